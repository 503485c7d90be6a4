"""Where a serving's groups already are (``Placement``), and what the placements of servings not being planned
add to each domain, summed once for many plans (``Held``, ``held``).

Pure core, beside ``planner`` (inventory + spec → validate → **plan** → render): ``demands`` and
``leaderworkersets`` read placements from a serving's status and from the fleet's LeaderWorkerSets, the
reconciler sums the fleet's once per fleet view (``FleetView.summed``) and ``planner.plan`` reads them. A pass
of one serving on a fleet of a thousand plans against the other 999: with their sums it costs what its own
serving holds, not what the fleet holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from nvlfleet.core import inventory

_K = TypeVar("_K")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Groups of one serving role already assigned to domains: {domain key: groups}."""

    serving: inventory.ServingKey
    role: str
    nodes_per_group: int
    groups: Mapping[str, int]
    owner: inventory.RoleKey = dataclasses.field(init=False, repr=False, compare=False)  # as ``Demand.owner``

    def __post_init__(self) -> None:
        object.__setattr__(self, "owner", inventory.RoleKey(self.serving, self.role))
        if self.nodes_per_group < 1 or any(g < 0 for g in self.groups.values()):
            raise ValueError(f"{self.owner}: nodes_per_group must be >= 1 and group counts >= 0")


@dataclasses.dataclass(frozen=True)
class Held:
    """What the placements of servings not being planned add to each domain, summed (``held``): a held
    placement's groups only ever count as nodes still needed (those its pods do not hold yet) and as nodes
    released (held by pods beyond its groups), and their sums are all a plan reads of them. A pass of one
    serving on a fleet of a thousand plans against the other 999; summed once per fleet view, each plan costs
    what its own serving holds, not what the fleet holds (``without`` takes that serving's own out)."""

    inv: inventory.Inventory
    need: Mapping[str, int]  # per domain key: nodes the placements' groups still need from the free ones
    released: Mapping[str, int]  # per domain key: nodes their pods hold beyond their groups
    placed: Mapping[str, int]  # per domain key: how many of the placements have groups there
    scopes: Mapping[inventory.Scope, int]  # how many placements are in each scope
    owners: frozenset[inventory.RoleKey]

    def without(self, placements: Iterable[Placement]) -> Held:
        """These sums less ``placements``' (which must be among those summed)."""
        mine = held(self.inv, placements)
        if not mine.owners <= self.owners:
            raise ValueError(f"{sorted(map(str, mine.owners - self.owners))} are not among the held placements")
        return Held(
            self.inv,
            _less(self.need, mine.need),
            _less(self.released, mine.released),
            _less(self.placed, mine.placed),
            _less(self.scopes, mine.scopes),
            self.owners - mine.owners,
        )

    def moved(self, inv: inventory.Inventory, before: Iterable[Placement], after: Iterable[Placement]) -> Held:
        """These sums on ``inv`` with ``before`` (among those summed, as this inventory counted them) taken out and
        ``after`` (counted on ``inv``) put in: the sums of the next fleet view, when only those changed. ``inv``
        must have the same domains as this inventory, and hold the same as it for every other placement's role."""
        gone, came = held(self.inv, before), held(inv, after)
        if not gone.owners <= self.owners:
            raise ValueError(f"{sorted(map(str, gone.owners - self.owners))} are not among the held placements")
        kept = self.owners - gone.owners
        if kept & came.owners:
            raise ValueError(f"{sorted(map(str, kept & came.owners))} are placed twice")
        return Held(
            inv,
            _plus(_less(self.need, gone.need), came.need),
            _plus(_less(self.released, gone.released), came.released),
            _plus(_less(self.placed, gone.placed), came.placed),
            _plus(_less(self.scopes, gone.scopes), came.scopes),
            kept | came.owners,
        )


def held(inv: inventory.Inventory, placements: Iterable[Placement]) -> Held:
    """The sums ``plan(..., others=)`` reads of ``placements``, as ``_Book.open`` counts a held placement.
    Raises ValueError when a role is placed twice."""
    placements = list(placements)
    check_unique([p.owner for p in placements], "placed")
    members = {scope: frozenset(d.key for d in inv.domains(scope)) for scope in inventory.SCOPES}
    tallies = {scope: inv.tally(scope).held for scope in members}
    need: dict[str, int] = {}
    released: dict[str, int] = {}
    placed: dict[str, int] = {}
    scopes: dict[inventory.Scope, int] = {}
    for p in placements:
        scope = scope_of(p.groups, members)
        scopes[scope] = scopes.get(scope, 0) + 1
        bound = tallies[scope].get(p.owner, {})
        for domain in {*bound, *p.groups}:
            nodes, pods = p.nodes_per_group * p.groups.get(domain, 0), bound.get(domain, 0)
            if nodes > pods:
                need[domain] = need.get(domain, 0) + nodes - pods
            elif pods > nodes:
                released[domain] = released.get(domain, 0) + pods - nodes
            if p.groups.get(domain, 0):
                placed[domain] = placed.get(domain, 0) + 1
    return Held(inv, need, released, placed, scopes, frozenset(p.owner for p in placements))


def _less(a: Mapping[_K, int], b: Mapping[_K, int]) -> dict[_K, int]:
    out = dict(a)
    for key, value in b.items():
        left = out.get(key, 0) - value
        if left:
            out[key] = left
        else:
            out.pop(key, None)
    return out


def _plus(a: Mapping[_K, int], b: Mapping[_K, int]) -> dict[_K, int]:
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0) + value
    return out


def check_unique(owners: Sequence[inventory.RoleKey], what: str) -> None:
    seen: set[inventory.RoleKey] = set()
    for owner in owners:
        if owner in seen:
            raise ValueError(f"{owner} is {what} twice")
        seen.add(owner)


def scope_of(groups: Mapping[str, int], members: Mapping[inventory.Scope, frozenset[str]]) -> inventory.Scope:
    """The scope of a held placement, from its domain keys (node keys are host names, not clique ids)."""
    node_keys = members.get("node", frozenset())
    return "node" if groups and node_keys.issuperset(groups) else "clique"
