"""Figure 1, convergence: how much longer N servings take through nvlfleet than the API server's own limit.

Measured on the benchmark cluster (``benchcluster``), side by side, each run in a fresh namespace on a free fleet:

* **nvlfleet**: ``nvlfleet run`` is started and idle; the clock starts at the first ``create`` of N
  DeepSeekServings and stops when every one reports ``Ready=True`` for its current generation (status).
* **plain client** (the reference): the very same children — ``render.render`` of the same specs with the
  placement nvlfleet chose, read from the first run's status — are server-side applied by a plain ``kubernetes``
  client; the clock stops when every pod of every LeaderWorkerSet is Ready. Rendering happens before the clock
  starts: the reference is the API server's write path and the controllers behind it (LWS, scheduler, kwok),
  nothing else. It runs twice: **concurrent**, with as many servings in flight at once as the operator reconciles
  at once (``Config.passes_at_once``, the ``--passes-at-once`` default of ``nvlfleet run``; each serving's
  children in order, as one pass applies them), the reference the ratio is taken against; and **serial**, one
  object after the other, kept as a second row. Its apply loop alone is timed too (``applied_seconds``).

Beside the time, each run notes the CPU every process of it used meanwhile (``MachineCpu``: the control plane's
components by their recorded PIDs, this process, the operator). On two cores a run of 1,000 servings keeps both
busy, the reference's as much as nvlfleet's, so the time a run takes follows the CPU it needs: the row says how
much of nvlfleet's overhead is the operator's own CPU and how much the work it makes the control plane do.

``measure`` repeats the runs (nvlfleet, concurrent, serial) ``repeats`` times per N, each repeat's ratio taken
against its own reference, and notes the machine's 1-minute load average after each repeat; the serial reference
may run in the first repeats only (``serial_repeats``: ``bench/run.py`` runs it once per N, and its row says so).

Both sides wait on a watch (no polling interval to round up to). Between the runs the namespace is deleted and
the benchmark waits until every pod is gone, so each run starts on an empty fleet. The servings keep the
defaults of a DeepSeek-V4.1-Flash decode role on GB200 with two-node groups (a leader and a worker per group),
without ComputeDomains (the local cluster runs no IMEX driver; with one, both sides would wait for it alike),
without scraping (figure 4 measures telemetry on its own) and without the router (its Deployment's pod is no
part of "every pod of every LeaderWorkerSet Ready"; both sides would create it alike).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import benchcluster
from kubernetes import client, watch

from nvlfleet.adapters.config import Config
from nvlfleet.api import models
from nvlfleet.api import names as api_names  # `names` is this module's list of serving names
from nvlfleet.core import kubeobjects, render

# Servings the reference applies at once: the operator's own default for passes of different servings in flight.
OPERATOR_CONCURRENCY = Config.passes_at_once

GROUP, VERSION, PLURAL = api_names.GROUP, api_names.VERSION, api_names.PLURAL
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
FIELD_MANAGER = "bench-plain-client"
POD_SELECTOR = f"{api_names.MANAGED_BY_LABEL}={api_names.MANAGED_BY}"
WARM_UP = "warm-up"
NODES_PER_GROUP = 2
EXTRA_FLEET = "bench-conv"  # the racks added beyond the shared bench fleet for a large N (removed after figure 1)
PODS_PER_SERVING = NODES_PER_GROUP  # one group per serving, one pod per node


def serving(name: str, *, groups: int = 1, nodes_per_group: int = NODES_PER_GROUP) -> dict[str, Any]:
    return {
        "apiVersion": api_names.API_VERSION,
        "kind": api_names.KIND,
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "servedName": "deepseek-v4.1-flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": benchcluster.GPU,
            "roles": {"decode": {"groups": groups, "parallelism": {"tensor": 1, "nodesPerGroup": nodes_per_group}}},
            "placement": {"computeDomain": False},
            "monitoring": {"scrape": False},
            "router": {"enabled": False},
        },
    }


def add_racks(cluster: benchcluster.BenchCluster, count: int, trays: int, say: Callable[[str], None]) -> int:
    """GB200 racks added as fleet ``EXTRA_FLEET`` beside ``trays`` trays so that ``count`` servings' groups fit
    (+2 spare trays), numbered after them; how many (0 when they fit already)."""
    missing = -(-(count * PODS_PER_SERVING + 2 - trays) // benchcluster.TRAYS_PER_RACK)
    if missing > 0:
        say(f"adding {missing} racks to the {trays} trays for N={count} (fleet {EXTRA_FLEET})")
        cluster.fleet(missing, name=EXTRA_FLEET, first_slot=trays)
    return max(0, missing)


def names(count: int) -> list[str]:
    return [f"serving-{i:04d}" for i in range(count)]


@dataclasses.dataclass(frozen=True)
class Run:
    seconds: float
    writes: float  # requests counted as writes for the client's identity
    placements: Mapping[str, Mapping[str, Mapping[str, int]]] = dataclasses.field(default_factory=dict)
    cpu_seconds: float | None = None  # the operator process's CPU during the run
    pods_seconds: float | None = None  # until every pod was Ready (the operator's run only; status comes later)
    applied_seconds: float | None = None  # the plain client's apply loop alone
    timed_out: bool = False  # cut short at the time cap: ``seconds`` is a lower bound
    ready: int = 0  # servings (or pods) ready at the end
    reads: float | None = None  # the operator's reads during the run (its watches' lists included)
    passes: float | None = None  # the operator's reconcile passes during the run, when counted (``count_passes``)
    # CPU every process of the run used during it: the control plane's (``BenchCluster.cpu_seconds``), this
    # process's (its watches; the plain client's applies) and the operator's. On a machine the run saturates, the
    # time a run takes follows it, so it says what the operator costs beyond its own CPU.
    machine_cpu_seconds: float | None = None


class MachineCpu:
    """CPU used by the cluster's processes, this process and ``extra`` PIDs (the operator) between ``start`` and
    ``stop``; a component that stopped or started in between is left out of the sum."""

    def __init__(self, cluster: benchcluster.BenchCluster, *extra: int) -> None:
        self._cluster, self._extra = cluster, extra
        self._before: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        from proc import cpu_seconds

        found = {**self._cluster.cpu_seconds(), "bench": time.process_time()}
        found.update({f"pid {pid}": cpu_seconds(pid) for pid in self._extra})
        return found

    def start(self) -> MachineCpu:
        self._before = self._now()
        return self

    def stop(self) -> float:
        after = self._now()
        return sum(after[k] - self._before[k] for k in after if k in self._before)


class ReadyWatch:
    """Watches a list call and notes the moment ``expected`` of its objects first satisfy ``ready`` together."""

    def __init__(self, list_fn: Callable[..., Any], ready: Callable[[Mapping[str, Any]], bool], expected: int) -> None:
        self._list_fn = list_fn
        self._ready = ready
        self.expected = expected
        self.reached_at: float | None = None
        self._state: dict[str, bool] = {}
        self._objects: dict[str, Mapping[str, Any]] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ready-watch")

    def start(self) -> ReadyWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    body = json.loads(self._list_fn(_preload_content=False).data)
                    with self._changed:
                        for obj in body.get("items") or []:
                            self._note("ADDED", obj)
                    version = body["metadata"]["resourceVersion"]
                for event in self._watch.stream(
                    self._list_fn, resource_version=version, timeout_seconds=60, _request_timeout=90
                ):
                    obj = event["raw_object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    with self._changed:
                        self._note(event["type"], obj)
                    if self._stop.is_set():
                        return
            except client.ApiException as err:
                if err.status == 410:  # the resource version expired: list again
                    version = ""
                elif not self._stop.is_set():
                    time.sleep(0.5)
            except Exception:  # a dropped connection: resume from the last version seen
                if not self._stop.is_set():
                    time.sleep(0.5)

    def _note(self, kind: str, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self._state.pop(name, None)
            self._objects.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._state[name] = self._ready(obj)
            self._objects[name] = obj
        if self.reached_at is None and sum(self._state.values()) >= self.expected:
            self.reached_at = time.monotonic()
        self._changed.notify_all()

    def wait(self, timeout: float) -> float:
        """Block until ``expected`` objects were ready together; returns that moment (``time.monotonic``)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.reached_at is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    ready = sum(self._state.values())
                    raise TimeoutError(f"{ready}/{self.expected} ready after {timeout:.0f}s")
                self._changed.wait(min(left, 1.0))
            return self.reached_at

    def objects(self) -> dict[str, Mapping[str, Any]]:
        with self._changed:
            return dict(self._objects)

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()


