"""Unit economics of a vLLM fleet: tokens/s, speculative-decoding yield, revenue and margin per GPU-hour.

Pure core, last step of the telemetry flow: vLLM /metrics → ``samples`` → ``rates`` (counters → per-second
rates over one interval) → **economics** (rates × price table × time-of-day schedule, per interval and per group
of leaders) → Prometheus gauges and the serving's status (``adapters.scraper``, ``adapters.exporter``). Also used
offline by ``nvlfleet economics`` on two saved scrapes. All money nvlfleet computes is computed here.

Conventions:

- A number that cannot be computed (no GPUs, no drafts, no running request, no price table) is ``None``, never 0:
  a dashboard showing "no data" is honest, one showing $0 is wrong.
- Prices are per 1M tokens. Prompt tokens served from the prefix cache (``vllm:prompt_tokens_cached``) are
  billed at the cache-hit price, the rest of ``vllm:prompt_tokens`` at the cache-miss price, generated tokens
  (``vllm:generation_tokens``) at the output price (``shared/reference/pricing.md``).
- The schedule is a list of UTC windows ``[start, end)``; ``end`` before ``start`` crosses midnight; outside every
  window the multiplier is 1. A measurement interval that crosses a window boundary is priced by integrating the
  multiplier piecewise over the interval (``mean_multiplier``), i.e. assuming the token rate was constant over
  the interval — the only assumption two counter samples allow. Pricing at the midpoint instead would bill a
  15 s interval that is 1 s into off-peak entirely at the peak price.
- Prompt tokens are billed by where they were computed (``vllm:prompt_tokens_by_source``): a token whose KV
  arrived by transfer (``source="external_kv_transfer"``, ``Rates.prompt_external``) was computed and billed by
  the prefill engine that sent it, so the engine that loaded it does not bill it again. A decode engine of a
  prefill/decode pair thus bills the prompt tokens it computed itself (the prefill's backoff, or a prompt
  recomputed after a failed KV load) and its output; a prefill engine bills its prompts and not its one
  generated token per request, which the client never sees (``Billing.for_role``). Per-role token rates stay as
  vLLM measured them; ``total`` and revenue use the billed view, so they add up across roles.
- Revenue accrues per server over its own interval (``interval_revenue``), so a total stays exact across missed
  scrapes (the next interval covers the gap). A group's summed rates are priced with ``group_multiplier``, which
  weights each server's interval multiplier by its revenue, so the group prices like its servers one by one.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Iterator, Sequence

from nvlfleet.api import models, problems
from nvlfleet.api import parity as parity_api

SECONDS_PER_DAY = 86_400
SECONDS_PER_HOUR = 3_600
TOKENS_PER_PRICE_UNIT = 1_000_000  # prices are per 1M tokens

# Tolerance for ``prompt_cached > prompt`` caused by float rounding of counter rates (not by real data).
_RELATIVE_SLACK = 1e-9


@dataclasses.dataclass(frozen=True)
class Rates:
    """Per-second rates over one measurement interval, summed over DP engines (and over leaders when aggregated).

    ``prompt`` counts every prompt token (cache hits included); ``prompt_cached`` is the cache-hit subset.
    Speculative-decoding rates are ``None`` when the engine does not speculate (vLLM then omits the families).
    ``running_requests`` is a gauge (requests in the batch), the mean of the interval's two samples.
    """

    prompt: float
    prompt_cached: float
    generation: float
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    running_requests: float | None = None
    prompt_external: float = 0.0  # the prompt tokens whose KV arrived by transfer (computed elsewhere)

    def __add__(self, other: Rates) -> Rates:
        return Rates(
            prompt=self.prompt + other.prompt,
            prompt_cached=self.prompt_cached + other.prompt_cached,
            generation=self.generation + other.generation,
            prompt_external=self.prompt_external + other.prompt_external,
            spec_drafts=_add(self.spec_drafts, other.spec_drafts),
            spec_draft_tokens=_add(self.spec_draft_tokens, other.spec_draft_tokens),
            spec_accepted_tokens=_add(self.spec_accepted_tokens, other.spec_accepted_tokens),
            running_requests=_add(self.running_requests, other.running_requests),
        )


ZERO_RATES = Rates(prompt=0.0, prompt_cached=0.0, generation=0.0)


def total(rates: Sequence[Rates]) -> Rates:
    """Sum of rates (over engines, leaders, domains); optional rates stay ``None`` only if absent everywhere."""
    out = ZERO_RATES
    for r in rates:
        out = out + r
    return out


def _add(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


@dataclasses.dataclass(frozen=True)
class Billing:
    """Which tokens a role is paid for (see the module docstring on prefill/decode disaggregation)."""

    prompt: bool = True
    generation: bool = True

    @staticmethod
    def for_role(role: str, *, disaggregated: bool) -> Billing:
        """The billing of ``role`` in a serving that does (or does not) run a separate prefill role."""
        if not disaggregated:
            return BILL_ALL
        if role == models.RoleName.PREFILL:
            return Billing(prompt=True, generation=False)
        if role == models.RoleName.DECODE:
            return BILL_ALL  # the prompts it loaded by KV transfer are excluded by ``view`` itself
        raise ValueError(f"unknown role {role!r}; expected one of {[r.value for r in models.RoleName]}")

    def view(self, rates: Rates) -> Rates:
        """``rates`` as counted towards a serving total: tokens this role is not paid for count as zero.

        Prompt tokens that arrived by KV transfer count as zero everywhere: the engine that computed them bills
        them. vLLM reports the sender's cache hits as the receiver's cached tokens (disaggregation.md §6), so the
        receiver's cache hits are capped at the prompt tokens it has left (without a transfer, more hits than
        prompt tokens stay inconsistent counters, which price nothing). Requests in flight and speculative
        decoding belong to generation: a prefill engine runs each request for one token, so its batch says
        nothing about streaming speed.
        """
        local = max(rates.prompt - rates.prompt_external, 0.0)
        prompt = local if self.prompt else 0.0
        cached = rates.prompt_cached if not rates.prompt_external else min(rates.prompt_cached, local)
        cached = cached if self.prompt else 0.0
        if self.generation:
            return dataclasses.replace(rates, prompt=prompt, prompt_cached=cached, prompt_external=0.0)
        return Rates(prompt=prompt, prompt_cached=cached, generation=0.0)


BILL_ALL = Billing()


@dataclasses.dataclass(frozen=True)
class TokenRates:
    """Tokens per second by kind. ``total`` is billed prompt + billed generation (all of both, unless the role
    is one half of a prefill/decode pair); ``prompt_uncached`` is ``None`` when the counters are inconsistent."""

    prompt: float
    prompt_cached: float
    prompt_uncached: float | None
    generation: float
    total: float


@dataclasses.dataclass(frozen=True)
class Economics:
    """Everything the gauges and the status report for one group of engines over one interval."""

    tokens_per_second: TokenRates
    gpus: int | None
    tokens_per_second_per_gpu: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    streaming_tokens_per_second_per_request: float | None
    price_multiplier: float | None
    revenue_per_hour: float | None
    revenue_per_gpu_hour: float | None
    cost_per_gpu_hour: float | None
    margin_per_gpu_hour: float | None
    parity: float | None
    currency: str | None


def evaluate(
    rates: Rates,
    *,
    gpus: int | None,
    pricing: models.PricingSpec | None,
    multiplier: float = 1.0,
    billing: Billing = BILL_ALL,
    parity_reference: parity_api.ParitySpec | None = None,
) -> Economics:
    """Economics of ``rates`` produced by ``gpus`` GPUs, priced at ``pricing`` × ``multiplier``.

    ``multiplier`` is the schedule's multiplier for the measurement interval: ``mean_multiplier(pricing, start,
    end)`` for an interval, ``multiplier_at(pricing, t)`` for an instant. ``parity_reference`` is the
    serving's ``spec.parity``: a reference tokens/s per GPU and the basis (output or total tokens) it counts.
    """
    billed = billing.view(rates)
    uncached = _uncached(rates.prompt, rates.prompt_cached)
    billed_uncached = _uncached(billed.prompt, billed.prompt_cached)
    tokens = TokenRates(
        prompt=rates.prompt,
        prompt_cached=rates.prompt_cached,
        prompt_uncached=uncached,
        generation=rates.generation,
        total=billed.prompt + billed.generation,
    )
    per_gpu = _ratio(tokens.total, gpus)

    revenue_per_hour: float | None = None
    if pricing is not None and billed_uncached is not None:
        per_second = (
            billed.prompt_cached * pricing.input_cache_hit_per_million
            + billed_uncached * pricing.input_cache_miss_per_million
            + billed.generation * pricing.output_per_million
        ) / TOKENS_PER_PRICE_UNIT
        revenue_per_hour = per_second * multiplier * SECONDS_PER_HOUR
    revenue_per_gpu_hour = _ratio(revenue_per_hour, gpus)
    cost = pricing.gpu_hour_cost if pricing is not None else None
    margin = revenue_per_gpu_hour - cost if revenue_per_gpu_hour is not None and cost is not None else None

    accepted = rates.spec_accepted_tokens
    return Economics(
        tokens_per_second=tokens,
        gpus=gpus,
        tokens_per_second_per_gpu=per_gpu,
        acceptance_rate=_ratio(accepted, rates.spec_draft_tokens),
        mean_accepted_length=_plus_one(_ratio(accepted, rates.spec_drafts)),
        streaming_tokens_per_second_per_request=_ratio(rates.generation, rates.running_requests),
        price_multiplier=multiplier if pricing is not None else None,
        revenue_per_hour=revenue_per_hour,
        revenue_per_gpu_hour=revenue_per_gpu_hour,
        cost_per_gpu_hour=cost,
        margin_per_gpu_hour=margin,
        parity=_parity(billed, tokens.total, gpus, billing, parity_reference),
        currency=pricing.currency if pricing is not None else None,
    )


def _parity(
    billed: Rates, total_tokens: float, gpus: int | None, billing: Billing, reference: parity_api.ParitySpec | None
) -> float | None:
    """Measured tokens/s per GPU on the reference's basis ÷ the reference: like with like, output against output.

    ``None`` without a reference, and on the output basis for a role billed for no output (a disaggregated
    prefill role generates one token per request and hands the rest to decode: its output parity would read 0).
    """
    if reference is None or reference.reference_tokens_per_second_per_gpu is None:
        return None
    if reference.basis is parity_api.ParityBasis.OUTPUT:
        if not billing.generation:
            return None
        measured = billed.generation
    else:
        measured = total_tokens
    return _ratio(_ratio(measured, gpus), reference.reference_tokens_per_second_per_gpu)


def _uncached(prompt: float, cached: float) -> float | None:
    """Cache-miss prompt tokens/s; ``None`` if the cache-hit counter ran ahead of the prompt counter."""
    uncached = prompt - cached
    if uncached >= 0:
        return uncached
    if -uncached <= _RELATIVE_SLACK * max(prompt, cached):
        return 0.0
    return None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _plus_one(x: float | None) -> float | None:
    return None if x is None else 1.0 + x


# ---------------------------------------------------------------------------------------------------------------
# Intervals of servers and groups of them


@dataclasses.dataclass(frozen=True)
class Interval:
    """Rates one server measured over ``[start, end]`` (epoch seconds) while serving ``role``: what is priced."""

    role: str
    rates: Rates
    start: float
    end: float


def interval_multiplier(pricing: models.PricingSpec | None, start: float, end: float) -> float:
    """The schedule's multiplier integrated over ``[start, end]`` (epoch seconds); 1 without a price table."""
    if pricing is None:
        return 1.0
    return mean_multiplier(pricing, _utc(start), _utc(end))


