"""The simulated vLLM server speaks vLLM 0.33's exposition and grows its counters at the configured rates."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client import parser

from nvlfleet.commands import simulate
from nvlfleet.facts import vllm_metrics
from nvlfleet.sim import simulator, vllmsim

T0 = 1_790_000_000.0  # any fixed wall-clock second


@dataclasses.dataclass
class FakeClock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


SPECULATING = vllmsim.Load(
    prompt=40_000,
    prompt_cached=30_000,
    generation=6_000,
    running_requests=64,
    waiting_requests=3,
    kv_cache_usage=0.4,
    speculative_tokens=3,
    acceptance_rate=0.7,
)
PLAIN = vllmsim.Load(prompt=1_000, prompt_cached=0, generation=200, running_requests=8)


def endpoint(load: vllmsim.Load = SPECULATING, engines: int = 4, **kwargs: Any) -> vllmsim.Endpoint:
    return vllmsim.Endpoint("127.0.0.1", 8000, load=load, engines=engines, clock=FakeClock(), **kwargs)


def families(body: bytes) -> dict[str, Any]:
    return {f.name: f for f in parser.text_string_to_metric_families(body.decode())}


def total(body: bytes, sample_name: str, **labels: str) -> float:
    """Sum of a sample over engines (and any label not given)."""
    return sum(
        s.value
        for f in parser.text_string_to_metric_families(body.decode())
        for s in f.samples
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    )


# ---------------------------------------------------------------------------------------------------------------
# Exposition


@pytest.mark.parametrize("load", [SPECULATING, PLAIN], ids=["speculating", "plain"])
@pytest.mark.parametrize(
    "names", [(), (vllm_metrics.PROMPT_TOKENS + "_total", vllm_metrics.GENERATION_TOKENS + "_created")]
)
def test_fast_exposition_is_byte_identical_to_prometheus_client(load: vllmsim.Load, names: tuple[str, ...]) -> None:
    ep = endpoint(load, engines=8)

    assert ep.exposition(T0 + 15, names) == ep.reference_exposition(T0 + 15, names)


def test_every_family_label_and_value_is_a_vllm_0_33_fact() -> None:
    facts = {f["family"]: f for f in vllmsim.metric_facts()["metrics"]["vllm_metrics"]}
    label_values = vllmsim.metric_facts()["metrics"]["label_values"]

    exposed = families(endpoint().exposition(T0 + 15))

    created = {name for name in exposed if name.endswith("_created")}
    assert {name.removesuffix("_created") for name in created} <= {
        name for name, fact in facts.items() if fact["type"] == "counter"
    }
    for name, family in exposed.items():
        if name in created:
            continue
        fact = facts[name]
        assert family.type == fact["type"], name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(fact["labels"]), sample
            if "source" in sample.labels:
                key = f"{name.removeprefix('vllm:')}.source"
                assert sample.labels["source"] in label_values[key]
    # The families the scraper and the economics depend on are all there.
    assert {
        vllm_metrics.PROMPT_TOKENS,
        vllm_metrics.PROMPT_TOKENS_CACHED,
        vllm_metrics.GENERATION_TOKENS,
        vllm_metrics.SPEC_DECODE_NUM_DRAFTS,
        vllm_metrics.SPEC_DECODE_NUM_DRAFT_TOKENS,
        vllm_metrics.SPEC_DECODE_NUM_ACCEPTED_TOKENS,
        vllm_metrics.NUM_REQUESTS_RUNNING,
        vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS,
        vllm_metrics.INTER_TOKEN_LATENCY_SECONDS,
        vllm_metrics.KV_CACHE_USAGE_PERC,
        "vllm:prompt_tokens_by_source",
    } <= set(exposed)


def test_histograms_use_the_vllm_buckets_and_are_cumulative() -> None:
    body = endpoint().exposition(T0 + 600)
    ttft = families(body)[vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS]
    engine0 = [s for s in ttft.samples if s.name.endswith("_bucket") and s.labels["engine"] == "0"]

    bounds = [float(s.labels["le"]) for s in engine0]
    expected = [*vllmsim.metric_facts()["metrics"]["buckets_seconds"]["time_to_first_token"], float("inf")]
    assert bounds == [float(b) for b in expected]
    counts = [s.value for s in engine0]
    assert counts == sorted(counts) and counts[-1] > 0


def test_counters_grow_at_the_configured_rates_summed_over_engines() -> None:
    ep = endpoint(engines=8)
    before, after = ep.exposition(T0 + 100), ep.exposition(T0 + 115)

    def rate(sample: str, **labels: str) -> float:
        return (total(after, sample, **labels) - total(before, sample, **labels)) / 15

    assert rate(vllm_metrics.PROMPT_TOKENS + "_total") == pytest.approx(SPECULATING.prompt)
    assert rate(vllm_metrics.PROMPT_TOKENS_CACHED + "_total") == pytest.approx(SPECULATING.prompt_cached)
    assert rate("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == pytest.approx(30_000)
    assert rate("vllm:prompt_tokens_by_source_total", source="local_compute") == pytest.approx(10_000)
    assert rate(vllm_metrics.GENERATION_TOKENS + "_total") == pytest.approx(SPECULATING.generation)
    assert total(after, vllm_metrics.NUM_REQUESTS_RUNNING) == SPECULATING.running_requests


def test_speculative_counters_are_consistent_with_generation() -> None:
    ep = endpoint()
    body = ep.exposition(T0 + 60)
    drafts = total(body, vllm_metrics.SPEC_DECODE_NUM_DRAFTS + "_total")
    draft_tokens = total(body, vllm_metrics.SPEC_DECODE_NUM_DRAFT_TOKENS + "_total")
    accepted = total(body, vllm_metrics.SPEC_DECODE_NUM_ACCEPTED_TOKENS + "_total")
    k, alpha = SPECULATING.speculative_tokens, SPECULATING.acceptance_rate

    assert draft_tokens == pytest.approx(k * drafts)
    assert accepted / draft_tokens == pytest.approx(alpha)
    assert drafts * (1 + accepted / drafts) == pytest.approx(total(body, vllm_metrics.GENERATION_TOKENS + "_total"))
    assert total(body, "vllm:spec_decode_num_accepted_tokens_per_pos_total") == pytest.approx(accepted)


def test_no_speculative_families_without_speculative_decoding() -> None:
    assert not any(name.startswith("vllm:spec_decode") for name in families(endpoint(PLAIN).exposition(T0 + 1)))


def test_restart_resets_counters_and_moves_created() -> None:
    clock = FakeClock()
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=PLAIN, clock=clock)
    clock.now = T0 + 100
    ep.restart()

    body = ep.exposition(T0 + 110)

    assert total(body, vllm_metrics.GENERATION_TOKENS + "_total") == pytest.approx(PLAIN.generation * 10)
    assert total(body, vllm_metrics.GENERATION_TOKENS + "_created") == T0 + 100


def test_multiprocess_mode_has_no_created_samples() -> None:
    body = endpoint(multiprocess=True).exposition(T0 + 1)

    assert not any(name.endswith("_created") for name in families(body))


def test_stall_freezes_counters_and_resume_continues_from_there() -> None:
    clock = FakeClock()
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=PLAIN, clock=clock)
    clock.now = T0 + 10
    ep.set_mode(vllmsim.Mode.STALL)
    clock.now = T0 + 50
    frozen = ep.counter(vllm_metrics.GENERATION_TOKENS)
    ep.set_mode(vllmsim.Mode.NORMAL)
    clock.now = T0 + 60

    assert frozen == pytest.approx(PLAIN.generation * 10)
    assert ep.counter(vllm_metrics.GENERATION_TOKENS) == pytest.approx(PLAIN.generation * 20)


def test_changing_the_load_keeps_counters_continuous() -> None:
    clock = FakeClock()
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=PLAIN, clock=clock)
    clock.now = T0 + 10
    ep.set_load(dataclasses.replace(PLAIN, generation=1_000))
    clock.now = T0 + 20

    assert ep.counter(vllm_metrics.GENERATION_TOKENS) == pytest.approx(200 * 10 + 1_000 * 10)


def test_an_impossible_load_is_refused() -> None:
    with pytest.raises(ValueError, match="subset of prompt"):
        vllmsim.Load(prompt=10, prompt_cached=20)


# ---------------------------------------------------------------------------------------------------------------
# HTTP


def serve(test: Callable[[simulator.Simulator, aiohttp.ClientSession], Awaitable[None]]) -> None:
    async def main() -> None:
        async with simulator.Simulator(clock=FakeClock()) as sim, aiohttp.ClientSession() as http:
            await test(sim, http)

    asyncio.run(main())


def test_http_endpoints_answer_like_vllm() -> None:
    async def check(sim: simulator.Simulator, http: aiohttp.ClientSession) -> None:
        ep = await sim.add("127.0.0.1", 0, load=PLAIN, model_name="ds-flash")
        async with http.get(ep.url + "/health") as r:
            assert r.status == 200
        async with http.get(ep.url + "/v1/models") as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["ds-flash"]
        async with http.get(ep.url + "/version") as r:
            assert await r.json() == {"version": "0.33.0"}
        async with http.get(ep.url + "/metrics", params=[("name[]", vllm_metrics.GENERATION_TOKENS + "_total")]) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            assert list(families(await r.read())) == [vllm_metrics.GENERATION_TOKENS]

    serve(check)


def test_garbage_mode_serves_an_exposition_no_parser_accepts() -> None:
    async def check(sim: simulator.Simulator, http: aiohttp.ClientSession) -> None:
        ep = await sim.add("127.0.0.1", 0, load=PLAIN)
        await sim.set_mode(ep, "garbage")
        async with http.get(ep.url + "/metrics") as r:
            body = await r.read()
        with pytest.raises(ValueError):
            families(body)

    serve(check)


def test_slow_mode_answers_after_the_delay() -> None:
    async def check(sim: simulator.Simulator, http: aiohttp.ClientSession) -> None:
        ep = await sim.add("127.0.0.1", 0, load=PLAIN, slow_seconds=5)
        await sim.set_mode(ep, vllmsim.Mode.SLOW)
        with pytest.raises(TimeoutError):
            async with http.get(ep.url + "/metrics", timeout=aiohttp.ClientTimeout(total=0.2)):
                pass

    serve(check)


def test_down_refuses_connections_until_it_comes_back() -> None:
    async def check(sim: simulator.Simulator, http: aiohttp.ClientSession) -> None:
        ep = await sim.add("127.0.0.1", 0, load=PLAIN)
        await sim.set_mode(ep, vllmsim.Mode.DOWN)
        with pytest.raises(aiohttp.ClientConnectorError):
            async with http.get(ep.url + "/health"):
                pass
        await sim.set_mode(ep, vllmsim.Mode.NORMAL)
        async with http.get(ep.url + "/health") as r:
            assert r.status == 200

    serve(check)


def test_down_for_a_while_comes_back_by_itself() -> None:
    async def check(sim: simulator.Simulator, http: aiohttp.ClientSession) -> None:
        ep = await sim.add("127.0.0.1", 0, load=PLAIN)
        await sim.set_mode(ep, vllmsim.Mode.DOWN, seconds=0.2)
        await asyncio.sleep(0.5)
        async with http.get(ep.url + "/health") as r:
            assert r.status == 200

    serve(check)


def test_control_routes_switch_modes_and_loads() -> None:
    async def check(sim: simulator.Simulator, http: aiohttp.ClientSession) -> None:
        ep = await sim.add("127.0.0.1", 0, load=PLAIN)
        async with http.post(ep.url + "/_sim/mode", params={"mode": "stall"}) as r:
            assert (await r.json())["mode"] == "stall"
        async with http.post(ep.url + "/_sim/load", data=json.dumps({"prompt": 5.0, "generation": 1.0})) as r:
            assert r.status == 200
        async with http.post(ep.url + "/_sim/mode", params={"mode": "sideways"}) as r:
            assert r.status == 400
        assert ep.mode == vllmsim.Mode.STALL
        assert ep.load == vllmsim.Load(prompt=5.0, generation=1.0)

    serve(check)


def test_many_endpoints_on_one_port_across_loopback_addresses() -> None:
    async def main() -> None:
        first = simulator.Simulator()
        probe = await first.add("127.0.0.1", 0, load=PLAIN)
        port = probe.port
        await first.close()
        addresses = [(f"127.0.1.{i}", port) for i in range(1, 31)]
        sim = await simulator.start_many(addresses, load=PLAIN, engines=2)
        try:
            async with aiohttp.ClientSession() as http:
                for ep in sim.endpoints[::7]:
                    async with http.get(ep.url + "/metrics") as r:
                        assert total(await r.read(), vllm_metrics.NUM_REQUESTS_RUNNING) == PLAIN.running_requests
            assert sorted((ep.host, ep.port) for ep in sim.endpoints) == sorted(addresses)
        finally:
            await sim.close()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------------------
# nvlfleet simulate


def test_listen_ranges_count_up_ports_or_hosts() -> None:
    assert simulate.expand(["127.0.0.1:20000"], 3, "port") == [
        ("127.0.0.1", 20000),
        ("127.0.0.1", 20001),
        ("127.0.0.1", 20002),
    ]
    assert simulate.expand(["127.1.0.255:8000"], 2, "host") == [("127.1.0.255", 8000), ("127.1.1.0", 8000)]


@pytest.mark.parametrize(
    ("listens", "count", "vary", "message"),
    [
        (["localhost"], 1, "port", "expected HOST:PORT"),
        (["127.0.0.1:65535"], 2, "port", "ports beyond 65535"),
        (["localhost:8000"], 2, "host", "needs an IPv4 address"),
        (["127.0.0.1:8000", "127.0.0.1:8001"], 2, "port", "overlap"),
    ],
)
def test_bad_listen_ranges_are_explained(listens: list[str], count: int, vary: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate.expand(listens, count, vary)


def test_the_command_serves_until_terminated(tmp_path: pathlib.Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    urls_file = tmp_path / "urls"
    argv = ["simulate", "--listen", f"127.0.2.1:{port}", "--count", "3", "--vary", "host", "--engines", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvlfleet.cli", *argv, "--addresses-file", str(urls_file)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("serving 3 simulated vLLM 0.33.0 endpoint(s)")
        urls = urls_file.read_text().split()
        assert urls == [f"http://127.0.2.{i}:{port}" for i in (1, 2, 3)]
        for url in urls:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                assert response.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_the_pressure_knob_sets_queue_depth_and_per_engine_kv_usage_and_keeps_the_rest_of_the_load() -> None:
    ep = endpoint(engines=4)
    vllmsim.set_pressure(ep, waiting_requests=24, kv_cache_usage=0.75)
    text = ep.exposition(T0 + 100)
    assert total(text, vllm_metrics.NUM_REQUESTS_WAITING) == 24
    kv = [
        s.value
        for family in parser.text_string_to_metric_families(text.decode())
        for s in family.samples
        if s.name == vllm_metrics.KV_CACHE_USAGE_PERC
    ]
    assert kv == [pytest.approx(0.75)] * 4
    assert ep.load.generation == SPECULATING.generation
    with pytest.raises(ValueError, match="fraction"):
        vllmsim.set_pressure(ep, waiting_requests=0, kv_cache_usage=75)
