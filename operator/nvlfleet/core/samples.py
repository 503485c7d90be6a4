"""One vLLM /metrics text → one ``Sample``: the counters and gauges nvlfleet reads, summed over nothing yet.

Pure core in the telemetry flow: vLLM /metrics (leaders) → ``exposition`` (sample lines) → **samples** (one
``Sample`` per scrape) → ``rates`` (two samples → per-second rates) → ``economics`` ($). The scraper
(``adapters.scraper``) feeds it the bytes it fetched and the time it fetched them (a clock reading passed in, so
this module has none), and so does ``nvlfleet economics`` with two saved scrapes.

- The families read are named in ``facts.vllm_metrics`` and checked against the pinned vLLM facts at import
  (type, and a per-``engine`` label). ``METRICS_QUERY`` is the ``name[]`` filter of prometheus-client's
  exposition (vLLM serves /metrics with it), so a leader sends the ~70 series read rather than ~2,600.
- A server ignoring the filter costs a little more: only the families read are cut out of the text (in the text
  format each family is one contiguous block of lines) and parsed.
- A text that yields no usable sample raises ``ScrapeError`` with a bounded ``reason``; no value beats a false one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from nvlfleet.core import exposition
from nvlfleet.facts import vllm_metrics


class ScrapeError(Exception):
    """A scrape that yields no sample. ``reason`` is a bounded label value; the message is for people."""

    REASONS = (
        "timeout",
        "connection",
        "http_status",
        "too_large",
        "parse",
        "missing_metrics",
        "invalid_value",
        "internal",
    )

    def __init__(self, reason: str, message: str) -> None:
        if reason not in self.REASONS:
            raise ValueError(f"unknown scrape error reason {reason!r}")
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class _Read:
    field: str  # economics.Rates field, or one of the extra fields below
    family: str  # vLLM family name
    sample: str  # sample name as exposed
    type_names: tuple[str, ...]  # names a ``# TYPE`` line may carry for it (text format 0.0.4 first)
    required: bool
    where: tuple[str, str] | None = None  # only the series with this (label, value)


def _reads() -> tuple[_Read, ...]:
    wanted: list[tuple[str, str, str, bool, tuple[str, str] | None]] = [
        ("prompt", vllm_metrics.PROMPT_TOKENS, "counter", True, None),
        ("prompt_cached", vllm_metrics.PROMPT_TOKENS_CACHED, "counter", True, None),
        ("generation", vllm_metrics.GENERATION_TOKENS, "counter", True, None),
        ("spec_drafts", vllm_metrics.SPEC_DECODE_NUM_DRAFTS, "counter", False, None),
        ("spec_draft_tokens", vllm_metrics.SPEC_DECODE_NUM_DRAFT_TOKENS, "counter", False, None),
        ("spec_accepted_tokens", vllm_metrics.SPEC_DECODE_NUM_ACCEPTED_TOKENS, "counter", False, None),
        ("running_requests", vllm_metrics.NUM_REQUESTS_RUNNING, "gauge", False, None),
    ]
    # Prompt tokens loaded by KV transfer (a P/D decode engine): billed where they were computed, not here.
    external = ("source", vllm_metrics.SOURCE_EXTERNAL_KV_TRANSFER)
    wanted.append(("prompt_external", vllm_metrics.PROMPT_TOKENS_BY_SOURCE, "counter", False, external))
    out = []
    for field, family, kind, required, where in wanted:
        fact = vllm_metrics.fact(family)
        if fact["type"] != kind or "engine" not in fact["labels"]:
            raise RuntimeError(f"vLLM facts disagree with the scraper about {family} ({kind}, per engine)")
        exposed: str = fact["exposed_as"]
        type_names = (exposed, family) if exposed != family else (family,)
        out.append(_Read(field, family, exposed, type_names, required, where))
        if kind == "counter" and field == "generation":
            # The creation time of one counter stands for the process start (all are created at startup).
            created = family + "_created"
            out.append(_Read("created", family, created, (created,), False))
    return tuple(out)


READS = _reads()
_BY_SAMPLE = {r.sample: r for r in READS}
COUNTER_FIELDS = tuple(r.field for r in READS if r.sample.endswith("_total"))
# ``?name[]=...`` for prometheus-client's exposition filter.
METRICS_QUERY = [("name[]", r.sample) for r in READS]

Series = tuple[tuple[str, str], ...]  # sorted label pairs of one series


@dataclasses.dataclass(frozen=True)
class Sample:
    """One good scrape of one server: counters per series, at ``time`` on the operator's clock."""

    time: float
    counters: Mapping[str, Mapping[Series, float]]  # Rates field -> series -> value
    running_requests: float | None
    created: float | None  # process start on the server's clock (``_created``); None in multiprocess mode


def parse_sample(body: bytes, at: float) -> Sample:
    """Parse a vLLM /metrics body (filtered or not), scraped at ``at``; raise ``ScrapeError`` if unusable."""
    try:
        lines = list(exposition.sample_lines(_blocks(body)))
    except (ValueError, UnicodeDecodeError, IndexError, KeyError) as err:
        raise ScrapeError("parse", f"not a Prometheus text exposition: {err}") from err
    counters: dict[str, dict[Series, float]] = {}
    running: float | None = None
    created: float | None = None
    for s in lines:
        read = _BY_SAMPLE.get(s.name)
        if read is None or (read.where is not None and s.labels.get(read.where[0]) != read.where[1]):
            continue
        value = s.value
        if not math.isfinite(value) or value < 0:
            raise ScrapeError("invalid_value", f"{s.name}{s.labels} = {value}")
        if read.field == "running_requests":
            running = (running or 0.0) + value
        elif read.field == "created":
            created = value if created is None else max(created, value)
        else:
            counters.setdefault(read.field, {})[tuple(sorted(s.labels.items()))] = value
    missing = [r.sample for r in READS if r.required and r.field not in counters]
    if missing:
        raise ScrapeError("missing_metrics", f"no {', '.join(missing)} in the exposition (is this vLLM?)")
    return Sample(time=at, counters=counters, running_requests=running, created=created)


def _blocks(body: bytes) -> str:
    """The families we read, cut out of an exposition (each family is one contiguous block of lines).

    A server honouring the ``name[]`` filter sends little else; one that ignores it sends ~40x more text,
    which a parser would take ~100 ms per leader to read.
    """
    parts: list[bytes] = []
    for read in READS:
        for name in read.type_names:
            start = _line_start(body, b"# TYPE " + name.encode() + b" ")
            if start is not None:
                parts.append(_family_block(body, start, name.encode()))
                break
    return b"".join(parts).decode("utf-8", errors="strict")


def _line_start(body: bytes, head: bytes) -> int | None:
    if body.startswith(head):
        return 0
    found = body.find(b"\n" + head)
    return found + 1 if found >= 0 else None


def _family_block(body: bytes, start: int, name: bytes) -> bytes:
    """From ``start`` to the first comment line about another family (or the end)."""
    own = (b"# TYPE " + name + b" ", b"# HELP " + name + b" ")
    end = start
    while True:
        comment = body.find(b"\n# ", end)
        if comment < 0:
            block = body[start:]
            return block if block.endswith(b"\n") else block + b"\n"
        if not body.startswith(own, comment + 1):
            return body[start : comment + 1]
        end = comment + 1
