"""Two samples of one vLLM server → per-second rates over the real time between them, or why there are none.

Pure core in the telemetry flow: ``samples`` (one ``Sample`` per scrape) → **rates** (``Measurement``: rates
over ``[start, end]`` on the operator's clock) → ``economics`` ($). Times are the clock readings stored in the
samples; this module reads no clock.

- Counters are summed over the ``engine`` (DP rank) label. A rate is computed over the real time between the
  two samples, so a missed scrape widens the next interval instead of counting as zero.
- A counter that went down, a changed ``_created`` time or a changed set of series means the server restarted:
  if ``_created`` (the restart time) lies between the two samples, the rate is the new value over the time
  since the restart; otherwise that interval has no rate. Offline (``trust_created=False``: ``nvlfleet
  economics`` on two saved scrapes, whose times are what the user says), a reset is read as Prometheus' ``rate()``
  reads it: a series that went down counts its new value as its increase over the whole interval.
- ``running_requests`` is a gauge: the mean of the two samples (the later one alone across a restart).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nvlfleet.core import economics, samples


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Rates of one server over ``[start, end]`` (operator clock), or why there are none."""

    rates: economics.Rates | None
    start: float
    end: float
    restarted: bool = False
    reason: str | None = None  # why ``rates`` is None


def measure(prev: samples.Sample, cur: samples.Sample, *, trust_created: bool = True) -> Measurement:
    """Counter rates between two samples of the same server (see the module docstring for resets).

    ``trust_created=False`` ignores ``_created`` (offline use, where sample times are not wall-clock times).
    """
    if cur.time <= prev.time:
        return Measurement(None, prev.time, cur.time, reason="no time elapsed between the samples")
    restarted = (prev.created is not None and cur.created is not None and cur.created != prev.created) or any(
        _went_back(prev.counters.get(field), cur.counters.get(field)) for field in samples.COUNTER_FIELDS
    )
    start = prev.time
    placed = restarted and trust_created and cur.created is not None and prev.time < cur.created < cur.time
    if restarted and trust_created and not placed:
        return Measurement(
            None, prev.time, cur.time, restarted=True, reason="the server restarted; waiting for a new sample"
        )
    if placed:
        assert cur.created is not None
        start = cur.created
    elapsed = cur.time - start

    def rate(field: str) -> float | None:
        now = cur.counters.get(field)
        if now is None:
            return None
        if placed:
            return sum(now.values()) / elapsed
        before = prev.counters.get(field)
        if before is None:
            return None if not restarted else sum(now.values()) / elapsed
        # Without a restart time (offline), a reset is read the way Prometheus' rate() reads it: a series that went
        # down restarted from zero within the interval, so its increase is its new value.
        return sum(v - before[k] if k in before and v >= before[k] else v for k, v in now.items()) / elapsed

    running = cur.running_requests
    if not restarted and prev.running_requests is not None and running is not None:
        running = (prev.running_requests + running) / 2
    prompt, cached, generation = rate("prompt"), rate("prompt_cached"), rate("generation")
    if prompt is None or cached is None or generation is None:
        return Measurement(None, start, cur.time, restarted, reason="required counters missing in a sample")
    return Measurement(
        economics.Rates(
            prompt=prompt,
            prompt_cached=cached,
            generation=generation,
            spec_drafts=rate("spec_drafts"),
            spec_draft_tokens=rate("spec_draft_tokens"),
            spec_accepted_tokens=rate("spec_accepted_tokens"),
            running_requests=running,
            prompt_external=rate("prompt_external") or 0.0,  # absent before the first KV transfer is counted
        ),
        start,
        cur.time,
        restarted,
    )


def _went_back(before: Mapping[samples.Series, float] | None, now: Mapping[samples.Series, float] | None) -> bool:
    """A counter series decreased, or the set of series changed: the counters were reset."""
    if before is None or now is None:
        return before is not None  # a family that vanished means a different process
    if before.keys() != now.keys():
        return True
    return any(now[k] < v for k, v in before.items())
