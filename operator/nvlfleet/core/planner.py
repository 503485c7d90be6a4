"""Which NVLink domain each engine group goes to: whole groups, packed, never moved, never over-committed.

Pure core, between inventory and render (inventory + spec → validate → **plan** → render → apply). The one
entry point is ``plan(inv, demands, placements) -> Plan``; the module ``demands`` turns a parsed
DeepSeekServing into its inputs. The operator calls it every reconcile, ``nvlfleet plan`` and
``nvlfleet render --nodes`` call it once.

A **group** is one vLLM engine (one LeaderWorkerSet replica): ``nodes_per_group`` nodes, one pod per node. It
must sit inside one NVLink domain, or the expert all-to-all leaves the NVLink fabric.

Rules, in the order they apply:

1. **Existing groups stay where they are.** A role's current placement (from its status, or observed from its
   pods with ``inventory.observed_placements``) is kept, counted at the size the demand asks for (that is what
   the re-rendered LeaderWorkerSet runs). Placements of servings that are not being planned are held as given.
2. **Scale-down first, for every demand, before anything new is placed.** Groups are removed first from
   domains where the role's groups cannot all run (the domain lost nodes), then, under ``pack``, from the
   domain holding the fewest groups of the role (the least-filled one, so the role consolidates and whole
   LeaderWorkerSets go away), under ``spread`` from the one holding the most. Ties go to the smaller key.
3. **New groups, demand by demand** in (namespace, name, larger groups first, role) order, so a serving's plan
   never depends on servings sorted after it. Each group goes to the domain that fits it with the fewest free
   nodes left (best fit: big holes stay big for big groups). Under ``pack`` a domain that already holds a
   group of the same serving (either role) comes first. Under ``spread`` the domain with the fewest groups of
   the role, then of the serving, comes first (failure isolation; more groups than domains share domains
   evenly). Ties go to the smaller key.
   **Prefill and decode of one serving go in units** (``pairing``): each group of the role with fewer groups
   takes its share of the other role's groups into its own domain, as a whole (the KV-cache hand-off stays on
   NVLink). Rule 2 then takes both roles from one domain at a time (the serving's least-filled under ``pack``);
   rule 3 first adds the groups the running ones are owed in their domains, then places whole units as it
   places groups (their size is the unit's nodes; ``spread`` counts the anchor role's groups). A unit, or an
   owed group, that fits nowhere waits with the reason; it is never placed apart.
4. **Never over-commit.** Capacity is counted in nodes over the steady state the plan describes: a domain's
   free nodes minus the nodes that placed groups still need (groups of any serving that are placed but whose
   pods are not all bound yet, including groups planned a moment earlier in this same call). Nodes that a
   scale-down will release are *not* reused in the same plan: their pods still hold them, the next plan sees
   them free. When requirements differ (tolerations, node selector), the scheduler may give any node a
   serving accepts to that serving, so in a domain the nodes still needed may not exceed the free nodes of the
   *most restricted* requirement with needs there; that keeps every placed group schedulable whatever order
   the scheduler binds pods in.

A pod of a group that sits on a cordoned or NotReady node is expected to be replaced, so its group still
needs a free node. Everything is deterministic: same inputs, same plan; no clock, no randomness.

Cost: O(domains) to set up, then O(log domains + domains the serving holds) per best fit under ``pack`` and
O(log domains + groups + domains the serving holds) per demand under ``spread``, through a per-requirement
index of domains by the free nodes it can claim (``capacity.Fits``); a P/D serving counts as two or three
demands (its unit sizes). What needs every node (domains, their counts, free nodes per requirement) is computed
once per inventory and kept on it (``inventory.Inventory``): of the plans on one fleet view only the first pays
it. Held placements of servings not being planned cost one step each, unless they come summed (``held``, once
per fleet view): then a pass of one serving costs what that serving holds.
``cd bench && ../.venv/bin/python -c "import placement; print(placement.time_plan(1000, 500, 10))"`` times
10,000 groups on 1,000 racks (72,000 GPUs) as the row of ``bench/run.py --only 3`` does (``time_plan(100, 50,
30)``: 1,000 groups on 100 racks); run it for your own machine's figure, it varies by a factor of several with
the machine's load.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from nvlfleet.core import capacity, inventory, pairing, shortfall
from nvlfleet.core.placements import Held, Placement, check_unique, scope_of

Strategy = Literal["pack", "spread"]


@dataclasses.dataclass(frozen=True)
class Demand:
    """How many groups of one serving role are wanted, and what their pods need from a node."""

    serving: inventory.ServingKey
    role: str
    nodes_per_group: int
    groups: int
    requirements: inventory.NodeRequirements
    strategy: Strategy = "pack"
    # Built once: a plan asks every demand and placement for it several times, a thousand placements per pass.
    owner: inventory.RoleKey = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "owner", inventory.RoleKey(self.serving, self.role))
        if self.nodes_per_group < 1 or self.groups < 0:
            raise ValueError(f"{self.owner}: nodes_per_group must be >= 1 and groups >= 0")


@dataclasses.dataclass(frozen=True)
class RolePlan:
    """Where one demand's groups go; ``placed`` has no zero entries and is sorted by domain key."""

    serving: inventory.ServingKey
    role: str
    nodes_per_group: int
    groups: int  # wanted
    placed: Mapping[str, int]
    unplaced: int
    reasons: tuple[str, ...] = ()

    @property
    def placed_groups(self) -> int:
        return sum(self.placed.values())