def price_interval(interval: Interval, *, pricing: models.PricingSpec | None, disaggregated: bool) -> Economics:
    """One server's interval, billed for its role and priced over its own interval (no GPUs: no per-GPU figures)."""
    return evaluate(
        interval.rates,
        gpus=None,
        pricing=pricing,
        multiplier=interval_multiplier(pricing, interval.start, interval.end),
        billing=Billing.for_role(interval.role, disaggregated=disaggregated),
    )


def interval_revenue(interval: Interval, *, pricing: models.PricingSpec | None, disaggregated: bool) -> float | None:
    """Revenue earned over the interval: billed rates × prices × ∫ multiplier dt; ``None`` if it has no price."""
    revenue_per_hour = price_interval(interval, pricing=pricing, disaggregated=disaggregated).revenue_per_hour
    if revenue_per_hour is None:
        return None
    return revenue_per_hour * ((interval.end - interval.start) / SECONDS_PER_HOUR)


def group_multiplier(
    intervals: Sequence[Interval], *, pricing: models.PricingSpec | None, disaggregated: bool
) -> float:
    """The multiplier that prices the group's summed rates like its servers priced one by one.

    Leaders are scraped at slightly different times, so near a window boundary their intervals carry
    different multipliers; weighting by each server's revenue at base price keeps the sum exact.
    """
    if pricing is None:
        return 1.0
    base = weighted = 0.0
    latest = 1.0
    for interval in sorted(intervals, key=lambda i: i.end):
        latest = interval_multiplier(pricing, interval.start, interval.end)
        revenue = price_interval(interval, pricing=pricing, disaggregated=disaggregated).revenue_per_hour or 0.0
        weighted += revenue
        base += revenue / latest
    return weighted / base if base > 0 else latest


