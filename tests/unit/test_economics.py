"""Unit economics: the pricing formula, the time-of-day schedule and the "None, not 0" rule."""

from __future__ import annotations

import dataclasses
import datetime

import hypothesis
import pytest
from hypothesis import strategies as st

from nvlfleet.api import models, problems
from nvlfleet.api import parity as parity_api
from nvlfleet.core import economics

UTC = datetime.UTC
MILLION = 1_000_000


def pricing(hit: float = 0.003, miss: float = 0.15, out: float = 0.60, **extra: object) -> models.PricingSpec:
    """V4.1-Flash off-peak prices from shared/reference/pricing.md unless told otherwise."""
    return models.PricingSpec.model_validate(
        {"inputCacheHitPerMillion": hit, "inputCacheMissPerMillion": miss, "outputPerMillion": out, **extra}
    )


def window(start: str, end: str, multiplier: float, name: str = "w") -> dict[str, object]:
    return {"name": name, "start": start, "end": end, "multiplier": multiplier}


def at(hhmm: str, day: int = 20) -> datetime.datetime:
    hours, minutes = hhmm.split(":")
    return datetime.datetime(2026, 10, day, int(hours), int(minutes), tzinfo=UTC)


def rates(prompt: float = 0.0, cached: float = 0.0, generation: float = 0.0, **extra: float) -> economics.Rates:
    return economics.Rates(prompt=prompt, prompt_cached=cached, generation=generation, **extra)


# ---------------------------------------------------------------------------------------------------------------
# The formula


def test_check_value_from_pricing_reference() -> None:
    # shared/reference/pricing.md: 986,900 cache-hit input + 13,100 output tokens/s on one GPU at 0.003 / 0.60.
    hit_rate, out_rate, hit_price, out_price = 986_900, 13_100, 0.003, 0.60
    result = economics.evaluate(
        rates(prompt=hit_rate, cached=hit_rate, generation=out_rate),
        gpus=1,
        pricing=pricing(hit=hit_price, out=out_price),
    )

    by_formula = (hit_rate * hit_price + out_rate * out_price) / MILLION * 3600
    assert result.revenue_per_gpu_hour == pytest.approx(by_formula)
    assert round(result.revenue_per_gpu_hour or 0, 2) == 38.95  # the figure pricing.md states
    assert result.tokens_per_second.total == hit_rate + out_rate
    assert result.tokens_per_second_per_gpu == hit_rate + out_rate


def test_uncached_prompt_tokens_are_billed_at_the_cache_miss_price() -> None:
    prompt, cached, generation, gpus = 10_000.0, 6_000.0, 500.0, 4
    spec = pricing(hit=0.006, miss=0.30, out=1.20)

    result = economics.evaluate(rates(prompt, cached, generation), gpus=gpus, pricing=spec)

    per_hour = (cached * 0.006 + (prompt - cached) * 0.30 + generation * 1.20) / MILLION * 3600
    assert result.tokens_per_second == economics.TokenRates(
        prompt=prompt,
        prompt_cached=cached,
        prompt_uncached=prompt - cached,
        generation=generation,
        total=prompt + generation,
    )
    assert result.revenue_per_hour == pytest.approx(per_hour)
    assert result.revenue_per_gpu_hour == pytest.approx(per_hour / gpus)
    assert result.tokens_per_second_per_gpu == (prompt + generation) / gpus
    assert result.currency == "USD"


def test_multiplier_scales_revenue_not_throughput() -> None:
    base = economics.evaluate(rates(1000, 0, 100), gpus=1, pricing=pricing())
    off_peak = economics.evaluate(rates(1000, 0, 100), gpus=1, pricing=pricing(), multiplier=0.5)

    assert off_peak.revenue_per_hour == pytest.approx(0.5 * (base.revenue_per_hour or 0))
    assert off_peak.tokens_per_second == base.tokens_per_second
    assert off_peak.price_multiplier == 0.5


def test_speculative_decoding_yield() -> None:
    drafts, draft_tokens, accepted = 100.0, 300.0, 210.0

    result = economics.evaluate(
        rates(generation=310, spec_drafts=drafts, spec_draft_tokens=draft_tokens, spec_accepted_tokens=accepted),
        gpus=4,
        pricing=None,
    )

    assert result.acceptance_rate == accepted / draft_tokens
    assert result.mean_accepted_length == 1 + accepted / drafts


def test_streaming_speed_is_generation_rate_per_running_request() -> None:
    result = economics.evaluate(rates(generation=6400, running_requests=64), gpus=4, pricing=None)

    assert result.streaming_tokens_per_second_per_request == 6400 / 64


