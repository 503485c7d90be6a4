"""``make compare-placement``: the same workload on the same fleet, placed four ways, in a real local cluster.

Engines, each on its own identical kwok fleet and namespace so they cannot disturb each other:

* **nvlfleet** — ``nvlfleet run`` reconciles a DeepSeekServing; its planner pins each LeaderWorkerSet to one
  NVLink domain and creates no LeaderWorkerSet replica for a group it cannot place.
* **LWS exclusive topology** — the same LeaderWorkerSets rendered unpinned, with LWS's own
  ``leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique`` annotation on those whose groups span
  several trays (as a user would set it: a one-tray group has nothing to keep together): LWS keeps each group in
  one domain and every other group out of it.
* **plain pod affinity** — the same LeaderWorkerSets rendered unpinned as ``nvlfleet render`` does without
  ``--nodes``: workers follow their leader's domain by required pod affinity; the scheduler picks the domain.
* **Kueue topology-aware scheduling** (Kueue v0.17.0, ``localcluster.kueue``, started on demand) — the same
  unpinned LeaderWorkerSets without the pod affinity, queued to a LocalQueue whose ClusterQueue has one
  ResourceFlavor on this fleet with a Topology of two levels (the clique label, then the hostname); leader and
  worker templates carry ``kueue.x-k8s.io/podset-required-topology: nvidia.com/gpu.clique`` and one
  ``kueue.x-k8s.io/podset-group-name``, so Kueue admits a group only where all its pods fit in one domain and
  holds the others' pods gated. The quota is larger than the fleet: topology is the only limit.

In every case kube-scheduler binds the pods and kwok runs them. Once nothing has moved for a while the pods are
read back and scored per group: **running** (all pods bound, one domain), **split** (all bound, several domains),
**waiting** (some bound, some Pending: holds nodes, cannot start), **pods Pending** (gated ones included), GPUs
serving, and GPUs **stranded**: GPUs held by waiting groups, plus free GPUs the engine can no longer use for this
workload (a domain already holding a group under exclusive topology; a domain with fewer free nodes than the
smallest group). The pure model of the same comparison (``bench/baselines.py``) is printed under the table for
reference; the real scheduler's scoring differs from the model's first fit, so the pod-affinity row can differ.

``measure`` is what ``make bench`` calls on its own cluster (figure 3, the headline placement rows); ``main`` runs
it on the local cluster (``make cluster-up``). Either stops its operators by PID and deletes its namespaces,
fleets and Kueue objects at the end (``--keep`` leaves them for inspection). An engine that cannot be measured
(Kueue not built, say) is reported as such, never as a number.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import baselines
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import cluster as localcluster
from localcluster import fleet as fleets
from localcluster.operatorprocess import OperatorProcess

from nvlfleet.api import models, names
from nvlfleet.core import demands, kubeobjects, render

REPO = pathlib.Path(__file__).resolve().parents[1]

LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GROUP_LABELS = ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index")
ENGINES = ("nvlfleet", "lws-exclusive-topology", "pod-affinity", "kueue-tas")
LABELS = {
    "nvlfleet": "nvlfleet",
    "lws-exclusive-topology": "LWS exclusive topology, multi-tray groups",
    "pod-affinity": "plain pod affinity",
    "kueue-tas": "Kueue TAS, required clique",
}
KUEUE = ("kueue.x-k8s.io", "v1beta2")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
SIZES = {"decode": 4, "prefill": 2}  # trays per group of each role in the workload below


def workload(name: str, fleet: str, decode_groups: int, prefill_groups: int) -> dict[str, Any]:
    """A disaggregated DeepSeek-V4.1-Flash serving: 4-tray decode groups and 2-tray prefill groups."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "servedName": "deepseek-v4.1-flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": {
                "prefill": {"groups": prefill_groups, "parallelism": {"tensor": 1, "nodesPerGroup": 2}},
                "decode": {"groups": decode_groups, "parallelism": {"tensor": 1, "nodesPerGroup": 4}},
            },
            # No IMEX driver runs locally and a ComputeDomain does not change where pods go: leave it out for all.
            "placement": {"computeDomain": False},
            "monitoring": {"scrape": False},
            "router": {"enabled": False},  # its pod needs no GPU and is no group: leave it out for all
            "pod": {"nodeSelector": {fleets.LABEL_FLEET: fleet}},
        },
    }


