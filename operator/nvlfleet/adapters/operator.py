"""The reconcile pass runtime: one ``Operator`` per process carries a serving from what is there to what should be.

Adapter, the whole operator data flow for one serving at a time:

    read (kube, and kopf's node/pod/LeaderWorkerSet indexes) → reconciler.reconcile (pure) → apply → prune →
    status → events

and, beside it, the routing of watch events to the servings they affect and the telemetry each pass points at
(``adapters.servingtelemetry``: the scraper's targets, the tokens/s and revenue copied into status).
``nvlfleet.adapters.main`` wires it into kopf; ``nvlfleet run`` builds it.

Choices worth knowing:

* **Passes side by side, placement one at a time.** Passes of one serving run one after the other; passes of
  different servings run side by side (a few at once: they mostly wait on the API server). A pass whose decision
  places new groups (``reconciler.Decision.places_groups``) takes the fleet lock and decides again under it, so
  two servings planned back to back see each other's LeaderWorkerSets and never over-commit a rack.
* **Level-based and quiet.** The reconciler decides from what is there; the periodic re-check (``recheck_all``)
  writes nothing when nothing changed (the reconciler compares rendered children with the observed ones, and the
  status with the observed status), and runs no pass at all for a serving whose inputs (``inputs``: its own
  version, the watch caches', its children's) are those its last pass left, when that pass changed nothing or
  wrote only the status: drift of a child reaches its watch, which nudges the serving. nvlfleet's own Events
  describe decisions.
* **Reads from the watch caches.** A pass reads the serving as last watched (or written), its children from
  kopf's children indexes (one per child kind), nodes and GPU pods from
  kopf's indexes, other servings' LeaderWorkerSets from the index — each merged with this process's own applies
  that the watch has not delivered yet (``caches.Written``). It asks the API server only for the StatefulSet
  Events, and only while a LeaderWorkerSet short of ready groups misses a pod (a refused pod is said only there,
  and is a pod that does not exist: ``passevents``). What a pass derives from the fleet (``reconciler.FleetView``:
  the inventory, every serving's groups) is computed once and shared until one of its objects changes, so a
  thousand passes after a restart do not rebuild it a thousand times.
* **Fenced writes.** With leader election (``nvlfleet.adapters.election``) the operator is given a ``fence``: a
  standby, and a leader whose last Lease renewal is older than the renew deadline, runs no pass and writes nothing,
  so two replicas never both reconcile. A standby that wins the Lease reconciles every serving at once
  (``take_over``): it knows them all from its watch (the ``servings`` index), though it acted on none.
* **Missing prerequisites** (the LWS or ComputeDomain API not installed) are a condition on the serving, not an
  exception, so nothing crash-loops; the re-check notices when the API appears.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import logging
import time
import weakref
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from nvlfleet.adapters import (
    caches,
    connection,
    exporter,
    fleetversion,
    kube,
    nudges,
    passevents,
    passinputs,
    servingtelemetry,
)
from nvlfleet.adapters.config import Config
from nvlfleet.api import names, ownership, reasons
from nvlfleet.core import inventory, leaderworkersets, reconciler

log = logging.getLogger("nvlfleet")

LABEL_VALUE_MAX = 63


@dataclasses.dataclass
class _Known:
    """What the last pass decided for a serving, to route node and pod events to it."""

    domain_label: str
    domains: frozenset[str]
    unplaced: int


class Operator:
    """Process-wide state: the API connection, the lock, what each serving last decided, telemetry."""

    def __init__(self, config: Config, fence: Callable[[], bool] | None = None) -> None:
        self.config = config
        self.api: kube.Api | None = None
        self.fleet_lock = asyncio.Lock()  # held by passes that place groups, see ``reconcile``
        self.passes = asyncio.Semaphore(config.passes_at_once)
        # Weak: a serving's lock lives while a pass holds or awaits it, so deleted servings leave nothing behind.
        self._serving_locks: weakref.WeakValueDictionary[inventory.ServingKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self.known: dict[inventory.ServingKey, _Known] = {}
        self.written = caches.Written()  # LeaderWorkerSets, over the fleet_lws index
        self.applied = caches.Written()  # every child, over the children indexes
        self._pruned: set[str] = set()  # uids this process deleted that the watch still shows
        self._seen: dict[inventory.ServingKey, caches.Packed] = {}  # each serving as last watched or written
        # What the last pass that changed nothing read, per serving: the re-check skips it while that still holds.
        self._settled: dict[inventory.ServingKey, passinputs.Inputs] = {}
        self.diff_bases = caches.DiffBases()
        self.in_flight = nudges.InFlight()  # servings with a pass begun: waiting to start, or running
        # The version of what fleet views read, and the views computed from it (per domain label).
        self.fleet_version = fleetversion.FleetVersion()
        self._views = fleetversion.Views(max_age=config.debounce_seconds / 2)
        self._fleet: tuple[int, list[Mapping[str, Any]]] = (-1, [])  # the merged fleet_lws index, by version
        self._holds = leaderworkersets.Holds()  # what each version of each LeaderWorkerSet holds, between views
        self._builds = inventory.Builds()  # the inventory of the last view, which the next is made from
        self.nudges = nudges.Nudges(config.debounce_seconds)
        self.indices: Mapping[str, Any] = {}
        self.metrics = exporter.OperatorMetrics()
        self.telemetry = servingtelemetry.ServingTelemetry(self.metrics)
        self.tasks: list[asyncio.Task[None]] = []
        self._served: dict[str, tuple[bool, float]] = {}
        # With leader election: False once this replica may have lost the Lease (then it writes nothing).
        self.fence = fence
        self.failures: dict[inventory.ServingKey, str] = {}  # the last refusal reported per serving

    def may_write(self) -> bool:
        return self.fence is None or self.fence()

    def watched(self, namespace: str | None) -> bool:
        return not self.config.namespaces or namespace in self.config.namespaces

    def reconciles(self, namespace: str | None) -> bool:
        """Whether this replica reconciles servings of ``namespace`` now: it watches it and may write."""
        return self.watched(namespace) and self.may_write()

    # -- the pass ---------------------------------------------------------------------------------------------

    async def reconcile(self, key: inventory.ServingKey) -> reconciler.Decision | None:
        """One full pass for one serving. Raises kube.ApiError on API failures.

        Passes of one serving run one after the other; passes of different servings run side by side (up to
        ``Config.passes_at_once``), except that a pass that places groups holds the fleet lock from deciding to
        applying: where new groups go depends on every other serving's groups, so it decides again once it holds
        the lock, from caches that include every group placed before it (``caches.Written``). Status and events are
        written after the lock is released."""
        if not self.may_write():
            return None  # a standby (or a leader past its renew deadline) would write nothing: no pass at all
        with self.in_flight.begin(key) as started:
            if started is None:
                return None  # a pass of this serving has not started yet: it reads what this one would
            return await self._pass(key, started)

    async def _pass(self, key: inventory.ServingKey, started: Callable[[], None]) -> reconciler.Decision | None:
        api = self._api()
        async with self._serving_lock(key), self.passes:
            started()  # from here on, what changes asks for another pass
            with self.metrics.reconciling(key.namespace, key.name):
                packed = self._seen.get(key)
                serving = packed.unpack() if packed is not None else None
                if serving is None:  # not watched yet (or no watch at all): ask
                    serving = await asyncio.to_thread(api.get, names.DEEPSEEK_SERVING, key.namespace, key.name)
                if serving is None:
                    self.forget(key)
                    return None
                read = self.inputs(key, caches.resource_version(serving))
                snap = await asyncio.to_thread(self._observe, api, serving)
                snap, decision, checked = await self._decide(api, serving, snap, frozenset())
                if decision.places_groups:
                    async with self.fleet_lock:
                        snap, decision, _ = await self._decide(api, serving, self._recached(snap), checked)
                        written = await self._carry_out(api, key, serving, snap, decision)
                else:
                    written = await self._carry_out(api, key, serving, snap, decision)
                if not written or not await self._write(api, key, serving, decision, self._report):
                    return None
        self.failures.pop(key, None)
        self._remember(key, serving, decision)
        if decision.requeue_after is not None:
            self.nudges.add(key, decision.requeue_after)
        elif not passevents.needed(snap.children, snap.pods) and read is not None:  # Events: not watched
            settled = self._settled_inputs(key, decision, read)
            if settled is not None:
                self._settled[key] = settled
        return decision

    def _settled_inputs(
        self, key: inventory.ServingKey, decision: reconciler.Decision, read: passinputs.Inputs
    ) -> passinputs.Inputs | None:
        """What a pass of ``key`` will read if nothing changes after ``decision``, when a pass on it would write
        nothing: ``read`` after a pass that wrote nothing; after one that wrote only the status (and its events),
        the same inputs with the serving's version as that write left it — the pass after it would find the status
        it wrote and write nothing, so the re-check need not run it (at start-up, a second pass of every serving).
        None after a pass that applied or deleted children: their watch events say when it has settled."""
        if not decision.writes:
            # The fleet's version was read as if the serving waited for room when this process knew nothing of it
            # yet (its first pass, after every restart); the re-check compares with what it reads now.
            return read if self._waits_for_room(key) else read._replace(fleet=0)
        if decision.apply or decision.delete or decision.replace or decision.status is None:
            return None
        seen = self._seen.get(key)
        return None if seen is None else self.inputs(key, seen.resource_version)

    async def _decide(
        self,
        api: kube.Api,
        serving: Mapping[str, Any],
        snap: reconciler.Snapshot,
        checked: frozenset[tuple[str, str]],
    ) -> tuple[reconciler.Snapshot, reconciler.Decision, frozenset[tuple[str, str]]]:
        """The reconciler's decision, made again when a name it would create is taken by an object that is not
        this serving's (``checked``: names already looked up this pass)."""
        with self.metrics.planning():
            decision = reconciler.reconcile(snap)
        unchecked = frozenset(decision.creates) - checked
        if unchecked:
            foreign = await asyncio.to_thread(self._foreign, api, serving, decision, unchecked)
            checked |= unchecked
            if foreign:
                snap = dataclasses.replace(snap, foreign=[*snap.foreign, *foreign])
                decision = reconciler.reconcile(snap)
        return snap, decision, checked

    async def _write(
        self,
        api: kube.Api,
        key: inventory.ServingKey,
        serving: Mapping[str, Any],
        decision: reconciler.Decision,
        step: Callable[[kube.Api, Mapping[str, Any], reconciler.Decision], None],
    ) -> bool:
        """Carry out one step of a decision in a worker thread; False when this replica may no longer write."""
        if not decision.writes:
            return True
        if not self.may_write():
            log.warning("not writing for %s: this replica may no longer hold the Lease", key)
            return False
        try:
            await asyncio.to_thread(step, api, serving, decision)
        except kube.ApiError as err:
            if not isinstance(err, _Refused):  # a refusal is told by the status and its event (reconciler.refused)
                await asyncio.to_thread(self._report_failure, api, key, serving, err)
            raise
        return True

    def _serving_lock(self, key: inventory.ServingKey) -> asyncio.Lock:
        lock = self._serving_locks.get(key)
        if lock is None:
            lock = self._serving_locks[key] = asyncio.Lock()
        return lock

    def _recached(self, snap: reconciler.Snapshot) -> reconciler.Snapshot:
        """The snapshot with nodes, GPU pods and the fleet read again from the caches (the serving's own
        children stay as listed: only its own passes write them, and they run one at a time), and a view of them
        as they are now."""
        return self._cached(dataclasses.replace(snap, view=None), fresh=True)

    def _cached(self, snap: reconciler.Snapshot, *, fresh: bool) -> reconciler.Snapshot:
        """``snap`` with nodes, GPU pods and the fleet from the watch caches, and their ``reconciler.FleetView``:
        computed once and shared by every pass until what a view reads of those objects changes (``fleetversion``),
        or, unless ``fresh``, for up to half a nudge debounce after (``fleetversion.Views``)."""
        # Read before the caches: a view is never filed under a newer version than its data.
        version = self.fleet_version.value
        lws = names.LEADER_WORKER_SET.kind in snap.served
        if not lws:
            fleet: list[Mapping[str, Any]] = []
        elif self._fleet[0] == version:
            fleet = self._fleet[1]
        else:  # what the index and this process's writes hold changes only with the version (``changed``)
            fleet = self.written.merged(_store(self.indices, "fleet_lws"))
            self._fleet = (version, fleet)
        snap = dataclasses.replace(
            snap,
            nodes=list(_store(self.indices, "fleet_nodes")),
            pods=self._own_pods(snap.serving),
            bound=list(_store(self.indices, "bound_gpu_pods")),
            fleet=list(fleet),
            live_servings=frozenset(_store(self.indices, "live_servings")) if "live_servings" in self.indices else None,
        )
        spec = snap.serving.get("spec")
        placement = (spec.get("placement") or {}) if isinstance(spec, Mapping) else None
        label = placement.get("domainLabel", names.DEFAULT_DOMAIN_LABEL) if isinstance(placement, Mapping) else None
        if not isinstance(label, str):
            return snap  # an invalid spec (the reconciler reports it) or none given: computed by the reconciler
        build = functools.partial(reconciler.fleet_view, snap, label, self._holds, self._builds)
        view = self._views.view(label, version, build, fresh=fresh)
        return dataclasses.replace(snap, view=view)

    def changed(self) -> None:
        """Something fleet views read changed with no summary to compare (this process applied a LeaderWorkerSet,
        a serving appeared or went): views are stale."""
        self.fleet_version.bump()

    def fleet_object_seen(self, kind: str, name: str, summary: Hashable | None) -> None:
        """A GPU pod's or nvlfleet LeaderWorkerSet's watch event, as what views read of it: stale only if that
        changed (``fleetversion``)."""
        self.fleet_version.saw(kind, name, summary)

    def _observe(self, api: kube.Api, serving: Mapping[str, Any]) -> reconciler.Snapshot:
        """What one pass looks at: the serving's children from the API server; nodes, GPU pods and other
        servings' LeaderWorkerSets from the watch caches, the last with this process's own writes the watch has
        not delivered yet (``caches.Written``) — so a pass never plans against a rack as it was before the previous
        one."""
        meta = serving["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        served = frozenset(
            k.kind for k in names.CHILD_KINDS if k in names.BUILTIN_CHILD_KINDS or self._is_served(api, k)
        )
        selector = {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.SERVING_LABEL: name}
        children: list[Mapping[str, Any]] = []
        # A name longer than a label value cannot label a child, so none exists, and the API server would refuse
        # the selector itself (400): skip the lists, and the reconciler reports the name as InvalidSpec.
        labelable = len(name) <= LABEL_VALUE_MAX
        for kind in names.CHILD_KINDS:
            if kind.kind in served and labelable:
                children += self._children(api, kind, namespace, name, selector)
        now = datetime.datetime.now(datetime.UTC)
        snap = reconciler.Snapshot(
            serving=serving,
            now=now,
            children=children,
            served=served,
            policy=self.config.policy,
            prometheus_address=self.config.prometheus_address,
        )
        snap = self._cached(snap, fresh=False)
        if not labelable:
            return snap
        return dataclasses.replace(snap, events=passevents.read(api, namespace, name, children, snap.pods))

    def _children(
        self, api: kube.Api, kind: names.Kind, namespace: str, name: str, selector: Mapping[str, str]
    ) -> list[Mapping[str, Any]]:
        """The serving's children of ``kind``: from the watch's index (with this process's applies it has not
        delivered yet, without what it deleted), else — no index, as outside kopf — listed."""
        index = self.indices.get(caches.CHILD_INDEXES[kind.kind])
        if index is None:
            return list(api.list_objects(kind, namespace, selector))
        indexed = [c.unpack() for c in index.get((namespace, name), ()) if c.uid not in self._pruned]
        return self.applied.merged(indexed, kind=kind.kind, namespace=namespace, serving=name)

    def inputs(self, key: inventory.ServingKey, serving_version: str) -> passinputs.Inputs | None:
        """What a pass of ``key`` reads, as versions: the serving's, the watch caches' (nodes, GPU pods,
        LeaderWorkerSets: ``changed``) while some of its groups are unplaced, and each child's. None without the
        children indexes (as outside kopf): nothing to compare, so every re-check runs the pass."""
        if not all(i in self.indices for i in caches.CHILD_INDEXES.values()):
            return None
        children: list[caches.Packed] = [
            c for i in caches.CHILD_INDEXES.values() for c in self.indices[i].get((key.namespace, key.name), ())
        ]
        versions = tuple(sorted((c.kind, c.resource_version) for c in children))
        pruned = sum(c.uid in self._pruned for c in children)
        # The fleet (every GPU pod and LeaderWorkerSet) counts only while groups wait for room: a placed serving's
        # plan keeps its groups, and what touches them (its pods, its racks' nodes) nudges it directly.
        fleet = self.fleet_version.value if self._waits_for_room(key) else 0
        # This serving's own writes and deletions the watch has not caught up with, not the whole process's: a
        # global count changed whenever any serving's write was delivered, and re-ran every settled serving.
        pending = self.applied.pending(key.namespace, key.name)
        return passinputs.Inputs(serving_version, fleet, pending, pruned, versions)

    def _waits_for_room(self, key: inventory.ServingKey) -> bool:
        """Whether some of ``key``'s groups wait for room (or this process has not passed it yet)."""
        known = self.known.get(key)
        return known is None or bool(known.unplaced)

    def serving_seen(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A watch event of a serving: passes read it here, not from the API server."""
        meta = body.get("metadata") or {}
        key = inventory.ServingKey(meta.get("namespace") or "default", str(meta.get("name")))
        if deleted:
            self._seen.pop(key, None)
            self._settled.pop(key, None)
            self.diff_bases.forget(str(meta.get("uid") or ""))
        elif self.watched(key.namespace) and _newer(caches.resource_version(body), self._seen.get(key)):
            self._seen[key] = caches.Packed(body)

    def child_seen(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A watch event of a child: it supersedes what this process wrote (``applied``, ``_pruned``)."""
        self.applied.seen(body, deleted=deleted)
        if deleted:
            self._pruned.discard(_uid(body))

    def _is_served(self, api: kube.Api, kind: names.Kind) -> bool:
        """Whether an API is installed; a yes is trusted for a minute, a no for a few seconds (a thousand passes
        after a restart ask once, and an API installed meanwhile is noticed at the next pass after that)."""
        answer, at = self._served.get(kind.kind, (False, -60.0))
        if time.monotonic() - at < (60 if answer else 5):
            return answer
        answer = api.served(kind)
        self._served[kind.kind] = (answer, time.monotonic())
        return answer

    def _foreign(
        self,
        api: kube.Api,
        serving: Mapping[str, Any],
        decision: reconciler.Decision,
        names: Collection[tuple[str, str]],
    ) -> list[dict[str, Any]]:
        """Objects already present under ``names`` (kind, name) the decision would create, not this serving's."""
        meta = serving["metadata"]
        found = []
        for obj in decision.apply:
            if (obj["kind"], obj["metadata"]["name"]) not in names:
                continue
            there = api.get(kube.kind_of(obj), obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if there is not None and not ownership.is_child_of(there, meta["name"], meta.get("uid", "")):
                found.append(there)
        return found

    async def _carry_out(
        self,
        api: kube.Api,
        key: inventory.ServingKey,
        serving: Mapping[str, Any],
        snap: reconciler.Snapshot,
        decision: reconciler.Decision,
    ) -> bool:
        """The decision's children; when the API server refuses one, what ``reconciler.refused`` decides instead
        (its status and the ComputeDomains left without a LeaderWorkerSet), then the refusal is raised for a retry."""
        try:
            return await self._write(api, key, serving, decision, self._apply)
        except _Refused as refusal:
            after = reconciler.refused(snap, refusal.kind, refusal.name, refusal.error.message, refusal.applied)
            if await self._write(api, key, serving, after, self._apply):
                await self._write(api, key, serving, after, self._report)
            raise refusal.error from None

    def _apply(self, api: kube.Api, serving: Mapping[str, Any], decision: reconciler.Decision) -> None:
        """The children: fields other managers set removed first, the LeaderWorkerSets this pass creates tried
        (dry run) before anything is created when the pass also creates ComputeDomains — so a refused one leaves no
        ComputeDomain behind (without one, nothing is left to clean up, and the dry run would be a write for
        nothing) —, then everything applied (noted in ``caches.Written`` at once), then pruned."""
        meta = serving["metadata"]
        for obj in decision.replace:
            api.replace(obj)
            log.warning("removed fields other managers set on %s", kube.describe(obj))
        domains = any(k == names.COMPUTE_DOMAIN.kind for k, _ in decision.creates)
        new_sets = {n for k, n in decision.creates if k == names.LEADER_WORKER_SET.kind} if domains else set()
        applied: list[dict[str, Any]] = []
        for obj in [o for o in decision.apply if o["kind"] == names.LEADER_WORKER_SET.kind]:
            if obj["metadata"]["name"] in new_sets:
                _refusable(functools.partial(api.apply, obj, dry_run=True), obj, applied)
        for obj in decision.apply:
            answer = _refusable(functools.partial(api.apply, obj), obj, applied)
            applied.append(answer)
            self.applied.note(answer)
            if obj["kind"] == names.LEADER_WORKER_SET.kind:
                self.written.note(caches.trim_lws(answer))
                self.changed()
            log.info("applied %s", kube.describe(obj))
        for old in decision.delete:
            if api.delete_child(old, meta["name"], meta.get("uid", "")):
                self._pruned.add(_uid(old))
                log.info("deleted %s", kube.describe(old))

    def _report(self, api: kube.Api, serving: Mapping[str, Any], decision: reconciler.Decision) -> None:
        """The status patch, then the events."""
        meta = serving["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        if decision.status is not None:
            self.serving_seen(api.patch_status(names.DEEPSEEK_SERVING, namespace, name, decision.status))
            conditions = " ".join(f"{c['type']}={c['status']}" for c in decision.status["conditions"])
            log.info("status of %s/%s: ready %s, %s", namespace, name, decision.status.get("ready"), conditions)
        for event in decision.events:
            log.info("event %s %s on %s/%s: %s", event.type, event.reason, namespace, name, event.message)
            try:
                api.emit_event(serving, event.type, event.reason, event.message)
            except kube.ApiError as err:  # an event is a courtesy; never fail a pass for it
                log.warning("could not record event %s on %s/%s: %s", event.reason, namespace, name, err)

    def _report_failure(
        self, api: kube.Api, key: inventory.ServingKey, serving: Mapping[str, Any], err: kube.ApiError
    ) -> None:
        """A Warning event when a write is refused, once per distinct refusal (the pass is retried meanwhile)."""
        message = f"the API server refused a change, retrying: {err}"
        if self.failures.get(key) == message or not self.may_write():
            return
        self.failures[key] = message
        try:
            api.emit_event(serving, "Warning", reasons.APPLY_FAILED, message)
        except kube.ApiError:
            log.warning("could not record the failure of %s: %s", key, err)

    def _remember(self, key: inventory.ServingKey, serving: Mapping[str, Any], decision: reconciler.Decision) -> None:
        spec = serving.get("spec") or {}
        label = (spec.get("placement") or {}).get("domainLabel", names.DEFAULT_DOMAIN_LABEL)
        domains = frozenset(d for per in decision.placement.values() for d in per)
        self.known[key] = _Known(label, domains, decision.unplaced)
        if decision.free_nodes:
            self.metrics.set_free_nodes(decision.free_nodes)
        status = decision.status if decision.status is not None else (serving.get("status") or {})
        conditions = {c["type"]: c.get("status") == "True" for c in status.get("conditions") or []}
        self.metrics.set_conditions(key.namespace, key.name, conditions)
        if decision.groups:  # a frozen pass judged no groups: the gauges keep what the last planned pass said
            self.metrics.set_groups(key.namespace, key.name, decision.groups, decision.max_groups)
        self.telemetry.point(key, serving, self._own_pods(serving), self._node_labels)

    def _own_pods(self, serving: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """``serving``'s GPU pods as watched (the ``serving_pods`` index): what its health, router and telemetry
        read; the fleet's reach a pass parsed (``bound_gpu_pods``)."""
        index = self.indices.get("serving_pods")
        meta = serving.get("metadata") or {}
        if index is None:
            return []
        return list(index.get((meta.get("namespace") or "default", meta.get("name")), ()))

    def forget(self, key: inventory.ServingKey) -> None:
        self.known.pop(key, None)
        self._settled.pop(key, None)
        self.failures.pop(key, None)
        self.telemetry.forget(key)

    def _api(self) -> kube.Api:
        if self.api is None:
            self.api = kube.Api(kube.connect(self.config.kubeconfig))
        return self.api

    def api_connection(self) -> connection.Connection:
        """The credentials the operator's calls use, which kopf's watches log in with too."""
        return self._api().connection

    # -- routing watch events to servings -------------------------------------------------------------------

    def node_changed(self, name: str, summary: tuple[Any, ...] | None) -> None:
        """A node appeared, vanished, or changed in a way placement cares about."""
        before = self.fleet_version.saw("Node", name, summary)
        if before == summary:
            return  # a heartbeat: nothing the inventory reads
        labels: dict[str, str] = {}
        for seen in (before, summary):
            if isinstance(seen, tuple):  # caches.node_summary: its labels first
                labels.update(seen[0])
        for key, known in self.known.items():
            domain = labels.get(known.domain_label) or labels.get(names.HOSTNAME_LABEL)
            if known.unplaced or domain in known.domains:
                self.nudges.add(key)

    def capacity_freed(self) -> None:
        for key, known in self.known.items():
            if known.unplaced:
                self.nudges.add(key)

    def _node_labels(self, name: object) -> Mapping[str, str]:
        node: inventory.Node
        for node in _store(self.indices, "fleet_nodes"):
            if node.name == name:
                return node.labels
        return {}

    def servings(self) -> set[inventory.ServingKey]:
        """Every serving this process knows: from kopf's watch (the ``servings`` index, filled on a standby too)
        and from its own passes."""
        return {*_store(self.indices, "servings"), *self.known}

    async def recheck_all(self, *, debounced: bool = True) -> None:
        """The periodic level check: a nudge for every serving this process knows whose inputs changed since its
        last pass changed nothing (``inputs``), so each pass queues behind the lock like any other and a failed one
        is retried by the nudger. A serving whose inputs hold costs no API call: its children's drift would have
        reached the watch, and nudged it."""
        for key in self.servings():
            if key in self.in_flight:
                continue  # its pass reads the inputs as they are when it starts; what changes after nudges it
            settled = self._settled.get(key)
            serving = self._seen.get(key)
            now = None if serving is None else self.inputs(key, serving.resource_version)
            if settled is None or now is None or settled != now:
                if log.isEnabledFor(logging.DEBUG):
                    why = passinputs.why_unsettled(settled, serving is not None, now)
                    log.debug("re-check of %s runs a pass: %s", key, why)
                self.nudges.add(key, debounced=debounced)

    async def take_over(self) -> None:
        """This replica has just won the Lease: a pass for every serving, at once. While it stood by, its watch saw
        every serving and every change, but it acted on none (kopf's handlers are blind while the fence is down),
        and kopf will not call them again for a serving until that serving changes."""
        log.info("taking over: a pass for each of %d serving(s)", len(self.servings()))
        self._settled.clear()
        await self.recheck_all(debounced=False)

    async def write_status_metrics(self) -> None:
        """Copy tokens/s and revenue into the status of each serving this process reconciles."""
        await self.telemetry.write_status(self._api(), self.known, self.may_write)


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _newer(mine: str, than: caches.Packed | None) -> bool:
    """Whether version ``mine`` is a later state than ``than`` (resourceVersions are etcd revisions: integers)."""
    if than is None:
        return True
    theirs = than.resource_version
    return not (mine.isdigit() and theirs.isdigit()) or int(mine) >= int(theirs)


def _store(indices: Mapping[str, Any], name: str) -> Iterable[Any]:
    index = indices.get(name)
    if index is None or None not in index:
        return ()
    store: Iterable[Any] = index[None]
    return store


class _Refused(kube.ApiError):
    """The API server refused child ``kind``/``name``; ``applied`` is what it answered to the writes before."""

    def __init__(self, obj: Mapping[str, Any], error: kube.ApiError, applied: list[dict[str, Any]]) -> None:
        super().__init__(error.status, error.reason, error.message)
        self.kind, self.name = str(obj["kind"]), str(obj["metadata"]["name"])
        self.error, self.applied = error, list(applied)


def _refusable(write: Callable[[], dict[str, Any]], obj: Mapping[str, Any], applied: list[dict[str, Any]]) -> Any:
    """``write()``, with a refusal of ``obj`` (``kube.ApiError.refused``) raised as ``_Refused``."""
    try:
        return write()
    except kube.ApiError as err:
        if err.refused:
            raise _Refused(obj, err, applied) from err
        raise
