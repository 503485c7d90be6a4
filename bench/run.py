"""``make bench``: every benchmark figure measured side by side, one table, written to docs/benchmarks.md.

    python bench/run.py [--quick] [--only 1,2,3,4] [--profile] [--out docs/benchmarks.md]

Figures, one module each (their docstrings say exactly what is timed and against what):

1. ``convergence``  — N servings through nvlfleet ÷ the same children applied by a plain client (N = 50, 200).
2. ``steadystate``  — operator RSS (and its growth per 100 servings), CPU, reads, writes and passes per minute
   with 1,000 servings and their pods, idle; a restart on the unchanged fleet; writes per new serving.
3. ``placement``    — planner time for 1,000 groups on 100 racks; quality next to LWS and pod affinity.
4. ``scrapecost``   — scraping 1,000 simulated vLLM leaders every 15 s: CPU cores, gauge staleness.

Figures 3 and 4 need no cluster and run first. Figures 1 and 2 run on a separate local cluster started for the
run (``NVLFLEET_BENCH_CLUSTER_DIR``, default .bench/cluster) so the shared one is neither used nor disturbed;
it is stopped by its PIDs at the end (``--keep-cluster`` leaves it up). Logs, profiles and raw results go to
.bench/. The output ends with one ``name: value`` line per figure. ``--quick`` measures smaller sizes with
shorter windows (the sizes are in the metric names); ``--profile`` records the operator with py-spy during the
largest convergence run and during the steady state's start-up, and prints their hottest frames.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import benchcluster
import machine
import profiler
import report

REPO = pathlib.Path(__file__).resolve().parents[1]

WORK = REPO / ".bench"


@dataclasses.dataclass(frozen=True)
class Sizes:
    convergence: tuple[int, ...]
    convergence_caps: tuple[float, ...]  # seconds the operator may take per N before the run is cut short
    steady_servings: int
    steady_window: float
    steady_startup_cap: float
    telemetry_targets: int
    telemetry_rounds: int
    planner_racks: int = 100
    planner_servings: int = 50  # 20 groups each: 1,000 groups

    @property
    def racks(self) -> int:
        """Racks of 18 trays: at least 20, and one tray per single-tray serving of figure 2 (+2 spare trays)."""
        return max(24, math.ceil((self.steady_servings + 2) / 18))


FULL = Sizes(
    convergence=(50, 200),
    convergence_caps=(600, 900),
    steady_servings=1000,
    steady_window=75,
    steady_startup_cap=480,
    telemetry_targets=1000,
    telemetry_rounds=4,
)
QUICK = Sizes(
    convergence=(20, 50),
    convergence_caps=(300, 600),
    steady_servings=200,
    steady_window=65,
    steady_startup_cap=300,
    telemetry_targets=1000,
    telemetry_rounds=2,
)


class Bench:
    def __init__(self, sizes: Sizes, figures: set[int], profile: bool) -> None:
        self.sizes = sizes
        self.figures = figures
        self.profile = profile
        self.rows: list[report.Row] = []
        self.summary: dict[str, float | None] = {}
        self.notes: list[str] = []
        self.raw: dict[str, Any] = {}
        self.cluster: benchcluster.BenchCluster | None = None
        self.logs = WORK / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def figure(self, number: int, title: str, body: Callable[[], None]) -> None:
        if number not in self.figures:
            return
        self.say(f"==> figure {number}: {title}")
        started = time.monotonic()
        try:
            body()
        except Exception as err:  # one broken figure must not cost the others; the table says what is missing
            traceback.print_exc()
            self.notes.append(f"figure {number} ({title}) failed: {type(err).__name__}: {err}")
        self.say(f"    figure {number} took {time.monotonic() - started:.0f} s")

    # -- figure 3 -------------------------------------------------------------------------------------------

    def placement(self) -> None:
        import placement

        s = self.sizes
        r = placement.measure(racks=s.planner_racks, servings=s.planner_servings)
        self.raw["placement"] = dataclasses.asdict(r)
        f = "3 placement"
        what = f"{r.groups:,} groups / {r.racks} racks"
        self.rows.append(
            report.Row(f, f"plan {what} (median of {placement.REPEATS})", "ms", r.plan_ms_median, goal=_at_most(50))
        )
        for label, other in (("LWS exclusive", r.lws_exclusive), ("pod affinity", r.pod_affinity)):
            self.rows.append(
                report.Row(f, "groups placed in one rack", "", r.nvlfleet.groups_placed, other.groups_placed, label)
            )
        self.rows.append(
            report.Row(
                f,
                "groups split across racks",
                "",
                r.nvlfleet.groups_split,
                r.pod_affinity_preferred.groups_split,
                "preferred pod affinity",
                _at_most(0, on="value"),
            )
        )
        for label, other in (("LWS exclusive", r.lws_exclusive), ("pod affinity", r.pod_affinity)):
            self.rows.append(report.Row(f, "GPUs stranded", "", r.nvlfleet.gpus_stranded, other.gpus_stranded, label))
        self.summary[f"planner_ms_{r.groups}_groups"] = round(r.plan_ms_median, 2)
        self.summary["stranded_gpus_nvlfleet"] = r.nvlfleet.gpus_stranded
        self.summary["stranded_gpus_lws_exclusive"] = r.lws_exclusive.gpus_stranded
        self.summary["stranded_gpus_pod_affinity"] = r.pod_affinity.gpus_stranded
        self.summary["split_groups_nvlfleet"] = r.nvlfleet.groups_split
        self.summary["split_groups_pod_affinity_preferred"] = r.pod_affinity_preferred.groups_split

    # -- figure 4 -------------------------------------------------------------------------------------------

    def telemetry(self) -> None:
        import scrapecost

        s = self.sizes
        work = WORK / "telemetry"
        work.mkdir(parents=True, exist_ok=True)
        r = scrapecost.measure(s.telemetry_targets, s.telemetry_rounds, work)
        self.raw["telemetry"] = r
        f = "4 telemetry"
        n = int(r["targets"])  # type: ignore[call-overload]
        interval = float(r["interval_seconds"])  # type: ignore[arg-type]
        self.rows.append(
            report.Row(
                f, f"CPU, {n:,} leaders every {interval:g} s", "cores", _float(r["cpu_cores"]), goal=_at_most(0.5)
            )
        )
        self.rows.append(
            report.Row(
                f,
                "gauge staleness p99",
                "s",
                _float(r["staleness_seconds_p99"]),
                interval,
                "the scrape interval",
                _at_most(1.25, on="ratio"),
            )
        )
        self.rows.append(report.Row(f, "scrape round, median", "s", _float(r["round_seconds_median"])))
        if r.get("targets_up") != n:
            self.notes.append(f"telemetry: only {r.get('targets_up')} of {n} leaders were up at the end")
        self.summary[f"telemetry_cpu_cores_{n}_targets"] = round(_float(r["cpu_cores"]) or 0, 4)
        self.summary["gauge_staleness_seconds_p99"] = round(_float(r["staleness_seconds_p99"]) or 0, 2)

    # -- the cluster figures --------------------------------------------------------------------------------

    def bench_cluster(self) -> benchcluster.BenchCluster:
        if self.cluster is None:
            self.say(f"    starting the benchmark cluster in {benchcluster.cluster_dir()}")
            self.cluster = benchcluster.BenchCluster(benchcluster.cluster_dir(), say=self.say).up()
            started = time.monotonic()
            nodes = self.cluster.fleet(self.sizes.racks)
            self.say(
                f"    {len(nodes)} kwok GB200 trays in {self.sizes.racks} racks, "
                f"ready in {time.monotonic() - started:.0f} s"
            )
            self.notes.append(
                f"cluster figures: {self.sizes.racks} simulated NVL72 racks ({len(nodes)} GB200 trays) in a local "
                f"control plane {self.cluster.server_version} started for this run"
            )
        return self.cluster

    def convergence(self) -> None:
        import convergence

        cluster = self.bench_cluster()
        f = "1 convergence"
        for count, cap in zip(self.sizes.convergence, self.sizes.convergence_caps, strict=True):
            largest = count == max(self.sizes.convergence)
            prof = None
            if self.profile and largest:
                out = WORK / f"profile-operator-n{count}.txt"
                prof = lambda pid, out=out: profiler.PySpy(pid, out)  # noqa: E731
            self.say(f"    N={count}: nvlfleet (cap {cap:.0f} s)")
            op = convergence.run_operator(
                cluster, f"conv-nvlfleet-{count}", count, log_dir=self.logs, timeout=cap, profile=prof
            )
            self.say(f"      {op.seconds:.1f} s{' (cut short)' if op.timed_out else ''}; cleaning up")
            cluster.delete_namespace(f"conv-nvlfleet-{count}")
            self.say(f"    N={count}: plain client")
            base = convergence.run_plain_client(cluster, f"conv-plain-{count}", count, op.placements)
            self.say(f"      {base.seconds:.1f} s; cleaning up")
            cluster.delete_namespace(f"conv-plain-{count}")
            self.raw[f"convergence_n{count}"] = {"nvlfleet": dataclasses.asdict(op), "plain": dataclasses.asdict(base)}
            self.rows.append(
                report.Row(
                    f,
                    f"N={count}: create → every serving Ready",
                    "s",
                    op.seconds,
                    base.seconds,
                    "plain SSA client → pods Ready",
                    _at_most(1.25, on="ratio"),
                    at_least=op.timed_out,
                )
            )
            self.rows.append(
                report.Row(
                    f,
                    f"N={count}: create → every pod Ready",
                    "s",
                    op.pods_seconds,
                    base.seconds,
                    "plain SSA client",
                    at_least=op.timed_out and op.pods_seconds == op.seconds,
                )
            )
            self.rows.append(
                report.Row(f, f"N={count}: writes to the API server", "", op.writes, base.writes, "plain SSA client")
            )
            self.summary[f"convergence_ratio_n{count}"] = _round(report.ratio(op.seconds, base.seconds), 3)
            if op.timed_out:
                self.notes.append(
                    f"convergence N={count}: nvlfleet had not made every serving Ready after the {cap:.0f} s cap "
                    f"({op.ready} of {count}); the ratio is a lower bound"
                )
            if prof is not None:
                self.profile_note(f"convergence N={count}", WORK / f"profile-operator-n{count}.txt")

    def profile_note(self, during: str, path: pathlib.Path) -> None:
        frames = profiler.hottest(
            path.read_text(),
            top=25,
            exclude=("threading.py", "runners.py", "base_events.py", "runpy", "cli.py", "(run.py)", "thread.py"),
        )
        lines = [f"{inc:6.1%} {own:6.1%}  {frame}" for frame, inc, own in frames]
        self.say(f"    py-spy, operator during {during} (inclusive, self, frame):\n      " + "\n      ".join(lines))
        self.raw[f"profile {during}"] = lines

    def steady(self) -> None:
        import steadystate

        cluster = self.bench_cluster()
        s = self.sizes
        n = s.steady_servings
        self.say(f"    seeding {n} servings, then nvlfleet run (start-up cap {s.steady_startup_cap:.0f} s)")
        out = WORK / f"profile-operator-startup-{n}.txt"
        prof = (lambda pid: profiler.PySpy(pid, out)) if self.profile else None
        r = steadystate.measure(
            cluster,
            f"steady-{n}",
            n,
            log_dir=self.logs,
            window=s.steady_window,
            startup_cap=s.steady_startup_cap,
            profile=prof,
        )
        if prof is not None:
            self.profile_note(f"start-up with {n} servings", out)
        self.raw["steady"] = dataclasses.asdict(r)
        self.steady_rows(r)
        if r.startup_seconds is None:
            self.notes.append(
                f"steady state: nvlfleet had not reconciled all {n} servings within the {s.steady_startup_cap:.0f} s "
                "start-up cap, so the window measures it still catching up, not idle"
            )
        if r.restart_seconds is None:
            self.notes.append(
                f"steady state: after the restart nvlfleet had not passed all {n} servings within "
                f"{s.steady_startup_cap:.0f} s, so restart_confirm_seconds_{n} is null"
            )
        if r.writes_per_new_serving is None:
            self.notes.append(
                f"steady state: the {r.new_servings} new servings were not all Ready within "
                f"{s.steady_startup_cap:.0f} s, so writes_per_new_serving is null"
            )
        if r.rss_mib_empty is None:
            self.notes.append("steady state: the operator without servings never answered, so no memory growth")
        self.summary[f"operator_rss_mib_{n}"] = round(r.rss_mib, 1)
        self.summary[f"operator_cpu_cores_idle_{n}"] = round(r.cpu_cores, 4)
        self.summary[f"idle_writes_per_minute_{n}"] = round(r.writes_per_minute, 2)
        self.summary[f"idle_cpu_cores_{n}"] = round(r.cpu_cores, 4)
        self.summary[f"idle_reads_per_minute_{n}"] = round(r.reads_per_minute, 1)
        self.summary[f"idle_passes_per_minute_{n}"] = round(r.passes_per_minute, 1)
        self.summary[f"restart_confirm_seconds_{n}"] = _round(r.restart_seconds, 1)
        self.summary[f"restart_writes_{n}"] = r.restart_writes if r.restart_seconds is not None else None
        self.summary["writes_per_new_serving"] = _round(r.writes_per_new_serving, 2)
        growth = r.rss_growth_mib_per_100
        self.summary[f"operator_rss_mib_empty_fleet_{n}"] = _round(r.rss_mib_empty, 1)
        self.summary["operator_rss_growth_mib_per_100_servings"] = _round(growth, 2)
        if growth is not None and r.rss_mib_empty is not None:
            predicted = r.rss_mib_empty + growth * PREDICTED_SERVINGS / 100
            self.summary[f"operator_rss_mib_predicted_{PREDICTED_SERVINGS}"] = round(predicted, 0)
            self.notes.append(
                f"prediction, not a measurement: operator RSS at {PREDICTED_SERVINGS:,} servings ≈ {predicted:.0f} MiB "
                f"(linear model from this run: {r.rss_mib_empty:.0f} MiB with the {self.sizes.racks} racks' nodes and "
                f"no serving, + {growth:.1f} MiB per 100 servings measured up to {n:,}; the nodes a larger fleet "
                "brings are not in it)"
            )

    def steady_rows(self, r: Any) -> None:
        f = "2 steady state"
        n = r.servings
        load = f" (load {machine.load_average():.1f})"
        self.rows.append(report.Row(f, f"operator RSS, {n:,} servings + pods", "MiB", r.rss_mib, goal=_at_most(200)))
        if r.rss_mib_empty is not None:
            self.rows.append(report.Row(f, "operator RSS, same nodes, no serving", "MiB", r.rss_mib_empty))
            self.rows.append(report.Row(f, "operator RSS growth per 100 servings", "MiB", r.rss_growth_mib_per_100))
        self.rows.append(
            report.Row(
                f, f"operator CPU over {r.window_seconds:.0f} s idle{load}", "cores", r.cpu_cores, goal=_at_most(0.05)
            )
        )
        self.rows.append(
            report.Row(f, "writes per minute, idle", "", r.writes_per_minute, goal=_at_most(0, on="value"))
        )
        self.rows.append(report.Row(f, "reads per minute, idle", "", r.reads_per_minute, goal=_at_most(60)))
        self.rows.append(
            report.Row(
                f,
                "reconcile passes per minute, idle",
                "",
                r.passes_per_minute,
                n * 60 / steadystate_recheck(),
                f"one re-check per serving per {steadystate_recheck():g} s",
            )
        )
        self.rows.append(
            report.Row(
                f,
                "start-up: every serving reconciled + Ready",
                "s",
                r.startup_seconds,
                at_least=r.startup_seconds is None,
            )
        )
        self.rows.append(
            report.Row(
                f,
                f"restart → every serving confirmed, nothing changed{load}",
                "s",
                r.restart_seconds,
                goal=_at_most(30),
                at_least=r.restart_seconds is None,
            )
        )
        self.rows.append(report.Row(f, "restart: writes", "", r.restart_writes, goal=_at_most(0, on="value")))
        self.rows.append(report.Row(f, "restart: reads", "", r.restart_reads))
        self.rows.append(
            report.Row(
                f,
                f"writes per new serving (mean of {r.new_servings})",
                "",
                r.writes_per_new_serving,
                2,
                "plain SSA client: LeaderWorkerSet + Service",
                _at_most(4, on="value"),
            )
        )

    def close(self, keep: bool) -> None:
        if self.cluster is not None and not keep:
            self.say("    stopping the benchmark cluster")
            self.cluster.down()


def steadystate_recheck() -> float:
    import steadystate

    return steadystate.RECHECK_SECONDS


def _at_most(limit: float, on: str = "value") -> report.Goal:
    return report.Goal(on=on, limit=limit)  # type: ignore[arg-type]


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


PREDICTED_SERVINGS = 10_000  # the memory model's prediction (a note, labelled as such)

REQUIRED = (
    "convergence_ratio_n50",
    "convergence_ratio_n200",
    "operator_rss_mib_1000",
    "idle_writes_per_minute_1000",
    "planner_ms_1000_groups",
    "stranded_gpus_nvlfleet",
    "stranded_gpus_lws_exclusive",
    "stranded_gpus_pod_affinity",
    "split_groups_nvlfleet",
    "telemetry_cpu_cores_1000_targets",
    "gauge_staleness_seconds_p99",
    "idle_cpu_cores_1000",
    "idle_reads_per_minute_1000",
    "restart_confirm_seconds_1000",
    "restart_writes_1000",
    "writes_per_new_serving",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter windows")
    parser.add_argument("--only", default="1,2,3,4", help="comma-separated figure numbers")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the operator (largest convergence run, steady-state start-up)"
    )
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--no-doc", action="store_true", help="do not write the document")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the benchmark cluster running")
    parser.add_argument("--invoked-as", help="the command to record in the document (make passes its own)")
    args = parser.parse_args(argv)
    figures = {int(x) for x in args.only.split(",") if x.strip()}
    command = args.invoked_as or shlex.join(["python", "bench/run.py", *(argv if argv is not None else sys.argv[1:])])
    facts = machine.facts()
    bench = Bench(QUICK if args.quick else FULL, figures, args.profile)
    started = time.monotonic()
    try:
        bench.figure(3, "placement", bench.placement)
        bench.figure(4, "telemetry", bench.telemetry)
        bench.figure(1, "convergence", bench.convergence)
        bench.figure(2, "steady state", bench.steady)
    finally:
        bench.close(args.keep_cluster)
    if bench.cluster is not None:
        facts["kubernetes (local control plane)"] = bench.cluster.server_version
    facts["load average at end (1 min)"] = f"{machine.load_average():.2f}"
    facts["duration"] = f"{(time.monotonic() - started) / 60:.1f} min"
    rows = sorted(bench.rows, key=lambda r: r.figure[0])
    summary = report.summary(REQUIRED, bench.summary)
    (WORK / "results.json").write_text(json.dumps({"raw": bench.raw, "summary": summary}, indent=2, default=str))
    print(report.table(rows))
    if bench.notes:
        print()
        print("\n".join(f"note: {n}" for n in bench.notes))
    print()
    print(report.summary_lines(summary))
    if not args.no_doc:
        args.out.write_text(report.document(rows, summary, command=command, machine=facts, notes=bench.notes))
        print(
            f"(written to {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out})", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
