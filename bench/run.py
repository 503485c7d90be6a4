"""``make bench``: every benchmark figure measured side by side, one table, written to docs/benchmarks.md.

    python bench/run.py [--quick] [--only 1,2,3,4] [--convergence 50,200,1000] [--profile] [--out docs/benchmarks.md]

Figures, one module each (their docstrings say exactly what is timed and against what):

1. ``convergence``  — N servings through nvlfleet ÷ the same children applied by a plain client with the
   operator's concurrency (N = 50, 200, 1,000; 3 repeats each, median and min–max; the serial client beside,
   once per N), and the CPU every process of each run used (control plane, bench, operator).
2. ``steadystate``  — operator RSS (and its growth per 100 servings), CPU, reads, writes and passes per minute
   with 1,000 servings and their pods, idle; a restart on the unchanged fleet; writes per new serving.
3. ``placement``    — planner time for 1,000 groups on 100 racks and 10,000 groups on 1,000 racks; placement
   quality on the real scheduler (``compare_placement``: nvlfleet, LWS exclusive topology, plain pod affinity,
   Kueue topology-aware scheduling), and the offline model of it (``placement``/``baselines``, rows "model").
4. ``scrapecost``   — scraping 1,000 simulated vLLM leaders every 15 s: CPU cores, gauge staleness.

The planner, the model and figure 4 need no cluster and run first. The scheduler comparison, figures 1 and 2 run
on a separate local cluster started for the run (``NVLFLEET_BENCH_CLUSTER_DIR``, default .bench/cluster) so the
shared one is neither used nor disturbed; Kueue is started on it for the comparison only, and the cluster is
stopped by its PIDs at the end (``--keep-cluster`` leaves it up). Every row carries the 1-minute load average
when it was measured; a figure that could not be measured prints null and the notes say why. Logs, profiles and
raw results go to .bench/. The output ends with one ``name: value`` line per figure. ``--quick`` measures
smaller sizes with shorter windows (the sizes are in the metric names); ``--profile`` records the operator with
py-spy during the largest convergence run and during the steady state's start-up, and prints their hottest frames.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import benchcluster
import figurerows
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
    steady_window: float | None  # None: one re-check and one node heartbeat round (steadystate.idle_window)
    steady_startup_cap: float
    telemetry_targets: int
    telemetry_rounds: int
    convergence_repeats: int = 3
    # The serial reference (a second row; the ratio is taken against the concurrent one) runs in this many of the
    # repeats: at N = 1,000 each of its runs takes as long as the operator's (473 s in docs/benchmarks.md).
    convergence_serial_repeats: int = 1
    planner_racks: int = 100
    planner_servings: int = 50  # 20 groups each: 1,000 groups
    planner_scale_racks: int = 1000
    planner_scale_servings: int = 500  # 10,000 groups: a 72,000-GPU estate
    # The placement comparison on the real scheduler (compare_placement): racks per engine, groups of each role.
    compare_racks: int = 2
    compare_decode: int = 6
    compare_prefill: int = 6

    @property
    def racks(self) -> int:
        """The shared bench fleet's racks, sized for figure 2 (``benchcluster.fleet_racks``)."""
        return benchcluster.fleet_racks(self.steady_servings)


