"""Figure 2, steady state: the operator's memory and CPU with 1,000 servings and their pods, and its idle writes.

On the benchmark cluster (``benchcluster``), with a fleet of single-tray GB200 groups without a router (one pod per
serving, so 1,000 servings fit 56 racks):

1. **Seed** the fleet as nvlfleet would have left it, without waiting for nvlfleet to build it serving by serving
   (figure 1 measures that): the servings are created, and for each one ``reconciler.reconcile`` — the
   operator's own pure decision — is asked what to apply on a snapshot holding the serving and its rack; those
   exact objects (owner reference, labels, applied hash) are server-side applied as the ``nvlfleet`` field
   manager. The LeaderWorkerSet controller, the scheduler and kwok then run the pods as usual; the benchmark
   waits until every pod is Ready and every LeaderWorkerSet's status says so, with none changing for a while.
2. **Start** ``nvlfleet run`` (its own ServiceAccount, its requests counted, the default 60 s re-check) and wait
   until it has reconciled every serving once and every serving reports Ready: the first pass writes each status
   (kopf's diff base stays in memory, ``caches.DiffBases``) — start-up writes, not counted.
3. **Idle window**: nothing changes in the cluster for ``window`` seconds: at least one re-check interval and,
   in the full run, one round of node heartbeats (``idle_window``: kwok rewrites each node's status every ten
   minutes, as a kubelet does every five — the same instant for trays created together, a burst of a thousand
   node watch events; a shorter window measured 0.002 or 0.06 cores depending on whether it caught one).
   The LeaderWorkerSets changed meanwhile are counted: a pass they cause is work, not idling, and the note says so.
   Measured over it: writes by the operator's identity (``apiserver_flowcontrol_dispatched_requests_total``, every
   create/update/patch/delete, kopf's included) per minute — the goal is none —, reads per minute, reconcile
   passes (the operator's own ``nvlfleet_reconcile_total``), CPU cores of the operator process (the window's
   mean, and its busiest ``SLICE_SECONDS``), and its RSS at the end.

If start-up does not finish within its time cap the window is measured anyway, and the result says so: the
operator was still catching up, so the window shows its cost under load rather than idle.
4. **Restart**: the operator is stopped and a new one started on the same, unchanged fleet. Measured: seconds
   until it has passed every serving once (its own pass counter reaches the fleet) — every serving confirmed —
   and the writes it made meanwhile (the goal is none: each pass compares with the watched children and status).
5. **New servings**: ``NEW_SERVINGS`` more servings are created on the spare trays and the benchmark waits until
   each one reports Ready; the operator's writes meanwhile ÷ their number is the writes one new serving costs (a
   plain server-side-apply client writes its two children: the LeaderWorkerSet and the Service).
6. **Memory growth**: the operator's RSS with the same fleet of nodes and no serving (measured before the seed,
   once it has listed everything) next to its RSS with every serving, so the growth per 100 servings is printed
   and a larger fleet can be predicted on paper.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import os
import socket
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import benchcluster
import convergence
import proc
from kubernetes import client
from localcluster import components

from nvlfleet.api import metric_names
from nvlfleet.core import reconciler

RECHECK_SECONDS = 60.0
# The unlabelled histogram's count: the per-serving nvlfleet_reconcile_total series is dropped whenever telemetry
# forgets a serving, which it does on every pass of a serving with monitoring.scrape false.
PASSES = metric_names.RECONCILE_DURATION + "_count"


NEW_SERVINGS = 4
SLICE_SECONDS = 30.0  # the idle window's CPU is also read in slices this long: its busiest one is a row


def idle_window() -> float:
    """An idle window that holds one re-check of every serving and one heartbeat of every node, with a margin."""
    return max(RECHECK_SECONDS, components.node_heartbeat_seconds()) + 15.0


@dataclasses.dataclass(frozen=True)
class Result:
    servings: int
    seed_seconds: float
    startup_seconds: float | None  # None: start-up did not finish within its cap
    startup_writes: float
    window_seconds: float
    writes_per_minute: float
    reads_per_minute: float
    passes_per_minute: float
    cpu_cores: float
    rss_mib: float
    rss_mib_empty: float | None = None  # the same fleet of nodes, no serving
    restart_seconds: float | None = None  # None: not every serving passed within the cap
    restart_writes: float | None = None
    restart_reads: float | None = None
    new_servings: int = 0
    writes_per_new_serving: float | None = None  # None: the new servings were not all Ready within the cap
    load_idle: float | None = None  # 1-minute load average as the idle window closed
    load_restart: float | None = None  # … as the restarted operator had confirmed every serving
    sets_changed_in_window: int = 0  # LeaderWorkerSets another controller changed while the idle window was open
    cpu_cores_busiest: float | None = None  # the idle window's busiest SLICE_SECONDS
    heartbeat_seconds: float = dataclasses.field(default_factory=components.node_heartbeat_seconds)

    @property
    def rss_growth_mib_per_100(self) -> float | None:
        if self.rss_mib_empty is None or self.servings == 0:
            return None
        return (self.rss_mib - self.rss_mib_empty) * 100 / self.servings


def serving(name: str) -> dict[str, Any]:
    """One single-tray group without a router: the children a plain client would write too (the LeaderWorkerSet
    and its Service), so writes per new serving compare with its 2."""
    body = convergence.serving(name, groups=1, nodes_per_group=1)
    body["spec"]["router"] = {"enabled": False}
    return body


def seed(cluster: benchcluster.BenchCluster, namespace: str, count: int, workers: int = 8) -> float:
    """Servings and the children nvlfleet would apply for them, then wait for every pod; returns seconds."""
    started = time.monotonic()
    cluster.namespace(namespace)
    custom = client.CustomObjectsApi(cluster.admin)
    core = client.CoreV1Api(cluster.admin)
    nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
    racks: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        racks.setdefault(node["metadata"]["labels"].get("nvidia.com/gpu.clique", ""), []).append(node)
    domains = [racks[k] for k in sorted(racks) if k]
    per_rack = min(len(r) for r in domains)
    if count > per_rack * len(domains):
        raise ValueError(f"{count} single-tray servings do not fit {len(domains)} racks of {per_rack} trays")
    now = datetime.datetime.now(datetime.UTC)

    def one(index: int) -> None:
        name = convergence.names(count)[index]
        created = custom.create_namespaced_custom_object(
            convergence.GROUP, convergence.VERSION, namespace, convergence.PLURAL, serving(name)
        )
        # The serving alone on its rack: the decision places its one group there, as the planner packs them.
        snap = reconciler.Snapshot(serving=created, now=now, nodes=domains[index // per_rack])
        decision = reconciler.reconcile(snap)
        if not any(obj["kind"] == "LeaderWorkerSet" for obj in decision.apply):
            # Its group was not placed (a node still tainted, say): the seed would lack its pod and wait forever.
            raise RuntimeError(f"nvlfleet would place no group for {name}: {decision.status}")
        for obj in decision.apply:
            convergence.server_side_apply(cluster.admin, obj, field_manager="nvlfleet")

    watcher = convergence.ReadyWatch(
        lambda **kw: core.list_namespaced_pod(namespace, label_selector=convergence.POD_SELECTOR, **kw),
        convergence.pod_ready,
        count,
    ).start()
    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, range(count)))
        watcher.wait(timeout=1800)
    finally:
        watcher.stop()
    settle_children(cluster, namespace, count)
    return time.monotonic() - started


def _sets(cluster: benchcluster.BenchCluster, namespace: str) -> dict[str, Mapping[str, Any]]:
    """The namespace's LeaderWorkerSets by name, as the API server holds them now."""
    api = client.CustomObjectsApi(cluster.admin)
    listed = api.list_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets")
    return {o["metadata"]["name"]: o for o in listed["items"]}


