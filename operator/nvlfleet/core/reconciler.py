"""The reconcile decision: from one observed snapshot of the cluster to what must change, as plain data.

Pure core, the heart of the operator's data flow:

    snapshot (serving, its children, nodes, GPU pods, every nvlfleet LeaderWorkerSet, served APIs, now)
      → validate → inventory → plan → render → diff against what is there
      → Decision (objects to apply, objects to delete, the status patch, the events)

``nvlfleet.adapters.main`` gathers the snapshot through ``nvlfleet.adapters.kube`` and carries the decision
out; this module does no I/O, reads no clock (``now`` is an input) and never raises on bad input: a spec it
cannot honour becomes a condition with a sentence a person understands. Running it twice on the same snapshot
gives the same decision, and on the state its own decision produced it decides nothing (no writes, no events):
that is what makes the periodic re-check free.

Decisions worth knowing:

* **What is running is the truth.** A serving's current placement is read from its LeaderWorkerSets (one per
  role and NVLink domain), not from its status, so a restart mid-rollout or a lost status write re-plans from
  the cluster as it is. Other servings' LeaderWorkerSets hold their capacity, including groups whose pods are
  not scheduled yet, so two servings planned one after the other never over-commit a rack.
* **Apply only what differs.** Every child carries ``nvlfleet.io/applied-hash``; a child is applied when it is
  missing or when what nvlfleet renders is not contained in what the API server returns (the hash changed, or
  someone edited a field nvlfleet owns). Defaults the server or another controller add are not a difference.
* **ComputeDomain specs are immutable.** When one changes, the old object is deleted and the new one created on a
  later pass, once the old one is gone (``requeue_after``); it is never patched.
* **Only nvlfleet's own children are touched.** A child counts as this serving's when it has nvlfleet's
  managed-by and serving labels *and* a controller owner reference to the serving's uid. Anything else with a
  name nvlfleet wants is a conflict reported on the serving, never overwritten.
* **An invalid spec or a missing prerequisite (LWS, ComputeDomain or PodMonitor API) freezes the fleet**: the
  running children are left exactly as they are and the conditions say why, rather than pruning a working fleet
  because of a typo.
* **Conditions** follow Kubernetes conventions: ``lastTransitionTime`` moves only when a condition's status
  changes, each carries the generation it describes. Events are emitted only for changes (an apply, a prune, a
  new placement, a condition turning), so a quiet fleet produces none.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from nvlfleet.api import models, names, ownership, problems, reasons
from nvlfleet.core import inventory, planner, render, validation
from nvlfleet.facts import hardware

# The API each child kind needs, with the sentence that tells a person what to install.
PREREQUISITES: Mapping[str, str] = {
    names.LEADER_WORKER_SET.kind: (
        f"the LeaderWorkerSet API ({names.LEADER_WORKER_SET.crd_name}/{names.LEADER_WORKER_SET.version}) is not "
        "installed; install the LeaderWorkerSet controller (https://lws.sigs.k8s.io) — every engine group runs as "
        "one of its replicas"
    ),
    names.COMPUTE_DOMAIN.kind: (
        f"the ComputeDomain API ({names.COMPUTE_DOMAIN.crd_name}/{names.COMPUTE_DOMAIN.version}) is not installed; "
        "install the NVIDIA DRA driver for GPUs with ComputeDomains, or set spec.placement.computeDomain: false"
    ),
    names.POD_MONITOR.kind: (
        f"the PodMonitor API ({names.POD_MONITOR.crd_name}/{names.POD_MONITOR.version}) is not installed; install "
        "the Prometheus Operator CRDs, or set spec.monitoring.podMonitor: false"
    ),
}

# Status keys the reconciler owns; the telemetry fields (tokensPerSecond, ...) are written elsewhere.
STATUS_KEYS = ("observedGeneration", "conditions", "placement", "ready", "readyGroups", "desiredGroups", "gpus")

# How soon to look again while waiting for something only time brings (an old ComputeDomain to go away).
REQUEUE_SECONDS = 2.0

Status = Literal["True", "False", "Unknown"]


# ---------------------------------------------------------------------------------------------------------------
# Inputs and outputs


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything one reconcile pass looks at, as the API server returned it (plain dicts).

    ``children``: objects labelled as this serving's children, of every child kind. ``nodes``: Node objects, or
    nodes the adapter already parsed (``inventory.parse_node``, once per watch event rather than every pass).
    ``pods``: pods requesting GPUs anywhere in the cluster (bound or not), which include this serving's own
    pods; ``bound``: the same pods as the adapter already parsed them (``inventory.parse_pod``, once per watch
    event), or None to parse ``pods`` here. ``fleet``: the LeaderWorkerSets of every nvlfleet serving (whole,
    or trimmed to metadata, replicas, size and pod placement). ``served``: the child kinds whose API is
    installed. ``foreign``: objects found under a name this serving wants that nvlfleet did not create for it.
    ``view``: nodes, pods and fleet digested (``fleet_view``) by an earlier pass over the same objects; used
    when its domain label is the serving's, else computed here.
    """

    serving: Mapping[str, Any]
    now: datetime.datetime
    children: Sequence[Mapping[str, Any]] = ()
    nodes: Sequence[Mapping[str, Any] | inventory.Node] = ()
    pods: Sequence[Mapping[str, Any]] = ()
    fleet: Sequence[Mapping[str, Any]] = ()
    served: frozenset[str] = frozenset(PREREQUISITES)
    foreign: Sequence[Mapping[str, Any]] = ()
    bound: Sequence[inventory.GpuPod] | None = None
    view: FleetView | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class FleetView:
    """The cluster-wide half of a pass: the inventory (nodes with their GPU pods) and every serving's groups
    (from ``Snapshot.fleet``), for one domain label. It is the same for every serving's pass until a node, a GPU
    pod or a LeaderWorkerSet changes, so the adapter may compute it once (``fleet_view``) and hand it to many
    passes (``Snapshot.view``) instead of each pass rebuilding it from a thousand objects."""

    domain_label: str
    inventory: inventory.Inventory
    held: tuple[planner.Placement, ...]


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to record on the serving."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to change. ``status`` is a merge patch for the status subresource, None when nothing changed.

    ``apply`` is ordered (ComputeDomains before the LeaderWorkerSets whose pods claim them); ``delete`` holds
    observed objects (with their uid) so the adapter can delete with a uid precondition.
    """

    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[Mapping[str, Any], ...] = ()
    status: dict[str, Any] | None = None
    events: tuple[Event, ...] = ()
    placement: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    unplaced: int = 0
    free_nodes: Mapping[str, int] = dataclasses.field(default_factory=dict)  # per domain, once the plan runs
    requeue_after: float | None = None
    creates: tuple[tuple[str, str], ...] = ()  # (kind, name) of applied objects that do not exist yet
    # Groups placed where this serving runs none yet, or groups left unplaced: a choice made against every other
    # serving's groups (``Snapshot.fleet``), so the adapter makes such choices one at a time.
    places_groups: bool = False

    @property
    def writes(self) -> bool:
        return bool(self.apply or self.delete or self.status is not None or self.events)


# ---------------------------------------------------------------------------------------------------------------
# The pass


def reconcile(snap: Snapshot) -> Decision:
    """Decide one pass for ``snap.serving``; see the module docstring."""
    raw = snap.serving
    meta = raw.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return Decision()  # garbage collection removes the children through their owner references
    before = _as_mapping(raw.get("status"))

    review = validation.review(dict(raw))
    serving = review.serving
    if serving is None or review.errors:
        message = "the spec is invalid, nothing was changed: " + _join(review.errors)
        return _frozen(snap, before, reasons.INVALID_SPEC, message)
    missing = [PREREQUISITES[k] for k in _needed_kinds(serving.spec) if k not in snap.served]
    if missing:
        return _frozen(snap, before, reasons.MISSING_PREREQUISITE, "; ".join(missing))

    key = inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)
    uid = serving.metadata.uid or ""
    owned = [c for c in snap.children if ownership.is_child_of(c, key.name, uid)]
    own_sets = [c for c in owned if c.get("kind") == names.LEADER_WORKER_SET.kind]
    domain_label = serving.spec.placement.domain_label

    try:
        view = snap.view if snap.view is not None and snap.view.domain_label == domain_label else None
        view = view or fleet_view(snap, domain_label)
        inv = view.inventory
        demands = planner.demands(serving)
        own_held = _placements_of(key, serving, own_sets, domain_label)
        held = [*own_held, *(p for p in view.held if p.serving != key)]
        plan = planner.plan(inv, demands, held)
        placement = plan.placement(key)
        desired = [_owned_copy(obj, serving) for obj in render.render(serving, placement)]
    except problems.InvalidSpec as err:
        return _frozen(
            snap, before, reasons.INVALID_SPEC, "the spec cannot be rendered, nothing was changed: " + str(err)
        )

    conflicts = _conflicts(desired, snap.foreign)
    if conflicts:
        return _frozen(snap, before, reasons.NAME_CONFLICT, "; ".join(conflicts))

    changes = _diff(desired, owned)
    health = _health(serving, desired, snap, inv, plan)
    status = _status(serving, plan, health, changes, before, snap.now)
    events = [*changes.events(), *_status_events(before, status)]
    if review.warnings and before.get("observedGeneration") != serving.metadata.generation:
        # Accepted but will run badly (validation's warnings): said once per generation.
        events.append(Event("Warning", reasons.SPEC_WARNING, _join(review.warnings)))
    return Decision(
        apply=tuple(changes.apply),
        delete=tuple(changes.delete),
        status=status if _differs(status, before) else None,
        events=tuple(events),
        placement=placement,
        unplaced=plan.unplaced,
        free_nodes={d.key: d.free_after for d in plan.domains},
        requeue_after=REQUEUE_SECONDS if changes.waiting else None,
        creates=tuple(changes.creates),
        places_groups=plan.unplaced > 0 or _grows(own_held, placement),
    )


# ---------------------------------------------------------------------------------------------------------------
# Parsing and checking


def _needed_kinds(spec: models.DeepSeekServingSpec) -> list[str]:
    kinds = [names.LEADER_WORKER_SET.kind]
    if spec.placement.compute_domain and hardware.generation(spec.gpu.value).multi_node_nvlink:
        kinds.append(names.COMPUTE_DOMAIN.kind)
    if spec.monitoring.pod_monitor:
        kinds.append(names.POD_MONITOR.kind)
    return kinds


def _inventory(snap: Snapshot, domain_label: str) -> inventory.Inventory:
    """Nodes and GPU pods as the planner sees them; an object the API server should never return is skipped."""
    ignored: list[problems.Problem] = []
    nodes = [
        n
        for i, o in enumerate(snap.nodes)
        if (n := o if isinstance(o, inventory.Node) else inventory.parse_node(o, f"nodes[{i}]", ignored))
    ]
    pods = (
        snap.bound
        if snap.bound is not None
        else [p for i, o in enumerate(snap.pods) if (p := inventory.parse_pod(o, f"pods[{i}]", ignored))]
    )
    return inventory.build(nodes, pods, domain_label)


# ---------------------------------------------------------------------------------------------------------------
# Placements held now, read from LeaderWorkerSets


def lws_domain(lws: Mapping[str, Any], domain_label: str) -> str | None:
    """The NVLink domain a LeaderWorkerSet is pinned to: render's ``nvlfleet.io/domain-value`` annotation, else
    the one value its required node affinity demands for ``domain_label`` (or the hostname, where NVLink stops at
    the node). None for an unpinned LeaderWorkerSet."""
    value = _as_mapping(_as_mapping(lws.get("metadata")).get("annotations")).get(names.DOMAIN_VALUE_ANNOTATION)
    if isinstance(value, str) and value:
        return value
    spec = _as_mapping(_as_mapping(lws.get("spec")).get("leaderWorkerTemplate"))
    for template_key in ("leaderTemplate", "workerTemplate"):
        pod_spec = _as_mapping(_as_mapping(spec.get(template_key)).get("spec"))
        affinity = _as_mapping(_as_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
        required = _as_mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
        for term in required.get("nodeSelectorTerms") or []:
            for expr in _as_mapping(term).get("matchExpressions") or []:
                expr = _as_mapping(expr)
                values = expr.get("values") or []
                if (
                    expr.get("key") in (domain_label, names.HOSTNAME_LABEL)
                    and expr.get("operator") == "In"
                    and len(values) == 1
                ):
                    return str(values[0])
        selector = _as_mapping(pod_spec.get("nodeSelector"))
        for label in (domain_label, names.HOSTNAME_LABEL):
            if isinstance(selector.get(label), str):
                return str(selector[label])
    return None


def _lws_groups(lws: Mapping[str, Any]) -> tuple[int, int]:
    """(replicas, nodes per group) of a LeaderWorkerSet."""
    spec = _as_mapping(lws.get("spec"))
    replicas = spec.get("replicas", 1)
    size = _as_mapping(spec.get("leaderWorkerTemplate")).get("size", 1)
    return (replicas if isinstance(replicas, int) else 1), (size if isinstance(size, int) else 1)


def _placements_of(
    key: inventory.ServingKey, serving: models.DeepSeekServing, own_sets: Iterable[Mapping[str, Any]], label: str
) -> list[planner.Placement]:
    """This serving's groups per role and domain, from its LeaderWorkerSets (roles its spec still has)."""
    roles = {role.value: spec for role, spec in serving.spec.roles_present()}
    groups: dict[str, dict[str, int]] = {}
    for lws in own_sets:
        role = _as_mapping(_as_mapping(lws.get("metadata")).get("labels")).get(names.ROLE_LABEL)
        domain = lws_domain(lws, label)
        if role not in roles or domain is None:
            continue
        replicas, _ = _lws_groups(lws)
        per = groups.setdefault(role, {})
        per[domain] = per.get(domain, 0) + replicas
    return [
        planner.Placement(
            serving=key,
            role=role,
            nodes_per_group=models.role_topology(serving.spec.gpu, roles[role]).nodes_per_group,
            groups={d: g for d, g in sorted(per.items()) if g > 0},
        )
        for role, per in sorted(groups.items())
    ]


