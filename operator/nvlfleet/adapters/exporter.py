"""The operator's own metrics and the HTTP server that exports them: ``OperatorMetrics``, ``start_exporter``.

Adapter at the end of the telemetry flow: vLLM /metrics → ``samples`` → ``rates`` → ``economics`` →
``group_telemetry`` → **exporter** (``nvlfleet_*`` gauges on one ``CollectorRegistry``) → Prometheus. Every
metric is registered under its name in ``api.metric_names`` (where the dashboards and alerts find it too).

``OperatorMetrics`` is one object with one registry (never the process-global one, so tests stay isolated): the
operator calls ``reconciling`` / ``planning`` around its work and ``set_free_nodes`` after reading the inventory;
the scraper (``adapters.scraper``) records scrapes on it and registers ``GroupGauges``, which renders the
scraper's latest per-group snapshot. ``start_exporter`` serves the registry; ``serve_route`` is the one-route
HTTP server it (and ``nvlfleet run``'s health endpoint) runs on; ``CannotListen`` says in one line why a port
could not be listened on.
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

import prometheus_client
from aiohttp import web
from prometheus_client import metrics_core

from nvlfleet.api import metric_names as names
from nvlfleet.core import group_telemetry, samples


class OperatorMetrics:
    """Every metric the operator exports, on one ``CollectorRegistry`` owned by this object."""

    def __init__(self, registry: prometheus_client.CollectorRegistry | None = None) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry(
            auto_describe=True, support_collectors_without_names=True
        )
        r = self.registry
        self.reconcile_total = prometheus_client.Counter(
            names.RECONCILE_TOTAL, "Reconciliations of a DeepSeekServing.", ["namespace", "serving"], registry=r
        )
        self.reconcile_errors_total = prometheus_client.Counter(
            names.RECONCILE_ERRORS_TOTAL,
            "Reconciliations that failed, by error type.",
            ["namespace", "serving", "reason"],
            registry=r,
        )
        self.reconcile_duration_seconds = prometheus_client.Histogram(
            names.RECONCILE_DURATION,
            "Time to reconcile one DeepSeekServing.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.planner_duration_seconds = prometheus_client.Histogram(
            names.PLANNER_DURATION,
            "Time to compute one placement.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
            registry=r,
        )
        self.scrape_errors_total = prometheus_client.Counter(
            names.SCRAPE_ERRORS_TOTAL,
            "Failed scrapes of vLLM leaders, by reason: " + ", ".join(samples.ScrapeError.REASONS) + ".",
            ["namespace", "serving", "reason"],
            registry=r,
        )
        self.scrape_duration_seconds = prometheus_client.Histogram(
            names.SCRAPE_DURATION,
            "Time to scrape one vLLM leader.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.scrape_round_duration_seconds = prometheus_client.Gauge(
            names.SCRAPE_ROUND_DURATION, "Wall time of the last round over every leader.", registry=r
        )
        self.scrape_targets = prometheus_client.Gauge(
            names.SCRAPE_TARGETS,
            "Leaders by state after the last round: up (rates), pending (first sample or restart), down.",
            ["state"],
            registry=r,
        )
        self.serving_condition = prometheus_client.Gauge(
            names.SERVING_CONDITION,
            "1 while the serving's status condition (Ready, Placed, ...) is True, else 0.",
            ["namespace", "serving", "condition"],
            registry=r,
        )
        self.groups_desired = prometheus_client.Gauge(
            names.GROUPS_DESIRED,
            "Groups the serving's spec asks for, per role (decode as its autoscaler sets it, prefill as it follows).",
            ["namespace", "serving", "role"],
            registry=r,
        )
        self.groups_ready = prometheus_client.Gauge(
            names.GROUPS_READY,
            "Groups whose pods are all Ready, per role.",
            ["namespace", "serving", "role"],
            registry=r,
        )
        self.autoscaling_max_groups = prometheus_client.Gauge(
            names.AUTOSCALING_MAX_GROUPS,
            "spec.autoscaling.maxGroups of an autoscaled serving (absent for the others).",
            ["namespace", "serving"],
            registry=r,
        )
        self.domain_free_nodes = prometheus_client.Gauge(
            names.DOMAIN_FREE_NODES,
            "Schedulable nodes without a group, per NVLink domain.",
            ["domain"],
            registry=r,
        )
        self._free_nodes: dict[str, int] = {}  # as the gauges hold them

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
        """Replace the free-node gauges (domains that vanished disappear). Every pass that plans calls this with
        every domain of the fleet, nearly always as the pass before left them, so only the series that change are
        touched: clearing and setting 112 domains' series on each pass was 4% of the operator's CPU samples while
        200 servings rolled out (``py-spy record --gil``)."""
        if free_by_domain == self._free_nodes:
            return
        for domain in self._free_nodes.keys() - free_by_domain.keys():
            self.domain_free_nodes.remove(domain)
        for domain, free in free_by_domain.items():
            if self._free_nodes.get(domain) != free:
                self.domain_free_nodes.labels(domain).set(free)
        self._free_nodes = dict(free_by_domain)

    def set_conditions(self, namespace: str, serving: str, conditions: Mapping[str, bool]) -> None:
        """Replace a serving's condition gauges: ``{"Ready": True, "Placed": False, ...}``."""
        for labels in _series_of(self.serving_condition, ("namespace", "serving", "condition"), namespace, serving):
            if labels[2] not in conditions:
                self.serving_condition.remove(*labels)
        for condition, true in conditions.items():
            self.serving_condition.labels(namespace, serving, condition).set(1 if true else 0)

    def set_groups(
        self, namespace: str, serving: str, groups: Mapping[str, tuple[int, int]], max_groups: int | None
    ) -> None:
        """Replace a serving's group gauges: ``{role: (desired, ready)}`` and its autoscaling ceiling (None: off)."""
        for metric in (self.groups_desired, self.groups_ready):
            for labels in _series_of(metric, ("namespace", "serving", "role"), namespace, serving):
                if labels[2] not in groups:
                    metric.remove(*labels)
        for role, (desired, ready) in groups.items():
            self.groups_desired.labels(namespace, serving, role).set(desired)
            self.groups_ready.labels(namespace, serving, role).set(ready)
        if max_groups is None:
            for labels in _series_of(self.autoscaling_max_groups, ("namespace", "serving"), namespace, serving):
                self.autoscaling_max_groups.remove(*labels)
        else:
            self.autoscaling_max_groups.labels(namespace, serving).set(max_groups)

    def forget_serving(self, namespace: str, serving: str) -> None:
        """Drop a deleted serving's labelled series."""
        for metric, labels_of in (
            (self.reconcile_total, ("namespace", "serving")),
            (self.reconcile_errors_total, ("namespace", "serving", "reason")),
            (self.scrape_errors_total, ("namespace", "serving", "reason")),
            (self.serving_condition, ("namespace", "serving", "condition")),
            (self.groups_desired, ("namespace", "serving", "role")),
            (self.groups_ready, ("namespace", "serving", "role")),
            (self.autoscaling_max_groups, ("namespace", "serving")),
        ):
            for labels in _series_of(metric, labels_of, namespace, serving):
                metric.remove(*labels)