def versions(cluster: benchcluster.BenchCluster, namespace: str) -> dict[str, str]:
    """Each LeaderWorkerSet's resourceVersion: what the idle window compares before and after."""
    return {name: o["metadata"]["resourceVersion"] for name, o in _sets(cluster, namespace).items()}


def settle_children(
    cluster: benchcluster.BenchCluster, namespace: str, count: int, quiet: float = 10.0, cap: float = 900.0
) -> float | None:
    """Until each of the ``count`` LeaderWorkerSets reports its groups ready and none has changed for ``quiet``
    seconds: pods Ready is not the end of the seed, for the LeaderWorkerSet controller writes each set's status
    after its pods, and on a loaded machine it still did so well after the operator had started — in the idle
    window, whose passes then measured the controller catching up, not an idle operator. Seconds it took, or None
    when it did not within ``cap`` (the window then says how many sets changed while it was open)."""
    started = time.monotonic()
    last: dict[str, str] = {}
    still = started
    while time.monotonic() - started < cap:
        sets = _sets(cluster, namespace)
        now = {name: o["metadata"]["resourceVersion"] for name, o in sets.items()}
        ready = len(sets) >= count and all(
            (o.get("status") or {}).get("readyReplicas") == (o.get("spec") or {}).get("replicas", 1)
            for o in sets.values()
        )
        if now != last or not ready:
            last, still = now, time.monotonic()
        elif time.monotonic() - still >= quiet:
            return time.monotonic() - started
        time.sleep(1.0)
    return None


