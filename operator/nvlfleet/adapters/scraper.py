"""Live telemetry: scrape vLLM's own /metrics from every group leader, keep each leader's latest rates.

Adapter at the start of the telemetry flow: vLLM /metrics (leaders) → **scraper** (network, clock) →
``samples`` → ``rates`` → ``economics`` → ``group_telemetry`` → ``exporter`` (gauges) + status. It owns the
network (one shared aiohttp session, a semaphore bounding requests in flight, a timeout per request), the clock
(injectable, so tests drive time) and the per-serving state; every number it holds is computed by the pure core.

- Each leader's ``/metrics`` is fetched with the ``name[]`` filter (``samples.METRICS_QUERY``); the time of a
  sample is the middle of the request on the operator's clock.
- A target whose last scrape failed (timeout, refused, HTTP error, unparsable or incomplete text) contributes no
  value until it answers again; the failure is counted in ``nvlfleet_scrape_errors_total{reason}`` and listed in
  the serving's summary so the operator can raise a condition. No value beats a false value.
- Revenue is priced per target over its own interval (``economics.interval_revenue``) and accumulated into
  ``nvlfleet_revenue_total``, which stays exact across missed scrapes because the next interval covers the gap.
- A serving's gauges are published as soon as its own leaders have answered, as one immutable snapshot that the
  exporter reads (``exporter.GroupGauges``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence

import aiohttp

from nvlfleet.adapters import exporter
from nvlfleet.api import models, problems
from nvlfleet.api import parity as parity_api
from nvlfleet.core import economics, group_telemetry, rates, samples

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class RoundReport:
    targets: int
    up: int
    pending: int
    down: int
    seconds: float


@dataclasses.dataclass
class _TargetState:
    target: group_telemetry.Target
    last: samples.Sample | None = None
    measurement: rates.Measurement | None = None  # from the last scrape, if it succeeded and yielded rates
    problem: group_telemetry.TargetProblem | None = None
    accrued_until: float = -math.inf  # end of the last interval whose revenue was accrued


@dataclasses.dataclass
class _Serving:
    pricing: models.PricingSpec | None
    parity_reference: parity_api.ParitySpec | None
    disaggregated: bool
    targets: dict[str, _TargetState]
    accrued: dict[tuple[str, str], float]  # (role, domain) -> revenue accrued


class Scraper:
    """Scrapes every leader of every serving; exports gauges on ``metrics.registry``; summarises for status.

    Not thread-safe except for the gauges' ``collect`` (called by the exporter), which reads an immutable snapshot.
    """

    def __init__(
        self,
        metrics: exporter.OperatorMetrics,
        *,
        clock: Clock = time.time,
        concurrency: int = 100,
        timeout: float = 5.0,
        max_body_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self._metrics = metrics
        self._clock = clock
        self._concurrency = concurrency
        self._timeout = timeout
        self._max_body = max_body_bytes
        self._servings: dict[tuple[str, str], _Serving] = {}
        self._snapshot: dict[tuple[str, str], list[group_telemetry.GroupTelemetry]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._semaphore: asyncio.Semaphore | None = None
        metrics.registry.register(exporter.GroupGauges(lambda: self._snapshot))

    # -- configuration, from the reconciler --------------------------------------------------------------

    def set_serving(
        self,
        namespace: str,
        serving: str,
        targets: Sequence[group_telemetry.Target],
        *,
        pricing: models.PricingSpec | None,
        parity_reference: parity_api.ParitySpec | None = None,
        disaggregated: bool | None = None,
    ) -> None:
        """Declare a serving's ready leaders (all of them, each call); leaders already known keep their samples.

        ``disaggregated``: the spec has a prefill role (pass ``spec.roles.prefill is not None``: while no prefill
        leader is ready yet, decode must still not bill prompts). ``None`` guesses from the targets' roles.
        Raises ``problems.InvalidSpec`` for a schedule with overlapping windows (validation rejects those too).
        """
        key = (namespace, serving)
        old = self._servings.get(key)
        states = {}
        for target in targets:
            state = old.targets.get(target.url) if old else None
            if state is None:
                state = _TargetState(target)
            state.target = target  # in place: a scrape in flight updates this very state
            states[target.url] = state
        if disaggregated is None:
            disaggregated = any(t.role == models.RoleName.PREFILL for t in targets)
        if pricing is not None and (found := economics.schedule_problems(pricing)):
            raise problems.InvalidSpec(found)  # here, in the reconciler, rather than in every round
        self._servings[key] = _Serving(pricing, parity_reference, disaggregated, states, old.accrued if old else {})
        self._publish([key])

    def remove_serving(self, namespace: str, serving: str) -> None:
        """Forget a deleted serving: its gauges disappear from the next exposition."""
        self._servings.pop((namespace, serving), None)
        self._metrics.forget_serving(namespace, serving)
        self._publish([(namespace, serving)])

    # -- scraping -----------------------------------------------------------------------------------------

    async def run(self, interval: float = 15.0, stop: asyncio.Event | None = None) -> None:
        """Scrape every ``interval`` seconds until ``stop`` is set (or the task is cancelled).

        A round longer than the interval delays the next one rather than overlapping it.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        while not stop.is_set():
            try:
                await self.scrape_once()
            except Exception:  # a bug here must not kill telemetry for the operator's lifetime
                log.exception("scrape round failed")
            next_round = max(next_round + interval, loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=next_round - loop.time())

    async def scrape_once(self) -> RoundReport:
        """Scrape every leader once, concurrently (bounded), then recompute and publish all gauges."""
        started = time.perf_counter()
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._concurrency, force_close=True),
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"},
                auto_decompress=False,
            )
            self._semaphore = asyncio.Semaphore(self._concurrency)
        jobs = [(key, state) for key, serving in self._servings.items() for state in serving.targets.values()]
        await asyncio.gather(
            *(self._scrape_serving(key, list(s.targets.values())) for key, s in self._servings.items())
        )
        up = sum(1 for _, s in jobs if s.measurement is not None)
        down = sum(1 for _, s in jobs if s.problem is not None and s.problem.reason != "pending")
        report = RoundReport(len(jobs), up, len(jobs) - up - down, down, time.perf_counter() - started)
        m = self._metrics
        m.scrape_round_duration_seconds.set(report.seconds)
        for state, count in (("up", report.up), ("pending", report.pending), ("down", report.down)):
            m.scrape_targets.labels(state).set(count)
        return report

    async def _scrape_serving(self, key: tuple[str, str], states: Sequence[_TargetState]) -> None:
        """Scrape one serving's leaders, then publish its gauges at once: waiting for the whole round (seconds,
        with a thousand leaders) would age every gauge by the round's length."""
        await asyncio.gather(*(self._scrape(key, state) for state in states))
        serving = self._servings.get(key)  # declared again meanwhile: the same target states, newer settings
        if serving is not None:
            _accrue(serving)
        self._publish([key])

    async def _scrape(self, key: tuple[str, str], state: _TargetState) -> None:
        target = state.target
        assert self._session is not None and self._semaphore is not None
        async with self._semaphore:
            started = time.perf_counter()
            try:
                try:
                    body, at = await self._fetch(target.url + "/metrics")
                    sample = samples.parse_sample(body, at)
                except samples.ScrapeError:
                    raise
                except Exception as err:  # a surprise must cost one target one round, not the operator
                    log.exception("scraping %s", target.url)
                    raise samples.ScrapeError("internal", f"{type(err).__name__}: {err}") from err
            except samples.ScrapeError as err:
                self._metrics.scrape_errors_total.labels(*key, err.reason).inc()
                state.measurement = None
                state.problem = group_telemetry.TargetProblem(
                    target.url, target.role, target.domain, err.reason, str(err)
                )
                return
            finally:
                self._metrics.scrape_duration_seconds.observe(time.perf_counter() - started)
        if state.last is None:
            state.measurement, state.problem = None, group_telemetry.pending(target, "first sample; a rate needs two")
        else:
            measurement = rates.measure(state.last, sample)
            if measurement.rates is None:
                state.measurement = None
                state.problem = group_telemetry.pending(target, measurement.reason or "no rate")
            else:
                state.measurement, state.problem = measurement, None
        state.last = sample

    async def _fetch(self, url: str) -> tuple[bytes, float]:
        assert self._session is not None
        try:
            asked = self._clock()
            async with self._session.get(url, params=samples.METRICS_QUERY) as response:
                # The server rendered the text somewhere between our asking and its answer: take the middle.
                at = (asked + self._clock()) / 2
                if response.status != 200:
                    raise samples.ScrapeError("http_status", f"HTTP {response.status} from {url}")
                if (response.content_length or 0) > self._max_body:
                    raise samples.ScrapeError("too_large", f"{response.content_length} bytes > {self._max_body}")
                chunks, size = [], 0
                async for chunk in response.content.iter_chunked(64 * 1024):
                    size += len(chunk)
                    if size > self._max_body:
                        raise samples.ScrapeError("too_large", f"more than {self._max_body} bytes")
                    chunks.append(chunk)
                return b"".join(chunks), at
        except TimeoutError as err:
            raise samples.ScrapeError("timeout", f"no answer within {self._timeout:g} s") from err
        except aiohttp.ClientError as err:
            raise samples.ScrapeError("connection", f"{type(err).__name__}: {err}") from err

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- publishing ---------------------------------------------------------------------------------------

    def _publish(self, keys: Iterable[tuple[str, str]]) -> None:
        snapshot = dict(self._snapshot)
        for key in keys:
            serving = self._servings.get(key)
            if serving is None:
                snapshot.pop(key, None)
                continue
            by_group: dict[tuple[str, str], list[_TargetState]] = {}
            for state in serving.targets.values():
                by_group.setdefault((state.target.role, state.target.domain), []).append(state)
            groups = [_group(key, serving, states, r, d) for (r, d), states in sorted(by_group.items())]
            whole = _group(key, serving, list(serving.targets.values()), None, None)
            snapshot[key] = [whole, *groups]
        self._snapshot = snapshot  # one reference swap: readers in other threads see old or new, never half

    # -- reading ------------------------------------------------------------------------------------------

    def summary(self, namespace: str, serving: str) -> group_telemetry.GroupTelemetry | None:
        """The whole serving (all roles and domains), for status; None if the serving is unknown."""
        groups = self._snapshot.get((namespace, serving))
        return groups[0] if groups else None

    def groups(self, namespace: str, serving: str) -> list[group_telemetry.GroupTelemetry]:
        """Per (role, NVLink domain), as exported."""
        return list(self._snapshot.get((namespace, serving), [])[1:])


def _accrue(serving: _Serving) -> None:
    """Add each target's new interval's revenue to its (role, domain), once per interval."""
    if serving.pricing is None:
        return
    for state in serving.targets.values():
        m = state.measurement
        if m is None or m.rates is None or m.end <= state.accrued_until:
            continue
        interval = economics.Interval(state.target.role, m.rates, m.start, m.end)
        revenue = economics.interval_revenue(interval, pricing=serving.pricing, disaggregated=serving.disaggregated)
        if revenue is not None:
            group = (state.target.role, state.target.domain)
            serving.accrued[group] = serving.accrued.get(group, 0.0) + revenue
        state.accrued_until = m.end


def _group(
    key: tuple[str, str], serving: _Serving, states: list[_TargetState], role: str | None, domain: str | None
) -> group_telemetry.GroupTelemetry:
    return group_telemetry.aggregate(
        *key,
        [group_telemetry.Reading(s.target, s.measurement, s.problem) for s in states],
        role=role,
        domain=domain,
        pricing=serving.pricing,
        disaggregated=serving.disaggregated,
        parity_reference=serving.parity_reference,
        accrued=serving.accrued,
    )