def reference(tokens_per_second_per_gpu: float, basis: str = "output") -> parity_api.ParitySpec:
    return parity_api.ParitySpec.model_validate(
        {"referenceTokensPerSecondPerGpu": tokens_per_second_per_gpu, "basis": basis}
    )


def test_cost_margin_and_parity() -> None:
    spec = pricing(gpu_hour_cost=2.0)
    result = economics.evaluate(rates(0, 0, 1000), gpus=2, pricing=spec, parity_reference=reference(400.0))

    revenue_per_gpu_hour = 1000 * 0.60 / MILLION * 3600 / 2
    assert result.revenue_per_gpu_hour == pytest.approx(revenue_per_gpu_hour)
    assert result.cost_per_gpu_hour == 2.0
    assert result.margin_per_gpu_hour == pytest.approx(revenue_per_gpu_hour - 2.0)
    assert result.parity == (1000 / 2) / 400.0


def test_what_cannot_be_computed_is_none_not_zero() -> None:
    result = economics.evaluate(rates(100, 0, 0, running_requests=0), gpus=0, pricing=None)

    assert dataclasses.asdict(result) == {
        "tokens_per_second": {
            "prompt": 100,
            "prompt_cached": 0,
            "prompt_uncached": 100,
            "generation": 0,
            "total": 100,
        },
        "gpus": 0,
        "tokens_per_second_per_gpu": None,
        "acceptance_rate": None,
        "mean_accepted_length": None,
        "streaming_tokens_per_second_per_request": None,
        "price_multiplier": None,
        "revenue_per_hour": None,
        "revenue_per_gpu_hour": None,
        "cost_per_gpu_hour": None,
        "margin_per_gpu_hour": None,
        "parity": None,
        "currency": None,
    }


def test_more_cached_than_prompt_tokens_gives_no_revenue_rather_than_a_wrong_one() -> None:
    result = economics.evaluate(rates(prompt=100, cached=150), gpus=1, pricing=pricing())

    assert result.tokens_per_second.prompt_uncached is None
    assert result.revenue_per_hour is None


def test_disaggregated_roles_bill_each_token_once() -> None:
    # The decode role counts every prompt again, as loaded by KV transfer, and reports prefill's cache hits.
    prefill = rates(prompt=50_000, cached=20_000, generation=100)
    decode = rates(prompt=50_000, cached=20_000, generation=4_000, running_requests=128, prompt_external=50_000)
    spec = pricing()

    prefill_eco = economics.evaluate(
        prefill, gpus=8, pricing=spec, billing=economics.Billing.for_role("prefill", disaggregated=True)
    )
    decode_eco = economics.evaluate(
        decode, gpus=8, pricing=spec, billing=economics.Billing.for_role("decode", disaggregated=True)
    )

    served_once = rates(prompt=50_000, cached=20_000, generation=4_000)
    whole = economics.evaluate(served_once, gpus=16, pricing=spec)
    assert (prefill_eco.revenue_per_hour or 0) + (decode_eco.revenue_per_hour or 0) == pytest.approx(
        whole.revenue_per_hour
    )
    assert prefill_eco.tokens_per_second.total + decode_eco.tokens_per_second.total == 54_000
    assert decode_eco.tokens_per_second.prompt == 50_000  # what vLLM measured stays visible


def test_billing_view_of_a_prefill_role_drops_generation_and_its_batch() -> None:
    prefill = rates(prompt=1000, cached=10, generation=5, spec_drafts=1.0, running_requests=3)

    view = economics.Billing.for_role("prefill", disaggregated=True).view(prefill)

    assert view == rates(prompt=1000, cached=10, generation=0)


def test_a_decode_role_bills_the_prompt_tokens_it_computed_itself_and_not_those_it_loaded() -> None:
    # 1,000 prompt tokens/s, 990 loaded by KV transfer: 10 recomputed (the prefill's backoff) are decode's own.
    decode = rates(prompt=1_000, generation=300, prompt_external=990)

    view = economics.Billing.for_role("decode", disaggregated=True).view(decode)

    assert view == rates(prompt=10, generation=300)


def test_without_prefill_role_every_role_bills_everything() -> None:
    assert economics.Billing.for_role("decode", disaggregated=False) == economics.BILL_ALL