def _series_of(
    metric: prometheus_client.Counter | prometheus_client.Gauge, labels_of: Sequence[str], namespace: str, serving: str
) -> list[tuple[str, ...]]:
    """Label values of ``metric``'s series that belong to one serving (``labels_of`` in declaration order)."""
    found = set()
    for family in metric.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_created") or (labels.get("namespace"), labels.get("serving")) != (
                namespace,
                serving,
            ):
                continue
            found.add(tuple(labels[n] for n in labels_of))
    return sorted(found)


# ---------------------------------------------------------------------------------------------------------------
# Per-group gauges

Snapshot = Mapping[tuple[str, str], Sequence[group_telemetry.GroupTelemetry]]  # (ns, serving) -> [whole, *groups]


class GroupGauges:
    """Renders a snapshot of per-group telemetry as ``nvlfleet_*`` families; deleted servings simply vanish.

    ``snapshot`` returns the scraper's latest snapshot: an immutable mapping, so reading it from the exporter's
    thread or task is safe while the scraper builds the next one.
    """

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[metrics_core.Metric]:
        return []  # dynamic label sets: do not let the registry collect at registration time

    def collect(self) -> Iterator[metrics_core.Metric]:
        g = {
            name: metrics_core.GaugeMetricFamily(name, doc, labels=[*names.GROUP_LABELS, *extra])
            for name, (doc, extra) in _GAUGES.items()
        }
        revenue_total = metrics_core.CounterMetricFamily(
            names.REVENUE_TOTAL,
            "Revenue accrued since the operator started, in currency units.",
            labels=[*names.GROUP_LABELS, "currency"],
        )
        for groups in self._snapshot().values():
            for group in groups[1:]:
                labels = [group.namespace, group.serving, group.role or "", group.domain or ""]
                g[names.GPUS].add_metric(labels, group.gpus)
                if group.coverage is not None:
                    g[names.COVERAGE].add_metric(labels, group.coverage)
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
                        g[names.TOKENS_PER_SECOND].add_metric([*labels, kind], value)
                    _add(g[names.REVENUE_PER_HOUR], [*labels, *currency], eco.revenue_per_hour)
                _add(g[names.TOKENS_PER_SECOND_PER_GPU], labels, eco.tokens_per_second_per_gpu)
                _add(g[names.SPEC_ACCEPTANCE_RATE], labels, eco.acceptance_rate)
                _add(g[names.SPEC_MEAN_ACCEPTED_LENGTH], labels, eco.mean_accepted_length)
                _add(g[names.STREAMING_TPS_PER_REQUEST], labels, eco.streaming_tokens_per_second_per_request)
                _add(g[names.REVENUE_PER_GPU_HOUR], [*labels, *currency], eco.revenue_per_gpu_hour)
                _add(g[names.COST_PER_GPU_HOUR], [*labels, *currency], eco.cost_per_gpu_hour)
                _add(g[names.MARGIN_PER_GPU_HOUR], [*labels, *currency], eco.margin_per_gpu_hour)
                _add(g[names.PRICE_MULTIPLIER], labels, eco.price_multiplier)
                _add(g[names.PARITY_RATIO], labels, eco.parity)
                if currency:
                    revenue_total.add_metric([*labels, *currency], group.revenue_accrued)
        yield from g.values()
        yield revenue_total


