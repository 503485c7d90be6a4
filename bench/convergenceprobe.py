"""Convergence side by side: N new servings through ``nvlfleet run`` from two or more source trees, one after the
other, on a kept benchmark cluster, repeated; for each tree the median and spread of what figure 1 measures of
the operator, and what it cost: the operator's CPU, reads, writes and reconcile passes.

Debug tool beside figure 1 (``convergence``), not part of ``bench/run.py``: run figure 1 once with
``--keep-cluster`` (or any figure: the cluster holds the 56-rack fleet), then compare trees (``git worktree add
/tmp/old <commit>``). A count beyond that fleet (two trays a serving: N > 503) gets the racks figure 1 adds for it,
as fleet ``bench-conv``, left in place for the next probe. Each run is ``convergence.run_operator`` in a fresh
namespace (created → every serving Ready; pods Ready beside it), the namespace deleted and its pods gone before the
next; no plain client runs, so a ratio here is tree against tree, not against the API server's limit. The trees
alternate within each repeat, so a drift of the machine's load spreads over all of them. ``--profile DIR`` records
each run's operator with ``py-spy record --gil --nonblocking`` (the samples split its CPU; the operator is not
stopped for each sample, which would stretch every pass it times) into ``DIR/<repeat>-<tree index>.txt``.

    PYTHONPATH=$PWD/cluster .venv/bin/python bench/convergenceprobe.py operator /tmp/old/operator --count 200
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import time
from typing import Any

import benchcluster
import convergence
import profiler
import sidebyside
from kubernetes import client
from localcluster import fleet

FIGURES = ("seconds", "pods_seconds", "cpu_seconds", "writes", "reads", "passes", "scheduling_failures", "node_flaps")


def events(cluster: benchcluster.BenchCluster, namespace: str, reason: str) -> int:
    """How often ``reason`` was said about an object of ``namespace`` (its Events, each with its repeat count).
    ``FailedScheduling``: the scheduler could not place a pod where the operator's view said there was room.
    ``NodeNotReady``: the node lifecycle controller marked a pod not ready because its node's heartbeat was late
    (benchcluster's "Node heartbeats")."""
    found = client.CoreV1Api(cluster.admin).list_namespaced_event(namespace, field_selector=f"reason={reason}")
    return sum((e.series.count if e.series else e.count) or 1 for e in found.items)


def run(
    cluster: benchcluster.BenchCluster, tree: pathlib.Path, count: int, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    """One convergence of ``count`` servings through the operator from ``tree`` (its ``operator/`` directory, put
    first on the path), in a namespace deleted afterwards."""
    namespace = f"probe-{tag}-{int(time.time()) % 100000}"
    profile = None
    if args.profile is not None:
        output = args.profile / f"{tag}.txt"
        profile = lambda pid: profiler.PySpy(pid, output, gil=True, rate=100, nonblocking=True)  # noqa: E731
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree.resolve())  # OperatorProcess hands the child this process's environment
    try:
        found = convergence.run_operator(
            cluster, namespace, count, log_dir=args.out, timeout=args.cap, profile=profile, count_passes=True
        )
        said = {"scheduling_failures": events(cluster, namespace, "FailedScheduling")}
        said["node_flaps"] = events(cluster, namespace, "NodeNotReady")
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
        cluster.delete_namespace(namespace)
    figures = {k: v for k, v in dataclasses.asdict(found).items() if k in FIGURES}
    return {
        **figures,
        **{k: float(v) for k, v in said.items()},
        "ready": found.ready,
        "timed_out": found.timed_out,
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=pathlib.Path, help="operator/ directories of the trees to compare")
    parser.add_argument("--count", type=int, default=200, help="servings created per run (figure 1's N)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each tree, alternating")
    parser.add_argument("--cap", type=float, default=900.0, help="seconds a run may take")
    parser.add_argument("--profile", type=pathlib.Path, help="directory for a py-spy --gil profile of each run")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=benchcluster.REPO / ".bench" / "convergenceprobe",
        help="directory for the operators' logs",
    )
    args = parser.parse_args(argv)
    sidebyside.check_trees(parser, args.trees)
    if args.count < 1:
        parser.error("--count must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    say = lambda text: print(time.strftime("%H:%M:%S"), text, file=sys.stderr, flush=True)  # noqa: E731
    cluster = benchcluster.BenchCluster(benchcluster.cluster_dir(), say=say).attach()
    trays = len(client.CoreV1Api(cluster.admin).list_node(label_selector=fleet.LABEL_CLIQUE).items)
    convergence.add_racks(cluster, args.count, trays, say)
    say(f"{args.count} servings per run; {len(args.trees)} trees × {args.repeats} repeats")
    runs = sidebyside.alternate(
        args.trees, args.repeats, lambda tree, tag: run(cluster, tree, args.count, args, tag), say
    )
    sidebyside.report(runs, FIGURES)
    cut = sum(r["timed_out"] for found in runs.values() for r in found)
    if cut:
        print(f"\n{cut} run(s) cut short at --cap {args.cap:.0f} s: their seconds are lower bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
