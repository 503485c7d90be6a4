"""What the same fleet would get from the placement tools nvlfleet replaces, next to what nvlfleet gets.

A pure model beside ``nvlfleet.core.planner``, kept out of the package because only benchmarks, their tests and
the docs use it, to show the difference in numbers. Three engines place one workload (a list of
``planner.Demand``) on one ``inventory.Inventory``, group by group in the planner's order, and are scored node by
node with the same yardstick (``Outcome``):

* **nvlfleet**: ``planner.plan``; groups it cannot place are not created, so nothing is left Pending.
* **LWS exclusive topology** (``leaderworkerset.sigs.k8s.io/exclusive-topology: <domain label>``), annotated
  as a user would: on the LeaderWorkerSets of multi-node groups only (a single-node group has nothing to keep
  together). An annotated group needs a domain no other group's pods use (the annotation adds anti-affinity
  against every pod of another group); an un-annotated single-node group may share a domain with other
  un-annotated ones, but not enter a domain an annotated group holds (that group's anti-affinity keeps it out).
  Modelled in its *best* case, which the real scheduler does not promise: each annotated group gets the domain
  with the fewest usable free nodes that still fits it, and single-node groups pack onto domains other
  single-node groups already use before opening a new one. A group that finds no domain leaves its pods Pending.
* **Plain pod affinity** (required affinity to the group's leader on the domain label, no planner): pods are
  scheduled one by one, first fit: the leader takes the first usable free node in (domain, node) order
  wherever that is; each worker takes the first usable free node in the leader's domain, or stays Pending.
  With ``affinity="preferred"`` a worker that finds no room there takes the first usable free node anywhere,
  splitting the group across domains.

Yardstick, per engine:

* ``groups_placed``: groups whose pods are all bound inside one domain (they run on the NVLink fabric).
* ``groups_split``: groups whose pods are all bound, across several domains (they run, but the expert
  all-to-all crosses the network).
* ``groups_waiting``: groups with some pods bound and some Pending: they cannot start, yet hold nodes.
* ``pods_pending``: pods created but not bound (nvlfleet creates no pod for a group it cannot place).
* ``gpus_stranded``: GPUs on nodes the workload can use but gets nothing from, in two kinds:
  (a) nodes held by pods of waiting groups, and
  (b) free nodes that no further group of the workload could be placed on under the engine's rules: every free
  node of a domain that already hosts an annotated group under exclusive topology, and, for multi-node demands,
  of a domain that hosts single-node groups there; under every engine, free nodes of a
  domain where, for every demand that may use them, the domain's free usable nodes are fewer than the
  demand's nodes per group.
  Free nodes that could still take a group are not stranded, whether or not more groups are waiting, and
  nodes no demand of the workload may use are not counted at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from nvlfleet.core import inventory, planner


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One engine's result for a workload; see the module docstring for each field's exact meaning."""

    engine: str
    groups: int
    groups_placed: int
    groups_split: int
    groups_waiting: int
    pods_pending: int
    gpus_placed: int  # GPUs of groups_placed
    gpus_stranded: int

    @property
    def groups_unplaced(self) -> int:
        """Groups that do not run on the NVLink fabric: split, waiting or never bound."""
        return self.groups - self.groups_placed


def compare(inv: inventory.Inventory, workload: Sequence[planner.Demand]) -> tuple[Outcome, Outcome, Outcome]:
    """nvlfleet, LWS exclusive topology and required pod affinity on the same fleet, in that order."""
    return nvlfleet(inv, workload), lws_exclusive(inv, workload), pod_affinity(inv, workload)


def nvlfleet(inv: inventory.Inventory, workload: Sequence[planner.Demand]) -> Outcome:
    """The planner's outcome, bound to concrete nodes (any order works: the planner never over-commits)."""
    fleet = _Fleet(inv, workload)
    result = planner.plan(inv, workload)
    for d in _ordered(workload):
        for key, groups in result.role(d.serving, d.role).placed.items():
            for _ in range(groups):
                nodes = [fleet.take(d, key) for _ in range(d.nodes_per_group)]
                fleet.bound.append((d, [n for n in nodes if n is not None]))
                if None in nodes:  # cannot happen when the planner keeps its promise; scored as waiting
                    fleet.pending += nodes.count(None)
    return fleet.outcome("nvlfleet")


def lws_exclusive(inv: inventory.Inventory, workload: Sequence[planner.Demand]) -> Outcome:
    """LeaderWorkerSet exclusive topology on multi-node groups, in its best case; see the module docstring."""
    fleet = _Fleet(inv, workload)
    for d in _ordered(workload):
        for _ in range(d.groups):
            if d.nodes_per_group == 1:
                _single_beside_exclusive(fleet, d)
                continue
            fits = [
                k
                for k in fleet.keys(d)
                if k not in fleet.exclusive and k not in fleet.shared and fleet.free_count(d, k) >= d.nodes_per_group
            ]
            if not fits:
                fleet.pending += d.nodes_per_group
                continue
            key = min(fits, key=lambda k: (fleet.free_count(d, k), k))
            fleet.exclusive.add(key)
            fleet.bound.append(
                (d, [n for n in (fleet.take(d, key) for _ in range(d.nodes_per_group)) if n is not None])
            )
    return fleet.outcome("lws-exclusive-topology")