# ---------------------------------------------------------------------------------------------------------------
# Running one engine


class Run:
    def __init__(self, api: client.ApiClient, engine: str, suffix: str, racks: int) -> None:
        self.api = api
        self.engine = engine
        self.name = f"cmp-{engine.split('-')[0][:6]}-{suffix}"
        self.namespace = self.name
        self.racks = racks
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.wanted: dict[str, int] = {}

    def prepare(self) -> None:
        fleets.apply_fleet(self.api, self.racks, "GB200", fleet=self.name)
        labels = {}
        if self.engine == "kueue-tas":
            from localcluster import kueue

            labels = dict([kueue.MANAGED_LABEL])
        self.core.create_namespace({"metadata": {"name": self.namespace, "labels": labels}})
        if self.engine == "kueue-tas":
            for plural, body in kueue_objects(self.name, self.namespace):
                if plural == "localqueues":
                    self.custom.create_namespaced_custom_object(*KUEUE, self.namespace, plural, body)
                else:
                    self.custom.create_cluster_custom_object(*KUEUE, plural, body)

    def serving(self, decode: int, prefill: int) -> dict[str, Any]:
        self.wanted = {"decode": decode, "prefill": prefill}
        return workload("flash", self.name, decode, prefill)

    def start(self, obj: dict[str, Any], kubeconfig: pathlib.Path, workdir: pathlib.Path) -> OperatorProcess | None:
        if self.engine == "nvlfleet":
            operator = OperatorProcess(workdir / self.name, kubeconfig, [self.namespace], recheck_seconds=5)
            operator.start().wait_ready()
            self.custom.create_namespaced_custom_object(names.GROUP, names.VERSION, self.namespace, names.PLURAL, obj)
            return operator
        parsed = models.DeepSeekServing.model_validate(
            {**obj, "metadata": {"name": "flash", "namespace": self.namespace}}
        )
        for child in render.render(parsed, None):
            if child["kind"] != "LeaderWorkerSet":
                continue
            multi_tray = child["spec"]["leaderWorkerTemplate"]["size"] > 1
            if self.engine == "lws-exclusive-topology" and multi_tray:
                child["metadata"].setdefault("annotations", {})[EXCLUSIVE] = fleets.LABEL_CLIQUE
                _drop_pod_affinity(child)  # LWS injects its own (anti-)affinity
            if self.engine == "kueue-tas":
                queue_to_kueue(child, self.name)
            self.custom.create_namespaced_custom_object(*LWS[:2], self.namespace, LWS[2], child)
        return None

    def pods(self) -> list[client.V1Pod]:
        return [p for p in self.core.list_namespaced_pod(self.namespace).items if p.metadata.deletion_timestamp is None]

    def settle(self, quiet: float, timeout: float) -> None:
        """Until the pods' (name, node, phase) stop changing for ``quiet`` seconds."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            now = sorted((p.metadata.name, p.spec.node_name, p.status.phase) for p in self.pods())
            if now != last:
                last, since = now, time.monotonic()
            elif now and time.monotonic() - since >= quiet:
                return
            time.sleep(1.0)

    def cleanup(self) -> None:
        if self.engine == "kueue-tas":
            remove_kueue_objects(self.api, self.name, self.namespace)
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)
        fleets.delete_fleet(self.api, self.name)


def remove_kueue_objects(api: client.ApiClient, name: str, namespace: str, timeout: float = 300) -> None:
    """The LeaderWorkerSets of ``namespace``, then ``kueue_objects``, each waited for while Kueue still runs: Kueue
    holds its queues, flavor and topology with a finalizer until no Workload uses them, and only a running Kueue
    lets go of it (stopped first, they would stay behind, deleting, for good)."""
    custom = client.CustomObjectsApi(api)
    with contextlib.suppress(ApiException):
        custom.delete_collection_namespaced_custom_object(*LWS[:2], namespace, LWS[2])
    _until_none(lambda: custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"], timeout)
    for plural, _ in reversed(kueue_objects(name, namespace)):
        with contextlib.suppress(ApiException):
            if plural == "localqueues":
                custom.delete_namespaced_custom_object(*KUEUE, namespace, plural, name)
            else:
                custom.delete_cluster_custom_object(*KUEUE, plural, name)
        _until_none(lambda plural=plural: _exists(custom, plural, namespace, name), timeout)  # type: ignore[misc]


def _exists(custom: client.CustomObjectsApi, plural: str, namespace: str, name: str) -> bool:
    try:
        if plural == "localqueues":
            custom.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
        else:
            custom.get_cluster_custom_object(*KUEUE, plural, name)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _until_none(present: Callable[[], Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while present():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kueue objects still present after {timeout:.0f}s")
        time.sleep(1.0)


def _drop_pod_affinity(lws: dict[str, Any]) -> None:
    for template in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"].get(template, {}).get("spec", {})
        spec.get("affinity", {}).pop("podAffinity", None)


def queue_to_kueue(lws: dict[str, Any], queue: str) -> None:
    """What a Kueue user writes on a LeaderWorkerSet: its LocalQueue, and one required topology domain for the
    whole group (leader and workers in one PodSet group); Kueue's admission replaces the pod affinity."""
    lws["metadata"].setdefault("labels", {})[KUEUE_QUEUE_LABEL] = queue
    _drop_pod_affinity(lws)
    templates = lws["spec"]["leaderWorkerTemplate"]
    annotations = {KUEUE_REQUIRED_TOPOLOGY: fleets.LABEL_CLIQUE}
    if "leaderTemplate" in templates:  # two PodSets (leader, workers): one group, so one domain for both
        annotations[KUEUE_PODSET_GROUP] = "group"
    for template in ("leaderTemplate", "workerTemplate"):
        if template in templates:
            templates[template].setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)


