"""Live telemetry: scrape vLLM's own /metrics from every group leader, turn counters into rates, export gauges.

Adapter in the flow vLLM /metrics (leaders) → **telemetry** (rates) → ``economics`` ($) → Prometheus gauges +
status. It owns the network (one shared aiohttp session, a semaphore bounding requests in flight, a timeout per
request), the clock (injectable, so tests drive time) and the operator's Prometheus registry. Everything it
computes about money is delegated to the pure ``economics`` module.

How a number is made, and when there is none
--------------------------------------------
- Each leader's ``/metrics`` is fetched with prometheus-client's ``name[]`` filter (vLLM serves /metrics with
  prometheus-client's ASGI app, which honours it), so a leader sends the ~70 series we read rather than ~2,600.
  A server ignoring the filter costs a little more: only the families we read are cut out of the text (in the
  text format each family is one contiguous block) and parsed, always by prometheus-client's parser.
- Counters are summed over the ``engine`` (DP rank) label. A rate needs two good samples of the same server;
  it is computed over the real time between them, so a missed scrape widens the next interval instead of
  counting as zero. A counter that went down, a changed ``_created`` time or a changed set of series means the
  server restarted: if ``_created`` (the restart time) lies between the two samples, the rate is the new value
  over the time since the restart; otherwise that interval has no rate.
- A target whose last scrape failed (timeout, refused, HTTP error, unparsable or incomplete text) contributes no
  value until it answers again; the failure is counted in ``nvlfleet_scrape_errors_total{reason}`` and listed in
  the serving's summary so the operator can raise a condition. No value beats a false value.
- Per (serving, role, NVLink domain): per-GPU and ratio figures use the leaders that reported and their GPUs;
  whole-group figures (tokens/s, revenue/h) are published only when every leader reported, since a sum with a
  missing leader would be a wrong number. ``nvlfleet_telemetry_coverage_ratio`` shows how much reported.
- Revenue is priced per target over its own interval with the schedule integrated across window boundaries
  (``economics.mean_multiplier``) and accumulated into ``nvlfleet_revenue_total``, which stays exact across
  missed scrapes because the next interval covers the gap.

The operator's metrics (reconcile, planner, scrape health, free nodes) are defined in ``OperatorMetrics``: one
object, one ``CollectorRegistry`` (never the process-global one, so tests stay isolated), served by
``start_exporter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence

import aiohttp
import prometheus_client
from aiohttp import web
from prometheus_client import metrics_core
from prometheus_client import parser as prom_parser

from nvlfleet.api import models, problems
from nvlfleet.core import economics
from nvlfleet.facts import facts

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# ---------------------------------------------------------------------------------------------------------------
# What is read from vLLM, checked against the pinned facts at import


@dataclasses.dataclass(frozen=True)
class _Read:
    field: str  # economics.Rates field, or one of the extra fields below
    family: str  # vLLM family name
    sample: str  # sample name as exposed
    type_names: tuple[str, ...]  # names a ``# TYPE`` line may carry for it (text format 0.0.4 first)
    required: bool


def _reads() -> tuple[_Read, ...]:
    known = {f["family"]: f for f in facts.load().raw["metrics"]["vllm_metrics"]}
    wanted = [
        ("prompt", "vllm:prompt_tokens", "counter", True),
        ("prompt_cached", "vllm:prompt_tokens_cached", "counter", True),
        ("generation", "vllm:generation_tokens", "counter", True),
        ("spec_drafts", "vllm:spec_decode_num_drafts", "counter", False),
        ("spec_draft_tokens", "vllm:spec_decode_num_draft_tokens", "counter", False),
        ("spec_accepted_tokens", "vllm:spec_decode_num_accepted_tokens", "counter", False),
        ("running_requests", "vllm:num_requests_running", "gauge", False),
    ]
    out = []
    for field, family, kind, required in wanted:
        fact = known.get(family)
        if fact is None or fact["type"] != kind or "engine" not in fact["labels"]:
            raise RuntimeError(f"vLLM facts disagree with the scraper about {family} ({kind}, per engine)")
        exposed = fact["exposed_as"]
        out.append(_Read(field, family, exposed, (exposed, family) if exposed != family else (family,), required))
        if kind == "counter" and field == "generation":
            # The creation time of one counter stands for the process start (all are created at startup).
            created = family + "_created"
            out.append(_Read("created", family, created, (created,), False))
    return tuple(out)


READS = _reads()
_BY_SAMPLE = {r.sample: r for r in READS}
_COUNTER_FIELDS = tuple(r.field for r in READS if r.sample.endswith("_total"))
# ``?name[]=...`` for prometheus-client's exposition filter.
METRICS_QUERY = [("name[]", r.sample) for r in READS]


# ---------------------------------------------------------------------------------------------------------------
# Parsing one scrape


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


Series = tuple[tuple[str, str], ...]  # sorted label pairs of one series


@dataclasses.dataclass(frozen=True)
class Sample:
    """One good scrape of one server: counters per series, at ``time`` on the operator's clock."""

    time: float
    counters: Mapping[str, Mapping[Series, float]]  # Rates field -> series -> value
    running_requests: float | None
    created: float | None  # process start on the server's clock (``_created``); None in multiprocess mode


