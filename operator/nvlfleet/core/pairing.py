"""Which prefill groups feed which decode group: the P/D units the planner places whole, in one NVLink domain.

Pure core, inside the plan step (inventory + spec → validate → **plan** → render → apply); ``planner`` calls it
and owns the capacity bookkeeping, this module only does the arithmetic of units (``shortfall`` words what
cannot be done).

A serving with prefill and decode groups hands each request's KV cache from a prefill engine to a decode engine;
over NVLink (one ComputeDomain per serving and domain, see ``render``) only inside one NVLink domain. So the
groups are placed in **units**: the role with fewer groups is the *anchor*, the other is *fed* to it, and every
anchor group gets its share of the fed groups in its own domain, as even as whole groups allow (the spec's
prefill:decode ratio). 4 prefill groups and 2 decode groups are 2 units of 1 decode + 2 prefill groups; 3
prefill and 2 decode groups are units of 1 + 2 and 1 + 1; 1 prefill and 3 decode groups are 1 unit of 1 prefill
+ 3 decode groups. A unit is never split; running groups are never moved, so a serving that grows first tops up
the domains its anchors are in (``Shares``), and only then places new units.

Pairing applies when both roles of one serving are demanded with groups, share their node requirements and
strategy, and the GPU has multi-node NVLink (clique scope): where NVLink stops at the node a KV transfer leaves
the node whatever the planner does, so the roles are placed on their own as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

PREFILL, DECODE = "prefill", "decode"  # the role names of models.RoleName, as the planner's demands spell them


@dataclasses.dataclass(frozen=True)
class Ratio:
    """How many fed groups each anchor group gets: ``per`` each, one more for the first ``extra`` anchors."""

    anchor_role: str
    fed_role: str
    anchors: int
    fed: int

    @property
    def per(self) -> int:
        return self.fed // self.anchors

    @property
    def extra(self) -> int:
        return self.fed % self.anchors


def ratio(prefill_groups: int, decode_groups: int) -> Ratio | None:
    """The units of a serving with these group counts; None when one role has none (nothing to pair)."""
    if prefill_groups < 1 or decode_groups < 1:
        return None
    if prefill_groups >= decode_groups:
        return Ratio(DECODE, PREFILL, decode_groups, prefill_groups)
    return Ratio(PREFILL, DECODE, prefill_groups, decode_groups)


@dataclasses.dataclass(frozen=True)
class Shares:
    """What the anchors already placed are owed: fed groups to add next to them (``deficit`` per domain), and
    the fed groups left for new units (``fed_for_new``). Orphans, fed groups running where no anchor is owed
    them, reduce both: they are kept, never moved, and the fed role never exceeds what the spec asks for."""

    deficit: Mapping[str, int]
    extra_for_new: int  # how many of the new units get one fed group more than ``per``
    fed_for_new: int


def shares(r: Ratio, anchors: Mapping[str, int], fed: Mapping[str, int]) -> Shares:
    """Split the fed groups between the anchors placed (per domain) and the anchors still to place.

    The extra fed groups go first to domains that already hold them (nothing to add there), then to new units
    (placed whole, so they cannot be left short), last to the placed anchors' domains in key order. Linear in
    the domains the serving holds."""
    placed_anchors = sum(anchors.values())
    new_anchors = max(0, r.anchors - placed_anchors)
    owed = {d: n * r.per for d, n in anchors.items()}
    extra = r.extra
    for d in sorted(anchors):  # credit fed groups already there with the extras first
        take = min(anchors[d], max(0, fed.get(d, 0) - owed[d]), extra)
        owed[d] += take
        extra -= take
    extra_for_new = min(extra, new_anchors)
    extra -= extra_for_new
    for d in sorted(anchors):
        if extra <= 0:
            break
        room = anchors[d] * (r.per + 1) - owed[d]
        take = min(room, extra)
        owed[d] += take
        extra -= take
    # Fed groups running where no anchor is owed them are kept (never moved), so fewer are left to add: the
    # domains in key order get what is left.
    left = r.fed - sum(fed.values())
    deficit: dict[str, int] = {}
    for d in sorted(owed):
        want = min(owed[d] - fed.get(d, 0), left)
        if want > 0:
            deficit[d] = want
            left -= want
    return Shares(deficit, extra_for_new, max(0, left))


def new_units(r: Ratio, new_anchors: int, s: Shares) -> list[tuple[int, int]]:
    """The new units as ``(count, fed groups per unit)``, the largest first; orphaned fed groups elsewhere
    leave the last units short, so the fed role never exceeds what the spec asks for."""
    sizes = [r.per + 1] * s.extra_for_new + [r.per] * (new_anchors - s.extra_for_new)
    surplus = sum(sizes) - s.fed_for_new
    i = len(sizes) - 1
    while surplus > 0 and i >= 0:
        cut = min(surplus, sizes[i])
        sizes[i] -= cut
        surplus -= cut
        i -= 1
    batches: list[tuple[int, int]] = []
    for size in sizes:
        if batches and batches[-1][1] == size:
            batches[-1] = (batches[-1][0] + 1, size)
        else:
            batches.append((1, size))
    return batches
