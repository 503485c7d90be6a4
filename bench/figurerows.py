"""What each measured figure becomes in the benchmark table: its rows, its summary names and its notes.

Pure (no clock, no I/O), between the measuring modules (``convergence``, ``placement``, ``compare_placement``) and
``report``: ``bench/run.py`` measures, hands the results here and gathers the ``Out`` of each.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import compare_placement
import convergence
import placement
import report


@dataclasses.dataclass
class Out:
    rows: list[report.Row] = dataclasses.field(default_factory=list)
    summary: dict[str, float | None] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


def at_most(limit: float, on: str = "value") -> report.Goal:
    return report.Goal(on=on, limit=limit)  # type: ignore[arg-type]


def rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def convergence_rows(count: int, cap: float, repeats: list[convergence.Repeat]) -> Out:
    out = Out()
    f = "1 convergence"
    ops = [r.nvlfleet for r in repeats]
    cut = any(o.timed_out for o in ops)
    load = report.spread([r.load for r in repeats]).median
    conc = [r.concurrent for r in repeats]
    with_serial = [r for r in repeats if r.serial is not None]
    serial = [s for r in repeats if (s := r.serial) is not None]
    at_once = convergence.OPERATOR_CONCURRENCY
    n = f"N={count}"
    label = f"plain SSA client, {at_once} servings at once → pods Ready"

    def seconds(runs: list[Any], field: str = "seconds") -> report.Spread:
        return report.spread([getattr(r, field) for r in runs])

    def row(measure: str, value: report.Spread, reference: report.Spread | None = None, **kw: Any) -> None:
        out.rows.append(
            report.Row(
                f,
                f"{n}: {measure}",
                kw.pop("unit", "s"),
                value.median,
                reference.median if reference else None,
                kw.pop("label", ""),
                value_spread=value,
                reference_spread=reference,
                load=load,
                **kw,
            )
        )

    ratios = report.spread([r.ratio for r in repeats])
    serial_ratios = report.spread([report.ratio(r.nvlfleet.seconds, s.seconds) for r in repeats if (s := r.serial)])

    def times(runs: int) -> str:
        return "1 run" if runs == 1 else f"median of {runs}"

    row(
        f"create → every serving Ready ({times(len(repeats))})",
        seconds(ops),
        seconds(conc),
        label=label,
        ratios=ratios,
        goal=at_most(1.10, on="ratio"),
        at_least=cut,
    )
    row(
        "overhead: nvlfleet − concurrent reference",
        report.spread([r.overhead_seconds for r in repeats]),
        at_least=cut,
    )
    if with_serial:
        row(
            f"create → every serving Ready, serial reference ({times(len(with_serial))})",
            seconds([r.nvlfleet for r in with_serial]),
            seconds(serial),
            label="plain SSA client, one object at a time",
            ratios=serial_ratios,
            at_least=any(r.nvlfleet.timed_out for r in with_serial),
        )
    row(
        "create → every pod Ready",
        seconds(ops, "pods_seconds"),
        seconds(conc),
        label=label,
        ratios=report.spread([report.ratio(o.pods_seconds, c.seconds) for o, c in zip(ops, conc, strict=True)]),
    )
    row("reference apply loop alone (concurrent)", seconds(conc, "applied_seconds"))
    if with_serial:
        row(f"reference apply loop alone (serial, {times(len(with_serial))})", seconds(serial, "applied_seconds"))
    row(
        "writes to the API server",
        report.spread([o.writes for o in ops]),
        report.spread([c.writes for c in conc]),
        unit="",
        label="plain SSA client",
    )
    machine = [(o.machine_cpu_seconds, c.machine_cpu_seconds) for o, c in zip(ops, conc, strict=True)]
    if all(o is not None and c is not None for o, c in machine):
        cpu_ratios = report.spread([report.ratio(o, c) for o, c in machine])
        row(
            "CPU of every process of the run (control plane, bench, operator)",
            report.spread([o for o, _ in machine]),
            report.spread([c for _, c in machine]),
            unit="CPU s",
            label="control plane and bench, plain client",
            ratios=cpu_ratios,
        )
        row("of it the operator's own", seconds(ops, "cpu_seconds"), unit="CPU s")
        out.summary[f"convergence_cpu_ratio_n{count}"] = rounded(cpu_ratios.median, 3)
    out.summary[f"convergence_ratio_n{count}"] = rounded(ratios.median, 3)
    out.summary[f"convergence_ratio_serial_n{count}"] = rounded(serial_ratios.median, 3)
    overhead = report.spread([r.overhead_seconds for r in repeats]).median
    out.summary[f"convergence_overhead_seconds_n{count}"] = rounded(overhead, 2)
    for i, r in enumerate(repeats):
        if r.nvlfleet.timed_out:
            out.notes.append(
                f"convergence N={count}, repeat {i + 1}: nvlfleet had not made every serving Ready after the "
                f"{cap:.0f} s cap ({r.nvlfleet.ready} of {count}); its figures are lower bounds"
            )
    return out


def placement_model_rows(r: placement.Model, load: float) -> Out:
    """The offline model's rows (bench/baselines.py), labelled "model": the scheduler's rows are the headline."""
    out = Out()
    f = "3 placement (model)"
    what = f"model, {r.groups:,} groups / {r.racks} racks"
    for label, other in (("LWS exclusive, multi-tray groups", r.lws_exclusive), ("pod affinity", r.pod_affinity)):
        out.rows.append(
            report.Row(
                f,
                f"{what}: groups in one rack",
                "",
                r.nvlfleet.groups_placed,
                other.groups_placed,
                label,
                load=load,
            )
        )
    out.rows.append(
        report.Row(
            f,
            f"{what}: groups split across racks",
            "",
            r.nvlfleet.groups_split,
            r.pod_affinity_preferred.groups_split,
            "preferred pod affinity",
            at_most(0, on="value"),
            load=load,
        )
    )
    for label, other in (("LWS exclusive, multi-tray groups", r.lws_exclusive), ("pod affinity", r.pod_affinity)):
        out.rows.append(
            report.Row(f, f"{what}: GPUs stranded", "", r.nvlfleet.gpus_stranded, other.gpus_stranded, label, load=load)
        )
    # Today's names carry the model's figures until the scheduler's replace them (placement_scheduler).
    out.summary["placement_measured_on_scheduler"] = 0
    out.summary["stranded_gpus_nvlfleet"] = r.nvlfleet.gpus_stranded
    out.summary["stranded_gpus_lws_exclusive"] = r.lws_exclusive.gpus_stranded
    out.summary["stranded_gpus_pod_affinity"] = r.pod_affinity.gpus_stranded
    out.summary["split_groups_nvlfleet"] = r.nvlfleet.groups_split
    out.summary["split_groups_pod_affinity_preferred"] = r.pod_affinity_preferred.groups_split
    out.summary["model_stranded_gpus_nvlfleet"] = r.nvlfleet.gpus_stranded
    out.summary["model_stranded_gpus_lws_exclusive"] = r.lws_exclusive.gpus_stranded
    out.summary["model_stranded_gpus_pod_affinity"] = r.pod_affinity.gpus_stranded
    out.summary["model_split_groups_nvlfleet"] = r.nvlfleet.groups_split
    out.summary["model_split_groups_pod_affinity_preferred"] = r.pod_affinity_preferred.groups_split
    return out


def placement_scheduler_rows(result: dict[str, Any]) -> Out:
    out = Out()
    f = "3 placement"
    rows = result["rows"]
    mine = rows.get("nvlfleet")
    what = f"scheduler, {result['groups']} groups / {result['racks']} racks"
    for engine, label in compare_placement.LABELS.items():
        if engine == "nvlfleet":
            continue
        other = rows.get(engine)
        for key, measure, goal in (
            ("running", "groups Running in one rack", None),
            ("split", "groups split across racks", at_most(0, on="value")),
            ("gpus_stranded", "GPUs stranded", None),
            ("pending", "pods Pending", None),
        ):
            out.rows.append(
                report.Row(
                    f,
                    f"{what}: {measure}",
                    "",
                    mine[key] if mine else None,
                    other[key] if other else None,
                    label,
                    goal,
                    load=result["load"],
                    why_missing="" if mine else result["why"].get("nvlfleet", "not measured"),
                )
            )
    if not mine:
        return out  # today's names keep the model's figures, and placement_measured_on_scheduler says 0
    out.summary["placement_measured_on_scheduler"] = 1
    for name, engine, key in (
        ("stranded_gpus_nvlfleet", "nvlfleet", "gpus_stranded"),
        ("split_groups_nvlfleet", "nvlfleet", "split"),
        ("stranded_gpus_lws_exclusive", "lws-exclusive-topology", "gpus_stranded"),
        ("stranded_gpus_pod_affinity", "pod-affinity", "gpus_stranded"),
        ("split_groups_pod_affinity", "pod-affinity", "split"),
        ("stranded_gpus_kueue_tas", "kueue-tas", "gpus_stranded"),
        ("split_groups_kueue_tas", "kueue-tas", "split"),
    ):
        out.summary[name] = rows[engine][key] if engine in rows else None
    for engine, why in result["why"].items():
        out.notes.append(f"placement on the scheduler: {engine} not measured: {why}")

    # -- figure 4 -------------------------------------------------------------------------------------------
    return out