def _grows(held: Iterable[planner.Placement], placement: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether ``placement`` has more groups in some role and domain than this serving holds there now."""
    now = {(p.role, domain): groups for p in held for domain, groups in p.groups.items()}
    return any(groups > now.get((role, domain), 0) for role, per in placement.items() for domain, groups in per.items())


def fleet_view(snap: Snapshot, domain_label: str) -> FleetView:
    """The cluster-wide half of a pass for servings whose NVLink domains are ``domain_label``'s values."""
    return FleetView(domain_label, _inventory(snap, domain_label), tuple(_held(snap.fleet, domain_label)))


def _held(fleet: Iterable[Mapping[str, Any]], label: str) -> list[planner.Placement]:
    """Every serving's groups per role and domain, from the LeaderWorkerSets nvlfleet made for them."""
    held: dict[inventory.RoleKey, tuple[int, dict[str, int]]] = {}
    for lws in fleet:
        meta = _as_mapping(lws.get("metadata"))
        labels = _as_mapping(meta.get("labels"))
        name, role = labels.get(names.SERVING_LABEL), labels.get(names.ROLE_LABEL)
        if (
            labels.get(names.MANAGED_BY_LABEL) != names.MANAGED_BY
            or not isinstance(name, str)
            or not isinstance(role, str)
        ):
            continue
        owner = inventory.RoleKey(inventory.ServingKey(str(meta.get("namespace", "default")), name), role)
        domain = lws_domain(lws, label)
        if domain is None:
            continue
        replicas, size = _lws_groups(lws)
        _, per = held.setdefault(owner, (size, {}))
        per[domain] = per.get(domain, 0) + replicas
    return [
        planner.Placement(owner.serving, owner.role, npg, {d: g for d, g in sorted(per.items()) if g > 0})
        for owner, (npg, per) in sorted(held.items())
    ]


# ---------------------------------------------------------------------------------------------------------------
# Desired children and the difference to what is there


def _owned_copy(obj: Mapping[str, Any], serving: models.DeepSeekServing) -> dict[str, Any]:
    """The rendered child with nvlfleet's labels, the controller owner reference and the applied hash."""
    child: dict[str, Any] = json.loads(json.dumps(obj))  # a deep copy of plain JSON data
    meta = child.setdefault("metadata", {})
    meta.setdefault("namespace", serving.metadata.namespace)
    meta["labels"] = {
        **meta.get("labels", {}),
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
        names.SERVING_LABEL: serving.metadata.name,
    }
    meta["ownerReferences"] = [ownership.owner_reference(serving.metadata.name, serving.metadata.uid or "")]
    annotations = {
        k: v
        for k, v in meta.get("annotations", {}).items()
        if k not in (names.APPLIED_HASH_ANNOTATION, names.SPEC_HASH_ANNOTATION)
    }
    if child.get("kind") == names.COMPUTE_DOMAIN.kind:
        annotations[names.SPEC_HASH_ANNOTATION] = _hash(child.get("spec"))
    meta["annotations"] = annotations
    annotations[names.APPLIED_HASH_ANNOTATION] = _hash(child)
    return child


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _ident(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(obj.get("kind")), str(_as_mapping(obj.get("metadata")).get("name"))


def contains(want: object, have: object) -> bool:
    """Whether ``have`` holds everything ``want`` says: maps by key, lists item by item, scalars equal.

    What the API server or another controller added (defaults, status, clusterIP) is not a difference.
    """
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and contains(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(contains, want, have))
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if isinstance(want, int | float) and isinstance(have, int | float):
        return float(want) == float(have)
    return want == have


@dataclasses.dataclass
class _Changes:
    apply: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    delete: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    creates: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    updates: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    recreates: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    pruned: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    waiting: bool = False

    def events(self) -> list[Event]:
        out = []
        if self.creates or self.updates:
            parts = [f"created {_names(self.creates)}"] if self.creates else []
            parts += [f"updated {_names(self.updates)}"] if self.updates else []
            out.append(Event("Normal", reasons.APPLIED, "; ".join(parts)))
        if self.recreates:
            out.append(
                Event(
                    "Normal",
                    reasons.RECREATING,
                    f"deleted {_names(self.recreates)} to recreate it: a ComputeDomain spec is immutable",
                )
            )
        if self.pruned:
            out.append(Event("Normal", reasons.PRUNED, f"deleted {_names(self.pruned)}: no longer part of the plan"))
        return out


def _diff(desired: Sequence[dict[str, Any]], owned: Sequence[Mapping[str, Any]]) -> _Changes:
    changes = _Changes()
    have = {_ident(o): o for o in owned}
    wanted = {_ident(d) for d in desired}
    for want in desired:
        ident = _ident(want)
        old = have.get(ident)
        if old is None:
            changes.apply.append(want)
            changes.creates.append(ident)
        elif _as_mapping(old.get("metadata")).get("deletionTimestamp"):
            changes.waiting = True  # being deleted (a ComputeDomain being recreated): create it once it is gone
        elif ident[0] == names.COMPUTE_DOMAIN.kind and _spec_changed(want, old):
            changes.delete.append(old)
            changes.recreates.append(ident)
            changes.waiting = True
        elif not contains(want, old):
            changes.apply.append(want)
            changes.updates.append(ident)
    for ident, old in sorted(have.items()):
        if ident not in wanted and not _as_mapping(old.get("metadata")).get("deletionTimestamp"):
            changes.delete.append(old)
            changes.pruned.append(ident)
    return changes


def _spec_changed(want: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    recorded = _as_mapping(_as_mapping(old.get("metadata")).get("annotations")).get(names.SPEC_HASH_ANNOTATION)
    if recorded is not None:
        return bool(recorded != _hash(want.get("spec")))
    return not contains(want.get("spec"), old.get("spec"))


def _conflicts(desired: Sequence[Mapping[str, Any]], foreign: Sequence[Mapping[str, Any]]) -> list[str]:
    wanted = {_ident(d) for d in desired}
    return [
        f"{kind} {name} already exists and was not created by nvlfleet for this serving; nvlfleet leaves it "
        "alone — delete or rename it"
        for kind, name in sorted({_ident(f) for f in foreign} & wanted)
    ]


# ---------------------------------------------------------------------------------------------------------------
# Health of the groups: which are ready, which are hurt and why


@dataclasses.dataclass(frozen=True)
class _Health:
    ready_groups: int
    placed_groups: int
    rolling: tuple[str, ...]  # LeaderWorkerSets still updating their groups
    not_ready: tuple[str, ...]  # one sentence per role and domain with groups not ready
    hurt: tuple[str, ...]  # one sentence per group that lost a node, crash-loops, or waits for a node


def _health(
    serving: models.DeepSeekServing,
    desired: Sequence[Mapping[str, Any]],
    snap: Snapshot,
    inv: inventory.Inventory,
    plan: planner.Plan,
) -> _Health:
    namespace, name = serving.metadata.namespace, serving.metadata.name
    label = serving.spec.placement.domain_label
    nodes = {n.name: n for n in inv.nodes}
    pods: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in snap.pods:
        meta = _as_mapping(pod.get("metadata"))
        labels = _as_mapping(meta.get("labels"))
        if meta.get("namespace", "default") != namespace or labels.get(names.SERVING_LABEL) != name:
            continue
        if meta.get("deletionTimestamp"):
            continue
        group = (str(labels.get(names.LWS_NAME_LABEL)), str(labels.get(names.LWS_GROUP_INDEX_LABEL)))
        pods.setdefault(group, []).append(pod)
    observed_sets = {_ident(c)[1]: c for c in snap.children if c.get("kind") == names.LEADER_WORKER_SET.kind}
    short = {d.key: d.short for d in plan.domains if d.short > 0}

    ready = placed = 0
    rolling: list[str] = []
    not_ready: list[str] = []
    hurt: list[str] = []
    for lws in desired:
        if lws.get("kind") != names.LEADER_WORKER_SET.kind:
            continue
        lws_name = _ident(lws)[1]
        role = str(_as_mapping(_as_mapping(lws.get("metadata")).get("labels")).get(names.ROLE_LABEL, "engine"))
        domain = lws_domain(lws, label) or "unpinned"
        where = f"{role} in domain {inventory.short_domain(domain)}"
        replicas, size = _lws_groups(lws)
        placed += replicas
        here_ready = 0
        for index in range(replicas):
            members = pods.get((lws_name, str(index)), [])
            problems_ = [p for m in members if (p := _pod_trouble(m, nodes)) is not None]
            if problems_:
                hurt.append(f"{role} group {index} in domain {inventory.short_domain(domain)}: {problems_[0]}")
            elif len(members) == size and all(_pod_ready(m) for m in members):
                here_ready += 1
        ready += here_ready
        if here_ready < replicas:
            not_ready.append(f"{where}: {here_ready}/{replicas} groups ready")
        if domain in short and here_ready < replicas:
            hurt.append(
                f"{where}: {replicas - here_ready} of its groups wait for nodes; the domain is short of "
                f"{_n(short[domain], 'node')} for the groups placed there"
            )
        observed = observed_sets.get(lws_name)
        if observed is not None and _rolling(observed):
            updated = _as_mapping(observed.get("status")).get("updatedReplicas", 0)
            rolling.append(f"{where}: {updated}/{replicas} groups updated")
    return _Health(ready, placed, tuple(rolling), tuple(not_ready), tuple(hurt))


def _rolling(lws: Mapping[str, Any]) -> bool:
    """Whether the LeaderWorkerSet controller is still rolling groups to its latest template (or has not yet
    looked at the latest generation)."""
    meta, status = _as_mapping(lws.get("metadata")), _as_mapping(lws.get("status"))
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return True
    return any(
        _as_mapping(c).get("type") == "UpdateInProgress" and _as_mapping(c).get("status") == "True"
        for c in status.get("conditions") or []
    )


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in _as_mapping(pod.get("status")).get("conditions") or []:
        cond = _as_mapping(cond)
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _pod_trouble(pod: Mapping[str, Any], nodes: Mapping[str, inventory.Node]) -> str | None:
    """Why a pod of a placed group cannot serve, for the Degraded condition; None when nothing is wrong yet."""
    meta = _as_mapping(pod.get("metadata"))
    node_name = _as_mapping(pod.get("spec")).get("nodeName")
    status = _as_mapping(pod.get("status"))
    pod_name = meta.get("name")
    if isinstance(node_name, str) and node_name:
        node = nodes.get(node_name)
        if node is None:
            return f"pod {pod_name} is on node {node_name}, which is gone"
        if not node.ready:
            return f"pod {pod_name} is on node {node_name}, which is NotReady"
    if status.get("phase") == "Failed":
        return f"pod {pod_name} failed ({status.get('reason') or 'no reason given'})"
    for container in status.get("containerStatuses") or []:
        waiting = _as_mapping(_as_mapping(_as_mapping(container).get("state")).get("waiting"))
        if waiting.get("reason") in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerError"):
            return f"pod {pod_name}: container {_as_mapping(container).get('name')} is in {waiting['reason']}"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Status and events


def _status(
    serving: models.DeepSeekServing,
    plan: planner.Plan,
    health: _Health,
    changes: _Changes,
    before: Mapping[str, Any],
    now: datetime.datetime,
) -> dict[str, Any]:
    key = inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)
    generation = serving.metadata.generation
    roles = [plan.role(key, role.value) for role, _ in serving.spec.roles_present()]
    desired = sum(r.groups for r in roles)
    placed = sum(r.placed_groups for r in roles)
    unplaced = sum(r.unplaced for r in roles)
    gpus_per_node = hardware.generation(serving.spec.gpu.value).gpus_per_node
    gpus = sum(r.placed_groups * r.nodes_per_group * gpus_per_node for r in roles)
    ready = health.ready_groups

    capacity = [reason for r in roles if r.unplaced for reason in r.reasons[:1]]
    fleet_note = next((r.reasons[-1] for r in roles if r.unplaced and len(r.reasons) > 1), None)
    placed_text = "; ".join(_placed_sentence(r) for r in roles) or "no roles"
    conds: dict[str, tuple[Status, str, str]] = {}
    if unplaced:
        text = "; ".join(capacity) + (f" ({fleet_note})" if fleet_note else "")
        conds[reasons.PLACED] = (
            "False",
            reasons.INSUFFICIENT_CAPACITY,
            f"{placed}/{desired} groups placed: {placed_text}",
        )
        conds[reasons.INSUFFICIENT_CAPACITY] = ("True", reasons.NOT_ENOUGH_FREE_NODES, text)
    else:
        conds[reasons.PLACED] = ("True", reasons.ALL_GROUPS_PLACED, placed_text)
        conds[reasons.INSUFFICIENT_CAPACITY] = (
            "False",
            reasons.FITS,
            f"every group fits: {_n(desired, 'group')} placed",
        )
    if health.hurt:
        conds[reasons.DEGRADED] = ("True", reasons.GROUPS_UNHEALTHY, "; ".join(health.hurt))
    else:
        conds[reasons.DEGRADED] = ("False", reasons.HEALTHY, "no group has lost a node or crashed")
    busy = bool(changes.apply or changes.delete or changes.waiting)
    if busy or health.rolling or ready < placed:
        detail = [*health.rolling, *health.not_ready] or ["applying the children"]
        reason = (
            reasons.ROLLING_UPDATE if health.rolling else (reasons.APPLYING if busy else reasons.WAITING_FOR_GROUPS)
        )
        conds[reasons.PROGRESSING] = ("True", reason, f"{ready}/{placed} placed groups ready; " + "; ".join(detail))
    else:
        tail = f"; {_n(unplaced, 'group')} wait for capacity" if unplaced else ""
        conds[reasons.PROGRESSING] = ("False", reasons.COMPLETE, f"all {_n(placed, 'placed group')} ready{tail}")
    if ready == desired:
        reason = reasons.ALL_GROUPS_READY if desired else reasons.SCALED_TO_ZERO
        conds[reasons.READY] = ("True", reason, f"{ready}/{desired} groups ready, {gpus} GPUs")
    else:
        reason = (
            reasons.INSUFFICIENT_CAPACITY
            if unplaced
            else (reasons.DEGRADED if health.hurt else reasons.GROUPS_NOT_READY)
        )
        conds[reasons.READY] = ("False", reason, f"{ready}/{desired} groups ready")

    return {
        "observedGeneration": generation,
        "conditions": _conditions(conds, before, generation, now),
        "placement": plan.placement(key),
        "ready": f"{ready}/{desired}",
        "readyGroups": ready,
        "desiredGroups": desired,
        "gpus": gpus,
    }


def _placed_sentence(r: planner.RolePlan) -> str:
    if not r.placed:
        return f"{r.role}: no group placed"
    where = ", ".join(f"{g} in domain {inventory.short_domain(d)}" for d, g in r.placed.items())
    return f"{r.role}: {_n(r.placed_groups, 'group')} of {_n(r.nodes_per_group, 'node')} ({where})"


def _frozen(snap: Snapshot, before: Mapping[str, Any], reason: str, message: str) -> Decision:
    """The fleet is left as it is; the conditions say why."""
    generation = _as_mapping(snap.serving.get("metadata")).get("generation")
    previous = {c.get("type"): c for c in _old_conditions(before)}
    conds: dict[str, tuple[Status, str, str]] = {
        reasons.READY: ("False", reason, message),
        reasons.PROGRESSING: ("False", reason, "the fleet is left as it is until this is fixed"),
    }
    for ctype in (reasons.PLACED, reasons.DEGRADED, reasons.INSUFFICIENT_CAPACITY):
        old = previous.get(ctype)
        if old is not None:
            conds[ctype] = (old.get("status", "Unknown"), old.get("reason", ""), old.get("message", ""))
        else:
            conds[ctype] = ("Unknown", reason, "not evaluated: " + message)
    status: dict[str, Any] = {
        "observedGeneration": generation if isinstance(generation, int) else None,
        "conditions": _conditions(conds, before, generation if isinstance(generation, int) else None, snap.now),
    }
    for field in ("placement", "ready", "readyGroups", "desiredGroups", "gpus"):
        status[field] = before.get(field)
    return Decision(
        status=status if _differs(status, before) else None,
        events=tuple(_status_events(before, status)),
        placement=_as_mapping(before.get("placement")),
    )


def _conditions(
    conds: Mapping[str, tuple[Status, str, str]],
    before: Mapping[str, Any],
    generation: int | None,
    now: datetime.datetime,
) -> list[dict[str, Any]]:
    previous = {c.get("type"): c for c in _old_conditions(before)}
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = []
    for ctype in reasons.CONDITION_TYPES:
        status, reason, message = conds[ctype]
        old = previous.get(ctype)
        keep = old is not None and old.get("status") == status and old.get("lastTransitionTime")
        out.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": old["lastTransitionTime"] if keep and old is not None else stamp,
                "observedGeneration": generation,
            }
        )
    return out