def serving_ready(obj: Mapping[str, Any]) -> bool:
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def pod_ready(obj: Mapping[str, Any]) -> bool:
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def run_operator(
    cluster: benchcluster.BenchCluster,
    namespace: str,
    count: int,
    *,
    log_dir: Any,
    timeout: float = 900,
    profile: Callable[[int], Any] | None = None,
    count_passes: bool = False,
) -> Run:
    """N servings through a freshly started ``nvlfleet run``; see the module docstring. ``count_passes``: also
    read the operator's pass counter from its /metrics (it then serves them on a free port)."""
    from proc import cpu_seconds
    from steadystate import _free_port, _passes

    cluster.namespace(namespace)
    identity = cluster.identity("operator")
    port = _free_port() if count_passes else 0
    command = cluster.operator_command(identity, [namespace], recheck_seconds=60, metrics_port=port)
    operator = benchcluster.OperatorProcess(command, log_dir / f"operator-{namespace}.log").start()
    custom = client.CustomObjectsApi(cluster.admin)
    watcher = ReadyWatch(
        lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **kw),
        serving_ready,
        count + 1,  # the warm-up serving too
    ).start()
    core = client.CoreV1Api(cluster.admin)
    pods = ReadyWatch(
        lambda **kw: core.list_namespaced_pod(namespace, label_selector=POD_SELECTOR, **kw),
        pod_ready,
        count * PODS_PER_SERVING,
    ).start()
    profiler = None
    try:
        warm_up(custom, namespace, watcher)
        before = cluster.requests()
        passes = _passes(port) if port else None
        cpu = cpu_seconds(operator.pid)
        machine = MachineCpu(cluster, operator.pid).start()
        if profile is not None:
            profiler = profile(operator.pid)
        started = time.monotonic()
        for name in names(count):
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, serving(name))
        try:
            done, timed_out = watcher.wait(timeout), False
        except TimeoutError:
            done, timed_out = time.monotonic(), True
        cpu = cpu_seconds(operator.pid) - cpu
        machine_cpu = machine.stop()
        pods_done = pods.reached_at or done
        requests = cluster.requests()
        writes = requests.get("operator-writes", 0.0) - before.get("operator-writes", 0.0)
        reads = requests.get("operator-reads", 0.0) - before.get("operator-reads", 0.0)
        if passes is not None:
            passes = _passes(port) - passes
        placements = {
            n: (o.get("status") or {}).get("placement") or {} for n, o in watcher.objects().items() if n != WARM_UP
        }
    finally:
        if profiler is not None:
            profiler.stop()
        watcher.stop()
        pods.stop()
        operator.stop()
    ready = sum(1 for n, o in watcher.objects().items() if n != WARM_UP and serving_ready(o))
    return Run(
        done - started,
        writes,
        placements,
        cpu,
        pods_done - started,
        timed_out=timed_out,
        ready=ready,
        reads=reads,
        passes=passes,
        machine_cpu_seconds=machine_cpu,
    )


