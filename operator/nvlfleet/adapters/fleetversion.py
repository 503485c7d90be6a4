"""The version of what a fleet view reads: it moves when a node, a GPU pod or an nvlfleet LeaderWorkerSet changes
in a way placement can see, not on every watch event.

Adapter, beside the watch caches (``caches``), at the *read* step of the data flow: ``Operator._cached`` computes a
``reconciler.FleetView`` (the inventory and every serving's held groups: linear in the fleet) once per version and
shares it between passes, and a serving waiting for room passes again when the version moves (``passinputs``).
Most watch events change nothing a view reads: the LeaderWorkerSet controller rewrites a set's status as its pods
come up, kwok a pod's as it starts, the kubelet a node's heartbeat. Moving the version on each made the view's
cost once per pass again while a fleet converged or an operator started (a quarter of the CPU of a start-up on
1,000 servings, bench figure 2 with ``--profile``). So each object's summary, the part a view reads
(``caches.node_summary``, ``caches.lws_summary``, the parsed ``GpuPod``), is kept by name, and the version moves
only when a summary appears, changes or goes. ``Views`` files the views under it, and says when an older one
still serves a pass.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Hashable

from nvlfleet.core import reconciler


class FleetVersion:
    """A counter of placement-relevant changes, with the last summary of each object that counts."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self.value = 0
        self._summaries: dict[tuple[str, str], Hashable] = {}

    def bump(self) -> None:
        """Something a view reads changed without a summary to compare (this process applied a LeaderWorkerSet, a
        serving appeared or went)."""
        self.value = next(self._counter)

    def saw(self, kind: str, name: str, summary: Hashable | None) -> Hashable | None:
        """An object's summary as its watch event carries it (None: gone, or nothing a view reads, such as an
        unbound pod); moves the version when it differs from the last one. Returns that last one."""
        key = (kind, name)
        before = self._summaries.pop(key, None)
        if summary is not None:
            self._summaries[key] = summary
        if before != summary:
            self.bump()
        return before


class Views:
    """The fleet view passes share, per domain label, with the version it was built from and when.

    While a fleet rolls out, what a view reads changes with nearly every pass (one pod bound anywhere moves the
    version), and a view is linear in the fleet: at 1,000 servings a pass that builds one takes 15 ms of CPU, one
    handed a view 2 ms (``bench/reconcile_bench.py``). So unless a pass asks for a ``fresh`` one, a view younger
    than ``max_age`` serves it though the version moved since. The operator asks for a fresh view where a decision
    places groups (made again under its fleet lock), and a serving waiting for room always places some; any other
    pass reads its own children and pods as they are now, and the view only tells it about the racks around its
    placed groups. With ``max_age`` under the nudge debounce, such a pass misses no change that asked for it: a
    watch event nudges a pass a debounce later, after the view that pass reads was built.
    """

    def __init__(self, max_age: float) -> None:
        self._max_age = max_age
        self._filed: dict[str, tuple[int, reconciler.FleetView, float]] = {}

    def view(
        self,
        label: str,
        version: int,
        build: Callable[[reconciler.FleetView | None], reconciler.FleetView],
        *,
        fresh: bool,
    ) -> reconciler.FleetView:
        """The view of ``label`` for a pass that read the caches at ``version`` (``build`` makes one of them from
        the view filed before, if any: ``reconciler.fleet_view``'s ``base``)."""
        filed = self._filed.get(label)
        if filed is None or (filed[0] != version and (fresh or time.monotonic() - filed[2] >= self._max_age)):
            filed = self._filed[label] = (version, build(filed[1] if filed else None), time.monotonic())
        return filed[1]