def _blocks(body: bytes) -> str:
    """The families we read, cut out of an exposition (each family is one contiguous block of lines).

    A server honouring the ``name[]`` filter sends little else; one that ignores it sends ~40x more text,
    which prometheus-client's parser would take ~100 ms per leader to read.
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


def parse_sample(body: bytes, at: float) -> Sample:
    """Parse a vLLM /metrics body (filtered or not) into a ``Sample``; raise ``ScrapeError`` if unusable."""
    try:
        text = _blocks(body)
        families = list(prom_parser.text_string_to_metric_families(text))
    except (ValueError, UnicodeDecodeError, IndexError, KeyError) as err:
        raise ScrapeError("parse", f"not a Prometheus text exposition: {err}") from err
    counters: dict[str, dict[Series, float]] = {}
    running: float | None = None
    created: float | None = None
    for family in families:
        for s in family.samples:
            read = _BY_SAMPLE.get(s.name)
            if read is None:
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


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Rates of one server over ``[start, end]`` (operator clock), or why there are none."""

    rates: economics.Rates | None
    start: float
    end: float
    restarted: bool = False
    reason: str | None = None  # why ``rates`` is None


def measure(prev: Sample, cur: Sample, *, trust_created: bool = True) -> Measurement:
    """Counter rates between two samples of the same server (see the module docstring for resets).

    ``trust_created=False`` ignores ``_created`` (offline use, where sample times are not wall-clock times).
    """
    if cur.time <= prev.time:
        return Measurement(None, prev.time, cur.time, reason="no time elapsed between the samples")
    restarted = (prev.created is not None and cur.created is not None and cur.created != prev.created) or any(
        _went_back(prev.counters.get(field), cur.counters.get(field)) for field in _COUNTER_FIELDS
    )
    start = prev.time
    if restarted:
        if not (trust_created and cur.created is not None and prev.time < cur.created < cur.time):
            return Measurement(
                None, prev.time, cur.time, restarted=True, reason="the server restarted; waiting for a new sample"
            )
        start = cur.created
    elapsed = cur.time - start

    def rate(field: str) -> float | None:
        now = cur.counters.get(field)
        if now is None:
            return None
        if restarted:
            return sum(now.values()) / elapsed
        before = prev.counters.get(field)
        if before is None:
            return None
        return (sum(now.values()) - sum(before.values())) / elapsed

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
        ),
        start,
        cur.time,
        restarted,
    )


def _went_back(before: Mapping[Series, float] | None, now: Mapping[Series, float] | None) -> bool:
    """A counter series decreased, or the set of series changed: the counters were reset."""
    if before is None or now is None:
        return before is not None  # a family that vanished means a different process
    if before.keys() != now.keys():
        return True
    return any(now[k] < v for k, v in before.items())


# ---------------------------------------------------------------------------------------------------------------
# Operator metrics: defined once, here


