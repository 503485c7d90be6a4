"""What the fleet has: GPU nodes grouped by NVLink domain, which of them a serving may use, which are free.

Pure core, first step of the data flow (inventory + spec → validate → plan → render → apply). It holds Node
and Pod objects as ``kubeobjects`` reads them from what the API server returns, keeping only what placement
needs: the domain label, the GPU product, allocatable ``nvidia.com/gpu``, readiness, cordons, taints, and which
nodes are already held by a GPU pod. ``planner`` turns that into group counts per domain.

Decisions worth knowing:

* A **domain** is the set of nodes sharing one value of the domain label (default ``nvidia.com/gpu.clique``,
  the NVLink domain published by GPU Feature Discovery). Generations whose NVLink stops at the node (B200,
  H200) use **node scope**: every GPU node without the domain label is its own domain, pinned by
  ``kubernetes.io/hostname``, so only single-node groups fit there. A node without the domain label is never
  part of a clique domain, so it never hosts a multi-node group; on GB200/GB300 it is not used at all, because
  a missing clique means its GPUs disagree about the fabric. The two scopes never share a node, so capacity
  bookkeeping can key domains by their label value alone.
* A node is **usable** for a serving when it is Ready, not cordoned, has the serving's GPU product, allocates
  at least the GPUs one pod requests, matches the serving's node selector, and every NoSchedule/NoExecute
  taint is tolerated (standard Kubernetes matching, see ``Toleration.tolerates``).
* A node is **free** when no running or pending-on-node pod requests ``nvidia.com/gpu`` on it: nvlfleet runs
  one vLLM pod per node requesting all its GPUs, so any GPU pod makes the node unavailable. GPUs requested
  through DRA claims other than ``nvidia.com/gpu`` are not seen.
* Pods of nvlfleet servings are recognised by the labels ``nvlfleet.io/serving`` and ``nvlfleet.io/role`` in
  their namespace, so the planner can tell "held by this serving's own group" from "held by someone else".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, NamedTuple

from nvlfleet.api import names
from nvlfleet.core import identities

# Only these taint effects keep a pod off a node; PreferNoSchedule merely lowers the node's score.
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_CLIQUE_FORM = re.compile(r"^([0-9a-fA-F]{8})[0-9a-fA-F-]{28}\.([0-9]+)$")

Scope = Literal["clique", "node"]
SCOPES: tuple[Scope, ...] = ("clique", "node")


class ServingKey(NamedTuple):
    """A DeepSeekServing by namespace and name; sorts the way plans are ordered."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class RoleKey(NamedTuple):
    """One role (decode, prefill) of one serving: the unit that owns groups."""

    serving: ServingKey
    role: str

    def __str__(self) -> str:
        return f"{self.serving} {self.role}"