def evaluate_group(
    intervals: Sequence[Interval],
    *,
    gpus: int,
    pricing: models.PricingSpec | None,
    disaggregated: bool,
    parity_reference: parity_api.ParitySpec | None,
    whole_serving: bool,
) -> Economics:
    """Economics of the servers that reported in one group, on their ``gpus``.

    ``whole_serving``: the servers span the serving's roles, so each role's billed share is summed; otherwise
    they share one role and are billed as it is.
    """
    billings = [Billing.for_role(i.role, disaggregated=disaggregated) for i in intervals]
    rates = [i.rates for i in intervals]
    return evaluate(
        total([b.view(r) for b, r in zip(billings, rates, strict=True)] if whole_serving else rates),
        gpus=gpus,
        pricing=pricing,
        multiplier=group_multiplier(intervals, pricing=pricing, disaggregated=disaggregated),
        billing=BILL_ALL if whole_serving else billings[0],
        parity_reference=parity_reference,
    )


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


# ---------------------------------------------------------------------------------------------------------------
# Time-of-day schedule


@dataclasses.dataclass(frozen=True)
class _Segment:
    """A window's part within one UTC day: seconds of day ``[start, end)``."""

    start: int
    end: int
    multiplier: float


def _seconds_of_day(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * SECONDS_PER_HOUR + int(minutes) * 60


def _split(start: int, end: int, multiplier: float) -> list[_Segment]:
    if start < end:
        return [_Segment(start, end, multiplier)]
    tail = [_Segment(0, end, multiplier)] if end > 0 else []
    return [_Segment(start, SECONDS_PER_DAY, multiplier), *tail]


def _segments(pricing: models.PricingSpec) -> list[_Segment]:
    """The schedule as same-day segments; a window crossing midnight becomes two."""
    found = schedule_problems(pricing)
    if found:
        raise problems.InvalidSpec(found)
    out: list[_Segment] = []
    for window in pricing.schedule:
        out += _split(_seconds_of_day(window.start), _seconds_of_day(window.end), window.multiplier)
    return out


def schedule_problems(pricing: models.PricingSpec, path: str = "spec.pricing.schedule") -> list[problems.Problem]:
    """Empty and overlapping windows (the multiplier of an overlap would be ambiguous)."""
    found: list[problems.Problem] = []
    taken: list[tuple[_Segment, int]] = []  # segments of the windows accepted so far, with their window index
    for i, window in enumerate(pricing.schedule):
        here = problems.path(path, i)
        start, end = _seconds_of_day(window.start), _seconds_of_day(window.end)
        if start == end:
            found.append(problems.Problem(here, f"window {window.name!r} is empty (start == end == {window.start})"))
            continue
        mine = _split(start, end, window.multiplier)
        clash = next((j for s in mine for t, j in taken if s.start < t.end and t.start < s.end), None)
        if clash is not None:
            other = pricing.schedule[clash]
            found.append(
                problems.Problem(
                    here,
                    f"window {window.name!r} ({window.start}-{window.end}) overlaps window {other.name!r} "
                    f"({other.start}-{other.end}); a time can have only one multiplier",
                )
            )
            continue
        taken += [(s, i) for s in mine]
    return found


def _timestamp(at: datetime.datetime) -> float:
    if at.tzinfo is None:
        raise ValueError(f"{at.isoformat()} has no time zone; prices are scheduled in UTC")
    return at.timestamp()


def multiplier_at(pricing: models.PricingSpec, at: datetime.datetime) -> float:
    """The schedule's multiplier at the instant ``at`` (windows include their start, exclude their end)."""
    second = _timestamp(at) % SECONDS_PER_DAY
    for segment in _segments(pricing):
        if segment.start <= second < segment.end:
            return segment.multiplier
    return 1.0


def mean_multiplier(pricing: models.PricingSpec, start: datetime.datetime, end: datetime.datetime) -> float:
    """The multiplier averaged over ``[start, end]``, integrating piecewise across window boundaries.

    Revenue over the interval is then ``rate × base price × mean × duration`` exactly, for a constant rate.
    An empty interval has the multiplier of its instant.
    """
    a, b = _timestamp(start), _timestamp(end)
    if b < a:
        raise ValueError(f"interval ends ({end.isoformat()}) before it starts ({start.isoformat()})")
    if b == a:
        return multiplier_at(pricing, start)
    extra = 0.0  # ∫ (multiplier - 1) dt over the interval
    for segment, seconds in _overlaps(_segments(pricing), a, b):
        extra += (segment.multiplier - 1.0) * seconds
    return 1.0 + extra / (b - a)


def _overlaps(segments: list[_Segment], a: float, b: float) -> Iterator[tuple[_Segment, float]]:
    """Seconds of ``[a, b]`` (epoch seconds) inside each segment, day by day."""
    for day in range(math.floor(a / SECONDS_PER_DAY), math.floor(b / SECONDS_PER_DAY) + 1):
        midnight = day * SECONDS_PER_DAY
        for segment in segments:
            seconds = min(b, midnight + segment.end) - max(a, midnight + segment.start)
            if seconds > 0:
                yield segment, seconds
