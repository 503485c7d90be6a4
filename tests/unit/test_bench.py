"""The benchmark harness's pure parts: ratios, goals, the table, the summary lines and the document."""

from __future__ import annotations

import math
import pathlib

import profiler
import pytest
import report
import sidebyside


def row(value: float | None, reference: float | None = None, **options: object) -> report.Row:
    return report.Row("1 convergence", "N=50: create → Ready", "s", value, reference, "plain client", **options)


def test_a_ratio_is_the_value_over_the_reference_measured_beside_it() -> None:
    assert row(30.0, 24.0).ratio == 1.25
    assert report.ratio(3.0, 2.0) == 1.5


@pytest.mark.parametrize(("value", "reference"), [(None, 2.0), (2.0, None), (2.0, 0.0), (math.nan, 1.0)])
def test_no_ratio_without_both_numbers_or_with_a_zero_reference(value: float | None, reference: float | None) -> None:
    assert report.ratio(value, reference) is None


def test_a_ratio_goal_is_met_at_its_limit_and_missed_above_it() -> None:
    goal = report.Goal(on="ratio", limit=1.25)
    assert row(25.0, 20.0, goal=goal).met is True
    assert row(26.0, 20.0, goal=goal).met is False
    assert row(None, 20.0, goal=goal).met is None


def test_a_value_goal_looks_at_the_value_alone() -> None:
    assert row(0.0, goal=report.Goal(on="value", limit=0)).met is True
    assert row(0.5, goal=report.Goal(on="value", limit=0)).met is False


def test_numbers_keep_three_significant_digits_and_integers_stay_integers() -> None:
    assert [report.number(v) for v in (1000.0, 36.6061, 1.39291, 0.244556, None)] == [
        "1000",
        "36.6",
        "1.39",
        "0.245",
        "—",
    ]


def test_the_table_shows_value_reference_ratio_goal_and_verdict_in_columns() -> None:
    text = report.table([row(30.0, 20.0, goal=report.Goal(on="ratio", limit=1.25))])
    head, rule, line = text.splitlines()
    assert head.split() == ["figure", "measure", "nvlfleet", "reference", "ratio", "goal", "load"]
    assert set(rule) == {"-", " "}
    assert "30 s" in line and "20 s (plain client)" in line and "1.50×" in line and "≤ 1.25×" in line
    assert line.endswith("MISSED")


def test_every_row_states_the_load_average_it_was_measured_under() -> None:
    line = report.table([row(30.0, 20.0, load=3.456)]).splitlines()[2]
    assert line.endswith("3.46")


def test_a_repeated_figure_shows_medians_with_min_max_and_the_median_of_its_paired_ratios() -> None:
    repeated = row(
        22.0,
        20.0,
        value_spread=report.spread([21.0, 22.0, 30.0]),
        reference_spread=report.spread([20.0, 20.0, 25.0]),
        ratios=report.spread([1.05, 1.1, 1.2]),
    )
    # 1.1 is the median of the three ratios, not 22 / 20 of the medians
    assert repeated.ratio == 1.1
    line = report.table([repeated]).splitlines()[2]
    assert "22 s (21–30)" in line and "20 s (20–25) (plain client)" in line and "1.10× (1.05–1.20×)" in line


def test_a_repeat_that_measured_nothing_is_left_out_of_the_spread() -> None:
    assert report.spread([3.0, None, 1.0, math.nan]) == report.Spread((3.0, 1.0))
    assert report.spread([None]).median is None


def test_a_figure_that_could_not_be_measured_prints_null_and_why() -> None:
    line = report.table([row(None, 16.0, why_missing="Kueue did not start")]).splitlines()[2]
    assert "null (Kueue did not start)" in line


def test_a_run_cut_short_is_a_lower_bound_and_cannot_meet_an_upper_limit() -> None:
    cut = row(600.0, 100.0, goal=report.Goal(on="ratio", limit=1.25), at_least=True)
    line = report.table([cut]).splitlines()[2]
    assert "≥ 600 s" in line and "≥ 6×" in line and line.endswith("MISSED")
    under = row(100.0, 100.0, goal=report.Goal(on="ratio", limit=1.25), at_least=True)
    assert not report.table([under]).splitlines()[2].endswith("ok")


def test_summary_lines_are_one_name_value_pair_per_line_in_order_with_null_for_missing() -> None:
    text = report.summary_lines({"convergence_ratio_n50": 1.2345678, "operator_rss_mib_1000": None, "split": 0.0})
    assert text.splitlines() == ["convergence_ratio_n50: 1.235", "operator_rss_mib_1000: null", "split: 0"]