class OperatorMetrics:
    """Every metric the operator exports, on one ``CollectorRegistry`` owned by this object.

    The operator calls ``reconciling`` / ``planning`` around its work and ``set_free_nodes`` after reading the
    inventory; the scraper records scrapes and adds the per-serving gauges as a collector on ``registry``.
    """

    def __init__(self, registry: prometheus_client.CollectorRegistry | None = None) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry(
            auto_describe=True, support_collectors_without_names=True
        )
        r = self.registry
        self.reconcile_total = prometheus_client.Counter(
            "nvlfleet_reconcile", "Reconciliations of a DeepSeekServing.", ["namespace", "serving"], registry=r
        )
        self.reconcile_errors_total = prometheus_client.Counter(
            "nvlfleet_reconcile_errors",
            "Reconciliations that failed, by error type.",
            ["namespace", "serving", "reason"],
            registry=r,
        )
        self.reconcile_duration_seconds = prometheus_client.Histogram(
            "nvlfleet_reconcile_duration_seconds",
            "Time to reconcile one DeepSeekServing.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.planner_duration_seconds = prometheus_client.Histogram(
            "nvlfleet_planner_duration_seconds",
            "Time to compute one placement.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
            registry=r,
        )
        self.scrape_errors_total = prometheus_client.Counter(
            "nvlfleet_scrape_errors",
            "Failed scrapes of vLLM leaders, by reason: " + ", ".join(ScrapeError.REASONS) + ".",
            ["namespace", "serving", "reason"],
            registry=r,
        )
        self.scrape_duration_seconds = prometheus_client.Histogram(
            "nvlfleet_scrape_duration_seconds",
            "Time to scrape one vLLM leader.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.scrape_round_duration_seconds = prometheus_client.Gauge(
            "nvlfleet_scrape_round_duration_seconds", "Wall time of the last round over every leader.", registry=r
        )
        self.scrape_targets = prometheus_client.Gauge(
            "nvlfleet_scrape_targets",
            "Leaders by state after the last round: up (rates), pending (first sample or restart), down.",
            ["state"],
            registry=r,
        )
        self.serving_condition = prometheus_client.Gauge(
            "nvlfleet_serving_condition",
            "1 while the serving's status condition (Ready, Placed, ...) is True, else 0.",
            ["namespace", "serving", "condition"],
            registry=r,
        )
        self.domain_free_nodes = prometheus_client.Gauge(
            "nvlfleet_domain_free_nodes",
            "Schedulable nodes without a group, per NVLink domain.",
            ["domain"],
            registry=r,
        )

    @contextlib.contextmanager
    def reconciling(self, namespace: str, serving: str) -> Iterator[None]:
        """Count and time one reconciliation; an exception is counted by its type and re-raised."""
        self.reconcile_total.labels(namespace, serving).inc()
        started = time.perf_counter()
        try:
            yield
        except BaseException as err:
            self.reconcile_errors_total.labels(namespace, serving, type(err).__name__).inc()
            raise
        finally:
            self.reconcile_duration_seconds.observe(time.perf_counter() - started)

    @contextlib.contextmanager
    def planning(self) -> Iterator[None]:
        with self.planner_duration_seconds.time():
            yield

    def set_free_nodes(self, free_by_domain: Mapping[str, int]) -> None:
        """Replace the free-node gauges (domains that vanished disappear)."""
        self.domain_free_nodes.clear()
        for domain, free in free_by_domain.items():
            self.domain_free_nodes.labels(domain).set(free)

    def set_conditions(self, namespace: str, serving: str, conditions: Mapping[str, bool]) -> None:
        """Replace a serving's condition gauges: ``{"Ready": True, "Placed": False, ...}``."""
        for labels in _series_of(self.serving_condition, ("namespace", "serving", "condition"), namespace, serving):
            if labels[2] not in conditions:
                self.serving_condition.remove(*labels)
        for condition, true in conditions.items():
            self.serving_condition.labels(namespace, serving, condition).set(1 if true else 0)

    def forget_serving(self, namespace: str, serving: str) -> None:
        """Drop a deleted serving's labelled series."""
        for metric, names in (
            (self.reconcile_total, ("namespace", "serving")),
            (self.reconcile_errors_total, ("namespace", "serving", "reason")),
            (self.scrape_errors_total, ("namespace", "serving", "reason")),
            (self.serving_condition, ("namespace", "serving", "condition")),
        ):
            for labels in _series_of(metric, names, namespace, serving):
                metric.remove(*labels)


