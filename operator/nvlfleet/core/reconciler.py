"""The reconcile decision: from one observed snapshot of the cluster to what must change, as plain data.

Pure core, the heart of the operator's data flow:

    snapshot (serving, its children, nodes, GPU pods, every nvlfleet LeaderWorkerSet, served APIs, now)
      → validate → inventory → what runs (``leaderworkersets``) → plan → render → diff against what is there
      → health of the groups (``health``) → status and events (``report``)
      → Decision (objects to apply, objects to delete, the status merge patch, the events)

``nvlfleet.adapters.main`` gathers the snapshot through ``nvlfleet.adapters.kube`` and carries the decision
out; this module does no I/O, reads no clock (``now`` is an input) and never raises on bad input: a spec it
cannot honour becomes a condition with a sentence a person understands. Running it twice on the same snapshot
gives the same decision, and on the state its own decision produced it decides nothing (no writes, no events):
that is what makes the periodic re-check free.

Decisions worth knowing:

* **What is running is the truth.** A serving's current placement is read from its LeaderWorkerSets (one per
  role and NVLink domain), not from its status, so a restart mid-rollout or a lost status write re-plans from
  the cluster as it is (``leaderworkersets``). Other servings' LeaderWorkerSets hold their capacity, including
  groups whose pods are not scheduled yet, so two servings planned one after the other never over-commit a rack.
* **Apply only what differs.** Every child carries ``nvlfleet.io/applied-hash``; a child is applied when it is
  missing or when what nvlfleet renders is not contained in what the API server returns (the hash changed, or
  someone edited a field nvlfleet owns). Defaults the server or another controller add are not a difference.
* **ComputeDomain specs are immutable.** When one changes, the old object is deleted and the new one created on a
  later pass, once the old one is gone (``requeue_after``); it is never patched. One ComputeDomain serves every
  role of the serving in its NVLink domain, so it is pruned only once no group of the serving is left there.
* **Only nvlfleet's own children are touched.** A child counts as this serving's when it has nvlfleet's
  managed-by and serving labels *and* a controller owner reference to the serving's uid (``api.ownership``, the
  same rule ``adapters.kube`` checks before it deletes). Anything else with a
  name nvlfleet wants is a conflict reported on the serving, never overwritten.
* **An invalid spec or a missing prerequisite (LWS, ComputeDomain or PodMonitor API) freezes the fleet**: the
  running children are left exactly as they are and the conditions say why, rather than pruning a working fleet
  because of a typo.
* **The status is typed** (``servingstatus.DeepSeekServingStatus``, built by ``report``) and written as a merge
  patch of the fields the reconciler owns (``servingstatus.RECONCILED``), only when one of them changed; the
  telemetry fields are written apart. Events are emitted only for decisions that change a running fleet or need
  a person (an update, a repair, a prune, a move to a new placement, a warning condition, a recovery), so a quiet
  fleet produces none, and a new serving's rollout is told by its status alone (its children, its placement, its
  readiness): a new serving costs its children and its status writes, nothing more.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nvlfleet.api import models, names, objects, ownership, problems, reasons, servingstatus
from nvlfleet.api import policy as policy_
from nvlfleet.core import (
    autoscaling,
    demands,
    fieldsets,
    health,
    identities,
    inventory,
    kubeobjects,
    leaderworkersets,
    placements,
    planner,
    render,
    report,
    routerstatus,
    validation,
)
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


# How soon to look again while waiting for something only time brings (an old ComputeDomain to go away).
REQUEUE_SECONDS = 2.0


# ---------------------------------------------------------------------------------------------------------------
# Inputs and outputs


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything one reconcile pass looks at, as the API server returned it (plain dicts).

    ``children``: objects labelled as this serving's children, of every child kind. ``nodes``: Node objects, or
    nodes the adapter already parsed (``kubeobjects.parse_node``, once per watch event rather than every pass).
    ``pods``: pods requesting GPUs (bound or not), among them every one of this serving's own: the adapter hands
    only those, a caller may hand the cluster's (only the serving's own are looked at, except to build the inventory
    when ``bound`` is None); ``bound``: the cluster's GPU pods as the adapter already parsed them
    (``kubeobjects.parse_pod``, once per watch event), or None to parse ``pods`` here. ``fleet``: the
    LeaderWorkerSets of every nvlfleet serving (whole, or trimmed to metadata, replicas, size and pod placement).
    ``served``: the child kinds whose API is installed. ``foreign``: objects found under a name this serving wants
    that nvlfleet did not create for it. ``events``: Events in the serving's namespace about its StatefulSets (a pod
    the API server refuses to create is said only there; see ``health``) and its ScaledObject (why KEDA's scaler
    fails; see ``autoscaling``). ``view``: nodes, pods and fleet digested (``fleet_view``) by an earlier pass over
    the same objects; used when its domain label is the serving's, else computed here.
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
    policy: policy_.Policy = policy_.DEFAULT  # what the cluster admin lets a serving ask for
    live_servings: frozenset[str] | None = None  # uids of the servings that exist, when the adapter knows them
    events: Sequence[Mapping[str, Any]] = ()
    prometheus_address: str | None = None  # what a ScaledObject queries when spec.autoscaling names none


# In FleetView's body ``inventory`` is its field, not the module.
_ServingKey = inventory.ServingKey


@dataclasses.dataclass(frozen=True, eq=False)
class FleetView:
    """The cluster-wide half of a pass: the inventory (nodes with their GPU pods) and every serving's groups
    (from ``Snapshot.fleet``), for one domain label. It is the same for every serving's pass until a node, a GPU
    pod or a LeaderWorkerSet changes, so the adapter may compute it once (``fleet_view``) and hand it to many
    passes (``Snapshot.view``) instead of each pass rebuilding it from a thousand objects."""

    domain_label: str
    inventory: inventory.Inventory
    held: tuple[placements.Placement, ...]
    # The view before, whose sums this one's are made from where few placements and roles' pods changed
    # (``fleet_view``); let go of once they are made, so views never chain.
    base: FleetView | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def summed(self) -> placements.Held:
        """``held`` summed per domain (``placements.held``), once per view: a pass plans its serving against the
        others' sums less its own, not against every other serving's placement (a thousand per pass). Made from
        the view before's where few changed (``Held.moved``)."""
        return self._sums[0]

    @functools.cached_property
    def _sums(self) -> tuple[placements.Held, Mapping[_ServingKey, tuple[placements.Placement, ...]]]:
        """``summed``, and each serving's placements (for ``others``)."""
        base = self.base
        object.__setattr__(self, "base", None)  # views never chain
        moved = _moved(base, self) if base is not None else None
        if moved is None:
            by: dict[_ServingKey, list[placements.Placement]] = {}
            for p in self.held:
                by.setdefault(p.serving, []).append(p)
            return placements.held(self.inventory, self.held), {key: tuple(found) for key, found in by.items()}
        gone, came = moved
        summed, index = base._sums  # type: ignore[union-attr]
        index = dict(index)
        for serving in {p.serving for p in gone} | {p.serving for p in came}:
            roles = {p.role: p for p in index.get(serving, ())}
            for p in gone:
                if p.serving == serving:
                    roles.pop(p.role, None)
            for p in came:
                if p.serving == serving:
                    roles[p.role] = p
            if roles:
                index[serving] = tuple(roles[r] for r in sorted(roles))
            else:
                index.pop(serving, None)
        return summed.moved(self.inventory, gone, came), index

    def others(self, key: _ServingKey) -> placements.Held:
        """What every serving but ``key`` holds, summed: ``summed`` less ``key``'s own placements, found through
        an index built once per view (a pass does not scan the fleet's thousand placements for its own)."""
        return self.summed.without(self._sums[1].get(key, ()))


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to change. ``status`` is a merge patch for the status subresource, None when nothing changed.

    ``apply`` is ordered (ComputeDomains before the LeaderWorkerSets whose pods claim them); ``delete`` holds
    observed objects (with their uid) so the adapter can delete with a uid precondition.
    """

    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[Mapping[str, Any], ...] = ()
    # Children to update (PUT, with their resourceVersion) before anything is applied: observed objects without
    # the spec fields other field managers set (``fieldsets``), which no apply would remove.
    replace: tuple[dict[str, Any], ...] = ()
    status: dict[str, Any] | None = None
    events: tuple[report.Event, ...] = ()
    placement: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    unplaced: int = 0
    free_nodes: Mapping[str, int] = dataclasses.field(default_factory=dict)  # per domain, once the plan runs
    requeue_after: float | None = None
    creates: tuple[tuple[str, str], ...] = ()  # (kind, name) of applied objects that do not exist yet
    # Groups placed where this serving runs none yet, or groups left unplaced: a choice made against every other
    # serving's groups (``Snapshot.fleet``), so the adapter makes such choices one at a time.
    places_groups: bool = False
    # Per role, (desired, ready) groups of a pass that planned (prefill as it follows decode); for the gauges.
    groups: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    max_groups: int | None = None  # spec.autoscaling.maxGroups of an autoscaled serving

    @property
    def writes(self) -> bool:
        return bool(self.apply or self.delete or self.replace or self.status is not None or self.events)


# ---------------------------------------------------------------------------------------------------------------
# The pass


def _moved(base: FleetView, view: FleetView) -> tuple[list[placements.Placement], list[placements.Placement]] | None:
    """The placements ``base`` summed that ``view`` does not (``gone``), and the other way round (``came``), each
    of a role whose placement or whose pods changed between them: what ``view``'s sums are made of from
    ``base``'s. None to sum the fleet anew: ``base``'s sums are not made yet, the inventories' domains may differ
    (``view``'s was not made from ``base``'s, ``inventory.Builds``), or much changed."""
    if "_sums" not in base.__dict__ or base.domain_label != view.domain_label:
        return None
    before, now = base.inventory, view.inventory
    changed: set[inventory.RoleKey] = set()
    if before is not now:
        for scope in inventory.SCOPES:
            was, is_ = before.tally(scope), now.tally(scope)
            if was.nodes is not is_.nodes:
                return None
            if was.held is not is_.held:
                changed.update(o for o, where in is_.held.items() if was.held.get(o) is not where)
                changed.update(was.held.keys() - is_.held.keys())
    came, gone = identities.changes(identities.by_identity(base.held), identities.by_identity(view.held))
    if not identities.few(len(gone) + len(came) + len(changed), len(view.held)):
        return None
    changed.difference_update(p.owner for p in gone)
    changed.difference_update(p.owner for p in came)
    index = base._sums[1]
    for owner in changed:  # the same placement, its role's pods moved: counted again on ``view``'s inventory
        p = next((p for p in index.get(owner.serving, ()) if p.role == owner.role), None)
        if p is not None:
            gone.append(p)
            came.append(p)
    return gone, came


def reconcile(snap: Snapshot) -> Decision:
    """Decide one pass for ``snap.serving``; see the module docstring."""
    raw = snap.serving
    meta = raw.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return Decision()  # garbage collection removes the children through their owner references
    before = objects.as_mapping(raw.get("status"))

    review = validation.review(dict(raw), snap.policy)
    if review.serving is None or review.errors:
        message = "the spec is invalid, nothing was changed: " + _join(review.errors)
        return _frozen(snap, before, reasons.INVALID_SPEC, message)
    serving = autoscaling.followed(review.serving)  # prefill follows decode before anything is planned
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
        wanted = demands.of(serving)
        own_held = leaderworkersets.placements_of(key, serving, own_sets, domain_label)
        others = view.others(key)
        plan = planner.plan(inv, wanted, own_held, others)
        placement = plan.placement(key)
        desired = [_owned_copy(obj, serving) for obj in render.render(serving, placement)]
        extra = _autoscaling(snap, serving, desired, owned)
        if (front_door := routerstatus.condition(serving, snap.children, snap.pods)) is not None:
            extra[reasons.ROUTER_READY] = front_door
    except problems.InvalidSpec as err:
        return _frozen(
            snap, before, reasons.INVALID_SPEC, "the spec cannot be rendered, nothing was changed: " + str(err)
        )

    conflicts = _conflicts(desired, snap.foreign)
    if conflicts:
        return _frozen(snap, before, reasons.NAME_CONFLICT, "; ".join(conflicts))

    changes = _diff(desired, owned)
    groups = health.assess(serving, desired, snap.pods, snap.children, inv, plan, snap.events)
    status = report.status(serving, plan, groups, changes.busy, before, snap.now, extra)
    patch = status.merge_patch(servingstatus.RECONCILED)
    events = [*changes.events(first=not before.get("placement")), *report.events(before, status)]
    if review.warnings and before.get("observedGeneration") != serving.metadata.generation:
        # Accepted but will run badly (validation's warnings): said once per generation.
        events.append(report.Event("Warning", reasons.SPEC_WARNING, _join(review.warnings)))
    return Decision(
        apply=tuple(changes.apply),
        delete=tuple(changes.delete),
        replace=tuple(changes.replace),
        status=patch if report.differs(patch, before) else None,
        events=tuple(events),
        placement=placement,
        unplaced=plan.unplaced,
        free_nodes={d.key: d.free_after for d in plan.domains},
        requeue_after=REQUEUE_SECONDS if changes.waiting else None,
        creates=tuple(changes.creates),
        places_groups=plan.unplaced > 0 or _grows(own_held, placement),
        groups={
            role.value: (plan.role(key, role.value).groups, groups.ready_by_role.get(role.value, 0))
            for role, _ in serving.spec.roles_present()
        },
        max_groups=serving.spec.autoscaling.max_groups if serving.spec.autoscaling is not None else None,
    )


# ---------------------------------------------------------------------------------------------------------------
# Parsing and checking


def _autoscaling(
    snap: Snapshot, serving: models.DeepSeekServing, desired: list[dict[str, Any]], owned: Sequence[Mapping[str, Any]]
) -> report.Conditions:
    """The Autoscaling condition of a serving with spec.autoscaling, adding its ScaledObject to ``desired`` when it
    can be rendered; the condition reads what KEDA reports on the ScaledObject among the serving's ``owned``
    children. Without spec.autoscaling no ScaledObject is desired, so one left from before is pruned."""
    if serving.spec.autoscaling is None:
        return {}
    prometheus = autoscaling.address(serving.spec, snap.prometheus_address)
    if autoscaling.blocked(serving.spec, snap.served, snap.prometheus_address) is None and prometheus is not None:
        desired.append(_owned_copy(autoscaling.scaled_object(serving, prometheus), serving))
    ident = (names.SCALED_OBJECT.kind, serving.metadata.name)
    observed = next((c for c in owned if _ident(c) == ident), None)
    return {
        reasons.AUTOSCALING: autoscaling.condition(serving, snap.served, snap.prometheus_address, observed, snap.events)
    }


def _needed_kinds(spec: models.DeepSeekServingSpec) -> list[str]:
    kinds = [names.LEADER_WORKER_SET.kind]
    if spec.placement.compute_domain and hardware.generation(spec.gpu.value).multi_node_nvlink:
        kinds.append(names.COMPUTE_DOMAIN.kind)
    if spec.monitoring.pod_monitor:
        kinds.append(names.POD_MONITOR.kind)
    return kinds


def _inventory(snap: Snapshot, domain_label: str, builds: inventory.Builds | None = None) -> inventory.Inventory:
    """Nodes and GPU pods as the planner sees them; an object the API server should never return is skipped.
    ``builds``: the inventories built before, which this one is made from where it can (``inventory.Builds``)."""
    ignored: list[problems.Problem] = []
    nodes: Sequence[inventory.Node] = (
        snap.nodes  # type: ignore[assignment] # parsed already, as the adapter's index holds them
        if set(map(type, snap.nodes)) <= {inventory.Node}  # at C speed: a view of a thousand nodes is made often
        else [
            n
            for i, o in enumerate(snap.nodes)
            if (n := o if isinstance(o, inventory.Node) else kubeobjects.parse_node(o, f"nodes[{i}]", ignored))
        ]
    )
    pods = (
        snap.bound
        if snap.bound is not None
        else [p for i, o in enumerate(snap.pods) if (p := kubeobjects.parse_pod(o, f"pods[{i}]", ignored))]
    )
    return builds.build(nodes, pods, domain_label) if builds is not None else inventory.build(nodes, pods, domain_label)


# ---------------------------------------------------------------------------------------------------------------
# The cluster-wide half of a pass, and what this serving holds


def _grows(held: Iterable[placements.Placement], placement: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether ``placement`` has more groups in some role and domain than this serving holds there now."""
    now = {(p.role, domain): groups for p in held for domain, groups in p.groups.items()}
    return any(groups > now.get((role, domain), 0) for role, per in placement.items() for domain, groups in per.items())