FULL = Sizes(
    convergence=(50, 200, 1000),
    convergence_caps=(600, 900, 2400),
    steady_servings=1000,
    steady_window=None,
    steady_startup_cap=480,
    telemetry_targets=1000,
    telemetry_rounds=4,
)
QUICK = Sizes(
    convergence=(10, 20),
    convergence_caps=(300, 300),
    steady_servings=200,
    steady_window=65,
    steady_startup_cap=300,
    telemetry_targets=1000,
    telemetry_rounds=2,
    convergence_repeats=2,
    planner_scale_racks=200,
    planner_scale_servings=100,
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
        self.attach = False  # --attach: reuse a kept cluster instead of starting a fresh one
        self.failed: set[int] = set()  # figures that raised: their figures are null for that reason
        self.logs = WORK / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def take(self, out: figurerows.Out) -> None:
        self.rows += out.rows
        self.summary.update(out.summary)
        self.notes += out.notes

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def figure(self, number: int, title: str, body: Callable[[], None]) -> None:
        if number not in self.figures:
            return
        self.say(f"==> figure {number}: {title}")
        started = time.monotonic()
        before = len(self.rows)
        try:
            body()
        except Exception as err:  # one broken figure must not cost the others; the table says what is missing
            traceback.print_exc()
            self.failed.add(number)
            self.notes.append(f"figure {number} ({title}) failed: {type(err).__name__}: {err}")
        # Rows that did not note the load they were measured under get the load as the figure ends.
        load = machine.load_average()
        self.rows[before:] = [
            r if r.load is not None else dataclasses.replace(r, load=load) for r in self.rows[before:]
        ]
        self.say(f"    figure {number} took {time.monotonic() - started:.0f} s")

    # -- figure 3 -------------------------------------------------------------------------------------------

    def placement(self) -> None:
        import placement

        s = self.sizes
        f = "3 placement"
        for racks, servings, repeats, goal in (
            (s.planner_racks, s.planner_servings, placement.REPEATS, 50.0),
            (s.planner_scale_racks, s.planner_scale_servings, placement.SCALE_REPEATS, 100.0),
        ):
            t = placement.time_plan(racks, servings, repeats)
            self.raw[f"planner_{t.groups}_groups"] = dataclasses.asdict(t)
            runs = report.spread(t.runs_ms)
            self.rows.append(
                report.Row(
                    f,
                    f"plan {t.groups:,} groups / {t.racks:,} racks (median of {repeats})",
                    "ms",
                    runs.median,
                    goal=_at_most(goal),
                    value_spread=runs,
                    load=t.load,
                )
            )
            self.summary[f"planner_ms_{t.groups}_groups"] = _round(runs.median, 2)
        r = placement.model(racks=s.planner_racks, servings=s.planner_servings)
        self.raw["placement_model"] = dataclasses.asdict(r)
        self.take(figurerows.placement_model_rows(r, machine.load_average()))

    def placement_scheduler(self) -> None:
        """``make compare-placement`` on the benchmark cluster: the headline placement rows."""
        import compare_placement

        cluster = self.bench_cluster()
        s = self.sizes
        self.say("    starting Kueue (on demand) for its topology-aware-scheduling baseline")
        kueue_pid = cluster.kueue()
        self.say(f"      kueue-manager PID {kueue_pid}")
        try:
            result = compare_placement.measure(
                cluster.admin,
                cluster.admin_kubeconfig,
                racks=s.compare_racks,
                decode=s.compare_decode,
                prefill=s.compare_prefill,
                settle=15.0,
                workdir=WORK / "compare-placement",
                say=self.say,
            )
        finally:
            cluster.stop_kueue()
        self.raw["placement_scheduler"] = result
        self.take(figurerows.placement_scheduler_rows(result))

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
        if self.cluster is None and self.attach:
            self.say(f"    attaching to the benchmark cluster in {benchcluster.cluster_dir()} (and its fleet)")
            self.cluster = benchcluster.BenchCluster(benchcluster.cluster_dir(), say=self.say).attach()
            self.notes.append(
                f"cluster figures: the benchmark cluster already running in {benchcluster.cluster_dir()} (--attach), "
                f"control plane {self.cluster.server_version}, its node grace period {self.cluster.grace_text()}"
            )
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
                f"control plane {self.cluster.server_version} started for this run, its node grace period "
                f"{self.cluster.grace_text()} (kwok's heartbeats share the machine: benchcluster.py)"
            )
        return self.cluster

    def convergence(self) -> None:
        import convergence

        cluster = self.bench_cluster()
        s = self.sizes
        extra = self.convergence_fleet(cluster)
        try:
            for count, cap in zip(s.convergence, s.convergence_caps, strict=True):
                prof = None
                if self.profile and count == max(s.convergence):
                    out = WORK / f"profile-operator-n{count}.txt"
                    prof = lambda pid, out=out: profiler.PySpy(pid, out)  # noqa: E731
                repeats = convergence.measure(
                    cluster,
                    count,
                    s.convergence_repeats,
                    cap=cap,
                    log_dir=self.logs,
                    say=self.say,
                    profile=prof,
                    serial_repeats=s.convergence_serial_repeats,
                )
                self.raw[f"convergence_n{count}"] = [dataclasses.asdict(r) for r in repeats]
                out = figurerows.convergence_rows(count, cap, repeats)
                self.say(report.table(out.rows))  # each N as it completes: a long run shows its figures early
                self.take(out)
                if prof is not None:
                    self.profile_note(f"convergence N={count}", WORK / f"profile-operator-n{count}.txt")
        finally:
            if extra:
                from localcluster import fleet

                fleet.delete_fleet(cluster.admin, convergence.EXTRA_FLEET)

    def convergence_fleet(self, cluster: benchcluster.BenchCluster) -> int:
        """Racks added for the largest N beyond the shared bench fleet (removed after figure 1); how many."""
        import convergence

        trays = self.sizes.racks * benchcluster.TRAYS_PER_RACK
        return convergence.add_racks(cluster, max(self.sizes.convergence), trays, lambda m: self.say(f"    {m}"))

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
            window=s.steady_window or steadystate.idle_window(),
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
        if r.sets_changed_in_window:
            self.notes.append(
                f"steady state: {r.sets_changed_in_window} LeaderWorkerSets changed during the idle window (another "
                "controller still writing): the passes they caused are in its figures"
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
        import steadystate

        f = "2 steady state"
        n = r.servings
        idle, restart = r.load_idle, r.load_restart  # the load each was measured under, not the figure's end
        self.rows.append(report.Row(f, f"operator RSS, {n:,} servings + pods", "MiB", r.rss_mib, goal=_at_most(200)))
        if r.rss_mib_empty is not None:
            self.rows.append(report.Row(f, "operator RSS, same nodes, no serving", "MiB", r.rss_mib_empty))
            self.rows.append(report.Row(f, "operator RSS growth per 100 servings", "MiB", r.rss_growth_mib_per_100))
        self.rows.append(
            report.Row(
                f,
                f"operator CPU over {r.window_seconds:.0f} s idle{_covers(r)}{_under(idle)}",
                "cores",
                r.cpu_cores,
                goal=_at_most(0.05),
                load=idle,
            )
        )
        self.rows.append(
            report.Row(
                f,
                f"operator CPU, busiest {steadystate.SLICE_SECONDS:g} s of the idle window",
                "cores",
                r.cpu_cores_busiest,
                load=idle,
            )
        )
        self.rows.append(
            report.Row(f, "writes per minute, idle", "", r.writes_per_minute, goal=_at_most(0, on="value"), load=idle)
        )
        self.rows.append(report.Row(f, "reads per minute, idle", "", r.reads_per_minute, goal=_at_most(60), load=idle))
        self.rows.append(
            report.Row(
                f,
                "reconcile passes per minute, idle",
                "",
                r.passes_per_minute,
                n * 60 / steadystate_recheck(),
                f"one re-check per serving per {steadystate_recheck():g} s",
                load=idle,
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
                f"restart → every serving confirmed, nothing changed{_under(restart)}",
                "s",
                r.restart_seconds,
                goal=_at_most(30),
                at_least=r.restart_seconds is None,
                load=restart,
            )
        )
        self.rows.append(
            report.Row(f, "restart: writes", "", r.restart_writes, goal=_at_most(0, on="value"), load=restart)
        )
        self.rows.append(report.Row(f, "restart: reads", "", r.restart_reads, load=restart))
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


def _under(load: float | None) -> str:
    return "" if load is None else f" (load {load:.1f})"


def _covers(r: Any) -> str:
    """Whether the idle window saw every node's heartbeat (a node watch event each): a shorter one may miss them."""
    return ", every node's heartbeat in it" if r.window_seconds >= r.heartbeat_seconds else ""


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


PREDICTED_SERVINGS = 10_000  # the memory model's prediction (a note, labelled as such)

REQUIRED = (
    "convergence_ratio_n50",
    "convergence_ratio_n200",
    "convergence_ratio_n1000",
    "convergence_overhead_seconds_n200",
    "planner_ms_10000_groups",
    "stranded_gpus_kueue_tas",
    "split_groups_kueue_tas",
    "placement_measured_on_scheduler",
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


# Which figure measures a summary name (its prefix): a null one is explained by what happened to that figure.
_FIGURE_OF = (
    ("convergence_", 1),
    ("idle_", 2),
    ("operator_", 2),
    ("restart_", 2),
    ("writes_per_new_serving", 2),
    ("planner_", 3),
    ("stranded_", 3),
    ("split_", 3),
    ("placement_", 3),
    ("telemetry_", 4),
    ("gauge_", 4),
)


def why_null(name: str, figures: set[int], sizes: Sizes, failed: set[int]) -> str:
    """Why the summary has no value for ``name``, in words (a null is never left unexplained)."""
    figure = next((n for prefix, n in _FIGURE_OF if name.startswith(prefix)), None)
    if figure is None:
        return "no figure measures it"
    if figure not in figures:
        return f"figure {figure} was not run (--only)"
    if figure in failed:
        return f"figure {figure} failed (its note says how)"
    sized = [int(x) for x in re.findall(r"_n?(\d+)(?:_|$)", name)]
    if figure == 1 and sized and sized[0] not in sizes.convergence:
        return f"N={sized[0]} is not among this run's sizes ({', '.join(map(str, sizes.convergence))})"
    if figure == 2 and sized and sized[0] != sizes.steady_servings:
        return f"this run's steady state has {sizes.steady_servings} servings, not {sized[0]}"
    return "its figure ran but did not reach it (the notes say why)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter windows")
    parser.add_argument("--only", default="1,2,3,4", help="comma-separated figure numbers")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the operator (largest convergence run, steady-state start-up)"
    )
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument(
        "--convergence",
        metavar="N,N",
        help="figure 1's sizes (default 50,200,1000; --quick 10,20); a size left out is null in the summary",
    )
    parser.add_argument("--no-doc", action="store_true", help="do not write the document")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the benchmark cluster running")
    parser.add_argument(
        "--attach", action="store_true", help="use the benchmark cluster a --keep-cluster run left (developing only)"
    )
    parser.add_argument("--invoked-as", help="the command to record in the document (make passes its own)")
    args = parser.parse_args(argv)
    figures = {int(x) for x in args.only.split(",") if x.strip()}
    command = args.invoked_as or shlex.join(["python", "bench/run.py", *(argv if argv is not None else sys.argv[1:])])
    facts = machine.facts()
    sizes = QUICK if args.quick else FULL
    if args.convergence:
        counts = tuple(int(x) for x in args.convergence.split(",") if x.strip())
        caps = dict(zip(sizes.convergence, sizes.convergence_caps, strict=True))
        sizes = dataclasses.replace(
            sizes, convergence=counts, convergence_caps=tuple(caps.get(n, max(300.0, 2.4 * n)) for n in counts)
        )
    bench = Bench(sizes, figures, args.profile)
    bench.attach = args.attach
    started = time.monotonic()
    try:
        bench.figure(3, "placement: planner and model", bench.placement)
        bench.figure(4, "telemetry", bench.telemetry)
        bench.figure(3, "placement on the scheduler (make compare-placement)", bench.placement_scheduler)
        bench.figure(1, "convergence", bench.convergence)
        bench.figure(2, "steady state", bench.steady)
    finally:
        bench.close(args.keep_cluster)
    if bench.cluster is not None:
        facts["kubernetes (local control plane)"] = bench.cluster.server_version
    facts["operator interpreter"] = "requirements/runtime.lock only, as in the image (bench/runtimevenv.py)"
    facts["load average at end (1 min)"] = f"{machine.load_average():.2f}"
    facts["duration"] = f"{(time.monotonic() - started) / 60:.1f} min"
    # By figure; within figure 3 the scheduler's rows (the headline) come before the model's.
    rows = sorted(bench.rows, key=lambda r: (r.figure[0], "model" in r.figure))
    summary = report.summary(REQUIRED, bench.summary)
    nulls = [f"{name}: {why_null(name, figures, sizes, bench.failed)}" for name, v in summary.items() if v is None]
    if nulls:
        bench.notes.append("null in the summary, and why: " + "; ".join(nulls))
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
