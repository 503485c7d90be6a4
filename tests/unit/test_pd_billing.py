"""A prefill/decode serving bills each token once: fed the same requests, it earns what a whole-request serving earns.

Real HTTP end to end: the requests go to simulated vLLM servers (one whole-request leader; a prefill and a decode
leader behind the real vllm-router in P/D mode, so the KV hand-off is the router's two-stage exchange), and the
operator's scraper reads their /metrics before and after, on a fake clock, as it reads vLLM.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import aiohttp
import pytest

from nvlfleet.adapters.exporter import OperatorMetrics
from nvlfleet.adapters.scraper import Scraper
from nvlfleet.api import models
from nvlfleet.core.group_telemetry import Target
from nvlfleet.sim import kvtransfer, simulator, vllmsim
from support import routerprocess

T = 1_790_000_000.0
INTERVAL = 15.0
PRICES = {"inputCacheHitPerMillion": 0.006, "inputCacheMissPerMillion": 0.30, "outputPerMillion": 1.20}
PRICING = models.PricingSpec.model_validate(PRICES)
IDLE = vllmsim.Load()  # no published rates: the counters hold exactly what was served
MILLION = 1_000_000


def request_stream() -> list[tuple[str, dict[str, Any]]]:
    """40 requests of varied prompt and output lengths, completions and chat, streamed and not."""
    out = []
    for i in range(40):
        words = " ".join(f"w{j}" for j in range(20 + 37 * i % 300))
        body: dict[str, Any] = {"model": vllmsim.DEFAULT_MODEL, "max_tokens": 8 + 13 * i % 90}
        if i % 2:
            body["stream"], body["stream_options"] = True, {"include_usage": True}
        if i % 3:
            out.append(("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": words}]}))
        else:
            out.append(("/v1/completions", {**body, "prompt": words}))
    return out


@dataclasses.dataclass
class FakeClock:
    now: float = T

    def __call__(self) -> float:
        return self.now


async def send(session: aiohttp.ClientSession, url: str) -> tuple[int, int]:
    """Send the stream to ``url``; the prompt and completion tokens its answers report."""
    prompt = completion = 0
    for path, body in request_stream():
        async with session.post(url + path, json=body) as response:
            assert response.status == 200
            text = await response.text()
        if body.get("stream"):
            assert text.endswith("data: [DONE]\n\n")
            usage = json.loads(text.split("\n\n")[-3].removeprefix("data: "))["usage"]
        else:
            usage = json.loads(text)["usage"]
        prompt, completion = prompt + usage["prompt_tokens"], completion + usage["completion_tokens"]
    return prompt, completion


def test_a_pd_serving_and_a_whole_request_serving_fed_the_same_requests_earn_the_same() -> None:
    async def main() -> tuple[float | None, float | None, tuple[int, int]]:
        clock = FakeClock()
        async with simulator.Simulator(clock=clock) as sim, aiohttp.ClientSession() as session:
            whole = await sim.add("127.0.0.1", 0, load=IDLE, engines=2)
            prefill = await sim.add("127.0.0.1", 0, load=IDLE, engines=2, kv=PRODUCER)
            decode = await sim.add("127.0.0.1", 0, load=IDLE, engines=2, kv=CONSUMER)
            scraper = Scraper(OperatorMetrics(), clock=clock, timeout=10.0)
            try:
                scraper.set_serving("ml", "whole", [Target("decode", "a", whole.url, 8)], pricing=PRICING)
                pd = [Target("prefill", "a", prefill.url, 4), Target("decode", "a", decode.url, 4)]
                scraper.set_serving("ml", "pd", pd, pricing=PRICING, disaggregated=True)
                await scraper.scrape_once()
                async with routerprocess.pd_router([prefill.url], [decode.url]) as router:
                    sent = await send(session, whole.url)
                    assert await send(session, router) == sent
                clock.now += INTERVAL
                await scraper.scrape_once()
                revenues = [scraper.summary("ml", name) for name in ("whole", "pd")]
            finally:
                await scraper.close()
        return (*(r.revenue_per_hour if r else None for r in revenues), sent)  # type: ignore[return-value]

    whole_revenue, pd_revenue, (prompt, completion) = asyncio.run(main())

    by_tokens = (prompt * PRICES["inputCacheMissPerMillion"] + completion * PRICES["outputPerMillion"]) / MILLION
    expected = by_tokens / INTERVAL * 3600
    # The issue asks for 1%; both servings count exactly the same tokens, so the match is exact up to rounding.
    assert whole_revenue == pytest.approx(expected, rel=1e-9)
    assert pd_revenue == pytest.approx(whole_revenue, rel=1e-9)


# DeepSeek-V4.1's prefill leaves one trailing prompt token to decode (disaggregation.md §4, SWA bounded replay):
# decode computes it, and bills it, while the rest arrives by KV transfer and is billed at prefill.
PRODUCER = kvtransfer.KvConfig(role=kvtransfer.KvRole.PRODUCER, backoff=1)
CONSUMER = kvtransfer.KvConfig(role=kvtransfer.KvRole.CONSUMER)