def _status_events(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Event]:
    """Events for what changed between two statuses: a new placement, a condition turning or a new reason."""
    old = {c.get("type"): c for c in _old_conditions(before)}
    new = {c["type"]: c for c in after["conditions"]}
    out: list[Event] = []

    def turned(ctype: str) -> bool:
        prev = old.get(ctype)
        return prev is None or prev.get("status") != new[ctype]["status"] or prev.get("reason") != new[ctype]["reason"]

    def said(ctype: str) -> bool:
        prev = old.get(ctype)
        return turned(ctype) or (prev is not None and prev.get("message") != new[ctype]["message"])

    placement = after.get("placement")
    if placement and placement != before.get("placement"):
        out.append(Event("Normal", reasons.PLACED, new[reasons.PLACED]["message"]))
    ready = new[reasons.READY]
    if ready["reason"] in reasons.FREEZES and said(reasons.READY):
        out.append(Event("Warning", ready["reason"], ready["message"]))
    if new[reasons.INSUFFICIENT_CAPACITY]["status"] == "True" and said(reasons.INSUFFICIENT_CAPACITY):
        out.append(Event("Warning", reasons.INSUFFICIENT_CAPACITY, new[reasons.INSUFFICIENT_CAPACITY]["message"]))
    if new[reasons.DEGRADED]["status"] == "True" and said(reasons.DEGRADED):
        out.append(Event("Warning", reasons.DEGRADED, new[reasons.DEGRADED]["message"]))
    if new[reasons.DEGRADED]["status"] == "False" and (old.get(reasons.DEGRADED) or {}).get("status") == "True":
        out.append(Event("Normal", reasons.RECOVERED, "every placed group is healthy again"))
    if ready["status"] == "True" and turned(reasons.READY):
        out.append(Event("Normal", reasons.READY, ready["message"]))
    return out


def _differs(status: Mapping[str, Any], before: Mapping[str, Any]) -> bool:
    return any(status.get(k) != before.get(k) for k in STATUS_KEYS if k in status)


def _old_conditions(before: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in before.get("conditions") or [] if isinstance(c, Mapping)]


# ---------------------------------------------------------------------------------------------------------------
# Small helpers


def _as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _join(found: Sequence[problems.Problem]) -> str:
    return "; ".join(str(p) for p in sorted(found))


def _names(idents: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{kind} {name}" for kind, name in idents)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
