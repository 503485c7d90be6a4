"""One reconcile pass on the benchmark fleet, timed without a cluster: the operator's per-serving CPU cost.

Run: ``.venv/bin/python bench/reconcile_bench.py`` (PYTHONPATH=cluster, as the Makefile sets it). The snapshot is
what the operator hands ``reconciler.reconcile`` on the cluster of figures 1 and 2: the 1,008 kwok GB200 trays of 56
racks (``localcluster.fleet``) and 1,000 GPU pods bound to them, as the operator's indexes hold them (nodes and
bound pods parsed once per watch event: ``caches.parsed_node``, ``caches.parsed_pod``; the serving's own pods also
trimmed, ``caches.trim_pod``, from the ``serving_pods`` index), and one serving with its children. Two figures, each
the median of repeated passes after a warm-up pass: a pass that builds the fleet view itself (the first pass after a
node, GPU pod or LeaderWorkerSet changed) and a pass handed the view an earlier pass built
(``reconciler.FleetView``, an idle re-check, or the thousand passes after a restart). The fleet holds figure 2's
other servings too: one single-tray group each, placed rack by rack as the planner packs them, their
LeaderWorkerSets as the ``fleet_lws`` index holds them (``caches.trim_lws``) — every pass books every other
serving's groups before it plans its own. Beside the second, the same pass handed every GPU pod of the cluster, as
passes were before the ``serving_pods`` index.
"""

from __future__ import annotations

import dataclasses
import datetime
import statistics
import sys
import time
from typing import Any

import steadystate
from localcluster import fleet

from nvlfleet.adapters import caches
from nvlfleet.api import names
from nvlfleet.core import inventory, leaderworkersets, reconciler

RACKS, PODS, SERVINGS, REPEATS = 56, 1000, 1000, 30
CONVERGENCE_RACKS, CONVERGENCE_PODS = 112, 2000  # figure 1 at N = 1,000: its 56 racks added, two pods a serving
TRAYS_PER_RACK = 18


def snapshot(
    racks: int = RACKS, pods: int = PODS, servings: int = SERVINGS, *, all_pods: bool = False
) -> reconciler.Snapshot:
    """``all_pods``: hand the pass every GPU pod trimmed, as the operator did before its ``serving_pods`` index."""
    nodes = fleet.fleet_nodes("GB200", racks, fleet="bench")
    for node in nodes:  # as kwok reports them once they are up
        node.setdefault("status", {}).setdefault("conditions", [{"type": "Ready", "status": "True"}])
    parsed = [caches.parsed_node(node["metadata"]["name"], node, []) for node in nodes]  # as the node index holds them
    serving = _serving(0)
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    children = reconciler.reconcile(reconciler.Snapshot(serving=serving, now=now, nodes=parsed)).apply
    raw = [_pod(i, node["metadata"]["name"]) for i, node in zip(range(pods), nodes, strict=False)]
    lws = next(c for c in children if c["kind"] == "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    raw[0]["metadata"]["labels"] = {  # the serving's own pod, as its LeaderWorkerSet labels it
        **(template.get("leaderTemplate") or template["workerTemplate"])["metadata"]["labels"],
        "leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
        "leaderworkerset.sigs.k8s.io/group-index": "0",
    }
    bound = [caches.parsed_pod(pod["metadata"]["name"], pod) for pod in raw]
    trimmed = [caches.trim_pod(pod) for pod in (raw if all_pods else raw[:1])]
    others = [_serving(i) for i in range(1, servings)]
    return reconciler.Snapshot(
        serving=serving,
        now=now,
        nodes=parsed,
        pods=trimmed,
        bound=bound,
        children=list(children),
        fleet=[_placed_set(other, parsed, i, now) for i, other in enumerate(others, start=1)],
        live_servings=frozenset(str(s["metadata"]["uid"]) for s in [serving, *others]),
    )


def _serving(index: int) -> dict[str, Any]:
    body = steadystate.serving(f"serving-{index:04d}")
    body["metadata"].update(namespace="bench", uid=f"uid-{index:04d}", generation=1, resourceVersion="1")
    return body