def measure(
    cluster: benchcluster.BenchCluster,
    namespace: str,
    count: int,
    *,
    log_dir: Any,
    window: float,
    startup_cap: float,
    profile: Callable[[int], Any] | None = None,
) -> Result:
    """See the module docstring. ``profile(pid)`` (a started profiler with ``stop()``) records the operator's
    start-up only, so the idle window's CPU is the operator's alone."""
    identity = cluster.identity("operator")
    empty = _empty_rss(cluster, identity, namespace, log_dir)
    seed_seconds = seed(cluster, namespace, count)
    port = _free_port()
    command = cluster.operator_command(identity, [namespace], recheck_seconds=RECHECK_SECONDS, metrics_port=port)
    before = cluster.requests()
    operator = benchcluster.OperatorProcess(command, log_dir / f"operator-{namespace}.log").start()
    custom = client.CustomObjectsApi(cluster.admin)
    watcher = convergence.ReadyWatch(
        lambda **kw: custom.list_namespaced_custom_object(
            convergence.GROUP, convergence.VERSION, namespace, convergence.PLURAL, **kw
        ),
        convergence.serving_ready,
        count,
    ).start()
    profiler = profile(operator.pid) if profile is not None else None
    try:
        started = time.monotonic()
        startup = _until(lambda: watcher.reached_at is not None and _passes(port) >= count, startup_cap)
        startup = None if startup is None else startup - started
        if profiler is not None:
            profiler.stop()
        time.sleep(2.0)  # let the last status writes of start-up land before the window opens
        opened = cluster.requests()
        passes = _passes(port)
        sets = versions(cluster, namespace)
        meter = proc.Meter(operator.pid).start()
        busiest = _busiest(operator.pid, window)
        usage = meter.stop()
        load_idle = os.getloadavg()[0]
        closed = cluster.requests()
        passes = _passes(port) - passes
        moved = sum(v != sets.get(name) for name, v in versions(cluster, namespace).items())
        rss = proc.rss_mib(operator.pid)
    finally:
        if profiler is not None:
            profiler.stop()
        watcher.stop()
        operator.stop()
    restart, restart_writes, restart_reads = _restart(cluster, command, count, port, log_dir, namespace, startup_cap)
    load_restart = os.getloadavg()[0]
    new = _new_servings(cluster, command, namespace, count, log_dir, startup_cap)
    minutes = usage.wall_seconds / 60
    return Result(
        servings=count,
        seed_seconds=seed_seconds,
        startup_seconds=startup,
        startup_writes=opened.get("operator-writes", 0.0) - before.get("operator-writes", 0.0),
        window_seconds=usage.wall_seconds,
        writes_per_minute=(closed.get("operator-writes", 0.0) - opened.get("operator-writes", 0.0)) / minutes,
        reads_per_minute=(closed.get("operator-reads", 0.0) - opened.get("operator-reads", 0.0)) / minutes,
        passes_per_minute=passes / minutes,
        cpu_cores=usage.cores,
        rss_mib=rss,
        rss_mib_empty=empty,
        restart_seconds=restart,
        restart_writes=restart_writes,
        restart_reads=restart_reads,
        new_servings=NEW_SERVINGS,
        writes_per_new_serving=new,
        load_idle=load_idle,
        load_restart=load_restart,
        sets_changed_in_window=moved,
        cpu_cores_busiest=busiest,
    )


