"""Figure 2, steady state: the operator's memory and CPU with 1,000 servings and their pods, and its idle writes.

On the benchmark cluster (``benchcluster``), with a fleet of single-tray GB200 groups (one pod per serving, so
1,000 servings fit 56 racks):

1. **Seed** the fleet as nvlfleet would have left it, without waiting for nvlfleet to build it serving by serving
   (figure 1 measures that): the servings are created, and for each one ``reconciler.reconcile`` — the
   operator's own pure decision — is asked what to apply on a snapshot holding the serving and its rack; those
   exact objects (owner reference, labels, applied hash) are server-side applied as the ``nvlfleet`` field
   manager. The LeaderWorkerSet controller, the scheduler and kwok then run the pods as usual; the benchmark
   waits until every pod is Ready.
2. **Start** ``nvlfleet run`` (its own ServiceAccount, its requests counted, the default 60 s re-check) and wait
   until it has reconciled every serving once and every serving reports Ready: kopf's resume pass writes its
   diff-base annotation, the first pass writes each status — start-up writes, not counted.
3. **Idle window**: nothing changes in the cluster for ``window`` seconds (at least one re-check interval).
   Measured over it: writes by the operator's identity (``apiserver_flowcontrol_dispatched_requests_total``, every
   create/update/patch/delete, kopf's included) per minute — the goal is none —, reads per minute, reconcile
   passes (the operator's own ``nvlfleet_reconcile_total``), CPU cores of the operator process, and its RSS at
   the end.

If start-up does not finish within its time cap the window is measured anyway, and the result says so: the
operator was still catching up, so the window shows its cost under load rather than idle.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import socket
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import benchcluster
import convergence
import proc
from kubernetes import client

from nvlfleet.api import metric_names
from nvlfleet.core import reconciler

RECHECK_SECONDS = 60.0
# The unlabelled histogram's count: the per-serving nvlfleet_reconcile_total series is dropped whenever telemetry
# forgets a serving, which it does on every pass of a serving with monitoring.scrape false.
PASSES = metric_names.RECONCILE_DURATION + "_count"


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


def serving(name: str) -> dict[str, Any]:
    return convergence.serving(name, groups=1, nodes_per_group=1)


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
        if not decision.apply:
            raise RuntimeError(f"nvlfleet would apply nothing for {name}: {decision.status}")
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
    return time.monotonic() - started


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
    seed_seconds = seed(cluster, namespace, count)
    identity = cluster.identity("operator")
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
        startup: float | None = None
        while time.monotonic() - started < startup_cap:
            if watcher.reached_at is not None and _passes(port) >= count:
                startup = time.monotonic() - started
                break
            time.sleep(1.0)
        if profiler is not None:
            profiler.stop()
        time.sleep(2.0)  # let the last status writes of start-up land before the window opens
        opened = cluster.requests()
        passes = _passes(port)
        meter = proc.Meter(operator.pid).start()
        time.sleep(window)
        usage = meter.stop()
        closed = cluster.requests()
        passes = _passes(port) - passes
        rss = proc.rss_mib(operator.pid)
    finally:
        if profiler is not None:
            profiler.stop()
        watcher.stop()
        operator.stop()
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
    )


def _passes(port: int) -> float:
    """Reconcile passes so far, from the operator's own /metrics."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(PASSES + " "))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def describe(result: Result) -> Mapping[str, object]:
    return dataclasses.asdict(result)
