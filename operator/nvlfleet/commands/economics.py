"""``nvlfleet economics``: the operator's telemetry arithmetic on two saved vLLM scrapes, for what-if pricing.

Adapter around the pure core, run by people: two ``/metrics`` texts taken ``--interval`` seconds apart (e.g.
``curl -s LEADER:8000/metrics > A.prom; sleep 60; curl -s LEADER:8000/metrics > B.prom``), a pricing block and
the GPUs behind the server, through exactly the parser, rate and economics code the operator runs
(``samples.parse_sample`` / ``rates.measure`` / ``economics.evaluate``).

``PRICING.yaml`` holds exactly a DeepSeekServing's ``spec.pricing`` block (camelCase keys). ``--at`` is when
the second scrape was taken (UTC; default: now); the schedule is integrated over ``[at - interval, at]``.

The JSON form is a stable interface (keys may be added, never renamed; a value that cannot be computed is null)::

    {"tokensPerSecond": {"prompt", "promptCached", "promptUncached", "generation", "total"},
     "tokensPerSecondPerGpu", "acceptanceRate", "meanAcceptedLength", "streamingTokensPerSecondPerRequest",
     "revenuePerHour", "revenuePerGpuHour", "costPerGpuHour", "marginPerGpuHour", "priceMultiplier",
     "parity", "parityBasis", "currency", "gpus", "intervalSeconds", "counterReset", "start", "end"}

Exit codes: 0 computed, 1 bad input (the message names the file or option and what is wrong).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import pydantic
import yaml

from nvlfleet.api import models, problems
from nvlfleet.api import parity as parity_api
from nvlfleet.core import economics, rates, samples


class BadInput(Exception):
    """Input the command cannot use; the message says which and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--before", required=True, metavar="A.prom", help="the earlier /metrics scrape")
    parser.add_argument("--after", required=True, metavar="B.prom", help="the later /metrics scrape")
    parser.add_argument(
        "--interval", required=True, type=float, metavar="SECONDS", help="seconds between the two scrapes"
    )
    parser.add_argument("--pricing", required=True, metavar="PRICING.yaml", help="a spec.pricing block")
    parser.add_argument("--gpus", required=True, type=int, metavar="N", help="GPUs behind the scraped server")
    parser.add_argument(
        "--at",
        metavar="UTC-TIME",
        help="when B.prom was taken: HH:MM[:SS] (today, UTC) or ISO 8601; default now",
    )
    parser.add_argument(
        "--role",
        choices=[r.value for r in models.RoleName],
        help="with --disaggregated: bill only what this role serves (prefill: prompts; decode: output and the "
        "prompt tokens it computed, not those it loaded by KV transfer)",
    )
    parser.add_argument(
        "--disaggregated", action="store_true", help="the serving runs separate prefill and decode roles"
    )
    parser.add_argument(
        "--reference",
        type=float,
        metavar="TOKENS_PER_SECOND_PER_GPU",
        help="reference throughput for the parity ratio (spec.parity.referenceTokensPerSecondPerGpu)",
    )
    parser.add_argument(
        "--reference-basis",
        choices=[b.value for b in parity_api.ParityBasis],
        default=parity_api.ParityBasis.OUTPUT.value,
        help="which tokens --reference counts (spec.parity.basis): output (default) or total",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")


def run(args: argparse.Namespace) -> int:
    try:
        result = _compute(args)
    except BadInput as err:
        print(f"nvlfleet economics: {err}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(_table(result))
    return 0


def _parity_reference(args: argparse.Namespace) -> parity_api.ParitySpec | None:
    if args.reference is None:
        return None
    try:
        return parity_api.ParitySpec(reference_tokens_per_second_per_gpu=args.reference, basis=args.reference_basis)
    except pydantic.ValidationError:
        raise BadInput(f"--reference must be a positive number of tokens/s per GPU, got {args.reference:g}") from None


def _compute(args: argparse.Namespace) -> dict[str, Any]:
    if not args.interval > 0:
        raise BadInput(f"--interval must be a positive number of seconds, got {args.interval:g}")
    if args.gpus < 1:
        raise BadInput(f"--gpus must be at least 1, got {args.gpus}")
    if bool(args.role) != args.disaggregated:
        raise BadInput("--role and --disaggregated go together: a disaggregated role bills only its own tokens")
    pricing = _pricing(Path(args.pricing))
    end = _at(args.at)
    start = end - datetime.timedelta(seconds=args.interval)
    before = _sample(Path(args.before), start.timestamp())
    after = _sample(Path(args.after), end.timestamp())
    # Offline, sample times are what the user says, not clock readings: ``_created`` cannot place a restart.
    measurement = rates.measure(before, after, trust_created=False)
    if measurement.rates is None:
        raise BadInput(f"{args.before} → {args.after}: no rates: {measurement.reason}")
    billing = economics.Billing.for_role(args.role, disaggregated=True) if args.role else economics.BILL_ALL
    eco = economics.evaluate(
        measurement.rates,
        gpus=args.gpus,
        pricing=pricing,
        multiplier=economics.mean_multiplier(pricing, start, end),
        billing=billing,
        parity_reference=_parity_reference(args),
    )
    tps = eco.tokens_per_second
    return {
        "tokensPerSecond": {
            "prompt": tps.prompt,
            "promptCached": tps.prompt_cached,
            "promptUncached": tps.prompt_uncached,
            "generation": tps.generation,
            "total": tps.total,
        },
        "tokensPerSecondPerGpu": eco.tokens_per_second_per_gpu,
        "acceptanceRate": eco.acceptance_rate,
        "meanAcceptedLength": eco.mean_accepted_length,
        "streamingTokensPerSecondPerRequest": eco.streaming_tokens_per_second_per_request,
        "revenuePerHour": eco.revenue_per_hour,
        "revenuePerGpuHour": eco.revenue_per_gpu_hour,
        "costPerGpuHour": eco.cost_per_gpu_hour,
        "marginPerGpuHour": eco.margin_per_gpu_hour,
        "priceMultiplier": eco.price_multiplier,
        "parity": eco.parity,
        "parityBasis": None if args.reference is None else args.reference_basis,
        "currency": eco.currency,
        "gpus": eco.gpus,
        "intervalSeconds": args.interval,
        # Said whenever it applies: the figures then rest on a reading of the counters, not on their difference.
        "counterReset": (
            "counters went down between the scrapes (a restart, or the files in the wrong order): read as "
            "Prometheus' rate() reads a reset, the value after it counting as the increase"
            if measurement.restarted
            else None
        ),
        "start": _iso(start),
        "end": _iso(end),
    }


def _pricing(path: Path) -> models.PricingSpec:
    raw = _load_yaml(path)
    if isinstance(raw, dict) and ("spec" in raw or "pricing" in raw):
        raise BadInput(f"{path}: give the spec.pricing block itself (inputCacheHitPerMillion: ...), not its parent")
    try:
        pricing = models.PricingSpec.model_validate(raw)
    except pydantic.ValidationError as err:
        lines = [f"{path}: {problems.pydantic_path(e['loc'], 'spec.pricing')}: {e['msg']}" for e in err.errors()]
        raise BadInput("\n".join(lines)) from err
    found = economics.schedule_problems(pricing)
    if found:
        raise BadInput("\n".join(f"{path}: {p}" for p in found))
    return pricing


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise BadInput(f"{path}: not YAML: {err}") from err


def _sample(path: Path, at: float) -> samples.Sample:
    try:
        body = path.read_bytes()
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror or err}") from err
    try:
        return samples.parse_sample(body, at)
    except samples.ScrapeError as err:
        raise BadInput(f"{path}: not a usable vLLM /metrics text ({err.reason}): {err}") from err


def _at(text: str | None) -> datetime.datetime:
    """``--at`` as an aware UTC datetime: HH:MM[:SS] means today (UTC), ISO 8601 without offset means UTC."""
    now = datetime.datetime.now(datetime.UTC)
    if text is None:
        return now
    try:
        if len(text) <= 8 and ":" in text and "T" not in text and "-" not in text:
            clock = datetime.time.fromisoformat(text)
            return datetime.datetime.combine(now.date(), clock, tzinfo=datetime.UTC)
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise BadInput(f"--at {text!r}: expected HH:MM[:SS] or an ISO 8601 time such as 2026-10-20T16:45:00Z") from err
    return parsed.replace(tzinfo=datetime.UTC) if parsed.tzinfo is None else parsed.astimezone(datetime.UTC)


def _iso(t: datetime.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _table(r: dict[str, Any]) -> str:
    tps, cur = r["tokensPerSecond"], r["currency"]

    def num(x: float | None, digits: int = 0) -> str:
        return "n/a" if x is None else f"{x:,.{digits}f}"

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    rows = [
        ("interval", f"{r['start']} → {r['end']} ({r['intervalSeconds']:g} s), price ×{num(r['priceMultiplier'], 3)}"),
        (
            "tokens/s",
            f"prompt {num(tps['prompt'])} (cached {num(tps['promptCached'])}, uncached "
            f"{num(tps['promptUncached'])}), generation {num(tps['generation'])}, total {num(tps['total'])}",
        ),
        ("tokens/s per GPU", f"{num(r['tokensPerSecondPerGpu'])} over {r['gpus']} GPUs"),
        (
            "speculative",
            f"acceptance {pct(r['acceptanceRate'])}, mean accepted length {num(r['meanAcceptedLength'], 2)}",
        ),
        ("streaming", f"{num(r['streamingTokensPerSecondPerRequest'], 1)} tokens/s per running request"),
        (
            "revenue",
            f"{num(r['revenuePerHour'], 2)} {cur}/h, {num(r['revenuePerGpuHour'], 2)} {cur}/GPU-hour",
        ),
        ("cost, margin", f"{num(r['costPerGpuHour'], 2)}, {num(r['marginPerGpuHour'], 2)} {cur}/GPU-hour"),
        ("parity", num(r["parity"], 3) + (f" ({r['parityBasis']} tokens/s per GPU)" if r["parityBasis"] else "")),
    ]
    if r["counterReset"]:
        rows.append(("counter reset", r["counterReset"]))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
