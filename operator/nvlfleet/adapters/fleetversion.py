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
only when a summary appears, changes or goes.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable


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
