"""One reconcile pass on the benchmark fleet, timed without a cluster: the operator's per-serving CPU cost.

Run: ``.venv/bin/python bench/reconcile_bench.py`` (PYTHONPATH=cluster, as the Makefile sets it). The snapshot is
what the operator hands ``reconciler.reconcile`` on the cluster of figures 1 and 2: the 1,008 kwok GB200 trays
of 56 racks (``localcluster.fleet``) and 1,000 GPU pods bound to them, trimmed as the operator's node and pod
indexes hold them (``main._trim_node``, ``main._trim_pod``), and one serving with its children. The
profile of figure 1 (``bench/run.py --profile``) shows the operator's CPU going into this pass, most of it into
parsing every Node and Pod; this times it alone, so a change to the parsing shows as a before/after ratio
(median of repeated passes after a warm-up pass).
"""

from __future__ import annotations

import datetime
import statistics
import sys
import time
from typing import Any

import convergence
from localcluster import fleet

from nvlfleet import main, reconciler

RACKS, PODS, REPEATS = 56, 1000, 30


def snapshot(racks: int = RACKS, pods: int = PODS) -> reconciler.Snapshot:
    nodes = fleet.fleet_nodes("GB200", racks, fleet="bench")
    for node in nodes:  # as kwok reports them once they are up
        node.setdefault("status", {}).setdefault("conditions", [{"type": "Ready", "status": "True"}])
    nodes = [main._trim_node(node) for node in nodes]  # as the operator's node index holds them
    serving = convergence.serving("serving-0000")
    serving["metadata"].update(namespace="bench", uid="uid-0000", generation=1, resourceVersion="1")
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    children = reconciler.reconcile(reconciler.Snapshot(serving=serving, now=now, nodes=nodes)).apply
    bound = [main._trim_pod(_pod(i, node["metadata"]["name"])) for i, node in zip(range(pods), nodes, strict=False)]
    return reconciler.Snapshot(serving=serving, now=now, nodes=nodes, pods=bound, children=list(children))


def _pod(index: int, node: str) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": f"pod-{index:04d}", "namespace": "bench", "labels": {}},
        "spec": {"nodeName": node, "containers": [{"name": "vllm", "resources": {"limits": gpus, "requests": gpus}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def measure(repeats: int = REPEATS) -> float:
    """Median CPU milliseconds per reconcile pass (this process's CPU time: a shared machine's other load does not
    count, as it would in wall time)."""
    snap = snapshot()
    reconciler.reconcile(snap)
    times = []
    for _ in range(repeats):
        started = time.process_time()
        reconciler.reconcile(snap)
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    print(f"reconcile pass, {RACKS * 18} nodes + {PODS} GPU pods: {measure():.1f} ms CPU (median of {REPEATS})")
    sys.exit(0)