def warm_up(custom: client.CustomObjectsApi, namespace: str, watcher: ReadyWatch, timeout: float = 300) -> None:
    """Until the operator has reconciled a serving of zero groups: kopf has filled its node and pod indexes
    (a thousand nodes take it a while) and runs handlers, so the clock measures reconciling, not start-up."""
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, serving(WARM_UP, groups=0))
    deadline = time.monotonic() + timeout
    while not serving_ready(watcher.objects().get(WARM_UP) or {"metadata": {}}):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the operator did not reconcile the warm-up serving within {timeout:.0f}s")
        time.sleep(0.1)


def run_plain_client(
    cluster: benchcluster.BenchCluster,
    namespace: str,
    count: int,
    placements: Mapping[str, Mapping[str, Mapping[str, int]]],
    *,
    concurrency: int = 1,
    timeout: float = 900,
) -> Run:
    """The same children, server-side applied by a plain client, ``concurrency`` servings at a time; see the
    module docstring."""
    from kubernetes import config

    cluster.namespace(namespace)
    identity = cluster.identity("plain-client")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(identity), client_configuration=configuration)
    configuration.connection_pool_maxsize = max(4, concurrency)  # one connection per serving in flight
    api = client.ApiClient(configuration)
    if any(not placements.get(name) for name in names(count)):
        # nvlfleet did not place them all (its run was cut short): the planner places the whole batch instead.
        placements = plan(cluster.admin, namespace, [serving(name) for name in names(count)])
    per_serving = []
    for name in names(count):
        body = serving(name)
        body["metadata"]["namespace"] = namespace
        parsed = models.DeepSeekServing.model_validate(body)
        per_serving.append(render.render(parsed, {r: dict(d) for r, d in placements[name].items()}))
    expected_pods = sum(
        child["spec"]["replicas"] * child["spec"]["leaderWorkerTemplate"]["size"]
        for children in per_serving
        for child in children
        if child["kind"] == "LeaderWorkerSet"
    )
    core = client.CoreV1Api(cluster.admin)
    watcher = ReadyWatch(
        lambda **kw: core.list_namespaced_pod(namespace, label_selector=POD_SELECTOR, **kw),
        pod_ready,
        expected_pods,
    ).start()
    try:
        before = cluster.requests().get("plain-client-writes", 0.0)
        machine = MachineCpu(cluster).start()
        started = time.monotonic()
        if concurrency <= 1:
            for children in per_serving:
                for child in children:
                    server_side_apply(api, child)
        else:
            with concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="plain-client") as pool:
                # list(): the first failed apply raises here, as it would in the serial loop
                list(pool.map(lambda children: [server_side_apply(api, c) for c in children], per_serving))
        applied = time.monotonic()
        done = watcher.wait(timeout)
        machine_cpu = machine.stop()
        writes = cluster.requests().get("plain-client-writes", 0.0) - before
    finally:
        watcher.stop()
        api.close()
    return Run(
        done - started,
        writes,
        applied_seconds=applied - started,
        ready=expected_pods,
        machine_cpu_seconds=machine_cpu,
    )


