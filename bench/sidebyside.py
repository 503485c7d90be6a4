"""Two or more source trees of the operator run one after the other on a kept benchmark cluster, repeated: what
the side-by-side probes (``restartprobe``, ``convergenceprobe``) share.

A probe gives a function that runs one tree once and returns its figures; ``alternate`` runs every tree once per
repeat, in the same order, so a drift of the machine's load spreads over all of them, and ``report`` prints each
figure's median and min–max per tree.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
from collections.abc import Callable, Sequence
from typing import Any

Figures = dict[str, Any]


def check_trees(parser: argparse.ArgumentParser, trees: Sequence[pathlib.Path]) -> None:
    """Refuse (``parser.error``) a path that is not an ``operator/`` directory."""
    for tree in trees:
        if not (tree / "nvlfleet" / "__init__.py").is_file():
            parser.error(f"{tree} is not an operator/ directory (no nvlfleet/__init__.py in it)")


def alternate(
    trees: Sequence[pathlib.Path],
    repeats: int,
    once: Callable[[pathlib.Path, str], Figures],
    say: Callable[[str], object],
) -> dict[pathlib.Path, list[Figures]]:
    """``once(tree, tag)`` for every tree in each repeat (``tag``: ``<repeat>-<tree index>``), said as it lands."""
    runs: dict[pathlib.Path, list[Figures]] = {tree: [] for tree in trees}
    for repeat in range(repeats):
        for i, tree in enumerate(trees):
            found = once(tree, f"{repeat}-{i}")
            shown = ", ".join(f"{k} {v:.4g}" for k, v in found.items() if isinstance(v, float))
            say(f"repeat {repeat + 1}, {tree}: {shown}")
            runs[tree].append(found)
    return runs


def summary(runs: list[Figures], keys: Sequence[str] | None = None) -> dict[str, str]:
    """Each figure's (of ``keys``, else every figure of the first run) median and min–max over the runs; a figure
    no run measured is left out."""
    out = {}
    for key in keys if keys is not None else list(runs[0]):
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            out[key] = f"{statistics.median(values):.4g} ({min(values):.4g}–{max(values):.4g})"
    return out


def report(runs: dict[pathlib.Path, list[Figures]], keys: Sequence[str] | None = None) -> None:
    for tree, found in runs.items():
        print(f"\n{tree} (median of {len(found)}, min–max)")
        for key, text in summary(found, keys).items():
            print(f"  {key:24} {text}")