def test_the_document_carries_command_machine_table_notes_and_summary() -> None:
    doc = report.document(
        [row(30.0, 20.0)],
        {"convergence_ratio_n50": 1.5},
        command="make bench",
        machine={"nproc": "2"},
        notes=["a note"],
    )
    assert "```\nmake bench\n```" in doc
    assert "- nproc: 2" in doc
    assert "| 1 convergence | N=50: create → Ready | 30 s | 20 s (plain client) | 1.50× |  |  |" in doc
    assert "- a note" in doc
    assert doc.rstrip().endswith("convergence_ratio_n50: 1.5\n```")


def test_the_hottest_frames_count_a_frame_once_per_stack_and_name_it_by_module() -> None:
    collapsed = "\n".join(
        [
            "main (pkg/cli.py:10);reconcile (pkg/main.py:20);parse (pkg/inventory.py:30) 3",
            "main (pkg/cli.py:10);reconcile (pkg/main.py:21);reconcile (pkg/main.py:22) 1",
        ]
    )
    hottest = profiler.hottest(collapsed, top=3)
    assert hottest == [
        ("main (cli.py)", 1.0, 0.0),
        ("reconcile (main.py)", 1.0, 0.25),
        ("parse (inventory.py)", 0.75, 0.75),
    ]


def test_the_summary_names_every_required_figure_first_and_null_for_one_not_measured() -> None:
    measured = {"split_groups_pod_affinity_preferred": 12, "convergence_ratio_n20": 1.1, "convergence_ratio_n50": 1.4}
    summary = report.summary(["convergence_ratio_n50", "convergence_ratio_n200"], measured)
    assert list(summary.items()) == [
        ("convergence_ratio_n50", 1.4),
        ("convergence_ratio_n200", None),
        ("split_groups_pod_affinity_preferred", 12),
        ("convergence_ratio_n20", 1.1),
    ]
    assert report.summary_lines(summary).splitlines()[1] == "convergence_ratio_n200: null"


def test_a_null_in_the_summary_is_explained_by_what_happened_to_its_figure() -> None:
    import run

    sizes = run.dataclasses.replace(run.FULL, convergence=(50, 200))
    assert run.why_null("convergence_ratio_n1000", {1, 2, 3, 4}, sizes, set()) == (
        "N=1000 is not among this run's sizes (50, 200)"
    )
    assert run.why_null("idle_cpu_cores_1000", {1, 3}, sizes, set()) == "figure 2 was not run (--only)"
    assert run.why_null("stranded_gpus_kueue_tas", {3}, sizes, {3}) == "figure 3 failed (its note says how)"
    assert run.why_null("idle_reads_per_minute_1000", {2}, run.QUICK, set()) == (
        "this run's steady state has 200 servings, not 1000"
    )


def test_every_required_summary_name_belongs_to_a_figure() -> None:
    import run

    assert [n for n in run.REQUIRED if run.why_null(n, set(), run.FULL, set()) == "no figure measures it"] == []


def test_a_probe_summary_gives_each_figure_its_median_and_spread_and_leaves_out_one_never_measured() -> None:
    runs = [
        {"seconds": 92.0, "cpu_seconds": 20.0, "passes": None},
        {"seconds": 94.0, "cpu_seconds": 24.0, "passes": None},
        {"seconds": 93.0, "cpu_seconds": 22.0, "passes": None},
    ]

    assert sidebyside.summary(runs) == {"seconds": "93 (92–94)", "cpu_seconds": "22 (20–24)"}


def test_a_py_spy_profile_of_cpu_samples_only_the_thread_holding_the_gil(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []

    class Popen:
        def __init__(self, command: list[str], **_: object) -> None:
            started.append(command)

    monkeypatch.setattr(profiler, "available", lambda: "py-spy")
    monkeypatch.setattr(profiler.subprocess, "Popen", Popen)
    profiler.PySpy(1234, tmp_path / "out.txt", gil=True)
    profiler.PySpy(1234, tmp_path / "out.txt")

    assert "--gil" in started[0] and "--gil" not in started[1]


def test_the_full_runs_idle_window_holds_one_re_check_and_one_heartbeat_of_every_kwok_node() -> None:
    import run
    import steadystate
    from localcluster import components

    assert run.FULL.steady_window is None  # the full run measures idle over steadystate.idle_window()
    assert steadystate.idle_window() > components.node_heartbeat_seconds() >= 600
    assert steadystate.idle_window() > steadystate.RECHECK_SECONDS


def test_the_bench_fleet_has_a_tray_for_every_single_tray_serving_and_two_spare_in_whole_nvl72_racks() -> None:
    import benchcluster
    import run

    assert benchcluster.TRAYS_PER_RACK == 18  # GB200 NVL72: 18 compute trays in one NVLink domain
    assert run.FULL.racks * benchcluster.TRAYS_PER_RACK >= run.FULL.steady_servings + 2
    assert (run.FULL.racks - 1) * benchcluster.TRAYS_PER_RACK < run.FULL.steady_servings + 2
    assert benchcluster.fleet_racks(10) == benchcluster.MIN_RACKS
