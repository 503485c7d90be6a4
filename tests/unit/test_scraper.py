"""Scraper → samples → rates → economics → gauges, checked against simulated vLLM servers whose true rates are known.

Every test drives one fake clock shared by the simulated servers and the scraper, so a "15 s interval" is
exactly 15 s and an expected value is computed from the simulator's configuration, never read back from the
code under test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import prometheus_client
import pytest
from prometheus_client import parser

from nvlfleet.adapters.exporter import OperatorMetrics, start_exporter
from nvlfleet.adapters.scraper import RoundReport, Scraper
from nvlfleet.api import metric_names as names
from nvlfleet.api import models, problems
from nvlfleet.api import parity as parity_api
from nvlfleet.core.group_telemetry import Target
from nvlfleet.sim import simulator, vllmsim

REPO = pathlib.Path(__file__).resolve().parents[2]
# 2026-10-20 16:30:00 UTC: the off-peak window below starts here; scenarios before it pay full price.
T = datetime.datetime(2026, 10, 20, 16, 30, tzinfo=datetime.UTC).timestamp()
MILLION = 1_000_000

PRICES = {"inputCacheHitPerMillion": 0.006, "inputCacheMissPerMillion": 0.30, "outputPerMillion": 1.20}
OFF_PEAK = {"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}
PRICING = models.PricingSpec.model_validate({**PRICES, "schedule": [OFF_PEAK], "gpuHourCost": 3.0})

DECODE = vllmsim.Load(
    prompt=90_000,
    prompt_cached=60_000,
    generation=12_000,
    running_requests=96,
    speculative_tokens=3,
    acceptance_rate=0.6,
)
OTHER = vllmsim.Load(prompt=20_000, prompt_cached=5_000, generation=3_000, running_requests=32)


def revenue_per_hour(load: vllmsim.Load, multiplier: float = 1.0, *, prompt: bool = True, output: bool = True) -> float:
    """The pricing.md formula, from the simulator's ground truth."""
    per_second = 0.0
    if prompt:
        per_second += load.prompt_cached * PRICES["inputCacheHitPerMillion"]
        per_second += (load.prompt - load.prompt_cached) * PRICES["inputCacheMissPerMillion"]
    if output:
        per_second += load.generation * PRICES["outputPerMillion"]
    return per_second / MILLION * 3600 * multiplier


@dataclasses.dataclass
class FakeClock:
    now: float = T

    def __call__(self) -> float:
        return self.now


class Fleet:
    """Simulated leaders and one scraper on a shared fake clock; gauges read from the operator's registry."""

    def __init__(self, timeout: float = 2.0) -> None:
        self.clock = FakeClock(T - 3600)  # the servers started an hour before the scenario's times
        self.sim = simulator.Simulator(clock=self.clock)
        self.metrics = OperatorMetrics()
        self.scraper = Scraper(self.metrics, clock=self.clock, timeout=timeout)
        self.targets: dict[tuple[str, str], list[Target]] = {}

    async def leader(
        self,
        load: vllmsim.Load,
        *,
        role: str = "decode",
        domain: str = "clique-a",
        gpus: int = 8,
        engines: int = 8,
        serving: str = "flash",
        **kwargs: Any,
    ) -> vllmsim.Endpoint:
        ep = await self.sim.add("127.0.0.1", 0, load=load, engines=engines, **kwargs)
        self.targets.setdefault(("ml", serving), []).append(Target(role, domain, ep.url, gpus))
        return ep

    def declare(self, pricing: models.PricingSpec | None = PRICING, **kwargs: Any) -> None:
        for (namespace, serving), targets in self.targets.items():
            self.scraper.set_serving(namespace, serving, targets, pricing=pricing, **kwargs)

    async def scrape_at(self, seconds_after_t: float) -> RoundReport:
        self.clock.now = T + seconds_after_t
        return await self.scraper.scrape_once()

    def gauge(self, name: str, **labels: str) -> float | None:
        full = {"namespace": "ml", "serving": "flash", "role": "decode", "domain": "clique-a", **labels}
        return self.metrics.registry.get_sample_value(name, full)

    def errors(self, reason: str, serving: str = "flash") -> float:
        labels = {"namespace": "ml", "serving": serving, "reason": reason}
        return self.metrics.registry.get_sample_value(names.SCRAPE_ERRORS_TOTAL, labels) or 0.0

    async def close(self) -> None:
        await self.scraper.close()
        await self.sim.close()