def kueue_objects(name: str, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """Topology, ResourceFlavor, ClusterQueue and LocalQueue of one fleet, all named ``name``, in creation order."""
    api_version = "/".join(KUEUE)
    gpu = fleets.GPU_RESOURCE
    return [
        (
            "topologies",
            {
                "apiVersion": api_version,
                "kind": "Topology",
                "metadata": {"name": name},
                "spec": {"levels": [{"nodeLabel": fleets.LABEL_CLIQUE}, {"nodeLabel": HOSTNAME_LABEL}]},
            },
        ),
        (
            "resourceflavors",
            {
                "apiVersion": api_version,
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                "spec": {"nodeLabels": {fleets.LABEL_FLEET: name}, "topologyName": name},
            },
        ),
        (
            "clusterqueues",
            {
                "apiVersion": api_version,
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": [gpu],
                            # more than the fleet has: only the topology limits admission
                            "flavors": [{"name": name, "resources": [{"name": gpu, "nominalQuota": 1_000_000}]}],
                        }
                    ],
                },
            },
        ),
        (
            "localqueues",
            {
                "apiVersion": api_version,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": name},
            },
        ),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Scoring


def score(run: Run) -> dict[str, int]:
    """The table row for one engine, from the pods and nodes as the API server has them."""
    nodes = run.core.list_node(label_selector=f"{fleets.LABEL_FLEET}={run.name}").items
    clique = {n.metadata.name: n.metadata.labels[fleets.LABEL_CLIQUE] for n in nodes}
    pods = run.pods()
    groups: dict[tuple[str, str], list[client.V1Pod]] = {}
    for pod in pods:
        labels = pod.metadata.labels or {}
        if all(k in labels for k in GROUP_LABELS):
            groups.setdefault((labels[GROUP_LABELS[0]], labels[GROUP_LABELS[1]]), []).append(pod)
    row = {"groups": sum(run.wanted.values()), "running": 0, "split": 0, "waiting": 0, "serving_nodes": 0}
    held_by_waiting = 0
    used_domains: set[str] = set()
    for members in groups.values():
        size = int((members[0].metadata.annotations or {}).get(SIZE_ANNOTATION, len(members)))
        bound = [p for p in members if p.spec.node_name]
        domains = {clique[p.spec.node_name] for p in bound}
        used_domains |= domains
        if len(bound) == size == len(members):
            row["running" if len(domains) == 1 else "split"] += 1
            row["serving_nodes"] += size
        elif bound:
            row["waiting"] += 1
            held_by_waiting += len(bound)
    busy = {p.spec.node_name for p in pods if p.spec.node_name}
    free: dict[str, int] = {}
    for name, domain in clique.items():
        free[domain] = free.get(domain, 0) + (name not in busy)
    smallest = min(SIZES.values())
    unusable_free = sum(
        count
        for domain, count in free.items()
        if count < smallest or (run.engine == "lws-exclusive-topology" and domain in used_domains)
    )
    gpus = fleets.gpu_model("GB200").gpus_per_node
    return {
        "groups": row["groups"],
        "running": row["running"],
        "split": row["split"],
        "waiting": row["waiting"],
        "pending": sum(1 for p in pods if not p.spec.node_name),
        "gpus_serving": row["serving_nodes"] * gpus,
        "gpus_stranded": (held_by_waiting + unusable_free) * gpus,
    }


