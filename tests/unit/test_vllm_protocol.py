"""The simulated vLLM answers vLLM's OpenAI protocol over real HTTP, the kv_transfer_params exchange included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from prometheus_client import parser

from nvlfleet.facts import vllm_metrics
from nvlfleet.sim import kvtransfer, simulator, vllmsim
from support import routerprocess

IDLE = vllmsim.Load()  # no published rates: /metrics shows exactly the requests served
MODEL = vllmsim.DEFAULT_MODEL
PROMPT = "one two three four five six seven eight nine ten"  # 10 simulated tokens
PRODUCER = kvtransfer.KvConfig(role=kvtransfer.KvRole.PRODUCER)
CONSUMER = kvtransfer.KvConfig(role=kvtransfer.KvRole.CONSUMER)
PREFILL_PARAMS = {  # what vllm-router puts in the prefill copy of a request (disaggregation.md §7)
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}

Session = aiohttp.ClientSession
Scenario = Callable[[simulator.Simulator, Session], Awaitable[None]]


def run(scenario: Scenario) -> None:
    async def main() -> None:
        async with simulator.Simulator() as sim, aiohttp.ClientSession() as session:
            await scenario(sim, session)

    asyncio.run(main())


async def post(
    session: Session, ep: vllmsim.Endpoint, path: str, body: dict[str, Any], **headers: str
) -> tuple[int, Any]:
    async with session.post(ep.url + path, json=body, headers=headers) as response:
        return response.status, await response.json()


async def sse(session: Session, ep: vllmsim.Endpoint, path: str, body: dict[str, Any]) -> list[str]:
    async with session.post(ep.url + path, json=body) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        text = await response.text()
    return [event.removeprefix("data: ") for event in text.split("\n\n") if event]


async def counter(session: Session, ep: vllmsim.Endpoint, sample: str, **labels: str) -> dict[str, float]:
    """A counter's value per engine, as /metrics shows it."""
    async with session.get(ep.url + "/metrics") as response:
        text = await response.text()
    out: dict[str, float] = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                out[s.labels["engine"]] = out.get(s.labels["engine"], 0.0) + s.value
    return out


def completion(max_tokens: int = 5, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, **extra}


PROMPT_TOTAL = vllm_metrics.PROMPT_TOKENS + "_total"
BY_SOURCE = vllm_metrics.PROMPT_TOKENS_BY_SOURCE + "_total"
GENERATION_TOTAL = vllm_metrics.GENERATION_TOKENS + "_total"
SUCCESS = vllm_metrics.REQUEST_SUCCESS + "_total"


def test_a_completion_is_answered_and_counted_on_the_engine_the_router_named() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        ep = await sim.add("127.0.0.1", 0, load=IDLE, engines=2)
        status, reply = await post(session, ep, "/v1/completions", completion(), **{"X-data-parallel-rank": "1"})
        assert status == 200
        assert reply["object"] == "text_completion"
        assert reply["usage"] == {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": None,
        }
        assert len(reply["choices"][0]["text"].split()) == 5 and reply["choices"][0]["finish_reason"] == "length"
        assert await counter(session, ep, PROMPT_TOTAL) == {"0": 0.0, "1": 10.0}
        assert await counter(session, ep, GENERATION_TOTAL) == {"0": 0.0, "1": 5.0}

    run(scenario)


def test_a_chat_stream_sends_chunks_then_the_usage_then_done() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        ep = await sim.add("127.0.0.1", 0, load=IDLE)
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        events = await sse(session, ep, "/v1/chat/completions", body)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        content = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
        assert len(content) == 3 and chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
        assert all(c["usage"] is None for c in chunks[:-1])

    run(scenario)


def test_a_stream_without_include_usage_carries_no_usage() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        ep = await sim.add("127.0.0.1", 0, load=IDLE)
        events = await sse(session, ep, "/v1/completions", completion(2, stream=True))
        chunks = [json.loads(e) for e in events[:-1]]
        assert events[-1] == "[DONE]" and len(chunks) == 2
        assert all("usage" not in c for c in chunks)

    run(scenario)


