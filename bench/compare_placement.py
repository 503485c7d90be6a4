"""``make compare-placement``: the same workload on the same fleet, placed three ways, in the real local cluster.

Engines, each on its own identical kwok fleet and namespace so they cannot disturb each other:

* **nvlfleet** — ``nvlfleet run`` reconciles a DeepSeekServing; its planner pins each LeaderWorkerSet to one
  NVLink domain and creates no LeaderWorkerSet replica for a group it cannot place.
* **LWS exclusive topology** — the same LeaderWorkerSets rendered unpinned, with LWS's own
  ``leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique`` annotation: LWS keeps each group in
  one domain and every other group out of it.
* **plain pod affinity** — the same LeaderWorkerSets rendered unpinned as ``nvlfleet render`` does without
  ``--nodes``: workers follow their leader's domain by required pod affinity; the scheduler picks the domain.

In every case kube-scheduler binds the pods and kwok runs them. Once nothing has moved for a while the pods are
read back and scored per group: **running** (all pods bound, one domain), **split** (all bound, several domains),
**waiting** (some bound, some Pending: holds nodes, cannot start), **pods Pending**, GPUs serving, and GPUs
**stranded**: GPUs held by waiting groups, plus free GPUs the engine can no longer use for this workload (a
domain already holding a group under exclusive topology; a domain with fewer free nodes than the smallest group).
The pure model of the same comparison (``bench/baselines.py``) is printed under the table for reference; the
real scheduler's scoring differs from the model's first-fit, so the pod-affinity row can differ from it.

Needs the running local cluster (``make cluster-up``). Stops its operator by PID and deletes its namespaces and
fleets at the end (``--keep`` leaves them for inspection).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import pathlib
import shutil
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
from nvlfleet.core import demands, inventory, render

REPO = pathlib.Path(__file__).resolve().parents[1]

LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GROUP_LABELS = ("leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index")
ENGINES = ("nvlfleet", "lws-exclusive-topology", "pod-affinity")
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
        self.core.create_namespace({"metadata": {"name": self.namespace}})

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
            if self.engine == "lws-exclusive-topology":
                child["metadata"].setdefault("annotations", {})[EXCLUSIVE] = fleets.LABEL_CLIQUE
                for template in ("leaderTemplate", "workerTemplate"):
                    spec = child["spec"]["leaderWorkerTemplate"].get(template, {}).get("spec", {})
                    spec.get("affinity", {}).pop("podAffinity", None)  # LWS injects its own (anti-)affinity
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
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)
        fleets.delete_fleet(self.api, self.name)


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
    inv = inventory.from_objects(nodes)
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
def runs(api: client.ApiClient, racks: int, keep: bool) -> Iterator[list[Run]]:
    suffix = hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:5]
    made = [Run(api, engine, suffix, racks) for engine in ENGINES]
    try:
        yield made
    finally:
        if not keep:
            for run in made:
                run.cleanup()


def main(argv: list[str] | None = None) -> int:
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
    rows: list[tuple[str, dict[str, int]]] = []
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="nvlfleet-compare-"))
    with runs(api, args.racks, args.keep) as made:
        operators: list[OperatorProcess] = []
        try:
            for run in made:
                say(f"{run.engine}: {args.racks} racks in fleet {run.name}, namespace {run.namespace}")
                run.prepare()
                operator = run.start(run.serving(args.decode_groups, args.prefill_groups), running.kubeconfig, workdir)
                if operator is not None:
                    say(f"  operator PID {operator.pid}, log {operator.log}")
                    operators.append(operator)
            for run in made:
                run.settle(args.settle, timeout=240)
                rows.append((run.engine, score(run)))
        finally:
            for operator in operators:
                operator.stop()
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    groups = args.decode_groups + args.prefill_groups
    print(
        f"\n{groups} groups ({args.decode_groups} decode × 4 trays, {args.prefill_groups} prefill × 2 trays) "
        f"on {args.racks} GB200 NVL72 racks ({args.racks * 18} trays, {args.racks * 72} GPUs), "
        "kube-scheduler + LWS + kwok:\n"
    )
    print(table(rows))
    print("\nthe pure model of the same comparison (bench/baselines.py: first fit, no scheduler scoring):\n")
    print(
        table(
            [
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
                for o in model_rows(args.racks, args.decode_groups, args.prefill_groups)
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