def _series_of(
    metric: prometheus_client.Counter | prometheus_client.Gauge, names: Sequence[str], namespace: str, serving: str
) -> list[tuple[str, ...]]:
    """Label values of ``metric``'s series that belong to one serving (``names`` in declaration order)."""
    found = set()
    for family in metric.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_created") or (labels.get("namespace"), labels.get("serving")) != (
                namespace,
                serving,
            ):
                continue
            found.add(tuple(labels[n] for n in names))
    return sorted(found)


async def start_exporter(metrics: OperatorMetrics, *, host: str, port: int) -> web.AppRunner:
    """Serve ``metrics.registry`` at ``http://host:port/metrics`` on the running event loop.

    Returns the runner; ``await runner.cleanup()`` stops it. (``prometheus_client.start_http_server(port, host,
    registry=metrics.registry)`` works too: the collector reads an immutable snapshot, safe from another thread.)
    """

    async def handle(request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    return await serve_route(host, port, "/metrics", handle)


async def serve_route(
    host: str, port: int, path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.AppRunner:
    """A one-route HTTP server on the running event loop; ``await runner.cleanup()`` stops it."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


# ---------------------------------------------------------------------------------------------------------------
# Targets, results


@dataclasses.dataclass(frozen=True)
class Target:
    """A group leader's vLLM API server: ``url`` is ``http://host:port``; ``gpus`` are the whole group's."""

    role: str
    domain: str
    url: str
    gpus: int


@dataclasses.dataclass(frozen=True)
class TargetProblem:
    """Why a leader gives no number right now (``reason`` is a ``ScrapeError`` reason or ``pending``)."""

    url: str
    role: str
    domain: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.url} ({self.role}, {self.domain}): {self.reason}: {self.message}"


@dataclasses.dataclass(frozen=True)
class GroupTelemetry:
    """Telemetry of one serving's leaders in one (role, NVLink domain), or of the whole serving (both None).

    ``figures`` cover the leaders that reported; ``complete`` says all did, so whole-group figures hold.
    """

    namespace: str
    serving: str
    role: str | None
    domain: str | None
    gpus: int
    reporting_gpus: int
    targets: int
    reporting_targets: int
    figures: economics.Economics | None
    revenue_accrued: float
    measured_at: float | None
    problems: tuple[TargetProblem, ...] = ()

    @property
    def complete(self) -> bool:
        return self.targets > 0 and self.reporting_targets == self.targets

    @property
    def coverage(self) -> float | None:
        return self.reporting_gpus / self.gpus if self.gpus else None

    # Whole-group figures: None unless every leader reported.
    @property
    def tokens_per_second(self) -> economics.TokenRates | None:
        return self.figures.tokens_per_second if self.figures and self.complete else None

    @property
    def revenue_per_hour(self) -> float | None:
        return self.figures.revenue_per_hour if self.figures and self.complete else None


@dataclasses.dataclass(frozen=True)
class RoundReport:
    targets: int
    up: int
    pending: int
    down: int
    seconds: float


# ---------------------------------------------------------------------------------------------------------------
# The scraper


@dataclasses.dataclass
class _TargetState:
    target: Target
    last: Sample | None = None
    measurement: Measurement | None = None  # from the last scrape, if it succeeded and yielded rates
    problem: TargetProblem | None = None
    accrued_until: float = -math.inf  # end of the last interval whose revenue was accrued


@dataclasses.dataclass
class _Serving:
    pricing: models.PricingSpec | None
    parity_reference: float | None
    disaggregated: bool
    targets: dict[str, _TargetState]
    accrued: dict[tuple[str, str], float]  # (role, domain) -> revenue accrued


class Scraper:
    """Scrapes every leader of every serving; exports gauges on ``metrics.registry``; summarises for status.

    Not thread-safe except for ``collect`` (called by the exporter), which reads an immutable snapshot.
    """

    def __init__(
        self,
        metrics: OperatorMetrics,
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
        self._snapshot: dict[tuple[str, str], list[GroupTelemetry]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._semaphore: asyncio.Semaphore | None = None
        metrics.registry.register(_GaugeCollector(self))

    # -- configuration, from the reconciler --------------------------------------------------------------

    def set_serving(
        self,
        namespace: str,
        serving: str,
        targets: Sequence[Target],
        *,
        pricing: models.PricingSpec | None,
        parity_reference: float | None = None,
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
            self._accrue(serving)
        self._publish([key])

    async def _scrape(self, key: tuple[str, str], state: _TargetState) -> None:
        target = state.target
        assert self._session is not None and self._semaphore is not None
        async with self._semaphore:
            started = time.perf_counter()
            try:
                try:
                    body, at = await self._fetch(target.url + "/metrics")
                    sample = parse_sample(body, at)
                except ScrapeError:
                    raise
                except Exception as err:  # a surprise must cost one target one round, not the operator
                    log.exception("scraping %s", target.url)
                    raise ScrapeError("internal", f"{type(err).__name__}: {err}") from err
            except ScrapeError as err:
                self._metrics.scrape_errors_total.labels(*key, err.reason).inc()
                state.measurement = None
                state.problem = TargetProblem(target.url, target.role, target.domain, err.reason, str(err))
                return
            finally:
                self._metrics.scrape_duration_seconds.observe(time.perf_counter() - started)
        if state.last is None:
            state.measurement, state.problem = None, _pending(target, "first sample; a rate needs two")
        else:
            measurement = measure(state.last, sample)
            if measurement.rates is None:
                state.measurement = None
                state.problem = _pending(target, measurement.reason or "no rate")
            else:
                state.measurement, state.problem = measurement, None
        state.last = sample

    async def _fetch(self, url: str) -> tuple[bytes, float]:
        assert self._session is not None
        try:
            asked = self._clock()
            async with self._session.get(url, params=METRICS_QUERY) as response:
                # The server rendered the text somewhere between our asking and its answer: take the middle.
                at = (asked + self._clock()) / 2
                if response.status != 200:
                    raise ScrapeError("http_status", f"HTTP {response.status} from {url}")
                if (response.content_length or 0) > self._max_body:
                    raise ScrapeError("too_large", f"{response.content_length} bytes > {self._max_body}")
                chunks, size = [], 0
                async for chunk in response.content.iter_chunked(64 * 1024):
                    size += len(chunk)
                    if size > self._max_body:
                        raise ScrapeError("too_large", f"more than {self._max_body} bytes")
                    chunks.append(chunk)
                return b"".join(chunks), at
        except TimeoutError as err:
            raise ScrapeError("timeout", f"no answer within {self._timeout:g} s") from err
        except aiohttp.ClientError as err:
            raise ScrapeError("connection", f"{type(err).__name__}: {err}") from err

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- aggregation --------------------------------------------------------------------------------------

    def _accrue(self, serving: _Serving) -> None:
        """Add each new interval's revenue to its (role, domain): billed rates × prices × ∫multiplier dt."""
        if serving.pricing is None:
            return
        for state in serving.targets.values():
            m = state.measurement
            if m is None or m.rates is None or m.end <= state.accrued_until:
                continue
            revenue_per_hour = self._priced(serving, state.target.role, m).revenue_per_hour
            if revenue_per_hour is not None:
                group = (state.target.role, state.target.domain)
                hours = (m.end - m.start) / economics.SECONDS_PER_HOUR
                serving.accrued[group] = serving.accrued.get(group, 0.0) + revenue_per_hour * hours
            state.accrued_until = m.end

    def _priced(self, serving: _Serving, role: str, m: Measurement) -> economics.Economics:
        """One target's interval, billed for its role and priced over its own interval."""
        assert m.rates is not None
        return economics.evaluate(
            m.rates,
            gpus=None,
            pricing=serving.pricing,
            multiplier=self._multiplier(serving, m),
            billing=economics.Billing.for_role(role, disaggregated=serving.disaggregated),
        )

    @staticmethod
    def _multiplier(serving: _Serving, m: Measurement) -> float:
        if serving.pricing is None:
            return 1.0
        return economics.mean_multiplier(serving.pricing, _utc(m.start), _utc(m.end))

    def _group(
        self,
        key: tuple[str, str],
        serving: _Serving,
        states: list[_TargetState],
        role: str | None,
        domain: str | None,
    ) -> GroupTelemetry:
        """Aggregate leaders; ``role`` None means the whole serving (each role's billed share, summed)."""
        reporting = [s for s in states if s.measurement is not None and s.measurement.rates is not None]
        measurements = [s.measurement for s in reporting if s.measurement is not None]
        eco: economics.Economics | None = None
        if reporting:
            billings = [
                economics.Billing.for_role(s.target.role, disaggregated=serving.disaggregated) for s in reporting
            ]
            rates = [m.rates for m in measurements if m.rates is not None]
            eco = economics.evaluate(
                economics.total(
                    rates if role is not None else [b.view(r) for b, r in zip(billings, rates, strict=True)]
                ),
                gpus=sum(s.target.gpus for s in reporting),
                pricing=serving.pricing,
                multiplier=self._group_multiplier(serving, reporting),
                billing=billings[0] if role is not None else economics.BILL_ALL,
                parity_reference=serving.parity_reference,
            )
        accrued = sum(v for (r, d), v in serving.accrued.items() if role in (None, r) and domain in (None, d))
        return GroupTelemetry(
            namespace=key[0],
            serving=key[1],
            role=role,
            domain=domain,
            gpus=sum(s.target.gpus for s in states),
            reporting_gpus=sum(s.target.gpus for s in reporting),
            targets=len(states),
            reporting_targets=len(reporting),
            figures=eco,
            revenue_accrued=accrued,
            measured_at=max((m.end for m in measurements), default=None),
            problems=tuple(s.problem for s in states if s.problem is not None),
        )

    def _group_multiplier(self, serving: _Serving, reporting: list[_TargetState]) -> float:
        """The multiplier that prices the group's summed rates like its targets priced one by one.

        Leaders are scraped at slightly different times, so near a window boundary their intervals carry
        different multipliers; weighting by each target's revenue at base price keeps the sum exact.
        """
        if serving.pricing is None:
            return 1.0
        base = weighted = 0.0
        latest = 1.0
        for state in sorted(reporting, key=lambda s: s.measurement.end if s.measurement else 0.0):
            m = state.measurement
            assert m is not None
            latest = self._multiplier(serving, m)
            revenue = self._priced(serving, state.target.role, m).revenue_per_hour or 0.0
            weighted += revenue
            base += revenue / latest
        return weighted / base if base > 0 else latest

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
            groups = [self._group(key, serving, states, r, d) for (r, d), states in sorted(by_group.items())]
            whole = self._group(key, serving, list(serving.targets.values()), None, None)
            snapshot[key] = [whole, *groups]
        self._snapshot = snapshot  # one reference swap: readers in other threads see old or new, never half

    # -- reading ------------------------------------------------------------------------------------------

    def summary(self, namespace: str, serving: str) -> GroupTelemetry | None:
        """The whole serving (all roles and domains), for status; None if the serving is unknown."""
        groups = self._snapshot.get((namespace, serving))
        return groups[0] if groups else None

    def groups(self, namespace: str, serving: str) -> list[GroupTelemetry]:
        """Per (role, NVLink domain), as exported."""
        return list(self._snapshot.get((namespace, serving), [])[1:])


def _pending(target: Target, message: str) -> TargetProblem:
    return TargetProblem(target.url, target.role, target.domain, "pending", message)


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


# ---------------------------------------------------------------------------------------------------------------
# Gauges

_LABELS = ["namespace", "serving", "role", "domain"]


class _GaugeCollector:
    """Renders the scraper's latest snapshot as ``nvlfleet_*`` families; deleted servings simply vanish."""

    def __init__(self, scraper: Scraper) -> None:
        self._scraper = scraper

    def describe(self) -> list[metrics_core.Metric]:
        return []  # dynamic label sets: do not let the registry collect at registration time

    def collect(self) -> Iterator[metrics_core.Metric]:
        snapshot = self._scraper._snapshot
        g = {
            name: metrics_core.GaugeMetricFamily(f"nvlfleet_{name}", doc, labels=[*_LABELS, *extra])
            for name, (doc, extra) in _GAUGES.items()
        }
        revenue_total = metrics_core.CounterMetricFamily(
            "nvlfleet_revenue",
            "Revenue accrued since the operator started, in currency units.",
            labels=[*_LABELS, "currency"],
        )
        for groups in snapshot.values():
            for group in groups[1:]:
                labels = [group.namespace, group.serving, group.role or "", group.domain or ""]
                g["gpus"].add_metric(labels, group.gpus)
                if group.coverage is not None:
                    g["telemetry_coverage_ratio"].add_metric(labels, group.coverage)
                eco = group.figures
                if eco is None:
                    continue
                currency = [eco.currency] if eco.currency else []
                if group.complete:
                    tps = eco.tokens_per_second
                    for kind, value in (
                        ("prompt", tps.prompt),
                        ("prompt_cached", tps.prompt_cached),
                        ("generation", tps.generation),
                    ):
                        g["tokens_per_second"].add_metric([*labels, kind], value)
                    _add(g["revenue_per_hour"], [*labels, *currency], eco.revenue_per_hour)
                _add(g["tokens_per_second_per_gpu"], labels, eco.tokens_per_second_per_gpu)
                _add(g["spec_decode_acceptance_rate"], labels, eco.acceptance_rate)
                _add(g["spec_decode_mean_accepted_length"], labels, eco.mean_accepted_length)
                _add(g["streaming_tokens_per_second_per_request"], labels, eco.streaming_tokens_per_second_per_request)
                _add(g["revenue_per_gpu_hour"], [*labels, *currency], eco.revenue_per_gpu_hour)
                _add(g["cost_per_gpu_hour"], [*labels, *currency], eco.cost_per_gpu_hour)
                _add(g["margin_per_gpu_hour"], [*labels, *currency], eco.margin_per_gpu_hour)
                _add(g["price_multiplier"], labels, eco.price_multiplier)
                _add(g["parity_ratio"], labels, eco.parity)
                if currency:
                    revenue_total.add_metric([*labels, *currency], group.revenue_accrued)
        yield from g.values()
        yield revenue_total


def _add(family: metrics_core.GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)


_GAUGES: dict[str, tuple[str, list[str]]] = {
    "tokens_per_second": (
        "Tokens/s by kind (prompt includes prompt_cached); only when every leader of the group reported.",
        ["kind"],
    ),
    "tokens_per_second_per_gpu": ("Billed (prompt + generation) tokens/s per reporting GPU.", []),
    "spec_decode_acceptance_rate": ("Accepted / proposed speculative tokens.", []),
    "spec_decode_mean_accepted_length": ("1 + accepted tokens per draft.", []),
    "streaming_tokens_per_second_per_request": ("Generated tokens/s per running request.", []),
    "revenue_per_hour": ("Revenue per hour at the scheduled price; only when every leader reported.", ["currency"]),
    "revenue_per_gpu_hour": ("Revenue per reporting GPU-hour at the scheduled price.", ["currency"]),
    "cost_per_gpu_hour": ("GPU-hour cost from the pricing spec.", ["currency"]),
    "margin_per_gpu_hour": ("Revenue minus cost per GPU-hour.", ["currency"]),
    "price_multiplier": ("Time-of-day price multiplier over the last interval.", []),
    "parity_ratio": ("Tokens/s per GPU ÷ the spec's reference.", []),
    "gpus": ("GPUs of the leaders' groups (allocated and ready).", []),
    "telemetry_coverage_ratio": ("Share of the group's GPUs whose leader reported in the last round.", []),
}
