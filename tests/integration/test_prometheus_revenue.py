"""A real Prometheus scrapes the operator's metrics exporter, and PromQL returns the revenue the prices imply.

Simulated vLLM leaders (wall clock) → ``scraper.Scraper.run`` → ``exporter.start_exporter`` → Prometheus
(Debian's package, via ``localprometheus``) → PromQL. The simulators and the scraper share one clock shifted to
20:00 UTC on a fixed day, inside the off-peak window, so the expected multiplier does not depend on when the
test runs; intervals are still real seconds.
"""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import time

import localprometheus  # cluster/ is on the path (pytest's pythonpath)
import pytest

from nvlfleet.adapters.exporter import OperatorMetrics, start_exporter
from nvlfleet.adapters.scraper import Scraper
from nvlfleet.api import metric_names as names
from nvlfleet.api import models
from nvlfleet.core.group_telemetry import Target
from nvlfleet.sim import simulator, vllmsim

pytestmark = pytest.mark.integration

MILLION = 1_000_000
PEAK = {"inputCacheHitPerMillion": 0.006, "inputCacheMissPerMillion": 0.30, "outputPerMillion": 1.20}
OFF_PEAK = {"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}
PRICING = models.PricingSpec.model_validate({**PEAK, "schedule": [OFF_PEAK]})
EVENING = datetime.datetime(2026, 10, 20, 20, 0, tzinfo=datetime.UTC).timestamp()

# One GPU doing the pricing.md check value; a two-leader serving in two NVLink domains.
CHECK = vllmsim.Load(prompt=986_900, prompt_cached=986_900, generation=13_100, running_requests=64)
DECODE = vllmsim.Load(
    prompt=90_000, prompt_cached=60_000, generation=12_000, running_requests=96, speculative_tokens=3,
    acceptance_rate=0.6,
)  # fmt: skip


def revenue_per_hour(load: vllmsim.Load, multiplier: float) -> float:
    per_second = (
        load.prompt_cached * PEAK["inputCacheHitPerMillion"]
        + (load.prompt - load.prompt_cached) * PEAK["inputCacheMissPerMillion"]
        + load.generation * PEAK["outputPerMillion"]
    )
    return per_second / MILLION * 3600 * multiplier


def value(result: list[dict[str, object]]) -> float:
    (series,) = result
    return float(series["value"][1])  # type: ignore[index]


def test_promql_returns_the_expected_revenue(tmp_path: pathlib.Path) -> None:
    offset = EVENING - time.time()

    def clock() -> float:
        return time.time() + offset

    async def main() -> None:
        sim = simulator.Simulator(clock=clock)
        metrics = OperatorMetrics()
        scraper = Scraper(metrics, clock=clock, timeout=2.0)
        check = await sim.add("127.0.0.1", 0, load=CHECK, engines=1)
        a = await sim.add("127.0.0.1", 0, load=DECODE, engines=8)
        b = await sim.add("127.0.0.1", 0, load=DECODE, engines=8)
        scraper.set_serving("ml", "check", [Target("decode", "clique-a", check.url, 1)], pricing=PRICING)
        scraper.set_serving(
            "ml",
            "flash",
            [Target("decode", "clique-a", a.url, 8), Target("decode", "clique-b", b.url, 8)],
            pricing=PRICING,
        )
        exporter = await start_exporter(metrics, host="127.0.0.1", port=0)
        port = exporter.addresses[0][1]
        stop = asyncio.Event()
        loop = asyncio.create_task(scraper.run(interval=1.0, stop=stop))
        server = localprometheus.Server(
            tmp_path / "prometheus",
            [{"job_name": "nvlfleet-operator", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
        )
        try:
            await asyncio.to_thread(server.start)
            by_gpu_hour = await asyncio.to_thread(
                server.wait_for, f'{names.REVENUE_PER_GPU_HOUR}{{namespace="ml",serving="check"}}', 60.0
            )
            flash = await asyncio.to_thread(
                server.wait_for, f'sum by (serving) ({names.REVENUE_PER_HOUR}{{namespace="ml",serving="flash"}})', 60.0
            )
            per_gpu_hour = await asyncio.to_thread(
                server.query,
                f'sum({names.REVENUE_PER_HOUR}{{serving="flash"}}) / sum({names.GPUS}{{serving="flash"}})',
            )
            generation = await asyncio.to_thread(
                server.query, f'sum({names.TOKENS_PER_SECOND}{{serving="flash",kind="generation"}})'
            )
        finally:
            stop.set()
            await loop
            await asyncio.to_thread(server.stop)
            await exporter.cleanup()
            await scraper.close()
            await sim.close()

        # ≈ $38.95 per GPU-hour, the check value of shared/reference/pricing.md (1 s intervals: within 1%).
        assert value(by_gpu_hour) == pytest.approx(revenue_per_hour(CHECK, 0.5), rel=0.01)
        assert value(flash) == pytest.approx(2 * revenue_per_hour(DECODE, 0.5), rel=0.01)
        assert value(per_gpu_hour) == pytest.approx(revenue_per_hour(DECODE, 0.5) / 8, rel=0.01)
        assert value(generation) == pytest.approx(2 * DECODE.generation, rel=0.01)

    asyncio.run(main())