def scenario(test: Callable[[Fleet], Awaitable[None]], **kwargs: Any) -> None:
    async def main() -> None:
        fleet = Fleet(**kwargs)
        try:
            await test(fleet)
        finally:
            await fleet.close()

    asyncio.run(main())


within_1pc = dict(rel=0.01)


# ---------------------------------------------------------------------------------------------------------------
# Gauges against ground truth


def test_steady_state_gauges_match_the_simulators_rates() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE, gpus=8)
        await f.leader(DECODE, gpus=8)
        f.declare(parity_reference=parity_api.ParitySpec(reference_tokens_per_second_per_gpu=5_000.0))
        await f.scrape_at(-45)
        await f.scrape_at(-30)

        tokens = 2 * (DECODE.prompt + DECODE.generation)
        assert f.gauge(names.TOKENS_PER_SECOND, kind="prompt") == pytest.approx(2 * DECODE.prompt, **within_1pc)
        assert f.gauge(names.TOKENS_PER_SECOND, kind="prompt_cached") == pytest.approx(2 * DECODE.prompt_cached)
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") == pytest.approx(2 * DECODE.generation, **within_1pc)
        assert f.gauge(names.TOKENS_PER_SECOND_PER_GPU) == pytest.approx(tokens / 16, **within_1pc)
        assert f.gauge(names.SPEC_ACCEPTANCE_RATE) == pytest.approx(DECODE.acceptance_rate, **within_1pc)
        assert f.gauge(names.SPEC_MEAN_ACCEPTED_LENGTH) == pytest.approx(
            1 + DECODE.acceptance_rate * DECODE.speculative_tokens, **within_1pc
        )
        assert f.gauge(names.STREAMING_TPS_PER_REQUEST) == pytest.approx(
            DECODE.generation / DECODE.running_requests, **within_1pc
        )
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") == pytest.approx(
            2 * revenue_per_hour(DECODE), **within_1pc
        )
        per_gpu_hour = revenue_per_hour(DECODE) / 8
        assert f.gauge(names.REVENUE_PER_GPU_HOUR, currency="USD") == pytest.approx(per_gpu_hour, **within_1pc)
        assert f.gauge(names.COST_PER_GPU_HOUR, currency="USD") == 3.0
        assert f.gauge(names.MARGIN_PER_GPU_HOUR, currency="USD") == pytest.approx(per_gpu_hour - 3.0, **within_1pc)
        # The reference counts output tokens (spec.parity.basis by default), so parity does too.
        assert f.gauge(names.PARITY_RATIO) == pytest.approx(2 * DECODE.generation / 16 / 5_000.0, **within_1pc)
        assert f.gauge(names.GPUS) == 16
        assert f.gauge(names.COVERAGE) == 1.0

    scenario(run)


def test_groups_are_per_role_and_domain_and_the_summary_adds_them_up() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE, domain="clique-a", gpus=8)
        await f.leader(OTHER, domain="clique-b", gpus=4, engines=4)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)

        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation", domain="clique-b") == pytest.approx(OTHER.generation)
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and summary.complete
        assert summary.gpus == 12
        assert summary.tokens_per_second is not None
        assert summary.tokens_per_second.total == pytest.approx(
            DECODE.prompt + DECODE.generation + OTHER.prompt + OTHER.generation, **within_1pc
        )
        assert summary.revenue_per_hour == pytest.approx(
            revenue_per_hour(DECODE) + revenue_per_hour(OTHER), **within_1pc
        )
        assert [(g.role, g.domain) for g in f.scraper.groups("ml", "flash")] == [
            ("decode", "clique-a"),
            ("decode", "clique-b"),
        ]

    scenario(run)


def test_revenue_across_the_off_peak_boundary_is_priced_piecewise() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-20)
        await f.scrape_at(-5)
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") == pytest.approx(revenue_per_hour(DECODE), **within_1pc)

        await f.scrape_at(10)  # 5 s at peak price, then 10 s off-peak at half price
        straddling = (5 * 1.0 + 10 * 0.5) / 15
        assert f.gauge(names.PRICE_MULTIPLIER) == pytest.approx(straddling)
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") == pytest.approx(
            revenue_per_hour(DECODE, straddling), **within_1pc
        )

        await f.scrape_at(25)
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") == pytest.approx(
            revenue_per_hour(DECODE, 0.5), **within_1pc
        )
        # Accrued revenue: 20 s at full price (from T-20 to T) and 25 s at half price (to T+25).
        accrued = revenue_per_hour(DECODE) * (20 + 25 * 0.5) / 3600
        assert f.gauge(names.REVENUE_TOTAL, currency="USD") == pytest.approx(accrued, **within_1pc)

    scenario(run)