def _placed_set(serving: dict[str, Any], nodes: list[Any], index: int, now: datetime.datetime) -> dict[str, Any]:
    """The serving's LeaderWorkerSet as nvlfleet placed it on its rack (the seed of figure 2), trimmed."""
    rack = nodes[(index // TRAYS_PER_RACK) * TRAYS_PER_RACK :][:TRAYS_PER_RACK]
    decision = reconciler.reconcile(reconciler.Snapshot(serving=serving, now=now, nodes=rack))
    lws = next(o for o in decision.apply if o["kind"] == "LeaderWorkerSet")
    lws["metadata"].update(uid=f"lws-{index:04d}", resourceVersion="1")
    return caches.trim_lws(lws)


def _pod(index: int, node: str) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": f"pod-{index:04d}", "namespace": "bench", "labels": {}},
        "spec": {"nodeName": node, "containers": [{"name": "vllm", "resources": {"limits": gpus, "requests": gpus}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def view_ms(repeats: int = REPEATS, *, remembered: bool = True) -> float:
    """Median CPU milliseconds to build one fleet view with its per-domain sums, on a fleet the size of figure 1's
    largest run (``CONVERGENCE_RACKS``: the bench fleet and the racks figure 1 adds; ``CONVERGENCE_PODS`` bound GPU
    pods; the LeaderWorkerSets of a thousand servings, figure 2's single-tray ones as ``snapshot`` places them): what
    a pass that places groups pays while a fleet rolls out. Between two views, as between two such passes, two pods
    changed (each a new object where its watch cache held one) and one LeaderWorkerSet was written (a new
    resourceVersion). With ``remembered`` the view is made as the operator makes it, from what it remembers: each
    LeaderWorkerSet's holding and each role's placement (``leaderworkersets.Holds``), the inventory the view before
    built (``inventory.Builds``), the view before's sums (``fleet_view``'s ``base``); without, each set is read and
    each node merged and counted again, as before the memos."""
    snap = snapshot(racks=CONVERGENCE_RACKS, pods=CONVERGENCE_PODS)
    label = names.DEFAULT_DOMAIN_LABEL
    holds = leaderworkersets.Holds() if remembered else None
    builds = inventory.Builds() if remembered else None
    view = reconciler.fleet_view(snap, label, holds, builds)
    view.others(next(iter(view.held)).serving)  # warm-up (and the memos' first read); a pass splits its own out
    bound, fleet_sets = list(snap.bound or ()), list(snap.fleet)
    times = []
    for i in range(repeats):
        for at in (2 * i % len(bound), (2 * i + 1) % len(bound)):
            bound[at] = dataclasses.replace(bound[at])
        written = fleet_sets[i % len(fleet_sets)]
        version = str(int(written["metadata"]["resourceVersion"]) + 1)
        fleet_sets[i % len(fleet_sets)] = {**written, "metadata": {**written["metadata"], "resourceVersion": version}}
        now = dataclasses.replace(snap, bound=list(bound), fleet=list(fleet_sets))
        started = time.process_time()
        view = reconciler.fleet_view(now, label, holds, builds, view if remembered else None)
        view.others(view.held[i % len(view.held)].serving)  # the sums, and a pass's own taken out of them
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def measure(repeats: int = REPEATS, *, shared_view: bool = False, all_pods: bool = False) -> float:
    """Median CPU milliseconds per reconcile pass (this process's CPU time: a shared machine's other load does not
    count, as it would in wall time); with ``shared_view`` the pass is handed a view built before."""
    snap = snapshot(all_pods=all_pods)
    if shared_view:
        label = snap.serving["spec"].get("placement", {}).get("domainLabel", names.DEFAULT_DOMAIN_LABEL)
        snap = dataclasses.replace(snap, view=reconciler.fleet_view(snap, label))
    reconciler.reconcile(snap)
    times = []
    for _ in range(repeats):
        started = time.process_time()
        reconciler.reconcile(snap)
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    size = f"{RACKS * TRAYS_PER_RACK} nodes + {PODS} GPU pods + {SERVINGS - 1} other servings' groups"
    print(f"reconcile pass, {size}, building the fleet view: {measure():.1f} ms CPU (median of {REPEATS})")
    print(f"reconcile pass, {size}, shared fleet view: {measure(shared_view=True):.1f} ms CPU (median of {REPEATS})")
    before = measure(shared_view=True, all_pods=True)
    print(
        f"  the same, handed every GPU pod (before the serving_pods index): {before:.1f} ms CPU (median of {REPEATS})"
    )
    big = f"{CONVERGENCE_RACKS * TRAYS_PER_RACK} nodes + {CONVERGENCE_PODS} GPU pods + {SERVINGS - 1} servings' groups"
    print(f"fleet view with its sums, {big}:")
    print(f"  two pods and a set changed since the view before: {view_ms():.1f} ms CPU (median of {REPEATS})")
    print(f"  each set read, each node merged and counted again: {view_ms(remembered=False):.1f} ms CPU")
    sys.exit(0)