def model_rows(racks: int, decode: int, prefill: int) -> list[baselines.Outcome]:
    """The pure model's outcome for the same fleet and workload (no scheduler, first fit)."""
    nodes = fleets.fleet_nodes("GB200", racks, fleet="model")
    for node in nodes:  # kwok reports them Ready in the cluster; the builder leaves status to kwok
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    inv = kubeobjects.from_objects(nodes)
    parsed = models.DeepSeekServing.model_validate(
        {**workload("flash", "model", decode, prefill), "metadata": {"name": "flash", "namespace": "model"}}
    )
    return list(baselines.compare(inv, demands.of(parsed)))


# ---------------------------------------------------------------------------------------------------------------
# Main


def table(rows: list[tuple[str, dict[str, int]]]) -> str:
    head = ("engine", "groups", "running", "split", "waiting", "pods Pending", "GPUs serving", "GPUs stranded")
    keys = ("groups", "running", "split", "waiting", "pending", "gpus_serving", "gpus_stranded")
    lines = [head, *[(name, *(str(r[k]) for k in keys)) for name, r in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for i, line in enumerate(lines):
        out.append(
            "  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths, strict=True)))
        )
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


@contextlib.contextmanager
def runs(api: client.ApiClient, racks: int, keep: bool, engines: tuple[str, ...] = ENGINES) -> Iterator[list[Run]]:
    suffix = hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:5]
    made = [Run(api, engine, suffix, racks) for engine in engines]
    try:
        yield made
    finally:
        if not keep:
            for run in made:
                run.cleanup()


def measure(
    api: client.ApiClient,
    kubeconfig: pathlib.Path,
    *,
    racks: int,
    decode: int,
    prefill: int,
    settle: float,
    workdir: pathlib.Path,
    say: Callable[[str], None],
    keep: bool = False,
) -> dict[str, Any]:
    """Every engine on its own fleet of ``racks`` racks, side by side; its rows, why any engine has none, and the
    1-minute load average when the pods were scored. Kueue must be running for its engine (``localcluster.kueue``)."""
    rows: dict[str, dict[str, int]] = {}
    why: dict[str, str] = {}
    loads: list[float] = []
    workdir.mkdir(parents=True, exist_ok=True)
    with runs(api, racks, keep) as made:
        operators: list[OperatorProcess] = []
        started: list[Run] = []
        try:
            for run in made:
                say(f"  {run.engine}: {racks} racks in fleet {run.name}, namespace {run.namespace}")
                try:
                    run.prepare()
                    operator = run.start(run.serving(decode, prefill), kubeconfig, workdir)
                except (ApiException, RuntimeError, OSError) as err:
                    why[run.engine] = _reason(err)
                    say(f"    not measured: {why[run.engine]}")
                    continue
                started.append(run)
                if operator is not None:
                    say(f"    operator PID {operator.pid}, log {operator.log}")
                    operators.append(operator)
            for run in started:
                run.settle(settle, timeout=240)
                rows[run.engine] = score(run)
                loads.append(os.getloadavg()[0])
        finally:
            for operator in operators:
                operator.stop()
    return {
        "racks": racks,
        "groups": decode + prefill,
        "decode": decode,
        "prefill": prefill,
        "rows": rows,
        "why": why,
        "load": statistics.median(loads) if loads else os.getloadavg()[0],
    }


def _reason(err: Exception) -> str:
    if isinstance(err, ApiException):
        if err.status == 404:
            return f"the API server has no such resource (HTTP 404: {err.reason}); is Kueue installed?"
        return f"HTTP {err.status}: {err.reason}"
    return f"{type(err).__name__}: {err}"


def main(argv: list[str] | None = None) -> int:
    from localcluster import kueue

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--racks", type=int, default=2, help="GB200 NVL72 racks per fleet (18 trays each)")
    parser.add_argument("--decode-groups", type=int, default=6, help="decode groups of 4 trays")
    parser.add_argument("--prefill-groups", type=int, default=6, help="prefill groups of 2 trays")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds without change that end a run")
    parser.add_argument("--keep", action="store_true", help="leave namespaces, fleets and LWS for inspection")
    args = parser.parse_args(argv)

    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    running = localcluster.up(progress=lambda m: say(f"localcluster: {m}"))
    api = config.new_client_from_config(config_file=str(running.kubeconfig))
    crd = subprocess.run([sys.executable, "-m", "nvlfleet.cli", "crd"], check=True, capture_output=True, text=True)
    subprocess.run(
        [
            str(running.kubectl),
            "--kubeconfig",
            str(running.kubeconfig),
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=nvlfleet-compare",
            "-f",
            "-",
        ],
        input=crd.stdout,
        check=True,
        capture_output=True,
        text=True,
    )
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="nvlfleet-compare-"))
    kueue.ensure_running(running.layout, progress=lambda m: say(f"localcluster: {m}"))
    try:
        result = measure(
            api,
            running.kubeconfig,
            racks=args.racks,
            decode=args.decode_groups,
            prefill=args.prefill_groups,
            settle=args.settle,
            workdir=workdir,
            say=say,
            keep=args.keep,
        )
    finally:
        if not args.keep:
            kueue.stop(running.layout.root, running.layout)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print(report(result))
    return 0