def _busiest(pid: int, window: float) -> float | None:
    """Waits ``window`` seconds; the most CPU cores ``pid`` used in one whole ``SLICE_SECONDS`` of them."""
    busiest = None
    ends = time.monotonic() + window
    while (left := ends - time.monotonic()) > 0:
        meter = proc.Meter(pid).start()
        time.sleep(min(SLICE_SECONDS, left))
        usage = meter.stop()
        if usage.wall_seconds >= SLICE_SECONDS * 0.99:
            busiest = max(busiest or 0.0, usage.cores)
    return busiest


def _until(done: Callable[[], bool], cap: float) -> float | None:
    """The monotonic time ``done()`` first held, polled every 0.5 s; None if it did not within ``cap`` seconds."""
    started = time.monotonic()
    while time.monotonic() - started < cap:
        if done():
            return time.monotonic()
        time.sleep(0.5)
    return None


def _empty_rss(cluster: benchcluster.BenchCluster, identity: Any, namespace: str, log_dir: Any) -> float | None:
    """The operator's RSS with the fleet's nodes and no serving, once it has listed everything (its metrics
    answer) and settled for a few seconds."""
    port = _free_port()
    command = cluster.operator_command(identity, [namespace], recheck_seconds=RECHECK_SECONDS, metrics_port=port)
    operator = benchcluster.OperatorProcess(command, log_dir / f"operator-{namespace}-empty.log").start()
    try:
        if _until(lambda: _metrics(port) is not None, 60) is None:
            return None
        time.sleep(10.0)
        return proc.rss_mib(operator.pid)
    finally:
        operator.stop()


def _restart(
    cluster: benchcluster.BenchCluster,
    command: list[str],
    count: int,
    port: int,
    log_dir: Any,
    namespace: str,
    cap: float,
) -> tuple[float | None, float | None, float | None]:
    """A new operator on the unchanged fleet: seconds until it passed every serving, its writes and reads."""
    before = cluster.requests()
    started = time.monotonic()
    operator = benchcluster.OperatorProcess(command, log_dir / f"operator-{namespace}-restart.log").start()
    try:
        confirmed = _until(lambda: _passes(port) >= count, cap)
        time.sleep(2.0)  # a write the last passes made lands in the counter
        after = cluster.requests()
    finally:
        operator.stop()
    writes = after.get("operator-writes", 0.0) - before.get("operator-writes", 0.0)
    reads = after.get("operator-reads", 0.0) - before.get("operator-reads", 0.0)
    return (None if confirmed is None else confirmed - started), writes, reads


def _new_servings(
    cluster: benchcluster.BenchCluster, command: list[str], namespace: str, count: int, log_dir: Any, cap: float
) -> float | None:
    """Writes per new serving: ``NEW_SERVINGS`` created beside the settled fleet, until each reports Ready."""
    custom = client.CustomObjectsApi(cluster.admin)
    operator = benchcluster.OperatorProcess(command, log_dir / f"operator-{namespace}-new.log").start()
    port = int(command[command.index("--metrics-port") + 1])
    try:
        if _until(lambda: _passes(port) >= count, cap) is None:
            return None
        time.sleep(2.0)
        fresh = [f"new-{i:02d}" for i in range(NEW_SERVINGS)]
        watcher = convergence.ReadyWatch(
            lambda **kw: custom.list_namespaced_custom_object(
                convergence.GROUP, convergence.VERSION, namespace, convergence.PLURAL, **kw
            ),
            convergence.serving_ready,
            count + NEW_SERVINGS,
        ).start()
        try:
            before = cluster.requests()
            for name in fresh:
                custom.create_namespaced_custom_object(
                    convergence.GROUP, convergence.VERSION, namespace, convergence.PLURAL, serving(name)
                )
            if _until(lambda: watcher.reached_at is not None, cap) is None:
                return None
            time.sleep(5.0)  # anything the last passes still write (a status, an event) is counted
            after = cluster.requests()
        finally:
            watcher.stop()
    finally:
        operator.stop()
    return (after.get("operator-writes", 0.0) - before.get("operator-writes", 0.0)) / NEW_SERVINGS


def _metrics(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text
    except OSError:
        return None


def _passes(port: int) -> float:
    """Reconcile passes so far, from the operator's own /metrics."""
    text = _metrics(port)
    if text is None:
        return 0.0
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(PASSES + " "))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def describe(result: Result) -> Mapping[str, object]:
    return dataclasses.asdict(result)