def plan(api: client.ApiClient, namespace: str, bodies: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """Placements of ``bodies`` planned together on the cluster's nodes, as nvlfleet's planner would."""
    from nvlfleet.core import demands, inventory, planner

    nodes = [n for n in json.loads(client.CoreV1Api(api).list_node(_preload_content=False).data)["items"]]
    ignored: list[Any] = []
    inv = inventory.build([p for i, n in enumerate(nodes) if (p := kubeobjects.parse_node(n, f"[{i}]", ignored))])
    parsed = [
        models.DeepSeekServing.model_validate({**b, "metadata": {**b["metadata"], "namespace": namespace}})
        for b in bodies
    ]
    result = planner.plan(inv, [d for s in parsed for d in demands.of(s)])
    return {s.metadata.name: result.placement(inventory.ServingKey(namespace, s.metadata.name)) for s in parsed}


def server_side_apply(api: client.ApiClient, obj: Mapping[str, Any], field_manager: str = FIELD_MANAGER) -> None:
    """One server-side apply of any child kind nvlfleet renders (its REST path from ``names.CHILD_KINDS``)."""
    kind = next((k for k in api_names.CHILD_KINDS if (k.api_version, k.kind) == (obj["apiVersion"], obj["kind"])), None)
    if kind is None:
        raise ValueError(f"the plain client does not apply {obj['apiVersion']} {obj['kind']}")
    meta = obj["metadata"]
    api.call_api(
        *api.param_serialize(
            "PATCH",
            kind.path(meta.get("namespace"), meta["name"]),
            query_params=[("fieldManager", field_manager), ("force", "true")],
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=dict(obj),
            auth_settings=["BearerToken"],
        )
    ).read()


@dataclasses.dataclass(frozen=True)
class Repeat:
    """One repeat at one N: nvlfleet, then the concurrent reference, then (in the first repeats only) the serial one,
    on a free fleet each."""

    nvlfleet: Run
    concurrent: Run
    serial: Run | None  # None: the serial reference was not run in this repeat (``measure``'s ``serial_repeats``)
    load: float  # 1-minute load average at the end of the repeat
    cleanup_seconds: float = 0.0  # deleting this repeat's namespaces (between runs, outside every clock)

    @property
    def ratio(self) -> float | None:
        return self.nvlfleet.seconds / self.concurrent.seconds if self.concurrent.seconds else None

    @property
    def overhead_seconds(self) -> float:
        return self.nvlfleet.seconds - self.concurrent.seconds


def measure(
    cluster: benchcluster.BenchCluster,
    count: int,
    repeats: int,
    *,
    cap: float,
    log_dir: pathlib.Path,
    say: Callable[[str], None],
    profile: Callable[[int], Any] | None = None,
    serial_repeats: int | None = None,
) -> list[Repeat]:
    """``repeats`` repeats at N = ``count``; the serial reference in the first ``serial_repeats`` of them only (all
    when None): it is a second row, not the one the ratio is taken against, and at N = 1,000 each of its runs
    takes as long as the operator's. The profile (if any) records the first repeat's operator only."""
    out = []
    for i in range(repeats):
        tag = f"{count}-{i + 1}"
        say(f"    N={count}, repeat {i + 1}/{repeats}: nvlfleet (cap {cap:.0f} s)")
        op = run_operator(
            cluster, f"conv-nvlfleet-{tag}", count, log_dir=log_dir, timeout=cap, profile=profile if i == 0 else None
        )
        say(f"      {op.seconds:.1f} s{' (cut short)' if op.timed_out else ''}; cleaning up")
        cleanup = cluster.delete_namespace(f"conv-nvlfleet-{tag}")
        say(f"      cleaned up in {cleanup:.1f} s")
        runs: dict[str, Run] = {}
        kinds = [("concurrent", OPERATOR_CONCURRENCY), ("serial", 1)]
        if serial_repeats is not None and i >= serial_repeats:
            kinds = kinds[:1]
        for kind, concurrency in kinds:
            say(f"    N={count}, repeat {i + 1}/{repeats}: plain client, {kind} ({concurrency} at once)")
            namespace = f"conv-{kind[:6]}-{tag}"
            runs[kind] = run_plain_client(cluster, namespace, count, op.placements, concurrency=concurrency)
            say(f"      {runs[kind].seconds:.1f} s (apply loop {runs[kind].applied_seconds:.1f} s); cleaning up")
            seconds = cluster.delete_namespace(namespace)
            say(f"      cleaned up in {seconds:.1f} s")
            cleanup += seconds
        out.append(Repeat(op, runs["concurrent"], runs.get("serial"), os.getloadavg()[0], cleanup))
    return out