def test_a_restart_is_a_counter_reset_not_negative_throughput() -> None:
    async def run(f: Fleet) -> None:
        ep = await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-60)
        await f.scrape_at(-45)
        f.clock.now = T - 40
        ep.restart()  # counters start again from 0 at T-40, with _created = T-40

        await f.scrape_at(-30)

        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") == pytest.approx(DECODE.generation, **within_1pc)
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") == pytest.approx(revenue_per_hour(DECODE), **within_1pc)

    scenario(run)


def test_a_reset_without_created_time_gives_no_value_for_that_interval_only() -> None:
    async def run(f: Fleet) -> None:
        ep = await f.leader(DECODE, multiprocess=True)
        f.declare()
        await f.scrape_at(-60)
        await f.scrape_at(-45)
        f.clock.now = T - 40
        ep.restart()

        await f.scrape_at(-30)
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") is None
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and [p.reason for p in summary.problems] == ["pending"]
        assert "restarted" in summary.problems[0].message

        await f.scrape_at(-15)
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") == pytest.approx(DECODE.generation, **within_1pc)

    scenario(run)


def test_a_missed_scrape_widens_the_next_interval_instead_of_counting_zero() -> None:
    async def run(f: Fleet) -> None:
        ep = await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-60)
        await f.scrape_at(-45)
        await f.sim.set_mode(ep, vllmsim.Mode.DOWN)

        report = await f.scrape_at(-30)
        assert (report.up, report.down) == (0, 1)
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") is None
        assert f.gauge(names.REVENUE_PER_GPU_HOUR, currency="USD") is None
        assert f.errors("connection") == 1

        await f.sim.set_mode(ep, vllmsim.Mode.NORMAL)
        await f.scrape_at(-15)  # 30 s since the last good sample
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") == pytest.approx(DECODE.generation, **within_1pc)
        accrued = revenue_per_hour(DECODE) * 45 / 3600
        assert f.gauge(names.REVENUE_TOTAL, currency="USD") == pytest.approx(accrued, **within_1pc)

    scenario(run)


def test_a_stalled_server_reports_zero_throughput_because_it_is_measured() -> None:
    async def run(f: Fleet) -> None:
        ep = await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-60)
        f.clock.now = T - 60
        ep.set_mode(vllmsim.Mode.STALL)
        await f.scrape_at(-45)

        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") == 0.0
        assert f.gauge(names.SPEC_ACCEPTANCE_RATE) is None  # no drafts: a ratio of nothing
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") == 0.0

    scenario(run)


def test_a_servings_gauges_are_published_when_its_own_leaders_have_answered_not_at_the_end_of_the_round() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE, serving="flash")
        slow = await f.leader(OTHER, serving="laggard", slow_seconds=1.0)
        f.declare()
        await f.scrape_at(-45)
        f.clock.now = T - 30
        await f.sim.set_mode(slow, vllmsim.Mode.SLOW)

        round_ = asyncio.create_task(f.scraper.scrape_once())
        while f.gauge(names.TOKENS_PER_SECOND, kind="generation") is None and not round_.done():
            await asyncio.sleep(0.01)

        assert not round_.done()  # the laggard is still answering
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") == pytest.approx(DECODE.generation, **within_1pc)
        report = await round_
        assert report.up == 2

    scenario(run)


# ---------------------------------------------------------------------------------------------------------------
# Bad targets: an error metric and a problem, never a crash, never a wrong number


@pytest.mark.parametrize(
    ("fault", "reason"),
    [(vllmsim.Mode.GARBAGE, "parse"), (vllmsim.Mode.SLOW, "timeout"), (vllmsim.Mode.DOWN, "connection")],
)
def test_a_broken_leader_costs_its_group_the_totals_but_not_the_per_gpu_figures(
    fault: vllmsim.Mode, reason: str
) -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE, gpus=8)
        bad = await f.leader(DECODE, gpus=8, slow_seconds=5)
        f.declare()
        await f.scrape_at(-45)
        await f.sim.set_mode(bad, fault)

        await f.scrape_at(-30)

        assert f.errors(reason) == 1
        assert f.gauge(names.TOKENS_PER_SECOND, kind="generation") is None  # a sum missing a leader would be wrong
        assert f.gauge(names.REVENUE_PER_HOUR, currency="USD") is None
        assert f.gauge(names.TOKENS_PER_SECOND_PER_GPU) == pytest.approx(
            (DECODE.prompt + DECODE.generation) / 8, **within_1pc
        )
        assert f.gauge(names.REVENUE_PER_GPU_HOUR, currency="USD") == pytest.approx(
            revenue_per_hour(DECODE) / 8, **within_1pc
        )
        assert f.gauge(names.COVERAGE) == 0.5
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and not summary.complete
        assert summary.revenue_per_hour is None
        assert [(p.url, p.reason) for p in summary.problems] == [(bad.url, reason)]

    scenario(run, timeout=0.3)


