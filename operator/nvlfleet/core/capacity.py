"""Free nodes per NVLink domain while a plan is made: each domain's running totals, and an index of domains by
the free nodes one requirement can still claim, so best fit is a binary search instead of a scan.

Pure core, inside the plan step (inventory + spec → validate → **plan** → render → apply): ``planner`` owns the
rules and mutates the totals (``Slot``) as it places and removes groups, logging each slot it changes; ``Fits``
replays that log before it answers. Nothing here survives a plan.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

UNKNOWN = -1  # requirement class of a held placement: unknown, so it competes for any free node


class Slot:
    """One domain's running totals; mutated in place so planning never copies."""

    __slots__ = ("free", "free_for", "key", "label", "limit", "need", "needs", "nodes", "released", "schedulable")

    def __init__(self, key: str, label: str) -> None:
        self.key = key
        self.label = label
        self.nodes = 0
        self.schedulable = 0
        self.free = 0  # schedulable nodes without a GPU pod
        self.free_for: dict[int, int] = {}  # free nodes each requirement class may use
        self.released = 0  # nodes held by pods of groups the plan removes (free once they are gone)
        self.needs: dict[int, int] = {}  # nodes placed groups still need from the free ones, per class
        self.need = 0  # sum of needs
        self.limit = 0  # the most nodes placed groups may need here: free nodes of the most restricted class

    def update_limit(self) -> None:
        limit = self.free
        for cls, need in self.needs.items():
            if need > 0 and cls != UNKNOWN:
                limit = min(limit, self.free_for.get(cls, 0))
        self.limit = limit


class Fits:
    """One requirement class's capacity in every slot of its scope, as ``(capacity, key)`` in order, so the
    tightest slot that still fits a size is one binary search. Kept current by replaying the book's log of
    changed slots (the planner's ``changed``) before each search: a change costs the book one append, and the index
    only the classes that search again pay for it."""

    __slots__ = ("caps", "cls", "order", "seen", "slots")

    def __init__(self, slots: Sequence[Slot], cls: int, seen: int) -> None:
        self.cls = cls
        self.slots = {slot.key: slot for slot in slots}
        self.caps = {slot.key: claimable(slot, cls) for slot in slots}
        self.order = sorted((cap, key) for key, cap in self.caps.items())
        self.seen = seen  # how much of the change log is already in ``order``

    def catch_up(self, changed: Sequence[Slot]) -> None:
        """Take in the slots changed since the last call (``changed`` is the book's whole log)."""
        for slot in changed[self.seen :]:
            old = self.caps.get(slot.key)
            if old is None or self.slots[slot.key] is not slot:  # not a slot of this scope
                continue
            new = claimable(slot, self.cls)
            if new != old:
                del self.order[bisect.bisect_left(self.order, (old, slot.key))]
                bisect.insort(self.order, (new, slot.key))
                self.caps[slot.key] = new
        self.seen = len(changed)

    def smallest(self, size: int) -> tuple[int, str] | None:
        """The slot with the least capacity of at least ``size`` (the smaller key on ties), as (capacity, key)."""
        at = bisect.bisect_left(self.order, (size,))  # (size,) sorts before every (size, key)
        return self.order[at] if at < len(self.order) else None

    def largest(self) -> tuple[int, str] | None:
        """The slot with the most capacity, if any has some (the smaller key on ties), as (capacity, key)."""
        if not self.order or self.order[-1][0] <= 0:
            return None
        return self.order[bisect.bisect_left(self.order, (self.order[-1][0],))]

    def keys_from(self, size: int) -> Iterator[str]:
        """The keys of the slots with capacity at least ``size``, least capacity first (then the smaller key),
        as they were at the last ``catch_up``."""
        for at in range(bisect.bisect_left(self.order, (size,)), len(self.order)):
            yield self.order[at][1]


def claimable(slot: Slot, cls: int) -> int:
    """Free nodes in ``slot`` that new groups of class ``cls`` can still claim (negative when short)."""
    return min(slot.limit, slot.free_for.get(cls, 0)) - slot.need


def short(slot: Slot) -> int:
    """Nodes the groups placed in ``slot`` need but the domain cannot give."""
    return max(0, slot.need - slot.limit)