def fleet_view(
    snap: Snapshot,
    domain_label: str,
    holds: leaderworkersets.Holds | None = None,
    builds: inventory.Builds | None = None,
    base: FleetView | None = None,
) -> FleetView:
    """The cluster-wide half of a pass for servings whose NVLink domains are ``domain_label``'s values (``holds``
    and ``builds``: what the adapter remembers between views of each LeaderWorkerSet, ``leaderworkersets.Holds``,
    and of the inventory, ``inventory.Builds``); ``base``: the view before, whose sums this one's are made from
    where that is cheaper (``FleetView.summed``)."""
    return FleetView(
        domain_label,
        _inventory(snap, domain_label, builds),
        tuple(leaderworkersets.held(snap.fleet, domain_label, snap.live_servings, holds)),
        base if base is not None and "_sums" in base.__dict__ else None,  # else it may hold its own base
    )


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
    return str(obj.get("kind")), str(objects.as_mapping(obj.get("metadata")).get("name"))


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
    replace: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    reverted: list[tuple[tuple[str, str], fieldsets.Foreign]] = dataclasses.field(default_factory=list)
    waiting: bool = False

    @property
    def busy(self) -> bool:
        """Whether anything is being applied, deleted or waited for."""
        return bool(self.apply or self.delete or self.replace or self.waiting)

    def events(self, first: bool) -> list[report.Event]:
        """One Event per decision. ``first``: the serving's first rollout, whose children and placement the status
        tells (an Event per new serving would be writes that say nothing the status does not)."""
        out = []
        creates = [] if first else self.creates
        if creates or self.updates:
            parts = [f"created {_names(creates)}"] if creates else []
            parts += [f"updated {_names(self.updates)}"] if self.updates else []
            out.append(report.Event("Normal", reasons.APPLIED, "; ".join(parts)))
        if self.recreates:
            out.append(
                report.Event(
                    "Normal",
                    reasons.RECREATING,
                    f"deleted {_names(self.recreates)} to recreate it: a ComputeDomain spec is immutable",
                )
            )
        for (kind, name), found in self.reverted:
            out.append(
                report.Event(
                    "Warning",
                    reasons.REVERTED,
                    f"removed from {kind} {name} what {', '.join(found.managers)} set and nvlfleet does not render: "
                    + ", ".join(found.paths),
                )
            )
        if self.pruned:
            out.append(
                report.Event("Normal", reasons.PRUNED, f"deleted {_names(self.pruned)}: no longer part of the plan")
            )
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
        elif objects.as_mapping(old.get("metadata")).get("deletionTimestamp"):
            changes.waiting = True  # being deleted (a ComputeDomain being recreated): create it once it is gone
        elif ident[0] == names.COMPUTE_DOMAIN.kind and _spec_changed(want, old):
            changes.delete.append(old)
            changes.recreates.append(ident)
            changes.waiting = True
        elif (found := fieldsets.foreign(old)) is not None:
            changes.replace.append(fieldsets.without_foreign(old))
            changes.reverted.append((ident, found))
            changes.apply.append(want)  # the desired state on top, in case the intruder also changed ours
        elif not contains(want, old):
            changes.apply.append(want)
            changes.updates.append(ident)
    for ident, old in sorted(have.items()):
        if ident not in wanted and not objects.as_mapping(old.get("metadata")).get("deletionTimestamp"):
            changes.delete.append(old)
            changes.pruned.append(ident)
    return changes