def report(result: dict[str, Any]) -> str:
    """The comparison as text: the scheduler's table, why an engine is missing, then the model's table."""
    racks, decode, prefill = result["racks"], result["decode"], result["prefill"]
    out = [
        f"\n{decode + prefill} groups ({decode} decode × 4 trays, {prefill} prefill × 2 trays) "
        f"on {racks} GB200 NVL72 racks ({racks * 18} trays, {racks * 72} GPUs), "
        f"kube-scheduler + LWS + Kueue + kwok (load average {result['load']:.2f}):\n",
        table([(LABELS[e], result["rows"][e]) for e in ENGINES if e in result["rows"]]),
    ]
    out += [f"{LABELS[e]}: not measured: {reason}" for e, reason in result["why"].items()]
    out.append("\nthe pure model of the same comparison (bench/baselines.py: first fit, no scheduler scoring):\n")
    model = [
        (
            o.engine,
            {
                "groups": o.groups,
                "running": o.groups_placed,
                "split": o.groups_split,
                "waiting": o.groups_waiting,
                "pending": o.pods_pending,
                "gpus_serving": o.gpus_placed,
                "gpus_stranded": o.gpus_stranded,
            },
        )
        for o in model_rows(racks, decode, prefill)
    ]
    out.append(table(model))
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