@dataclasses.dataclass(frozen=True)
class DomainUsage:
    """One domain before and after the plan, counted in nodes.

    ``nodes``: every node of the domain. ``schedulable``: Ready, not cordoned, with GPUs. ``free_before``:
    schedulable nodes without a GPU pod now. ``free_after``: free nodes once every planned group runs and every
    removed group is gone. ``short``: nodes that groups placed here need but the domain cannot give (it lost
    nodes, or its label moved); those groups wait.
    """

    key: str
    label: str
    nodes: int
    schedulable: int
    free_before: int
    free_after: int
    short: int = 0


@dataclasses.dataclass(frozen=True)
class Plan:
    roles: tuple[RolePlan, ...]
    domains: tuple[DomainUsage, ...]

    @property
    def unplaced(self) -> int:
        return sum(r.unplaced for r in self.roles)

    def role(self, serving: inventory.ServingKey, role: str) -> RolePlan:
        for plan_ in self.roles:
            if plan_.serving == serving and plan_.role == role:
                return plan_
        raise KeyError(f"{serving} {role} was not planned")

    def domain(self, key: str) -> DomainUsage:
        """A domain by key; its ``label`` and ``key`` are the node-affinity term that pins pods to it."""
        for usage in self.domains:
            if usage.key == key:
                return usage
        raise KeyError(f"domain {key} is not in the plan")

    def placement(self, serving: inventory.ServingKey) -> dict[str, dict[str, int]]:
        """One serving's placement in the shape of ``status.placement``: {role: {domain: groups}}."""
        return {r.role: dict(r.placed) for r in self.roles if r.serving == serving}


def plan(
    inv: inventory.Inventory,
    demands: Sequence[Demand],
    placements: Iterable[Placement] = (),
    others: Held | None = None,
) -> Plan:
    """Place every demand's groups; see the module docstring for the rules.

    ``placements`` are the current placements of the demanded roles and of any other serving sharing the
    fleet; ``others`` (``held``) may stand for those of servings with no demand here, summed once for many plans
    on the same inventory: the plan is the same as with them among ``placements``. Raises ValueError when a role
    is demanded or placed twice.
    """
    placements = list(placements)
    check_unique([d.owner for d in demands], "demanded")
    current = {p.owner: p for p in placements}
    check_unique([p.owner for p in placements], "placed")
    book = _Book(inv)
    if others is not None:
        book.hold(others)
    ordered = sorted(demands, key=lambda d: (d.serving, -d.nodes_per_group, d.role))
    for d in ordered:
        existing = current.pop(d.owner, None)
        book.open(d.owner, d.nodes_per_group, d.requirements, existing.groups if existing else {})
    for p in sorted(current.values(), key=lambda p: p.owner):
        book.open(p.owner, p.nodes_per_group, None, p.groups)
    steps = _steps(ordered)
    for step in steps:
        if isinstance(step, Demand):
            book.scale_down(step)
        else:
            book.scale_down_pair(step)
    for step in steps:
        if isinstance(step, Demand):
            book.scale_up(step)
        else:
            book.scale_up_pair(step)
    return Plan(roles=tuple(book.role_plan(d) for d in ordered), domains=book.usage())


