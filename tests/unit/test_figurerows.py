"""What the benchmark's measurements become in its table and summary (bench/figurerows.py)."""

from __future__ import annotations

import convergence
import figurerows


def run(seconds: float, **fields: object) -> convergence.Run:
    return convergence.Run(seconds=seconds, writes=fields.pop("writes", 2.0), **fields)  # type: ignore[arg-type]


def repeat(nvlfleet: float, concurrent: float, serial: float | None) -> convergence.Repeat:
    return convergence.Repeat(
        nvlfleet=run(nvlfleet, pods_seconds=nvlfleet - 1),
        concurrent=run(concurrent, applied_seconds=1.0),
        serial=None if serial is None else run(serial, applied_seconds=4.0),
        load=2.0,
    )


def test_the_convergence_ratio_is_the_median_of_each_repeat_against_its_own_concurrent_reference() -> None:
    out = figurerows.convergence_rows(200, 900, [repeat(110, 100, 120), repeat(60, 50, 70), repeat(105, 100, 130)])
    # per repeat 1.10, 1.20, 1.05: the median is 1.10 (the ratio of the medians, 105 / 100, would say 1.05)
    assert out.summary["convergence_ratio_n200"] == 1.1
    assert out.summary["convergence_overhead_seconds_n200"] == 10  # overheads 10, 10, 5
    assert out.summary["convergence_ratio_serial_n200"] == round(60 / 70, 3)  # 0.917, 0.857, 0.808


def test_a_serial_reference_run_in_one_repeat_only_is_compared_with_that_repeat_and_says_one_run() -> None:
    out = figurerows.convergence_rows(200, 900, [repeat(110, 100, 120), repeat(60, 50, None), repeat(105, 100, None)])
    serial = next(r for r in out.rows if "serial reference" in r.measure)
    assert serial.measure == "N=200: create → every serving Ready, serial reference (1 run)"
    assert (serial.value, serial.reference) == (110, 120)  # the first repeat's nvlfleet run against its serial one
    assert out.summary["convergence_ratio_serial_n200"] == round(110 / 120, 3)
    assert out.summary["convergence_ratio_n200"] == 1.1  # the concurrent reference still counts every repeat
    assert "median of 3" in out.rows[0].measure


def test_a_convergence_repeat_cut_short_makes_its_figures_lower_bounds_and_says_so() -> None:
    cut = convergence.Repeat(run(900, timed_out=True, ready=150), run(100), run(120), load=5.0)
    out = figurerows.convergence_rows(200, 900, [cut])
    assert out.rows[0].at_least
    assert "150 of 200" in out.notes[0]


def test_the_cpu_of_every_process_of_a_run_is_compared_with_the_reference_s_and_the_operator_s_share_shown() -> None:
    def costed(nvlfleet_cpu: float, operator_cpu: float, reference_cpu: float) -> convergence.Repeat:
        return convergence.Repeat(
            nvlfleet=run(500, machine_cpu_seconds=nvlfleet_cpu, cpu_seconds=operator_cpu),
            concurrent=run(450, machine_cpu_seconds=reference_cpu),
            serial=None,
            load=2.0,
        )

    out = figurerows.convergence_rows(1000, 2400, [costed(1050, 175, 900), costed(1000, 150, 1000)])
    cpu = next(r for r in out.rows if "CPU of every process" in r.measure)
    assert (cpu.value, cpu.reference) == (1025, 950)  # medians of two
    assert out.summary["convergence_cpu_ratio_n1000"] == round((1050 / 900 + 1.0) / 2, 3)
    own = next(r for r in out.rows if "operator's own" in r.measure)
    assert own.value == 162.5


def test_runs_without_the_cpu_of_their_processes_print_no_cpu_row() -> None:
    out = figurerows.convergence_rows(200, 900, [repeat(110, 100, 120)])
    assert not any("CPU" in r.measure for r in out.rows)
    assert "convergence_cpu_ratio_n200" not in out.summary


def scheduler_result(rows: dict[str, dict[str, int]], why: dict[str, str] | None = None) -> dict[str, object]:
    return {"racks": 2, "groups": 12, "rows": rows, "why": why or {}, "load": 1.5}


ROW = {"groups": 12, "running": 12, "split": 0, "waiting": 0, "pending": 0, "gpus_serving": 160, "gpus_stranded": 4}


def test_the_scheduler_rows_set_todays_placement_names_and_say_they_were_measured_on_the_scheduler() -> None:
    engines = ("nvlfleet", "lws-exclusive-topology", "pod-affinity", "kueue-tas")
    out = figurerows.placement_scheduler_rows(scheduler_result({e: dict(ROW) for e in engines}))
    assert out.summary["placement_measured_on_scheduler"] == 1
    assert out.summary["stranded_gpus_kueue_tas"] == 4 and out.summary["split_groups_kueue_tas"] == 0
    assert all(r.load == 1.5 for r in out.rows)


def test_an_engine_the_scheduler_run_could_not_measure_is_null_with_its_reason() -> None:
    why = {"kueue-tas": "Kueue did not start"}
    out = figurerows.placement_scheduler_rows(scheduler_result({"nvlfleet": dict(ROW)}, why))
    assert out.summary["stranded_gpus_kueue_tas"] is None
    assert any("Kueue did not start" in n for n in out.notes)


def test_without_nvlfleet_on_the_scheduler_the_model_keeps_todays_names() -> None:
    out = figurerows.placement_scheduler_rows(scheduler_result({}, {"nvlfleet": "operator exited"}))
    assert "placement_measured_on_scheduler" not in out.summary  # the model's 0 stands
    assert all(r.value is None and "operator exited" in r.why_missing for r in out.rows)