def _spec_changed(want: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    recorded = objects.as_mapping(objects.as_mapping(old.get("metadata")).get("annotations")).get(
        names.SPEC_HASH_ANNOTATION
    )
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


def refused(snap: Snapshot, kind: str, name: str, message: str, applied: Sequence[Mapping[str, Any]] = ()) -> Decision:
    """What follows when the API server refuses child ``kind``/``name`` (quota, admission, an invalid field): the
    fleet is left as it is with ``Ready=False, ApplyRefused`` naming the child and the server's reason, and a
    ComputeDomain without its LeaderWorkerSet — created by this pass (``applied``: what the server answered to the
    applies before the refusal) or an earlier one — is deleted, since nothing would ever use it. A ComputeDomain is
    shared by the serving's LeaderWorkerSets in its NVLink domain (both roles), so it stays while one of them is
    there."""
    before = objects.as_mapping(snap.serving.get("status"))
    meta = objects.as_mapping(snap.serving.get("metadata"))
    mine = [
        c
        for c in (*snap.children, *applied)
        if ownership.is_child_of(c, str(meta.get("name")), str(meta.get("uid") or ""))
    ]
    claimed = {_domain_of(c) for c in mine if c.get("kind") == names.LEADER_WORKER_SET.kind}
    orphans = {
        _ident(c): c for c in mine if c.get("kind") == names.COMPUTE_DOMAIN.kind and _domain_of(c) not in claimed
    }
    frozen = _frozen(snap, before, reasons.APPLY_REFUSED, f"the API server refused {kind} {name}: {message}")
    return dataclasses.replace(frozen, delete=tuple(orphans.values()))


def _domain_of(child: Mapping[str, Any]) -> object:
    """The ``nvlfleet.io/domain`` label render puts on a LeaderWorkerSet and on the ComputeDomain it claims."""
    return objects.as_mapping(objects.as_mapping(child.get("metadata")).get("labels")).get(names.DOMAIN_LABEL)


def _frozen(snap: Snapshot, before: Mapping[str, Any], reason: str, message: str) -> Decision:
    """The fleet is left as it is; the conditions say why."""
    status = report.frozen(snap.serving, before, reason, message, snap.now)
    patch = status.merge_patch(servingstatus.RECONCILED)
    return Decision(
        status=patch if report.differs(patch, before) else None,
        events=tuple(report.events(before, status)),
        placement=objects.as_mapping(before.get("placement")),
    )


# ---------------------------------------------------------------------------------------------------------------
# Small helpers


def _join(found: Sequence[problems.Problem]) -> str:
    return "; ".join(str(p) for p in sorted(found))


def _names(idents: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{kind} {name}" for kind, name in idents)