@dataclasses.dataclass(frozen=True)
class _Pair:
    """The prefill and decode demands of one serving, placed in units (``pairing``)."""

    anchor: Demand
    fed: Demand
    ratio: pairing.Ratio


def _steps(ordered: Sequence[Demand]) -> list[Demand | _Pair]:
    """The demands in plan order, the prefill and decode demands of a serving placed in units (``pairing`` says
    when) taken together where the first of them comes."""
    by_serving: dict[inventory.ServingKey, dict[str, Demand]] = {}
    for d in ordered:
        by_serving.setdefault(d.serving, {})[d.role] = d
    pairs: dict[inventory.ServingKey, _Pair] = {}
    for key, roles in by_serving.items():
        prefill, decode = roles.get(pairing.PREFILL), roles.get(pairing.DECODE)
        if prefill is None or decode is None or prefill.requirements != decode.requirements:
            continue
        r = pairing.ratio(prefill.groups, decode.groups)
        if r is None or prefill.strategy != decode.strategy or prefill.requirements.scope != "clique":
            continue
        anchor, fed = (decode, prefill) if r.anchor_role == pairing.DECODE else (prefill, decode)
        pairs[key] = _Pair(anchor, fed, r)
    steps: list[Demand | _Pair] = []
    taken: set[inventory.ServingKey] = set()
    for d in ordered:
        if d.serving not in pairs:
            steps.append(d)
        elif d.serving not in taken:
            taken.add(d.serving)
            steps.append(pairs[d.serving])
    return steps


# ---------------------------------------------------------------------------------------------------------------
# The bookkeeping behind plan()


@dataclasses.dataclass
class _Owner:
    key: inventory.RoleKey
    nodes_per_group: int
    cls: int  # requirement class (interned NodeRequirements) or capacity.UNKNOWN
    groups: dict[str, int]
    bound: Mapping[str, int]  # nodes its pods hold per domain (schedulable nodes only); the inventory's, shared