def _single_beside_exclusive(fleet: _Fleet, d: planner.Demand) -> None:
    """An un-annotated single-node group: outside every exclusive domain, packed onto shared ones first."""
    fits = [k for k in fleet.keys(d) if k not in fleet.exclusive and fleet.free_count(d, k) > 0]
    if not fits:
        fleet.pending += 1
        return
    key = min(fits, key=lambda k: (k not in fleet.shared, fleet.free_count(d, k), k))
    fleet.shared.add(key)
    node = fleet.take(d, key)
    fleet.bound.append((d, [node] if node is not None else []))


def pod_affinity(
    inv: inventory.Inventory,
    workload: Sequence[planner.Demand],
    affinity: Literal["required", "preferred"] = "required",
) -> Outcome:
    """Plain pod affinity, first fit per pod; see the module docstring."""
    fleet = _Fleet(inv, workload)
    for d in _ordered(workload):
        for _ in range(d.groups):
            leader_key = next((k for k in fleet.keys(d) if fleet.free_count(d, k) > 0), None)
            if leader_key is None:
                fleet.pending += d.nodes_per_group
                continue
            nodes = [fleet.take(d, leader_key)]
            for _ in range(d.nodes_per_group - 1):
                node = fleet.take(d, leader_key)
                if node is None and affinity == "preferred":
                    anywhere = next((k for k in fleet.keys(d) if fleet.free_count(d, k) > 0), None)
                    node = fleet.take(d, anywhere) if anywhere is not None else None
                nodes.append(node)
            fleet.pending += nodes.count(None)
            fleet.bound.append((d, [n for n in nodes if n is not None]))
    return fleet.outcome(f"pod-affinity-{affinity}")


# ---------------------------------------------------------------------------------------------------------------
# Node-level bookkeeping shared by the engines


def _ordered(workload: Sequence[planner.Demand]) -> list[planner.Demand]:
    """The planner's demand order, so every engine sees groups in the same sequence."""
    return sorted(workload, key=lambda d: (d.serving, -d.nodes_per_group, d.role))


class _Fleet:
    def __init__(self, inv: inventory.Inventory, workload: Sequence[planner.Demand]) -> None:
        self.inv = inv
        self.workload = list(workload)
        self.domain_of: dict[str, str] = {}
        self.free: dict[str, list[inventory.Node]] = {}  # free nodes per domain, in name order
        self.usable: dict[planner.Demand, set[str]] = {}  # names of nodes each demand may use
        self.by_scope: dict[inventory.Scope, list[str]] = {}
        for scope in {d.requirements.scope for d in self.workload}:
            keys = self.by_scope[scope] = []
            for domain in inv.domains(scope):
                keys.append(domain.key)
                self.free[domain.key] = [n for n in domain.nodes if n.schedulable and not n.busy]
                for n in domain.nodes:
                    self.domain_of[n.name] = domain.key
        for d in self.workload:
            self.usable[d] = {
                n.name
                for n in inv.nodes
                if n.name in self.domain_of and inventory.usable(n, d.requirements, inv.domain_label)
            }
        self.exclusive: set[str] = set()  # domains an exclusive-topology group holds
        self.shared: set[str] = set()  # domains un-annotated groups use under exclusive topology
        self.bound: list[tuple[planner.Demand, list[inventory.Node]]] = []
        self.pending = 0

    def keys(self, d: planner.Demand) -> list[str]:
        return self.by_scope[d.requirements.scope]

    def free_count(self, d: planner.Demand, key: str) -> int:
        mine = self.usable[d]
        return sum(1 for n in self.free[key] if n.name in mine)

    def take(self, d: planner.Demand, key: str) -> inventory.Node | None:
        """Bind one pod of ``d`` to the first free node of ``key`` it may use."""
        mine, free = self.usable[d], self.free[key]
        for i, node in enumerate(free):
            if node.name in mine:
                return free.pop(i)
        return None

    def _closed(self, d: planner.Demand, key: str) -> bool:
        """No further group of ``d`` can go to domain ``key`` under the engine's rules."""
        if key in self.exclusive or (key in self.shared and d.nodes_per_group > 1):
            return True
        return self.free_count(d, key) < d.nodes_per_group

    def outcome(self, engine: str) -> Outcome:
        placed = split = waiting = gpus_placed = stranded = 0
        for d, nodes in self.bound:
            domains = {self.domain_of[n.name] for n in nodes}
            if len(nodes) < d.nodes_per_group:
                waiting += 1
                stranded += sum(n.gpus for n in nodes)
            elif len(domains) > 1:
                split += 1
            else:
                placed += 1
                gpus_placed += sum(n.gpus for n in nodes)
        for key, free in self.free.items():
            for node in free:
                users = [d for d in self.workload if node.name in self.usable[d]]
                if users and all(self._closed(d, key) for d in users):
                    stranded += node.gpus
        return Outcome(
            engine=engine,
            groups=sum(d.groups for d in self.workload),
            groups_placed=placed,
            groups_split=split,
            groups_waiting=waiting,
            pods_pending=self.pending,
            gpus_placed=gpus_placed,
            gpus_stranded=stranded,
        )