def test_a_leader_answering_with_an_http_error_is_counted_not_guessed() -> None:
    async def run(f: Fleet) -> None:
        ep = await f.leader(DECODE)
        f.targets[("ml", "flash")][0] = dataclasses.replace(f.targets[("ml", "flash")][0], url=ep.url + "/nope")
        f.declare()
        await f.scrape_at(0)
        assert f.errors("http_status") == 1

    scenario(run)


def test_deleted_servings_disappear_from_the_exposition() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE)
        bad = await f.leader(DECODE, serving="gone")
        await f.sim.set_mode(bad, vllmsim.Mode.DOWN)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)
        assert f.errors("connection", serving="gone") == 2

        f.scraper.remove_serving("ml", "gone")

        exposition = prometheus_client.generate_latest(f.metrics.registry).decode()
        assert 'serving="gone"' not in exposition
        assert 'serving="flash"' in exposition
        assert f.scraper.summary("ml", "gone") is None

    scenario(run)


# ---------------------------------------------------------------------------------------------------------------
# Prefill/decode disaggregation


def test_disaggregated_serving_bills_prompts_at_prefill_and_output_at_decode() -> None:
    # Decode receives every prompt again by KV transfer: vLLM counts those under source="external_kv_transfer".
    prefill_load = vllmsim.Load(prompt=80_000, prompt_cached=30_000, generation=40, running_requests=16)
    decode_load = vllmsim.Load(prompt=80_000, prompt_external=80_000, generation=9_000, running_requests=128)

    async def run(f: Fleet) -> None:
        await f.leader(prefill_load, role="prefill", gpus=4, engines=4)
        await f.leader(decode_load, role="decode", gpus=8)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)

        assert f.gauge(names.REVENUE_PER_HOUR, role="prefill", currency="USD") == pytest.approx(
            revenue_per_hour(prefill_load, output=False), **within_1pc
        )
        assert f.gauge(names.REVENUE_PER_HOUR, role="decode", currency="USD") == pytest.approx(
            revenue_per_hour(decode_load, prompt=False), **within_1pc
        )
        assert f.gauge(names.TOKENS_PER_SECOND, role="decode", kind="prompt") == pytest.approx(decode_load.prompt)
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and summary.tokens_per_second is not None and summary.figures is not None
        assert summary.tokens_per_second.total == pytest.approx(
            prefill_load.prompt + decode_load.generation, **within_1pc
        )
        assert summary.figures.streaming_tokens_per_second_per_request == pytest.approx(
            decode_load.generation / decode_load.running_requests, **within_1pc
        )

    scenario(run)


def test_an_overlapping_schedule_is_refused_when_the_serving_is_declared() -> None:
    overlapping = models.PricingSpec.model_validate(
        {**PRICES, "schedule": [OFF_PEAK, {"name": "peak", "start": "00:00", "end": "02:00", "multiplier": 2}]}
    )
    scraper = Scraper(OperatorMetrics())

    with pytest.raises(problems.InvalidSpec, match=r"schedule\[1\]"):
        scraper.set_serving("ml", "flash", [], pricing=overlapping)


def test_the_exporter_serves_the_gauges_over_http() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)
        runner = await start_exporter(f.metrics, host="127.0.0.1", port=0)
        try:
            host, port = runner.addresses[0][:2]
            async with aiohttp.ClientSession() as http, http.get(f"http://{host}:{port}/metrics") as response:
                text = await response.text()
        finally:
            await runner.cleanup()
        revenue = {
            s.labels["serving"]: s.value
            for family in parser.text_string_to_metric_families(text)
            for s in family.samples
            if s.name == names.REVENUE_PER_HOUR
        }
        assert revenue == {"flash": pytest.approx(revenue_per_hour(DECODE), **within_1pc)}

    scenario(run)