def test_rates_add_up_and_keep_absent_optional_rates_absent() -> None:
    a = rates(1, 1, 1, spec_drafts=2.0)
    b = rates(2, 0, 3)

    assert economics.total([a, b]) == rates(3, 1, 4, spec_drafts=2.0)
    assert economics.total([]) == economics.ZERO_RATES


# ---------------------------------------------------------------------------------------------------------------
# Schedule

OFF_PEAK_ACROSS_MIDNIGHT = pricing(schedule=[window("16:30", "00:30", 0.5, "off-peak")])
V4_PEAKS = pricing(schedule=[window("01:00", "04:00", 2.0, "peak-1"), window("06:00", "10:00", 2.0, "peak-2")])


@pytest.mark.parametrize(
    ("hhmm", "expected"),
    [
        ("16:29", 1.0),
        ("16:30", 0.5),  # start is inclusive
        ("23:59", 0.5),
        ("00:00", 0.5),
        ("00:29", 0.5),
        ("00:30", 1.0),  # end is exclusive
        ("12:00", 1.0),
    ],
)
def test_window_crossing_midnight(hhmm: str, expected: float) -> None:
    assert economics.multiplier_at(OFF_PEAK_ACROSS_MIDNIGHT, at(hhmm)) == expected


def test_interval_crossing_a_boundary_is_priced_piecewise() -> None:
    # 10 minutes at 1.0 then 10 minutes at 0.5.
    assert economics.mean_multiplier(OFF_PEAK_ACROSS_MIDNIGHT, at("16:20"), at("16:40")) == pytest.approx(
        (10 * 1.0 + 10 * 0.5) / 20
    )
    # The end of a window that crossed midnight, on the next calendar day.
    assert economics.mean_multiplier(OFF_PEAK_ACROSS_MIDNIGHT, at("00:20", day=21), at("00:40", day=21)) == (
        pytest.approx((10 * 0.5 + 10 * 1.0) / 20)
    )


def test_a_whole_day_averages_every_window() -> None:
    day_start, next_day = at("00:00"), at("00:00", day=21)
    peak_hours = 3 + 4

    assert economics.mean_multiplier(V4_PEAKS, day_start, next_day) == pytest.approx(
        (peak_hours * 2.0 + (24 - peak_hours) * 1.0) / 24
    )


def test_an_empty_interval_has_the_multiplier_of_its_instant() -> None:
    assert economics.mean_multiplier(V4_PEAKS, at("02:00"), at("02:00")) == 2.0


def test_times_without_time_zone_and_reversed_intervals_are_refused() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        economics.multiplier_at(V4_PEAKS, datetime.datetime(2026, 10, 20, 2, 0))
    with pytest.raises(ValueError, match="before it starts"):
        economics.mean_multiplier(V4_PEAKS, at("03:00"), at("02:00"))


def test_overlapping_windows_are_reported_with_their_path() -> None:
    clashing = pricing(schedule=[window("16:30", "00:30", 0.5, "off-peak"), window("00:00", "01:00", 2.0, "peak")])

    assert economics.schedule_problems(clashing) == [
        problems.Problem(
            "spec.pricing.schedule[1]",
            "window 'peak' (00:00-01:00) overlaps window 'off-peak' (16:30-00:30); a time can have only one multiplier",
        )
    ]
    with pytest.raises(problems.InvalidSpec):
        economics.multiplier_at(clashing, at("12:00"))


def test_adjacent_windows_do_not_overlap() -> None:
    assert (
        economics.schedule_problems(pricing(schedule=[window("01:00", "04:00", 2), window("04:00", "01:00", 1)])) == []
    )


HHMM = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
EPOCH_2026 = at("00:00", day=1).timestamp()


@hypothesis.given(
    start=HHMM,
    end=HHMM,
    multiplier=st.floats(0.1, 10),
    a=st.floats(0, 3 * 86_400),
    lengths=st.tuples(st.floats(0, 2 * 86_400), st.floats(0, 2 * 86_400)),
)
def test_mean_multiplier_integrates_additively(
    start: str, end: str, multiplier: float, a: float, lengths: tuple[float, float]
) -> None:
    hypothesis.assume(start != end)
    spec = pricing(schedule=[window(start, end, multiplier)])
    t0 = datetime.datetime.fromtimestamp(EPOCH_2026 + a, UTC)
    t1 = t0 + datetime.timedelta(seconds=lengths[0])
    t2 = t1 + datetime.timedelta(seconds=lengths[1])

    def integral(x: datetime.datetime, y: datetime.datetime) -> float:
        return economics.mean_multiplier(spec, x, y) * (y - x).total_seconds()

    assert integral(t0, t2) == pytest.approx(integral(t0, t1) + integral(t1, t2), rel=1e-6, abs=1e-3)
    low, high = sorted([1.0, multiplier])
    assert low - 1e-9 <= economics.mean_multiplier(spec, t0, t2) <= high + 1e-9


