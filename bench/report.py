"""The benchmark table: rows measured side by side, their ratios, goals, and the documents made from them.

Pure (no clock, no I/O): ``bench/run.py`` measures, this module only formats. One ``Row`` per measured
quantity: nvlfleet's value next to the reference measured in the same run (a plain client, a baseline
placement engine, the scrape interval), the ratio of the two, the goal it is held to, and the machine's 1-minute
load average when it was measured. A figure measured several times shows its median with the min–max beside it
(``Spread``); its ratio is then the median of the per-repeat ratios, each repeat paired with its own reference.
The machine-readable summary (one ``name: value`` line per figure) closes both the terminal output and
``docs/benchmarks.md``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Literal


@dataclasses.dataclass(frozen=True)
class Goal:
    """``on`` the ratio or the nvlfleet value, ``at most`` (or ``at least``) ``limit``."""

    on: Literal["ratio", "value"]
    limit: float
    at_most: bool = True

    def met(self, row: Row) -> bool | None:
        measured = row.ratio if self.on == "ratio" else row.value
        if measured is None:
            return None
        return measured <= self.limit if self.at_most else measured >= self.limit

    def text(self, unit: str) -> str:
        sign = "≤" if self.at_most else "≥"
        return f"{sign} {number(self.limit)}×" if self.on == "ratio" else f"{sign} {number(self.limit)} {unit}".strip()


@dataclasses.dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity: shown as the median with the min–max beside it."""

    values: tuple[float, ...]

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def text(self, unit: str = "") -> str:
        if len(self.values) < 2:
            return ""
        return f"({number(min(self.values))}–{number(max(self.values))}{unit})"


def spread(values: Sequence[float | None]) -> Spread:
    """The measured values among ``values`` (a repeat that measured nothing is left out)."""
    return Spread(tuple(v for v in values if v is not None and not math.isnan(v)))


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured quantity of one figure; ``reference`` was measured in the same run as ``value``."""

    figure: str
    measure: str
    unit: str
    value: float | None
    reference: float | None = None
    reference_label: str = ""
    goal: Goal | None = None
    at_least: bool = False  # the run was cut short: the value (and the ratio) is a lower bound
    load: float | None = None  # 1-minute load average when this was measured (median over repeats)
    # Repeated: the value and the reference are medians of these; the ratio is the median of ``ratios``.
    value_spread: Spread | None = None
    reference_spread: Spread | None = None
    ratios: Spread | None = None
    why_missing: str = ""  # what kept ``value`` from being measured, said instead of a number

    @property
    def ratio(self) -> float | None:
        if self.ratios is not None:
            return self.ratios.median
        return ratio(self.value, self.reference)

    @property
    def met(self) -> bool | None:
        return self.goal.met(self) if self.goal else None


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``; None when either is missing, or the reference is zero (no ratio exists)."""
    if value is None or reference is None or reference == 0 or math.isnan(value) or math.isnan(reference):
        return None
    return value / reference


def number(value: float | None) -> str:
    """Three significant digits, no exponent for the sizes a benchmark reports; ``—`` for no value."""
    if value is None or math.isnan(value):
        return "—"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    magnitude = abs(value)
    digits = 3 if magnitude < 1 else max(0, 3 - len(str(int(magnitude))))
    return f"{value:.{digits}f}"


_HEAD = ("figure", "measure", "nvlfleet", "reference", "ratio", "goal", "", "load")


def _with_spread(text: str, spread: Spread | None, unit: str = "") -> str:
    extra = spread.text(unit) if spread is not None else ""
    return f"{text} {extra}" if extra else text


def _cells(row: Row) -> tuple[str, ...]:
    unit = f" {row.unit}" if row.unit else ""
    bound = "≥ " if row.at_least else ""
    if row.value is None and row.why_missing:
        value = f"null ({row.why_missing})"
    else:
        value = _with_spread(bound + number(row.value) + (unit if row.value is not None else ""), row.value_spread)
    if row.reference is None:
        reference = row.reference_label or ""
    else:
        reference = _with_spread(f"{number(row.reference)}{unit}", row.reference_spread)
        reference += f" ({row.reference_label})" if row.reference_label else ""
    ratio_text = _with_spread(f"{bound}{number(row.ratio)}×", row.ratios, "×") if row.ratio is not None else ""
    goal = row.goal.text(row.unit) if row.goal else ""
    met = row.met
    if row.at_least and met and row.goal and row.goal.at_most:
        met = None  # a lower bound under an upper limit proves nothing
    mark = {True: "ok", False: "MISSED", None: ""}[met] if row.goal else ""
    load = f"{row.load:.2f}" if row.load is not None else ""
    return (row.figure, row.measure, value, reference, ratio_text, goal, mark, load)


def table(rows: Sequence[Row]) -> str:
    """A fixed-width text table for the terminal."""
    cells = [_HEAD, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_HEAD))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths).rstrip())
    return "\n".join(lines)


def markdown_table(rows: Sequence[Row]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(_HEAD), "|" + "---|" * len(_HEAD)]
    out += [line(_cells(r)) for r in rows]
    return "\n".join(out)


def summary(required: Sequence[str], measured: Mapping[str, float | None]) -> dict[str, float | None]:
    """The figures the issue names first, in its order, ``None`` for any this run did not measure (a figure that
    failed, or a ``--quick`` run whose names carry its smaller sizes); then every other measured figure."""
    return {**{name: measured.get(name) for name in required}, **measured}


def summary_lines(summary: Mapping[str, float | None]) -> str:
    """``name: value`` per line, in the given order; a figure that could not be measured says ``null``."""
    return "\n".join(f"{name}: {_plain(value)}" for name, value in summary.items())


def _plain(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, float) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def document(
    rows: Sequence[Row],
    summary: Mapping[str, float | None],
    *,
    command: str,
    machine: Mapping[str, str],
    notes: Sequence[str] = (),
) -> str:
    """docs/benchmarks.md: generated, so every number in it comes from the run it describes."""
    facts = "\n".join(f"- {key}: {value}" for key, value in machine.items())
    parts = [
        "# Benchmarks",
        "",
        "<!-- Generated by `make bench` (bench/run.py). Do not edit: rerun it. -->",
        "",
        "Each row puts nvlfleet next to a reference measured in the same run, on the same machine. That does not",
        "make a ratio immune to load: the operator is a CPU-bound Python process while the plain client's side is",
        "bound by the control plane, so a busy machine slows nvlfleet more (the load averages below say how busy",
        "this run's machine was; the last column is the 1-minute load average when each row was measured). A",
        "figure measured several times shows its median with the min–max in brackets. How each figure is measured",
        "is written in `bench/` (one module per figure, its docstring says what is timed and against what).",
        "",
        "Command:",
        "",
        "```",
        command,
        "```",
        "",
        "Machine:",
        "",
        facts,
        "",
        markdown_table(rows),
        "",
    ]
    if notes:
        parts += ["Notes from this run:", "", *(f"- {n}" for n in notes), ""]
    parts += ["Machine-readable summary:", "", "```", summary_lines(summary), "```", ""]
    return "\n".join(parts)