def _add(family: metrics_core.GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)


# Gauge name -> (help, labels after GROUP_LABELS), in exposition order.
_GAUGES: dict[str, tuple[str, list[str]]] = {
    names.TOKENS_PER_SECOND: (
        "Tokens/s by kind (prompt includes prompt_cached); only when every leader of the group reported.",
        ["kind"],
    ),
    names.TOKENS_PER_SECOND_PER_GPU: ("Billed (prompt + generation) tokens/s per reporting GPU.", []),
    names.SPEC_ACCEPTANCE_RATE: ("Accepted / proposed speculative tokens.", []),
    names.SPEC_MEAN_ACCEPTED_LENGTH: ("1 + accepted tokens per draft.", []),
    names.STREAMING_TPS_PER_REQUEST: ("Generated tokens/s per running request.", []),
    names.REVENUE_PER_HOUR: (
        "Revenue per hour at the scheduled price; only when every leader reported.",
        ["currency"],
    ),
    names.REVENUE_PER_GPU_HOUR: ("Revenue per reporting GPU-hour at the scheduled price.", ["currency"]),
    names.COST_PER_GPU_HOUR: ("GPU-hour cost from the pricing spec.", ["currency"]),
    names.MARGIN_PER_GPU_HOUR: ("Revenue minus cost per GPU-hour.", ["currency"]),
    names.PRICE_MULTIPLIER: ("Time-of-day price multiplier over the last interval.", []),
    names.PARITY_RATIO: ("Tokens/s per GPU ÷ the spec's reference.", []),
    names.GPUS: ("GPUs of the leaders' groups (allocated and ready).", []),
    names.COVERAGE: ("Share of the group's GPUs whose leader reported in the last round.", []),
}


# ---------------------------------------------------------------------------------------------------------------
# HTTP


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
    """A one-route HTTP server on the running event loop; ``await runner.cleanup()`` stops it. Raises
    ``CannotListen`` when ``host:port`` cannot be listened on."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except (OSError, OverflowError) as err:  # OverflowError: a port number beyond 65535
        await runner.cleanup()
        raise CannotListen(host, port, err) from None
    return runner


_LISTEN_FAILURES = {
    errno.EADDRINUSE: "address in use",
    errno.EADDRNOTAVAIL: "not an address of this host",
    errno.EACCES: "permission denied",
}


class CannotListen(ValueError):
    """An address nothing could listen on, said in one line: ``cannot listen on 127.0.0.1:9090: address in use``."""

    def __init__(self, host: str, port: int, err: OSError | OverflowError) -> None:
        reason = isinstance(err, OSError) and _LISTEN_FAILURES.get(err.errno or 0)
        if not reason:
            reason = (err.strerror if isinstance(err, OSError) and err.strerror else str(err)).lower()
        super().__init__(f"cannot listen on {host}:{port}: {reason}")