# ---------------------------------------------------------------------------------------------------------------
# Intervals of servers and groups of them


def test_an_intervals_revenue_is_its_billed_rate_times_price_times_the_integrated_multiplier() -> None:
    # 10 minutes at full price, then 10 minutes off-peak at half price.
    interval = economics.Interval("decode", rates(generation=1_000), at("16:20").timestamp(), at("16:40").timestamp())

    revenue = economics.interval_revenue(interval, pricing=OFF_PEAK_ACROSS_MIDNIGHT, disaggregated=False)

    assert revenue == pytest.approx(1_000 * 0.60 / MILLION * (600 * 1.0 + 600 * 0.5))


def test_an_interval_without_a_price_table_earns_nothing_countable() -> None:
    interval = economics.Interval("decode", rates(generation=1_000), 0.0, 60.0)

    assert economics.interval_revenue(interval, pricing=None, disaggregated=False) is None


def test_a_group_straddling_a_window_boundary_prices_like_its_servers_one_by_one() -> None:
    # One leader's interval ends before off-peak starts, the other's after it: different multipliers.
    before = economics.Interval("decode", rates(generation=2_000), at("16:00").timestamp(), at("16:30").timestamp())
    after = economics.Interval("decode", rates(generation=1_000), at("16:30").timestamp(), at("17:00").timestamp())
    one_by_one = sum(
        economics.price_interval(i, pricing=OFF_PEAK_ACROSS_MIDNIGHT, disaggregated=False).revenue_per_hour or 0.0
        for i in (before, after)
    )

    group = economics.evaluate_group(
        [after, before],
        gpus=16,
        pricing=OFF_PEAK_ACROSS_MIDNIGHT,
        disaggregated=False,
        parity_reference=None,
        whole_serving=False,
    )

    assert group.revenue_per_hour == pytest.approx(one_by_one)
    assert group.price_multiplier == pytest.approx(one_by_one / ((3_000 * 0.60 / MILLION) * 3600))


def test_parity_against_an_output_reference_counts_output_tokens_only() -> None:
    # A decode serving with long, mostly cached prompts: total tokens/s is 15× its output.
    busy = rates(prompt=56_000, cached=50_000, generation=4_000)

    result = economics.evaluate(busy, gpus=4, pricing=None, parity_reference=reference(2_000.0))

    assert result.parity == (4_000 / 4) / 2_000.0


def test_parity_against_a_total_reference_counts_prompt_and_output() -> None:
    busy = rates(prompt=56_000, cached=50_000, generation=4_000)

    result = economics.evaluate(busy, gpus=4, pricing=None, parity_reference=reference(20_000.0, "total"))

    assert result.parity == (60_000 / 4) / 20_000.0


def test_the_reference_basis_is_output_unless_the_spec_says_total() -> None:
    assert parity_api.ParitySpec(reference_tokens_per_second_per_gpu=1.0).basis is parity_api.ParityBasis.OUTPUT


def test_a_disaggregated_prefill_group_has_no_output_parity_to_fall_short_of() -> None:
    prefill = economics.Interval("prefill", rates(prompt=50_000, generation=10), 0.0, 15.0)

    def group(basis: str) -> economics.Economics:
        return economics.evaluate_group(
            [prefill], gpus=4, pricing=None, disaggregated=True, parity_reference=reference(100.0, basis),
            whole_serving=False,
        )  # fmt: skip

    assert group("output").parity is None
    assert group("total").parity == (50_000 / 4) / 100.0


def test_a_whole_serving_sums_each_roles_billed_share() -> None:
    # Decode re-counts every prompt prefill computed, as loaded by KV transfer; the serving bills it once.
    prefill = economics.Interval("prefill", rates(prompt=50_000, generation=10), 0.0, 15.0)
    decode_rates = rates(prompt=50_000, generation=4_000, prompt_external=50_000)
    decode = economics.Interval("decode", decode_rates, 0.0, 15.0)

    whole = economics.evaluate_group(
        [prefill, decode], gpus=12, pricing=pricing(), disaggregated=True, parity_reference=None, whole_serving=True
    )

    assert whole.tokens_per_second.total == 50_000 + 4_000
    assert whole.tokens_per_second_per_gpu == pytest.approx(54_000 / 12)
