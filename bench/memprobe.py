"""Where the operator's memory goes: allocator and tracemalloc dumps of ``nvlfleet run`` without servings and with N.

Debug tool beside figure 2 (``steadystate``), not part of ``bench/run.py``: on the benchmark cluster
(``benchcluster``; ``--attach`` reuses a running one and its fleet, which must hold no servings yet:
the seed places them from the first rack on) it starts the operator on an empty namespace,
then seeds ``--servings`` single-tray servings as figure 2 does (``steadystate.seed``) and starts it on them; each
time, once it has passed every serving and settled, it signals the operator to dump its memory (``memhook``) and
prints what each allocator holds, live and free, and the growth per serving. ``--tracemalloc DEPTH`` also traces
every allocation (slow: several times the CPU and RSS) and writes snapshots, compared with
``python -c 'import tracemalloc; ...'`` or ``memprobe.py --compare EMPTY.snap FULL.snap N``.

    PYTHONPATH=$PWD/cluster .venv/bin/python bench/memprobe.py --servings 200 [--attach] [--tracemalloc 10]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import sys
import time
import tracemalloc
from typing import Any

import benchcluster
import proc
import steadystate

HOOK = pathlib.Path(__file__).resolve().parent / "memhook"

# Lines of sys._debugmallocstats (pymalloc) and glibc's malloc_stats (its last "Total" stanza) read from a dump.
_PYMALLOC = {
    "pymalloc_arenas": r"^(\d+) arenas \* \d+ bytes/arena\s+=\s+([\d,]+)",
    "pymalloc_live": r"^# bytes in allocated blocks\s+=\s+([\d,]+)",
    "pymalloc_free_blocks": r"^# bytes in available blocks\s+=\s+([\d,]+)",
    "pymalloc_unused_pools": r"^\d+ unused pools \* \d+ bytes\s+=\s+([\d,]+)",
}


def allocators(text: str) -> dict[str, float]:
    """MiB each allocator holds, from a ``.alloc`` dump."""
    found: dict[str, float] = {}
    for key, pattern in _PYMALLOC.items():
        match = re.search(pattern, text, re.MULTILINE)
        if match:
            found[key] = int(match.groups()[-1].replace(",", "")) / 2**20
    total = text.rsplit("Total (incl. mmap):", 1)[-1]
    for key, label in (("glibc_system", "system bytes"), ("glibc_in_use", "in use bytes")):
        match = re.search(rf"{label}\s+=\s+(\d+)", total)
        if match:
            found[key] = int(match.group(1)) / 2**20
    return found


def measure(
    cluster: benchcluster.BenchCluster, namespace: str, count: int, out: pathlib.Path, tag: str
) -> dict[str, Any]:
    port = steadystate._free_port()
    command = cluster.operator_command(
        cluster.identity("operator"), [namespace], recheck_seconds=steadystate.RECHECK_SECONDS, metrics_port=port
    )
    operator = benchcluster.OperatorProcess(command, out / f"operator-{tag}.log").start()
    try:
        steadystate._until(lambda: steadystate._metrics(port) is not None and steadystate._passes(port) >= count, 900)
        time.sleep(15.0)  # the start-up's kopf workers idle out (5 s) and the last status writes land
        rss = proc.rss_mib(operator.pid)
        before = set(os.listdir(out))
        os.kill(operator.pid, signal.SIGUSR1)
        steadystate._until(lambda: any(f.endswith(".done") for f in set(os.listdir(out)) - before), 900)
        dump = next(f for f in set(os.listdir(out)) - before if f.endswith(".done"))[: -len(".done")]
    finally:
        operator.stop()
    return {"rss_mib": rss, "dump": str(out / dump), **allocators((out / f"{dump}.alloc").read_text())}


def compare(empty: str, full: str, count: int, top: int = 20) -> None:
    """The tracemalloc holders that grew from ``empty`` to ``full``, per serving, by allocating traceback."""
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    a = tracemalloc.Snapshot.load(empty).filter_traces(keep)
    b = tracemalloc.Snapshot.load(full).filter_traces(keep)
    grown = sum(s.size for s in b.statistics("filename")) - sum(s.size for s in a.statistics("filename"))
    print(f"traced growth: {grown / count / 1024:.1f} KiB per serving")
    for stat in b.compare_to(a, "traceback")[:top]:
        print(f"\n{stat.size_diff / count / 1024:8.1f} KiB/serving {stat.count_diff / count:7.1f} blocks/serving")
        print("   " + "\n   ".join(line.strip() for line in stat.traceback.format()[-14::2]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servings", type=int, default=200)
    parser.add_argument("--out", type=pathlib.Path, default=benchcluster.REPO / ".bench" / "memprobe")
    parser.add_argument("--attach", action="store_true", help="reuse the running benchmark cluster and its fleet")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="DEPTH", help="trace allocations (slow)")
    parser.add_argument("--compare", nargs=3, metavar=("EMPTY", "FULL", "N"), help="compare two snapshots, then exit")
    args = parser.parse_args(argv)
    if args.compare:
        compare(args.compare[0], args.compare[1], int(args.compare[2]))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["NVLFLEET_MEMHOOK_DIR"] = str(args.out.resolve())
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HOOK), os.environ.get("PYTHONPATH", "")])
    if args.tracemalloc:
        os.environ["PYTHONTRACEMALLOC"] = str(args.tracemalloc)
    say = lambda text: print(time.strftime("%H:%M:%S"), text, file=sys.stderr, flush=True)  # noqa: E731
    root = benchcluster.cluster_dir()
    cluster = benchcluster.BenchCluster(root, say=say)
    if args.attach:
        cluster.attach()
    else:
        cluster.up()
        cluster.fleet(benchcluster.fleet_racks(args.servings))
    stamp = time.strftime("%H%M%S")
    empty = measure(cluster, cluster.namespace(f"memprobe-empty-{stamp}"), 0, args.out, f"empty-{stamp}")
    say(f"no serving: {empty}")
    namespace = f"memprobe-{args.servings}-{stamp}"
    steadystate.seed(cluster, namespace, args.servings)  # creates the namespace
    full = measure(cluster, namespace, args.servings, args.out, f"n{args.servings}-{stamp}")
    say(f"{args.servings} servings: {full}")
    for key, value in full.items():
        if isinstance(value, float) and key in empty:
            growth = (value - empty[key]) * 1024 / args.servings
            print(f"{key:24} {empty[key]:8.1f} MiB -> {value:8.1f} MiB: {growth:7.1f} KiB per serving")
    return 0


if __name__ == "__main__":
    sys.exit(main())
