"""Restarts side by side: ``nvlfleet run`` from two or more source trees, one after the other, on the fleet a kept
benchmark cluster holds, repeated; for each tree the median and spread of what figure 2's restart row measures.

Debug tool beside figure 2 (``steadystate``), not part of ``bench/run.py``: run figure 2 once with
``--keep-cluster``, then compare trees (``git worktree add /tmp/old <commit>``) on its servings, which nobody
changes in between: every start is a restart on an unchanged fleet. Each start is timed from the process's launch
until its pass counter reaches the number of servings (every serving confirmed); then, after a short settle, its
CPU and passes are metered over an idle window, and its RSS read. The trees alternate within each repeat, so a
drift of the machine's load spreads over all of them. ``--memory`` also has each operator dump what its allocators
hold once idle (``memhook``, as ``memprobe`` does: pymalloc's arenas and live blocks, glibc's heap). ``--profile DIR``
records each start until every serving is confirmed with ``py-spy record --gil`` (the samples split its CPU) into
``DIR/<repeat>-<tree index>.txt``.

    PYTHONPATH=$PWD/cluster .venv/bin/python bench/restartprobe.py operator /tmp/old/operator [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import sys
import time
from typing import Any

import benchcluster
import memprobe
import proc
import profiler
import sidebyside
import steadystate
from kubernetes import client

from nvlfleet.api import names


def servings(cluster: benchcluster.BenchCluster, namespace: str) -> int:
    """How many DeepSeekServings ``namespace`` holds: the pass count that confirms them all."""
    listed = client.CustomObjectsApi(cluster.admin).list_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL
    )
    return len(listed["items"])


def start(
    cluster: benchcluster.BenchCluster,
    tree: pathlib.Path,
    namespace: str,
    count: int,
    args: argparse.Namespace,
    out: pathlib.Path,
    tag: str,
) -> dict[str, Any]:
    """One restart of the operator from ``tree`` (its ``operator/`` directory, put first on the path)."""
    port = steadystate._free_port()
    command = cluster.operator_command(
        cluster.identity("operator"), [namespace], recheck_seconds=steadystate.RECHECK_SECONDS, metrics_port=port
    )
    path = [str(tree.resolve())]
    if args.memory:
        path.insert(0, str(memprobe.HOOK))
        os.environ["NVLFLEET_MEMHOOK_DIR"] = str(out.resolve())
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(path)  # OperatorProcess hands the child this process's environment
    launched = time.monotonic()
    try:
        operator = benchcluster.OperatorProcess(command, out / f"operator-{tag}.log").start()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    spy = None
    if args.profile is not None:
        spy = profiler.PySpy(operator.pid, args.profile / f"{tag}.txt", gil=True, rate=100)
    try:
        answering = steadystate._until(lambda: steadystate._metrics(port) is not None, args.cap)
        first = steadystate._until(lambda: steadystate._passes(port) >= 1, args.cap)
        cpu_to_first = proc.cpu_seconds(operator.pid)
        confirmed = steadystate._until(lambda: steadystate._passes(port) >= count, args.cap)
        cpu_to_confirm = proc.cpu_seconds(operator.pid)
        if spy is not None:
            spy.stop()
        time.sleep(args.settle)
        passes = steadystate._passes(port)
        meter = proc.Meter(operator.pid).start()
        time.sleep(args.idle)
        usage = meter.stop()
        found: dict[str, Any] = {
            "restart_s": None if confirmed is None else confirmed - launched,
            # Where the restart's time goes: the process up and serving /metrics (imports, kopf started), then
            # kopf's lists done and the first pass counted, then the rest of the passes.
            "metrics_up_s": None if answering is None else answering - launched,
            "first_pass_s": None if first is None else first - launched,
            "cpu_to_first_pass_s": cpu_to_first,
            "cpu_to_confirm_s": cpu_to_confirm,
            "idle_cores": usage.cores,
            "idle_passes_per_min": (steadystate._passes(port) - passes) * 60 / usage.wall_seconds,
            "rss_mib": proc.rss_mib(operator.pid),
            "load": os.getloadavg()[0],
        }
        if args.memory:
            found.update(_allocators(operator.pid, out))
        return found
    finally:
        if spy is not None:
            spy.stop()
        operator.stop()


def _allocators(pid: int, out: pathlib.Path) -> dict[str, float]:
    """Ask the operator for a memory dump (``memhook``) and read what each allocator holds, in MiB."""
    before = set(os.listdir(out))
    os.kill(pid, signal.SIGUSR1)
    done = steadystate._until(lambda: any(f.endswith(".done") for f in set(os.listdir(out)) - before), 300)
    if done is None:
        return {}
    dump = next(f for f in set(os.listdir(out)) - before if f.endswith(".done"))[: -len(".done")]
    return memprobe.allocators((out / f"{dump}.alloc").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=pathlib.Path, help="operator/ directories of the trees to compare")
    parser.add_argument("--namespace", default="steady-1000", help="the kept cluster's servings (figure 2's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after confirming, before the window")
    parser.add_argument("--idle", type=float, default=60.0, help="idle window, seconds")
    parser.add_argument("--cap", type=float, default=600.0, help="seconds a restart may take")
    parser.add_argument("--memory", action="store_true", help="also dump what the allocators hold once idle")
    parser.add_argument("--profile", type=pathlib.Path, help="directory for a py-spy --gil profile of each start")
    parser.add_argument("--out", type=pathlib.Path, default=benchcluster.REPO / ".bench" / "restartprobe")
    args = parser.parse_args(argv)
    sidebyside.check_trees(parser, args.trees)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    say = lambda text: print(time.strftime("%H:%M:%S"), text, file=sys.stderr, flush=True)  # noqa: E731
    cluster = benchcluster.BenchCluster(benchcluster.cluster_dir(), say=say).attach()
    count = servings(cluster, args.namespace)
    if count == 0:
        parser.error(f"namespace {args.namespace} holds no serving: run figure 2 with --keep-cluster first")
    say(f"{count} servings in {args.namespace}; {len(args.trees)} trees × {args.repeats} repeats")
    runs = sidebyside.alternate(
        args.trees,
        args.repeats,
        lambda tree, tag: start(cluster, tree, args.namespace, count, args, args.out, tag),
        say,
    )
    sidebyside.report(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