class _Book:
    def __init__(self, inv: inventory.Inventory) -> None:
        self.inv = inv
        self.slots: dict[str, capacity.Slot] = {}
        self.scope_keys: dict[inventory.Scope, list[str]] = {}
        self.scopes_used: set[inventory.Scope] = {"clique"}
        self.owners: dict[inventory.RoleKey, _Owner] = {}
        self.notes: dict[inventory.RoleKey, list[str]] = {}  # why groups placed in units wait (``pairing``)
        # Slots whose need or limit changed, in order: what the fit indexes replay before they answer.
        self.changed: list[capacity.Slot] = []
        self.fits: dict[int, capacity.Fits] = {}  # per requirement class, built when a best fit first asks
        self.summaries: dict[int, str] = {}  # per requirement class: where its nodes went, once planned
        self.serving_groups: dict[inventory.ServingKey, dict[str, int]] = {}
        self.held_domains: set[str] = set()  # where the placements summed in ``hold`` have groups
        self.classes: dict[inventory.NodeRequirements, int] = {}
        self.bound: dict[inventory.Scope, Mapping[inventory.RoleKey, Mapping[str, int]]] = {}
        for scope in inventory.SCOPES:
            tally = inv.tally(scope)
            self.bound[scope] = tally.held
            keys = self.scope_keys[scope] = []
            for domain in inv.domains(scope):
                keys.append(domain.key)
                slot = self.slots[domain.key] = capacity.Slot(domain.key, domain.label)
                slot.nodes, slot.schedulable = tally.nodes[domain.key], tally.schedulable[domain.key]
                slot.free = slot.limit = tally.free[domain.key]
        # Each scope's slots in key order, for the best-fit scans (a domain only placements name is not in it).
        self.scope_slots = {scope: [self.slots[k] for k in keys] for scope, keys in self.scope_keys.items()}
        self.scope_members = {scope: frozenset(keys) for scope, keys in self.scope_keys.items()}

    # -- requirements ------------------------------------------------------------------------------------------

    def intern(self, req: inventory.NodeRequirements) -> int:
        """A small id for ``req``; the first time, count the free nodes it may use in every domain."""
        cls = self.classes.get(req)
        if cls is None:
            cls = self.classes[req] = len(self.classes)
            for key, free in self.inv.free_for(req).items():
                self.slots[key].free_for[cls] = free
        return cls

    # -- groups ---------------------------------------------------------------------------------------------

    def slot(self, key: str) -> capacity.Slot:
        slot = self.slots.get(key)
        if slot is None:  # placed in a domain the inventory no longer has: nodes gone or relabelled
            slot = self.slots[key] = capacity.Slot(key, self.inv.domain_label)
        return slot

    def hold(self, others: Held) -> None:
        """Count ``others``' placements as ``open`` counts each held placement (needs of no requirement class,
        released nodes), from their sums."""
        if others.inv is not self.inv:
            raise ValueError("the held placements were summed on another inventory")
        self.scopes_used.update(scope for scope, count in others.scopes.items() if count)
        for domain in sorted({*others.need, *others.released, *others.placed}):
            slot = self.slot(domain)
            need = others.need.get(domain, 0)
            if need:
                slot.needs[capacity.UNKNOWN] = slot.needs.get(capacity.UNKNOWN, 0) + need
                slot.need += need
                slot.update_limit()
                self.changed.append(slot)
            slot.released += others.released.get(domain, 0)
        self.held_domains.update(d for d, count in others.placed.items() if count)

    def open(
        self,
        key: inventory.RoleKey,
        nodes_per_group: int,
        req: inventory.NodeRequirements | None,
        existing: Mapping[str, int],
    ) -> None:
        scope: inventory.Scope = req.scope if req is not None else scope_of(existing, self.scope_members)
        self.scopes_used.add(scope)
        cls = capacity.UNKNOWN if req is None else self.intern(req)
        bound = self.bound[scope].get(key, {})
        owner = self.owners[key] = _Owner(key, nodes_per_group, cls, {}, bound)
        self.serving_groups.setdefault(key.serving, {})
        for domain in sorted({*bound, *existing}):
            self.slot(domain).released += bound.get(domain, 0)
            self.set_groups(owner, domain, existing.get(domain, 0))

    def set_groups(self, owner: _Owner, domain: str, groups: int) -> None:
        slot = self.slot(domain)
        before = owner.groups.get(domain, 0)
        bound = owner.bound.get(domain, 0)
        old_need, new_need = owner.nodes_per_group * before, owner.nodes_per_group * groups
        change = max(0, new_need - bound) - max(0, old_need - bound)
        if change:  # groups its own pods already hold change nothing the fit indexes rank by
            slot.needs[owner.cls] = slot.needs.get(owner.cls, 0) + change
            slot.need += change
            slot.update_limit()
            self.changed.append(slot)
        slot.released += max(0, bound - new_need) - max(0, bound - old_need)
        if groups:
            owner.groups[domain] = groups
        else:
            owner.groups.pop(domain, None)
        mine = self.serving_groups.setdefault(owner.key.serving, {})
        mine[domain] = mine.get(domain, 0) + groups - before

    def scale_down(self, d: Demand) -> None:
        owner = self.owners[d.owner]
        surplus = sum(owner.groups.values()) - d.groups

        def order(domain: str) -> tuple[int, int, str]:
            count = owner.groups[domain]
            return (0 if self.waits(owner, domain) else 1, count if d.strategy == "pack" else -count, domain)

        while surplus > 0:
            domain = min(owner.groups, key=order)
            take = min(surplus, owner.groups[domain]) if d.strategy == "pack" else 1
            self.set_groups(owner, domain, owner.groups[domain] - take)
            surplus -= take

    def waits(self, owner: _Owner, domain: str) -> bool:
        """Whether some of the owner's groups in ``domain`` are not bound and the domain is short of nodes."""
        needs = owner.groups.get(domain, 0) * owner.nodes_per_group > owner.bound.get(domain, 0)
        return needs and capacity.short(self.slots[domain]) > 0

    def scale_up(self, d: Demand) -> None:
        owner = self.owners[d.owner]
        missing = d.groups - sum(owner.groups.values())
        if missing > 0:
            (self.pack if d.strategy == "pack" else self.spread)(owner, d, missing)

    def pack(self, owner: _Owner, d: Demand, missing: int) -> None:
        # Best fit is stable for a batch: after a domain takes a group it still has the fewest nodes left
        # among those that fit, so it takes as many groups as fit before the next scan.
        scope = d.requirements.scope
        while missing > 0:
            best_slot, best_cap = self.best_fit(scope, owner.cls, d.nodes_per_group, self.serving_groups[d.serving])
            if best_slot is None:
                return
            take = min(missing, best_cap // d.nodes_per_group)
            self.set_groups(owner, best_slot.key, owner.groups.get(best_slot.key, 0) + take)
            missing -= take

    def spread(self, owner: _Owner, d: Demand, missing: int) -> None:
        def place(key: str) -> None:
            self.set_groups(owner, key, owner.groups.get(key, 0) + 1)

        scope, mine = d.requirements.scope, self.serving_groups[d.serving]
        self.spread_over(scope, owner.cls, d.nodes_per_group, owner.groups, mine, missing, place)

    def spread_over(
        self,
        scope: inventory.Scope,
        cls: int,
        size: int,
        role: Mapping[str, int],
        mine: Mapping[str, int],
        count: int,
        place: Callable[[str], None],
    ) -> int:
        """``place`` ``count`` times, one at a time, in the domain with the fewest groups of the role (``role``),
        then of the serving (``mine``), then the fewest of ``size`` nodes left, then the smaller key; returns how
        many found no room. Both maps are live: ``place`` updates them.

        A domain without groups of the serving ranks before every domain with some, and placing there makes it
        one with some, so those go first in the class's capacity order (``capacity.Fits``), each once; only then a heap
        of the domains the serving is in (one re-push per placement: only the domain placed in changes). So a
        demand costs O(log domains + groups placed + domains of the serving), not O(domains)."""
        members = self.scope_members[scope]
        touched = [key for key, n in mine.items() if n > 0 and key in members]
        for key in self.fit_index(scope, cls).keys_from(size):
            if count <= 0:
                return 0
            if mine.get(key, 0) <= 0:
                place(key)
                touched.append(key)
                count -= 1
        heap: list[tuple[int, int, int, str]] = []
        for key in touched:
            cap = capacity.claimable(self.slots[key], cls)
            if cap >= size:
                heap.append((role.get(key, 0), mine.get(key, 0), cap - size, key))
        heapq.heapify(heap)
        while count > 0 and heap:
            key = heapq.heappop(heap)[3]
            place(key)
            count -= 1
            cap = capacity.claimable(self.slots[key], cls)
            if cap >= size:
                heapq.heappush(heap, (role[key], mine[key], cap - size, key))
        return count

    def fit_index(self, scope: inventory.Scope, cls: int) -> capacity.Fits:
        """Class ``cls``'s index of the slots of its scope by capacity, brought up to date."""
        fits = self.fits.get(cls)
        if fits is None:
            fits = self.fits[cls] = capacity.Fits(self.scope_slots[scope], cls, len(self.changed))
        fits.catch_up(self.changed)
        return fits

    def best_fit(
        self, scope: inventory.Scope, cls: int, size: int, mine: Mapping[str, int]
    ) -> tuple[capacity.Slot | None, int]:
        """The slot that fits ``size`` nodes of class ``cls`` best, and its capacity: under ``pack`` a domain
        holding groups of the serving (``mine``) first, then the fewest nodes left, then the smaller key.

        The serving's own domains are few and scanned; the rest is one search in the class's index of slots by
        capacity (``capacity.Fits``), so a best fit costs O(domains of the serving + log domains), not O(domains)."""
        members, best = self.scope_members[scope], None
        for key, groups in mine.items():
            if groups > 0 and key in members:
                cap = capacity.claimable(self.slots[key], cls)
                if cap >= size and (best is None or (cap, key) < best):
                    best = (cap, key)
        if best is None:
            best = self.fit_index(scope, cls).smallest(size)
        return (None, 0) if best is None else (self.slots[best[1]], best[0])

    # -- prefill and decode in units (``pairing``) ------------------------------------------------------------

    def scale_down_pair(self, pair: _Pair) -> None:
        """Both roles' surplus, domain by domain: first where groups wait for nodes, then under ``pack`` the
        domain holding the fewest groups of the serving (both roles: a unit goes away whole), under ``spread``
        the one holding the most. Ties go to the smaller key."""
        owners = (self.owners[pair.anchor.owner], self.owners[pair.fed.owner])
        surplus = [sum(o.groups.values()) - d.groups for o, d in zip(owners, (pair.anchor, pair.fed), strict=True)]
        pack = pair.anchor.strategy == "pack"

        def order(domain: str) -> tuple[int, int, str]:
            count = sum(o.groups.get(domain, 0) for o in owners)
            return (0 if any(self.waits(o, domain) for o in owners) else 1, count if pack else -count, domain)

        while any(n > 0 for n in surplus):
            domain = min({k for o, n in zip(owners, surplus, strict=True) if n > 0 for k in o.groups}, key=order)
            for i, owner in enumerate(owners):
                here = owner.groups.get(domain, 0)
                if surplus[i] > 0 and here:
                    take = min(surplus[i], here) if pack else 1
                    self.set_groups(owner, domain, here - take)
                    surplus[i] -= take

    def scale_up_pair(self, pair: _Pair) -> None:
        """First the fed groups the anchors already placed are owed, in their domains; then the missing units,
        each whole in one domain. What cannot be done waits, with the reason in ``notes``: a fed group is never
        put where its anchor is not."""
        anchor, fed = self.owners[pair.anchor.owner], self.owners[pair.fed.owner]
        r, fed_nodes = pair.ratio, pair.fed.nodes_per_group
        shares = pairing.shares(r, anchor.groups, fed.groups)
        for domain, owed in shares.deficit.items():
            free = max(0, capacity.claimable(self.slot(domain), fed.cls))
            fits = min(owed, free // fed_nodes)
            if fits:
                self.set_groups(fed, domain, fed.groups.get(domain, 0) + fits)
            if owed > fits:
                note = shortfall.top_up_unplaced(r, owed - fits, domain, fed_nodes, free - fits * fed_nodes)
                self.notes.setdefault(fed.key, []).append(note)
        new_anchors = r.anchors - sum(anchor.groups.values())
        for count, fed_each in pairing.new_units(r, new_anchors, shares) if new_anchors > 0 else ():
            place = self.pack_units if pair.anchor.strategy == "pack" else self.spread_units
            left = place(pair, count, fed_each)
            if left:
                req = pair.anchor.requirements
                largest = self.largest_block(req, anchor.cls)
                args = (pair.anchor.nodes_per_group, fed_nodes, req.gpus_per_node, largest)
                note = shortfall.unit_unplaced(r, left, fed_each, *args)
                for key in (anchor.key, fed.key):
                    self.notes.setdefault(key, []).append(note)

    def add_units(self, pair: _Pair, domain: str, units: int, fed_each: int) -> None:
        anchor, fed = self.owners[pair.anchor.owner], self.owners[pair.fed.owner]
        self.set_groups(anchor, domain, anchor.groups.get(domain, 0) + units)
        if fed_each:
            self.set_groups(fed, domain, fed.groups.get(domain, 0) + units * fed_each)

    def pack_units(self, pair: _Pair, count: int, fed_each: int) -> int:
        """``count`` units under ``pack``, best fit for the unit's nodes (as ``pack``); returns how many did not fit."""
        size = pair.anchor.nodes_per_group + fed_each * pair.fed.nodes_per_group
        cls, mine = self.owners[pair.anchor.owner].cls, self.serving_groups[pair.anchor.serving]
        while count > 0:
            best_slot, best_cap = self.best_fit("clique", cls, size, mine)
            if best_slot is None:
                return count
            take = min(count, best_cap // size)
            self.add_units(pair, best_slot.key, take, fed_each)
            count -= take
        return 0

    def spread_units(self, pair: _Pair, count: int, fed_each: int) -> int:
        """``count`` units under ``spread``, one at a time to the domain with the fewest anchor groups, then
        groups of the serving, then best fit (as ``spread``); returns how many did not fit."""
        anchor = self.owners[pair.anchor.owner]
        size = pair.anchor.nodes_per_group + fed_each * pair.fed.nodes_per_group
        mine = self.serving_groups[pair.anchor.serving]

        def place(key: str) -> None:
            self.add_units(pair, key, 1, fed_each)

        return self.spread_over("clique", anchor.cls, size, anchor.groups, mine, count, place)

    # -- results --------------------------------------------------------------------------------------------

    def role_plan(self, d: Demand) -> RolePlan:
        owner = self.owners[d.owner]
        placed = dict(sorted(owner.groups.items()))
        unplaced = max(0, d.groups - sum(placed.values()))
        notes = self.notes.get(owner.key)
        if unplaced and notes:  # placed in units with the other role: the unit's reason
            why = [*dict.fromkeys(notes), self.fleet_summary(d.requirements, owner.cls)]
        else:
            why = self.why_unplaced(d, unplaced) if unplaced else []
        reasons = [*self.waiting(owner, d), *why]
        return RolePlan(d.serving, d.role, d.nodes_per_group, d.groups, placed, unplaced, tuple(reasons))

    def waiting(self, owner: _Owner, d: Demand) -> list[str]:
        return [
            shortfall.waiting(d.role, groups, domain, self.slots[domain].need, self.slots[domain].limit)
            for domain, groups in sorted(owner.groups.items())
            if self.waits(owner, domain)
        ]

    def why_unplaced(self, d: Demand, unplaced: int) -> list[str]:
        req, cls = d.requirements, self.owners[d.owner].cls
        first = shortfall.unplaced(d.role, d.nodes_per_group, req, unplaced, self.largest_block(req, cls))
        return [first, self.fleet_summary(req, cls)]

    def largest_block(self, req: inventory.NodeRequirements, cls: int) -> str:
        most = self.fit_index(req.scope, cls).largest()
        return shortfall.largest(most[1], most[0]) if most is not None else shortfall.largest("", 0)

    def fleet_summary(self, req: inventory.NodeRequirements, cls: int) -> str:
        # Asked only once planning is done, so the same for every role of a class: said once per plan.
        said = self.summaries.get(cls)
        if said is None:
            slots = self.scope_slots[req.scope]
            free = sum(slot.free_for.get(cls, 0) for slot in slots)
            left = sum(max(0, capacity.claimable(slot, cls)) for slot in slots)
            said = self.summaries[cls] = shortfall.fleet(self.inv, req, free, left)
        return said

    def usage(self) -> tuple[DomainUsage, ...]:
        keys = sorted(
            {k for scope in self.scopes_used for k in self.scope_keys.get(scope, ())}
            | {k for owner in self.owners.values() for k in owner.groups}
            | self.held_domains
        )
        out = []
        for key in keys:
            slot = self.slots[key]
            out.append(
                DomainUsage(
                    key=key,
                    label=slot.label,
                    nodes=slot.nodes,
                    schedulable=slot.schedulable,
                    free_before=slot.free,
                    free_after=max(0, slot.free - slot.need) + slot.released,
                    short=capacity.short(slot),
                )
            )
        return tuple(out)
