"""Scraper → rates → gauges, checked against simulated vLLM servers whose true rates are known.

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

from nvlfleet.adapters import telemetry
from nvlfleet.api import models, problems
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
        self.metrics = telemetry.OperatorMetrics()
        self.scraper = telemetry.Scraper(self.metrics, clock=self.clock, timeout=timeout)
        self.targets: dict[tuple[str, str], list[telemetry.Target]] = {}

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
        self.targets.setdefault(("ml", serving), []).append(telemetry.Target(role, domain, ep.url, gpus))
        return ep

    def declare(self, pricing: models.PricingSpec | None = PRICING, **kwargs: Any) -> None:
        for (namespace, serving), targets in self.targets.items():
            self.scraper.set_serving(namespace, serving, targets, pricing=pricing, **kwargs)

    async def scrape_at(self, seconds_after_t: float) -> telemetry.RoundReport:
        self.clock.now = T + seconds_after_t
        return await self.scraper.scrape_once()

    def gauge(self, name: str, **labels: str) -> float | None:
        full = {"namespace": "ml", "serving": "flash", "role": "decode", "domain": "clique-a", **labels}
        return self.metrics.registry.get_sample_value(f"nvlfleet_{name}", full)

    def errors(self, reason: str, serving: str = "flash") -> float:
        labels = {"namespace": "ml", "serving": serving, "reason": reason}
        return self.metrics.registry.get_sample_value("nvlfleet_scrape_errors_total", labels) or 0.0

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
        f.declare(parity_reference=5_000.0)
        await f.scrape_at(-45)
        await f.scrape_at(-30)

        tokens = 2 * (DECODE.prompt + DECODE.generation)
        assert f.gauge("tokens_per_second", kind="prompt") == pytest.approx(2 * DECODE.prompt, **within_1pc)
        assert f.gauge("tokens_per_second", kind="prompt_cached") == pytest.approx(2 * DECODE.prompt_cached)
        assert f.gauge("tokens_per_second", kind="generation") == pytest.approx(2 * DECODE.generation, **within_1pc)
        assert f.gauge("tokens_per_second_per_gpu") == pytest.approx(tokens / 16, **within_1pc)
        assert f.gauge("spec_decode_acceptance_rate") == pytest.approx(DECODE.acceptance_rate, **within_1pc)
        assert f.gauge("spec_decode_mean_accepted_length") == pytest.approx(
            1 + DECODE.acceptance_rate * DECODE.speculative_tokens, **within_1pc
        )
        assert f.gauge("streaming_tokens_per_second_per_request") == pytest.approx(
            DECODE.generation / DECODE.running_requests, **within_1pc
        )
        assert f.gauge("revenue_per_hour", currency="USD") == pytest.approx(2 * revenue_per_hour(DECODE), **within_1pc)
        per_gpu_hour = revenue_per_hour(DECODE) / 8
        assert f.gauge("revenue_per_gpu_hour", currency="USD") == pytest.approx(per_gpu_hour, **within_1pc)
        assert f.gauge("cost_per_gpu_hour", currency="USD") == 3.0
        assert f.gauge("margin_per_gpu_hour", currency="USD") == pytest.approx(per_gpu_hour - 3.0, **within_1pc)
        assert f.gauge("parity_ratio") == pytest.approx(tokens / 16 / 5_000.0, **within_1pc)
        assert f.gauge("gpus") == 16
        assert f.gauge("telemetry_coverage_ratio") == 1.0

    scenario(run)


def test_groups_are_per_role_and_domain_and_the_summary_adds_them_up() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE, domain="clique-a", gpus=8)
        await f.leader(OTHER, domain="clique-b", gpus=4, engines=4)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)

        assert f.gauge("tokens_per_second", kind="generation", domain="clique-b") == pytest.approx(OTHER.generation)
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
        assert f.gauge("revenue_per_hour", currency="USD") == pytest.approx(revenue_per_hour(DECODE), **within_1pc)

        await f.scrape_at(10)  # 5 s at peak price, then 10 s off-peak at half price
        straddling = (5 * 1.0 + 10 * 0.5) / 15
        assert f.gauge("price_multiplier") == pytest.approx(straddling)
        assert f.gauge("revenue_per_hour", currency="USD") == pytest.approx(
            revenue_per_hour(DECODE, straddling), **within_1pc
        )

        await f.scrape_at(25)
        assert f.gauge("revenue_per_hour", currency="USD") == pytest.approx(revenue_per_hour(DECODE, 0.5), **within_1pc)
        # Accrued revenue: 20 s at full price (from T-20 to T) and 25 s at half price (to T+25).
        accrued = revenue_per_hour(DECODE) * (20 + 25 * 0.5) / 3600
        assert f.gauge("revenue_total", currency="USD") == pytest.approx(accrued, **within_1pc)

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

        assert f.gauge("tokens_per_second", kind="generation") == pytest.approx(DECODE.generation, **within_1pc)
        assert f.gauge("revenue_per_hour", currency="USD") == pytest.approx(revenue_per_hour(DECODE), **within_1pc)

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
        assert f.gauge("tokens_per_second", kind="generation") is None
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and [p.reason for p in summary.problems] == ["pending"]
        assert "restarted" in summary.problems[0].message

        await f.scrape_at(-15)
        assert f.gauge("tokens_per_second", kind="generation") == pytest.approx(DECODE.generation, **within_1pc)

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
        assert f.gauge("tokens_per_second", kind="generation") is None
        assert f.gauge("revenue_per_gpu_hour", currency="USD") is None
        assert f.errors("connection") == 1

        await f.sim.set_mode(ep, vllmsim.Mode.NORMAL)
        await f.scrape_at(-15)  # 30 s since the last good sample
        assert f.gauge("tokens_per_second", kind="generation") == pytest.approx(DECODE.generation, **within_1pc)
        accrued = revenue_per_hour(DECODE) * 45 / 3600
        assert f.gauge("revenue_total", currency="USD") == pytest.approx(accrued, **within_1pc)

    scenario(run)


def test_a_stalled_server_reports_zero_throughput_because_it_is_measured() -> None:
    async def run(f: Fleet) -> None:
        ep = await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-60)
        f.clock.now = T - 60
        ep.set_mode(vllmsim.Mode.STALL)
        await f.scrape_at(-45)

        assert f.gauge("tokens_per_second", kind="generation") == 0.0
        assert f.gauge("spec_decode_acceptance_rate") is None  # no drafts: a ratio of nothing
        assert f.gauge("revenue_per_hour", currency="USD") == 0.0

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
        while f.gauge("tokens_per_second", kind="generation") is None and not round_.done():
            await asyncio.sleep(0.01)

        assert not round_.done()  # the laggard is still answering
        assert f.gauge("tokens_per_second", kind="generation") == pytest.approx(DECODE.generation, **within_1pc)
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
        assert f.gauge("tokens_per_second", kind="generation") is None  # a sum missing a leader would be wrong
        assert f.gauge("revenue_per_hour", currency="USD") is None
        assert f.gauge("tokens_per_second_per_gpu") == pytest.approx(
            (DECODE.prompt + DECODE.generation) / 8, **within_1pc
        )
        assert f.gauge("revenue_per_gpu_hour", currency="USD") == pytest.approx(
            revenue_per_hour(DECODE) / 8, **within_1pc
        )
        assert f.gauge("telemetry_coverage_ratio") == 0.5
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and not summary.complete
        assert summary.revenue_per_hour is None
        assert [(p.url, p.reason) for p in summary.problems] == [(bad.url, reason)]

    scenario(run, timeout=0.3)


def test_a_server_that_is_not_vllm_is_reported_not_guessed() -> None:
    async def run(f: Fleet) -> None:
        other = prometheus_client.CollectorRegistry()
        prometheus_client.Counter("http_requests", "Requests.", registry=other).inc(5)
        body = prometheus_client.generate_latest(other)

        with pytest.raises(telemetry.ScrapeError) as err:
            telemetry.parse_sample(body, T)
        assert err.value.reason == "missing_metrics"

        ep = await f.leader(DECODE)
        f.targets[("ml", "flash")][0] = dataclasses.replace(f.targets[("ml", "flash")][0], url=ep.url + "/nope")
        f.declare()
        await f.scrape_at(0)
        assert f.errors("http_status") == 1

    scenario(run)


def test_negative_or_nan_counters_are_invalid() -> None:
    body = b'# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine="0"} NaN\n'

    with pytest.raises(telemetry.ScrapeError) as err:
        telemetry.parse_sample(body, T)

    assert err.value.reason == "invalid_value"


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
    # Decode receives every prompt again by KV transfer; vLLM counts those as its (cached) prompt tokens.
    prefill_load = vllmsim.Load(prompt=80_000, prompt_cached=30_000, generation=40, running_requests=16)
    decode_load = vllmsim.Load(prompt=80_000, prompt_cached=80_000, generation=9_000, running_requests=128)

    async def run(f: Fleet) -> None:
        await f.leader(prefill_load, role="prefill", gpus=4, engines=4)
        await f.leader(decode_load, role="decode", gpus=8)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)

        assert f.gauge("revenue_per_hour", role="prefill", currency="USD") == pytest.approx(
            revenue_per_hour(prefill_load, output=False), **within_1pc
        )
        assert f.gauge("revenue_per_hour", role="decode", currency="USD") == pytest.approx(
            revenue_per_hour(decode_load, prompt=False), **within_1pc
        )
        assert f.gauge("tokens_per_second", role="decode", kind="prompt") == pytest.approx(decode_load.prompt)
        summary = f.scraper.summary("ml", "flash")
        assert summary is not None and summary.tokens_per_second is not None and summary.figures is not None
        assert summary.tokens_per_second.total == pytest.approx(
            prefill_load.prompt + decode_load.generation, **within_1pc
        )
        assert summary.figures.streaming_tokens_per_second_per_request == pytest.approx(
            decode_load.generation / decode_load.running_requests, **within_1pc
        )

    scenario(run)


# ---------------------------------------------------------------------------------------------------------------
# Rates from two samples (no network)


def sample(at: float, generation: float, created: float | None = T, engines: int = 2) -> telemetry.Sample:
    def per_engine(total: float) -> dict[telemetry.Series, float]:
        return {(("engine", str(e)),): total / engines for e in range(engines)}

    counters = {"prompt": per_engine(0.0), "prompt_cached": per_engine(0.0), "generation": per_engine(generation)}
    return telemetry.Sample(time=at, counters=counters, running_requests=4.0, created=created)


def test_rate_is_increase_over_elapsed_time() -> None:
    m = telemetry.measure(sample(T + 10, 1_000), sample(T + 30, 5_000))

    assert m.rates is not None and m.rates.generation == 4_000 / 20
    assert (m.start, m.end, m.restarted) == (T + 10, T + 30, False)


def test_a_reset_with_created_time_rates_from_the_restart() -> None:
    m = telemetry.measure(sample(T + 10, 9_000), sample(T + 30, 600, created=T + 24))

    assert m.rates is not None and m.rates.generation == 600 / 6
    assert (m.start, m.restarted) == (T + 24, True)


def test_a_value_going_down_without_created_time_gives_no_rate() -> None:
    m = telemetry.measure(sample(T + 10, 9_000, created=None), sample(T + 30, 600, created=None))

    assert m.rates is None and m.restarted


def test_a_restart_that_outgrew_the_old_value_is_still_seen_by_its_created_time() -> None:
    m = telemetry.measure(sample(T + 10, 100), sample(T + 30, 900, created=T + 20))

    assert m.rates is not None and m.rates.generation == 900 / 10


def test_no_time_elapsed_gives_no_rate() -> None:
    assert telemetry.measure(sample(T, 1), sample(T, 2)).rates is None


def test_an_unfiltered_exposition_reads_the_same_as_a_filtered_one() -> None:
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=DECODE, engines=8, clock=FakeClock())
    names = [name for _, name in telemetry.METRICS_QUERY]

    assert telemetry.parse_sample(ep.exposition(T + 9), T) == telemetry.parse_sample(ep.exposition(T + 9, names), T)


# ---------------------------------------------------------------------------------------------------------------
# Operator metrics and the exporter


def test_operator_metrics_live_on_their_own_registry() -> None:
    a, b = telemetry.OperatorMetrics(), telemetry.OperatorMetrics()

    with a.reconciling("ml", "flash"):
        pass
    with pytest.raises(problems.InvalidSpec), a.reconciling("ml", "flash"):
        raise problems.InvalidSpec([problems.Problem("spec.gpu", "bad")])
    with a.planning():
        pass
    a.set_free_nodes({"clique-a": 3, "clique-b": 0})
    a.set_free_nodes({"clique-a": 2})
    a.set_conditions("ml", "flash", {"Ready": False, "Placed": True, "Progressing": True})
    a.set_conditions("ml", "flash", {"Ready": True, "Placed": True})
    a.set_conditions("ml", "gone", {"Ready": True})
    a.forget_serving("ml", "gone")

    value = a.registry.get_sample_value
    assert value("nvlfleet_reconcile_total", {"namespace": "ml", "serving": "flash"}) == 2
    assert (
        value("nvlfleet_reconcile_errors_total", {"namespace": "ml", "serving": "flash", "reason": "InvalidSpec"}) == 1
    )
    assert value("nvlfleet_reconcile_duration_seconds_count") == 2
    assert value("nvlfleet_planner_duration_seconds_count") == 1
    assert value("nvlfleet_domain_free_nodes", {"domain": "clique-a"}) == 2
    assert value("nvlfleet_domain_free_nodes", {"domain": "clique-b"}) is None
    conditions = {
        s.labels["condition"]: s.value
        for s in a.serving_condition.collect()[0].samples
        if s.labels["serving"] == "flash"
    }
    assert conditions == {"Ready": 1.0, "Placed": 1.0}
    assert not [s for s in a.serving_condition.collect()[0].samples if s.labels["serving"] == "gone"]
    assert b.registry.get_sample_value("nvlfleet_reconcile_duration_seconds_count") == 0


def test_an_overlapping_schedule_is_refused_when_the_serving_is_declared() -> None:
    overlapping = models.PricingSpec.model_validate(
        {**PRICES, "schedule": [OFF_PEAK, {"name": "peak", "start": "00:00", "end": "02:00", "multiplier": 2}]}
    )
    scraper = telemetry.Scraper(telemetry.OperatorMetrics())

    with pytest.raises(problems.InvalidSpec, match=r"schedule\[1\]"):
        scraper.set_serving("ml", "flash", [], pricing=overlapping)


def test_the_exporter_serves_the_gauges_over_http() -> None:
    async def run(f: Fleet) -> None:
        await f.leader(DECODE)
        f.declare()
        await f.scrape_at(-45)
        await f.scrape_at(-30)
        runner = await telemetry.start_exporter(f.metrics, host="127.0.0.1", port=0)
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
            if s.name == "nvlfleet_revenue_per_hour"
        }
        assert revenue == {"flash": pytest.approx(revenue_per_hour(DECODE), **within_1pc)}

    scenario(run)


# ---------------------------------------------------------------------------------------------------------------
# Facts


def test_the_scraper_reads_names_the_facts_define() -> None:
    exposed = {
        name
        for fact in vllmsim.metric_facts()["metrics"]["vllm_metrics"]
        for name in ([fact["exposed_as"]] if isinstance(fact["exposed_as"], str) else fact["exposed_as"])
    }
    read = {name for _, name in telemetry.METRICS_QUERY}

    assert read - exposed == {"vllm:generation_tokens_created"}  # the _created twin of a counter in the facts