@dataclasses.dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A pod toleration; ``operator`` is Equal or Exists, empty ``effect`` matches every effect."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' own rule (``Toleration.ToleratesTaint``), plus one planning rule.

        Empty key with Exists matches every key; empty effect matches every effect; Equal compares values.
        The planning rule: a NoExecute toleration with ``tolerationSeconds`` only delays eviction, so it does
        not make the node usable for a long-running engine.
        """
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if taint.effect == "NoExecute" and self.toleration_seconds is not None:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclasses.dataclass(frozen=True)
class NodeRequirements:
    """What one vLLM pod of a role asks of its node; equal requirements share capacity bookkeeping.

    ``node_selector`` is a sorted tuple of (label, value) so the object stays hashable.
    """

    gpu_product: str
    gpus_per_node: int
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    scope: Scope = "clique"


@dataclasses.dataclass(frozen=True)
class GpuPod:
    """A pod bound to a node and requesting GPUs; ``owner`` is set for pods of nvlfleet servings."""

    namespace: str
    name: str
    node: str
    gpus: int
    owner: RoleKey | None = None
    group: str | None = None  # identity of its LeaderWorkerSet group, when labelled


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    """The placement-relevant facts of one Kubernetes node."""

    name: str
    labels: Mapping[str, str]
    gpus: int  # allocatable nvidia.com/gpu
    ready: bool
    unschedulable: bool
    taints: tuple[Taint, ...] = ()
    pods: tuple[GpuPod, ...] = ()

    @property
    def gpu_product(self) -> str | None:
        return self.labels.get(names.PRODUCT_LABEL)

    @property
    def busy(self) -> bool:
        return bool(self.pods)

    @property
    def hostname(self) -> str:
        return self.labels.get(names.HOSTNAME_LABEL, self.name)

    @property
    def schedulable(self) -> bool:
        """Ready, not cordoned and offering GPUs: usable by someone, whatever their tolerations."""
        return self.ready and not self.unschedulable and self.gpus > 0

    def with_pods(self, pods: Sequence[GpuPod]) -> Node:
        # Not dataclasses.replace, which looks up the fields on every call: a fleet view merges the bound pods
        # into a node this way for every busy node of the fleet, and is rebuilt many times while a fleet rolls out.
        return Node(self.name, self.labels, self.gpus, self.ready, self.unschedulable, self.taints, tuple(pods))


@dataclasses.dataclass(frozen=True, eq=False)
class Domain:
    """Nodes that share one NVLink domain. ``label``/``key`` is the node-affinity term that pins a pod to it."""

    key: str
    label: str
    nodes: tuple[Node, ...]


@dataclasses.dataclass(frozen=True)
class Tally:
    """One scope's domains counted, what the planner starts every plan from.

    Per domain key: ``nodes``, ``schedulable`` ones (Ready, not cordoned, with GPUs) and ``free`` ones
    (schedulable, without a GPU pod); ``held``: per serving role, the schedulable nodes its pods are on in each
    domain.
    """

    nodes: Mapping[str, int]
    schedulable: Mapping[str, int]
    free: Mapping[str, int]
    held: Mapping[RoleKey, Mapping[str, int]]


@dataclasses.dataclass(frozen=True)
class Census:
    """Every node counted for one requirement: ``total`` with its GPU product, of those ``busy`` (usable, running
    GPU pods) and ``excluded`` (not usable: count per reason); ``products``: nodes per GPU product."""

    total: int
    busy: int
    excluded: Mapping[str, int]
    products: Mapping[str, int]


@dataclasses.dataclass(frozen=True, eq=False)
class Inventory:
    """All GPU-relevant nodes (sorted by name), with the GPU pods bound to them. Immutable, so what is derived
    from its nodes (domains, tallies, free nodes and censuses per requirement) is computed once and kept: the
    operator plans every serving of a pass against one fleet view, each plan would walk every node again."""

    nodes: tuple[Node, ...]
    domain_label: str = names.DEFAULT_DOMAIN_LABEL
    _domains: dict[Scope, tuple[Domain, ...]] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _tallies: dict[Scope, Tally] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _free: dict[NodeRequirements, Mapping[str, int]] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _censuses: dict[NodeRequirements, Census] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _by_name: dict[str, Node] = dataclasses.field(default_factory=dict, init=False, repr=False)

    def by_name(self) -> Mapping[str, Node]:
        """Every node by name; read-only, shared by every caller (each serving's pass looks its pods' nodes up)."""
        if len(self._by_name) != len(self.nodes):
            self._by_name.update((n.name, n) for n in self.nodes)
        return self._by_name

    def domains(self, scope: Scope = "clique") -> tuple[Domain, ...]:
        """Domains of one scope, sorted by key. Clique scope leaves out nodes without the domain label."""
        found = self._domains.get(scope)
        if found is None:
            found = self._domains[scope] = self._grouped(scope)
        return found

    def _grouped(self, scope: Scope) -> tuple[Domain, ...]:
        if scope == "node":
            alone = [n for n in self.nodes if not n.labels.get(self.domain_label) and _has_gpus(n)]
            return tuple(Domain(n.hostname, names.HOSTNAME_LABEL, (n,)) for n in sorted(alone, key=_hostname))
        members: dict[str, list[Node]] = {}
        for node in self.nodes:
            key = node.labels.get(self.domain_label)
            if key:
                members.setdefault(key, []).append(node)
        return tuple(Domain(k, self.domain_label, tuple(members[k])) for k in sorted(members))

    def tally(self, scope: Scope = "clique") -> Tally:
        """The domains of ``scope`` counted (see ``Tally``); read-only, shared by every caller."""
        found = self._tallies.get(scope)
        if found is None:
            nodes: dict[str, int] = {}
            schedulable: dict[str, int] = {}
            free: dict[str, int] = {}
            held: dict[RoleKey, dict[str, int]] = {}
            for domain in self.domains(scope):
                ready = [n for n in domain.nodes if n.schedulable]
                nodes[domain.key], schedulable[domain.key] = len(domain.nodes), len(ready)
                free[domain.key] = sum(1 for n in ready if not n.pods)
                for owner, count in _owners_in(ready).items():
                    held.setdefault(owner, {})[domain.key] = count
            found = self._tallies[scope] = Tally(nodes, schedulable, free, held)
        return found

    def free_for(self, req: NodeRequirements) -> Mapping[str, int]:
        """Free nodes a pod with ``req`` may use, per domain of its scope (every domain, zeros included);
        read-only, shared by every caller."""
        found = self._free.get(req)
        if found is None:
            found = self._free[req] = {
                domain.key: _free_in(domain, req, self.domain_label) for domain in self.domains(req.scope)
            }
        return found

    def census(self, req: NodeRequirements) -> Census:
        """Every node counted for ``req`` (see ``Census``); read-only, shared by every caller."""
        found = self._censuses.get(req)
        if found is None:
            total, busy = 0, 0
            excluded: dict[str, int] = {}
            products: dict[str, int] = {}
            for node in self.nodes:
                product = node.gpu_product
                if product is not None:
                    products[product] = products.get(product, 0) + 1
                if product != req.gpu_product:
                    continue
                total += 1
                reason = unusable_reason(node, req, self.domain_label)
                if reason is not None:
                    excluded[reason] = excluded.get(reason, 0) + 1
                elif node.busy:
                    busy += 1
            found = self._censuses[req] = Census(total, busy, excluded, products)
        return found

    def changed(self, nodes: tuple[Node, ...], made: Mapping[str, Node]) -> Inventory:
        """This inventory with ``nodes``: the same names in the same order, each in the same domains, ``made``
        holding by name the ones that differ. What was derived from this one is carried over, counted again only
        in the domains those nodes are in (``Builds``); equal to an inventory of ``nodes`` built anew."""
        out = Inventory(nodes=nodes, domain_label=self.domain_label)
        by_name = self.by_name()
        out._by_name.update(by_name)
        out._by_name.update(made)
        old = [by_name[name] for name in made]
        # Copies of the derived maps first: passes in other threads may still be filling this inventory's.
        derived_domains, tallies = list(self._domains.items()), list(self._tallies.items())
        frees, censuses = list(self._free.items()), list(self._censuses.items())
        keys: dict[Scope, set[str]] = {}
        for scope, domains in derived_domains:
            keys[scope] = {k for n in old if (k := self.domain_key(n, scope)) is not None}
            out._domains[scope] = (
                tuple(
                    Domain(d.key, d.label, tuple(made.get(n.name, n) for n in d.nodes)) if d.key in keys[scope] else d
                    for d in domains
                )
                if keys[scope]
                else domains
            )
        for scope, tally in tallies:
            if scope in keys:
                out._tallies[scope] = (
                    _recounted(tally, self._domains[scope], out._domains[scope], keys[scope]) if keys[scope] else tally
                )
        for req, free in frees:
            if req.scope not in keys:
                continue
            if keys[req.scope]:
                free = dict(free)
                for domain in out._domains[req.scope]:
                    if domain.key in keys[req.scope]:
                        free[domain.key] = _free_in(domain, req, self.domain_label)
            out._free[req] = free
        for req, census in censuses:
            out._censuses[req] = _census_moved(census, old, made.values(), req, self.domain_label)
        return out

    def domain_key(self, node: Node, scope: Scope = "clique") -> str | None:
        """The key of the domain ``node`` belongs to in ``scope``, or None when it belongs to none."""
        clique = node.labels.get(self.domain_label) or None
        if scope == "clique":
            return clique
        return node.hostname if clique is None and _has_gpus(node) else None


def _owners_in(ready: Iterable[Node]) -> dict[RoleKey, int]:
    """Per serving role, how many of ``ready`` its pods are on."""
    count: dict[RoleKey, int] = {}
    for node in ready:
        for owner in {p.owner for p in node.pods if p.owner is not None} if node.pods else ():
            count[owner] = count.get(owner, 0) + 1
    return count


def _free_in(domain: Domain, req: NodeRequirements, domain_label: str) -> int:
    return sum(1 for n in domain.nodes if not n.pods and unusable_reason(n, req, domain_label) is None)


def _recounted(tally: Tally, before: Sequence[Domain], after: Sequence[Domain], keys: set[str]) -> Tally:
    """``tally`` with the domains of ``keys`` counted again (``after``: the domains as they are now, with the
    same keys and node names as ``before``)."""
    schedulable, free = dict(tally.schedulable), dict(tally.free)
    held = dict(tally.held)
    old = {d.key: d for d in before if d.key in keys}
    for domain in after:
        if domain.key not in keys:
            continue
        ready = [n for n in domain.nodes if n.schedulable]
        schedulable[domain.key] = len(ready)
        free[domain.key] = sum(1 for n in ready if not n.pods)
        was = _owners_in(n for n in old[domain.key].nodes if n.schedulable)
        now = _owners_in(ready)
        for owner in was.keys() | now.keys():
            if was.get(owner) == now.get(owner):
                continue
            where = dict(held.get(owner, {}))
            if owner in now:
                where[domain.key] = now[owner]
            else:
                where.pop(domain.key, None)
            if where:
                held[owner] = where
            else:
                held.pop(owner, None)
    # The same ``nodes`` map: the domains did not change, and a view's sums take that as the sign that they may be
    # moved from the view before's (``reconciler._moved``); each role's ``held`` map is new only if it changed.
    return Tally(tally.nodes, schedulable, free, held)


def _census_moved(
    census: Census, before: Iterable[Node], after: Iterable[Node], req: NodeRequirements, domain_label: str
) -> Census:
    """``census`` with the nodes of ``before`` counted as ``after`` (the same nodes, as they are now)."""
    total, busy = census.total, census.busy
    excluded, products = dict(census.excluded), dict(census.products)
    for sign, nodes in ((-1, before), (1, after)):
        for node in nodes:
            product = node.gpu_product
            if product is not None:
                products[product] = products.get(product, 0) + sign
            if product != req.gpu_product:
                continue
            total += sign
            reason = unusable_reason(node, req, domain_label)
            if reason is not None:
                excluded[reason] = excluded.get(reason, 0) + sign
            elif node.busy:
                busy += sign
    return Census(total, busy, {k: v for k, v in excluded.items() if v}, {k: v for k, v in products.items() if v})


def _hostname(node: Node) -> str:
    return node.hostname


def _has_gpus(node: Node) -> bool:
    return node.gpus > 0 or node.gpu_product is not None


class Merges:
    """Each busy node as the last ``build`` merged it with its GPU pods, by name: the same node object with the
    same pod objects (the watch caches' parsed ones, which stay the same objects until their object changes) is
    merged once, not once per fleet view. While a fleet rolls out the operator builds a view many times a minute,
    and making every busy node anew was more than half of building its inventory. Only the nodes of
    the latest build are kept: the memo never outgrows the fleet."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[Node, list[GpuPod], Node]] = {}
        self._now: dict[str, tuple[Node, list[GpuPod], Node]] = {}

    def __len__(self) -> int:
        return len(self._last)

    def merged(self, node: Node, pods: list[GpuPod]) -> Node:
        last = self._last.get(node.name)
        if last is not None and last[0] is node and len(last[1]) == len(pods) and all(map(_same, last[1], pods)):
            out = last[2]
        else:
            out = node.with_pods((*node.pods, *pods))
        self._now[node.name] = (node, pods, out)
        return out

    def kept(self) -> None:
        """The build is over: what it merged is what the next one compares with."""
        self._last, self._now = self._now, {}


def _same(a: object, b: object) -> bool:
    return a is b


def build(
    nodes: Iterable[Node],
    pods: Iterable[GpuPod] = (),
    domain_label: str = names.DEFAULT_DOMAIN_LABEL,
    merges: Merges | None = None,
) -> Inventory:
    """An inventory from parsed nodes and pods; pods on nodes not listed are ignored (they hold nothing here).
    ``merges``: the busy nodes the last build merged, which this one reuses where nothing changed (``Merges``)."""
    return _built(nodes, pods, domain_label, merges)[0]


def _built(
    nodes: Iterable[Node], pods: Iterable[GpuPod], domain_label: str, merges: Merges | None
) -> tuple[Inventory, dict[str, list[GpuPod]]]:
    """``build``, with the GPU pods of each node name (sorted as the node holds them)."""
    by_node: dict[str, list[GpuPod]] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    merged = []
    for n in nodes:
        mine = by_node.get(n.name)
        if mine:
            if len(mine) > 1:
                mine.sort(key=_pod_order)
            n = merges.merged(n, mine) if merges is not None else n.with_pods((*n.pods, *mine))
        merged.append(n)
    if merges is not None:
        merges.kept()
    merged.sort(key=_node_name)
    return Inventory(nodes=tuple(merged), domain_label=domain_label), by_node


@dataclasses.dataclass(frozen=True, eq=False)
class _Source:
    """What one inventory of ``Builds`` was built from: the node and pod objects (by identity, which keeps them
    alive, so an id names one object), each raw node and its pods by name, each node's position."""

    inv: Inventory
    nodes: Mapping[int, Node]
    pods: Mapping[int, GpuPod]
    raw: Mapping[str, Node]
    on: Mapping[str, list[GpuPod]]
    at: Mapping[str, int]


class Builds:
    """The last inventory built for each domain label, with what it was built from: the next ``build`` makes
    again only the nodes whose node object or GPU pods are not the same objects as last time, and carries over
    what the last inventory had counted (domains, tallies, free nodes, censuses), counting again only the
    domains those nodes are in.

    While a fleet of a thousand servings rolls out, the operator builds a fresh view for each pass that places
    groups, and between two of them a few pods were bound and one LeaderWorkerSet was written: making every
    node and counting every domain again each time was most of a view. The watch caches hand out the same
    parsed objects until their object changes, so which ones changed is found by identity (set differences, at
    C speed). When nodes come or go, a node changes domain, or much changed at once, the inventory is built
    whole (through ``Merges``)."""

    def __init__(self) -> None:
        self._last: dict[str, _Source] = {}
        self._merges = Merges()
        self.whole = 0  # builds made whole (the first of each label included), for tests and benches
        self.partial = 0

    def build(self, nodes: Sequence[Node], pods: Sequence[GpuPod], domain_label: str) -> Inventory:
        last = self._last.get(domain_label)
        source = _rebuilt(last, nodes, pods) if last is not None else None
        if source is None:
            self.whole += 1
            source = _whole(nodes, pods, domain_label, self._merges)
        else:
            self.partial += 1
        self._last[domain_label] = source
        return source.inv


def _whole(nodes: Sequence[Node], pods: Sequence[GpuPod], domain_label: str, merges: Merges) -> _Source:
    inv, by_node = _built(nodes, pods, domain_label, merges)
    at = {n.name: i for i, n in enumerate(inv.nodes)}
    return _Source(
        inv,
        identities.by_identity(nodes),
        identities.by_identity(pods),
        {n.name: n for n in nodes},
        {name: mine for name, mine in by_node.items() if name in at},
        at,
    )


def _rebuilt(last: _Source, nodes: Sequence[Node], pods: Sequence[GpuPod]) -> _Source | None:
    """The inventory of ``nodes`` and ``pods`` made from ``last`` where only some nodes or pods are new objects;
    None when it must be built whole."""
    by_id = identities.by_identity(nodes)
    pods_by_id = identities.by_identity(pods)
    if len(by_id) != len(nodes) or len(pods_by_id) != len(pods) or len(last.at) != len(last.inv.nodes):
        return None  # the same object listed twice, or two nodes of one name: counted as ``build`` counts them
    if len(by_id) != len(last.nodes):
        return None  # nodes came or went
    came, gone = identities.changes(last.nodes, by_id)
    if sorted(n.name for n in came) != sorted(n.name for n in gone):
        return None  # not each new node object in place of the old one of its name
    pods_came, pods_gone = identities.changes(last.pods, pods_by_id)
    if not came and not pods_came and not pods_gone:
        return dataclasses.replace(last, nodes=by_id, pods=pods_by_id)
    if not identities.few(len(came) + len(pods_came) + len(pods_gone), len(nodes)):
        return None
    raw = dict(last.raw)
    raw.update((n.name, n) for n in came)
    # The lists of ``last`` are shared with builds in other threads: a node whose pods changed gets a new one.
    on = dict(last.on)
    moved: set[str] = set()
    for pod in pods_gone:
        if pod.node in last.at:
            on[pod.node] = [p for p in on[pod.node] if p is not pod]
            moved.add(pod.node)
    for pod in pods_came:
        if pod.node in last.at:
            on[pod.node] = [*on.get(pod.node, ()), pod]
            moved.add(pod.node)
    for name in moved:
        if not on[name]:
            del on[name]
        elif len(on[name]) > 1:
            on[name].sort(key=_pod_order)
    inv = last.inv
    made: dict[str, Node] = {}
    for name in moved | {n.name for n in came}:
        mine = on.get(name)
        node = raw[name]
        new = node.with_pods((*node.pods, *mine)) if mine else node
        old = inv.nodes[last.at[name]]
        if inv.domain_key(old, "clique") != inv.domain_key(new, "clique") or inv.domain_key(
            old, "node"
        ) != inv.domain_key(new, "node"):
            return None  # the node changed domain: the domains are grouped again
        made[name] = new
    listed = list(inv.nodes)
    for name, node in made.items():
        listed[last.at[name]] = node
    return _Source(inv.changed(tuple(listed), made), by_id, pods_by_id, raw, on, last.at)


def _pod_order(pod: GpuPod) -> tuple[str, str]:
    return pod.namespace, pod.name


def _node_name(node: Node) -> str:
    return node.name


# ---------------------------------------------------------------------------------------------------------------
# Who may use a node


def blocking_taint(node: Node, tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint of ``node`` that no toleration matches, if any."""
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def unusable_reason(node: Node, req: NodeRequirements, domain_label: str = names.DEFAULT_DOMAIN_LABEL) -> str | None:
    """Why a pod with ``req`` cannot run on ``node`` (a short phrase for counting), or None when it can.

    Busy nodes are usable in this sense: whether a node is free is a separate question.
    """
    if node.gpu_product != req.gpu_product:
        return f"GPU product {node.gpu_product or 'unlabelled'}"
    if req.scope == "clique" and not node.labels.get(domain_label):
        return f"without the {domain_label} label"
    if req.scope == "node" and node.labels.get(domain_label):
        return f"inside an NVLink domain ({domain_label} is set)"
    if not node.ready:
        return "not Ready"
    if node.unschedulable:
        return "cordoned"
    if node.gpus < req.gpus_per_node:
        return f"fewer than {req.gpus_per_node} allocatable {names.GPU_RESOURCE}"
    for key, value in req.node_selector:
        if node.labels.get(key) != value:
            return f"not matching the node selector {key}={value}"
    taint = blocking_taint(node, req.tolerations)
    if taint is not None:
        return f"with the taint {taint} not tolerated"
    return None


def usable(node: Node, req: NodeRequirements, domain_label: str = names.DEFAULT_DOMAIN_LABEL) -> bool:
    return unusable_reason(node, req, domain_label) is None


# ---------------------------------------------------------------------------------------------------------------
# Groups already running


def observed_placements(inv: Inventory, scope: Scope = "clique") -> dict[RoleKey, dict[str, int]]:
    """Groups of each serving role per domain, counted from their pods (for when status.placement is lost).

    A group is identified by its LeaderWorkerSet name and group index; a pod without those labels counts as a
    group of its own. A group whose pods sit in several domains (which nvlfleet never plans) is counted where
    most of its pods are, ties to the smaller domain key.
    """
    pods_of: dict[tuple[RoleKey, str], dict[str, int]] = {}
    for node in inv.nodes:
        key = inv.domain_key(node, scope)
        if key is None:
            continue
        for pod in node.pods:
            if pod.owner is None:
                continue
            group = pod.group if pod.group is not None else f"pod/{pod.namespace}/{pod.name}"
            where = pods_of.setdefault((pod.owner, group), {})
            where[key] = where.get(key, 0) + 1
    out: dict[RoleKey, dict[str, int]] = {}
    for (owner, _group), where in sorted(pods_of.items()):
        home = min(where, key=lambda k: (-where[k], k))
        placed = out.setdefault(owner, {})
        placed[home] = placed.get(home, 0) + 1
    return {owner: dict(sorted(placed.items())) for owner, placed in out.items()}


def short_domain(key: str) -> str:
    """A readable id for a domain key: ``61248eac-4785-…-231635e37e9d.20663`` becomes ``61248eac.20663``.

    For people only (tables, messages); names and selectors always use the full key.
    """
    match = _CLIQUE_FORM.match(key)
    return f"{match.group(1)}.{match.group(2)}" if match else key