def test_prefill_answers_a_remote_decode_request_with_one_token_and_the_params_decode_needs() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        prefill = await sim.add("127.0.0.1", 0, load=IDLE, engines=2, kv=PRODUCER)
        body = completion(1, min_tokens=1, kv_transfer_params=PREFILL_PARAMS)
        status, reply = await post(session, prefill, "/v1/completions", body, **{"X-Request-Id": "r1"})
        assert status == 200 and reply["usage"]["completion_tokens"] == 1
        params = reply["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
        assert params["remote_request_id"] == "r1" and params["remote_num_tokens"] == 10
        assert params["remote_engine_id"] in prefill.engine_ids and params["transfer_mode"] == "pull"
        assert params["remote_host"] == "127.0.0.1"
        assert params["remote_port"] == kvtransfer.DEFAULT_SIDE_CHANNEL_PORT + prefill.engine_ids.index(
            params["remote_engine_id"]
        )
        assert sum((await counter(session, prefill, BY_SOURCE, source="local_compute")).values()) == 10

    run(scenario)


async def _prefill(session: Session, prefill: vllmsim.Endpoint, request_id: str) -> dict[str, Any]:
    body = completion(1, kv_transfer_params=PREFILL_PARAMS)
    _, reply = await post(session, prefill, "/v1/completions", body, **{"X-Request-Id": request_id})
    params: dict[str, Any] = reply["kv_transfer_params"]
    return params


def test_decode_counts_a_transferred_prompt_as_external_kv_transfer_and_computes_none_of_it() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        prefill = await sim.add("127.0.0.1", 0, load=IDLE, kv=PRODUCER)
        decode = await sim.add("127.0.0.1", 0, load=IDLE, kv=CONSUMER)
        params = await _prefill(session, prefill, "r2")
        status, reply = await post(session, decode, "/v1/completions", completion(7, kv_transfer_params=params))
        assert status == 200 and reply["usage"] == {
            "prompt_tokens": 10,
            "completion_tokens": 7,
            "total_tokens": 17,
            "prompt_tokens_details": None,
        }
        assert await counter(session, decode, BY_SOURCE, source="external_kv_transfer") == {"0": 10.0}
        assert await counter(session, decode, BY_SOURCE, source="local_compute") == {"0": 0.0}
        assert await counter(session, decode, PROMPT_TOTAL) == {"0": 10.0}

    run(scenario)


def test_a_failed_kv_load_under_policy_fail_ends_the_request_with_an_error() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        prefill = await sim.add("127.0.0.1", 0, load=IDLE, kv=PRODUCER)
        decode = await sim.add("127.0.0.1", 0, load=IDLE, kv=CONSUMER)
        params = await _prefill(session, prefill, "r3")
        prefill.restart()  # a new process: its blocks are gone
        status, reply = await post(session, decode, "/v1/completions", completion(kv_transfer_params=params))
        assert status == 500 and "KV load failed" in reply["error"]["message"]
        assert await counter(session, decode, SUCCESS, finished_reason="error") == {"0": 1.0}
        assert await counter(session, decode, GENERATION_TOTAL) == {"0": 0.0}

    run(scenario)


def test_a_failed_kv_load_under_policy_recompute_computes_the_whole_prompt() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        recompute = kvtransfer.KvConfig(
            role=kvtransfer.KvRole.CONSUMER, failure_policy=kvtransfer.FailurePolicy.RECOMPUTE
        )
        prefill = await sim.add("127.0.0.1", 0, load=IDLE, kv=PRODUCER)
        decode = await sim.add("127.0.0.1", 0, load=IDLE, kv=recompute)
        params = await _prefill(session, prefill, "r4")
        await post(session, decode, "/v1/completions", completion(kv_transfer_params=params))  # reads the blocks
        status, _ = await post(session, decode, "/v1/completions", completion(kv_transfer_params=params))
        assert status == 200  # the second read finds no blocks: recomputed
        assert await counter(session, decode, BY_SOURCE, source="local_compute") == {"0": 10.0}
        assert await counter(session, decode, BY_SOURCE, source="external_kv_transfer") == {"0": 10.0}

    run(scenario)


def test_an_engine_without_a_connector_ignores_kv_transfer_params() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        plain = await sim.add("127.0.0.1", 0, load=IDLE)
        status, reply = await post(session, plain, "/v1/completions", completion(4, kv_transfer_params=PREFILL_PARAMS))
        assert status == 200 and reply["kv_transfer_params"] is None and reply["usage"]["completion_tokens"] == 4

    run(scenario)


def test_requests_vllm_would_refuse_get_its_error_shape() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        ep = await sim.add("127.0.0.1", 0, load=IDLE, engines=2)
        status, reply = await post(session, ep, "/v1/completions", completion(), **{"X-data-parallel-rank": "2"})
        assert status == 400 and "out of range [0, 2)" in reply["error"]["message"]
        status, reply = await post(session, ep, "/v1/completions", {**completion(), "model": "other"})
        assert status == 404 and reply["error"]["type"] == "NotFoundError"
        status, reply = await post(session, ep, "/v1/completions", completion(max_tokens=vllmsim.DEFAULT_MAX_MODEL_LEN))
        assert status == 400 and "maximum context length" in reply["error"]["message"]

    run(scenario)


def test_health_and_models_answer_like_vllm() -> None:
    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        ep = await sim.add("127.0.0.1", 0, load=IDLE)
        async with session.get(ep.url + "/health") as response:
            assert response.status == 200 and await response.read() == b""
        async with session.get(ep.url + "/v1/models") as response:
            assert [m["id"] for m in (await response.json())["data"]] == [MODEL]

    run(scenario)


def test_the_real_vllm_router_runs_the_two_stage_exchange_against_it() -> None:
    """vllm-router 0.1.17 (the wheel in .venv) in P/D mode in front of a 2-engine prefill and a decode server."""

    async def scenario(sim: simulator.Simulator, session: Session) -> None:
        prefill = await sim.add("127.0.0.1", 0, load=IDLE, engines=2, kv=PRODUCER)
        decode = await sim.add("127.0.0.1", 0, load=IDLE, kv=CONSUMER)
        async with routerprocess.pd_router([prefill.url], [decode.url]) as url:
            for _ in range(4):
                async with session.post(url + "/v1/completions", json=completion(6)) as response:
                    assert response.status == 200
                    assert (await response.json())["usage"]["completion_tokens"] == 6
        assert await counter(session, prefill, GENERATION_TOTAL) == {"0": 2.0, "1": 2.0}  # 1 token per request
        assert await counter(session, decode, BY_SOURCE, source="external_kv_transfer") == {"0": 40.0}
        assert await counter(session, decode, GENERATION_TOTAL) == {"0": 24.0}

    run(scenario)
