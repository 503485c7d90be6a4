"""The operator process: kopf handlers that run the reconcile loop, the admission webhook, and telemetry.

Adapter at the top of the data flow. Every path into the loop — a serving created, changed or resumed, the
periodic re-check, a Node or GPU pod or LeaderWorkerSet that changed — ends in ``Operator.reconcile``:

    read (kube, and kopf's node/pod indexes) → reconciler.reconcile (pure) → apply → prune → status → events

Choices worth knowing:

* **Passes side by side, placement one at a time.** Passes of one serving run one after the other; passes of
  different servings run side by side (a few at once: they mostly wait on the API server). A pass whose decision
  places new groups (``reconciler.Decision.places_groups``) takes the fleet lock and decides again under it, so
  two servings planned back to back see each other's LeaderWorkerSets and never over-commit a rack.
* **Level-based and quiet.** The reconciler decides from what is there; the periodic re-check (a task that nudges
  every serving this process knows — not a kopf timer: kopf puts a finalizer on every object a timer runs for, and
  a serving could then not be deleted, nor its namespace, while no operator runs) writes nothing when nothing
  changed (the reconciler compares rendered children with the observed ones, and the status with the observed
  status). kopf posts only warnings as Events; nvlfleet's own Events describe decisions.
* **Nodes, GPU pods and nvlfleet's LeaderWorkerSets are watched through kopf indexes** (informer caches that kopf
  fills before any handler runs); a pass lists only its own serving's children from the API server. Other
  servings' LeaderWorkerSets come from the index merged with this process's own applies that the watch has not
  delivered yet (``Written``), so two servings placed back to back never count a tray twice, without listing
  the whole fleet on every pass. Nodes and GPU pods are parsed once per watch event, and what a pass derives
  from all of them (``reconciler.FleetView``: the inventory, every serving's groups) is computed once and shared
  until one of them changes, so an idle re-check of a thousand servings does not rebuild it a thousand times.
  Watch events nudge the servings they affect — a rack that frees capacity re-plans servings waiting for it, a
  lost node re-plans the servings placed in its rack — through a small debounced queue, so a burst of pod
  updates costs one pass per serving. Nodes and GPU pods are watched cluster-wide even when only some
  namespaces' servings are reconciled: free capacity in a rack is a cluster fact.
* **Leader election** is a ``coordination.k8s.io`` Lease (see ``nvlfleet.commands.run``): a standby replica
  starts kopf only once it holds the Lease, and a leader that cannot renew stops — writing nothing once its last
  renewal is older than the renew deadline (``Operator.fence``) — so two replicas never both reconcile. kopf's own
  peering is switched off (it pauses operators by priority but does not elect).
* **Admission webhook, failurePolicy Ignore.** The webhook runs ``validation.validate``, the same checks as
  ``nvlfleet validate``, so ``kubectl apply`` of a bad serving fails at once with the field path. It is a fast
  path for feedback, not the safety net: the CRD's schema and CEL rules hold without it, and the reconciler
  re-validates every generation and touches nothing for an invalid spec (condition ``Ready=False,
  InvalidSpec``). ``Fail`` would make the operator's availability a precondition for editing any serving —
  scaling down during an incident while the operator is down would be refused — and would also reject kopf's
  own bookkeeping patches. Updates that leave the spec as it is (labels, annotations, kopf's bookkeeping) are
  always admitted, so an object admitted while the webhook was down never gets stuck.
* **Missing prerequisites** (the LWS or ComputeDomain API not installed) are a condition on the serving, not an
  exception, so nothing crash-loops; the re-check notices when the API appears.

``kopf run -m nvlfleet.adapters.main`` works with settings from the environment (``NVLFLEET_*``, see ``Config``);
``nvlfleet run`` sets them from its flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import itertools
import logging
import os
import pathlib
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import kopf

from nvlfleet.adapters import decoding, kube, telemetry
from nvlfleet.api import models, names, ownership, problems
from nvlfleet.core import inventory, reconciler, validation

log = logging.getLogger("nvlfleet")

DSS = (names.GROUP, names.VERSION, names.PLURAL)
WEBHOOK_ID = "validate-deepseekserving"  # kopf serves it at /validate-deepseekserving (the chart's path)
LEADER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LABEL_VALUE_MAX = 63


@dataclasses.dataclass
class Config:
    """Operator settings; defaults come from ``NVLFLEET_*`` environment variables."""

    namespaces: frozenset[str] = frozenset()  # empty: every namespace
    recheck_seconds: float = 60.0
    debounce_seconds: float = 1.0
    retry_seconds: float = 10.0
    bind_address: str = "0.0.0.0"  # noqa: S104 — in a pod, probes and Prometheus come from outside
    metrics_port: int = 0  # 0: no exporter
    webhook_port: int = 0  # 0: no admission webhook
    webhook_host: str = "127.0.0.1"  # the address the API server calls when nvlfleet manages the configuration
    webhook_cert_dir: str | None = None  # tls.crt/tls.key (+ ca.crt) from the chart; None: self-signed + managed
    scrape_seconds: float = 15.0
    status_metrics_seconds: float = 60.0
    # Passes of different servings in flight at once: they mostly wait on the API server, so a few side by side
    # keep it busy; those that place groups still go one at a time.
    passes_at_once: int = 4

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Config:
        def num(name: str, default: float) -> float:
            return float(env.get(f"NVLFLEET_{name}", default))

        names = env.get("NVLFLEET_NAMESPACES", "")
        return cls(
            namespaces=frozenset(n for n in names.split(",") if n),
            recheck_seconds=num("RECHECK_SECONDS", cls.recheck_seconds),
            bind_address=env.get("NVLFLEET_BIND_ADDRESS", cls.bind_address),
            metrics_port=int(num("METRICS_PORT", cls.metrics_port)),
            webhook_port=int(num("WEBHOOK_PORT", cls.webhook_port)),
            webhook_host=env.get("NVLFLEET_WEBHOOK_HOST", cls.webhook_host),
            webhook_cert_dir=env.get("NVLFLEET_WEBHOOK_CERT_DIR") or None,
            scrape_seconds=num("SCRAPE_SECONDS", cls.scrape_seconds),
            status_metrics_seconds=num("STATUS_METRICS_SECONDS", cls.status_metrics_seconds),
            passes_at_once=max(1, int(num("PASSES_AT_ONCE", cls.passes_at_once))),
        )


@dataclasses.dataclass
class _Known:
    """What the last pass decided for a serving, to route node and pod events to it."""

    domain_label: str
    domains: frozenset[str]
    unplaced: int


class Nudges:
    """Servings to reconcile soon: coalesces bursts (one pass per serving) and holds delayed retries."""

    def __init__(self, debounce: float) -> None:
        self._debounce = debounce
        self._due: dict[inventory.ServingKey, float] = {}
        self._wake = asyncio.Event()

    def add(self, key: inventory.ServingKey, delay: float = 0.0) -> None:
        when = time.monotonic() + max(delay, self._debounce)
        self._due[key] = min(self._due.get(key, when), when)
        self._wake.set()

    async def next_batch(self) -> list[inventory.ServingKey]:
        """Wait until at least one serving is due, and return every serving due by then."""
        while True:
            now = time.monotonic()
            due = sorted(k for k, t in self._due.items() if t <= now)
            if due:
                for key in due:
                    del self._due[key]
                return due
            self._wake.clear()
            timeout = min(self._due.values()) - now if self._due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)


class Written:
    """LeaderWorkerSets this process applied that its watch has not delivered yet: read-your-writes over the
    ``fleet_lws`` index.

    Where a pass puts new groups depends on every other serving's groups. The index lags the API server by a
    watch round trip, and two servings are often placed back to back; without this, the second could count the
    first one's trays as free. An entry lasts until the index holds the same object at the same or a later
    resourceVersion (the API server issues them as increasing etcd revisions; when one is not an integer, only
    the same version counts), or until the watch reports it deleted.
    """

    def __init__(self) -> None:
        self._sets: dict[tuple[str, str], dict[str, Any]] = {}
        # Passes note and merge in worker threads while watch events arrive on the event loop.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sets)

    def note(self, applied: dict[str, Any]) -> None:
        """What the API server answered to an apply (trimmed like the index's entries)."""
        with self._lock:
            self._sets[_ident(applied)] = applied

    def seen(self, watched: Mapping[str, Any], deleted: bool = False) -> None:
        """The watch delivered ``watched``: forget the write it makes redundant. A deletion counts only for the
        object written (same uid): an old object's deletion can arrive after a new one of that name was applied."""
        key = _ident(watched)
        with self._lock:
            mine = self._sets.get(key)
            if mine is None:
                return
            same = (watched.get("metadata") or {}).get("uid") == (mine.get("metadata") or {}).get("uid")
            if _caught_up(watched, mine) or (deleted and same):
                del self._sets[key]

    def merged(self, indexed: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The index's LeaderWorkerSets, each replaced by this process's newer write where the index lags."""
        fleet: list[Mapping[str, Any]] = []
        listed = set()
        with self._lock:
            for obj in list(indexed):
                key = _ident(obj)
                listed.add(key)
                mine = self._sets.get(key)
                if mine is not None and _caught_up(obj, mine):
                    del self._sets[key]
                    mine = None
                fleet.append(obj if mine is None else mine)
            fleet += [obj for key, obj in self._sets.items() if key not in listed]
        return fleet


def _ident(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _caught_up(watched: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether ``watched`` is the object ``written`` describes, or a later state of it."""
    seen = (watched.get("metadata") or {}).get("resourceVersion")
    mine = (written.get("metadata") or {}).get("resourceVersion")
    if isinstance(seen, str) and isinstance(mine, str) and seen.isdigit() and mine.isdigit():
        return int(seen) >= int(mine)
    return seen == mine


class Operator:
    """Process-wide state: the API connection, the lock, what each serving last decided, telemetry."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.api: kube.Api | None = None
        self.fleet_lock = asyncio.Lock()  # held by passes that place groups, see ``reconcile``
        self.passes = asyncio.Semaphore(config.passes_at_once)
        # Weak: a serving's lock lives while a pass holds or awaits it, so deleted servings leave nothing behind.
        self._serving_locks: weakref.WeakValueDictionary[inventory.ServingKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self.known: dict[inventory.ServingKey, _Known] = {}
        self.written = Written()
        # Versions of what the watch caches hold, and the fleet views computed from them (per domain label).
        self._versions = itertools.count(1)
        self._version = 0
        self._views: dict[str, tuple[int, reconciler.FleetView]] = {}
        self.nudges = Nudges(config.debounce_seconds)
        self.indices: Mapping[str, Any] = {}
        self.metrics = telemetry.OperatorMetrics()
        self.scraper = telemetry.Scraper(self.metrics)
        self.tasks: list[asyncio.Task[None]] = []
        self.nodes_seen: dict[str, tuple[Any, ...]] = {}
        self.status_metrics: dict[inventory.ServingKey, dict[str, Any]] = {}
        self._served: dict[str, tuple[bool, float]] = {}
        # Set with leader election: False once this replica may have lost the Lease (then it writes nothing).
        self.fence: Callable[[], bool] | None = None
        self.failures: dict[inventory.ServingKey, str] = {}  # the last refusal reported per serving

    def may_write(self) -> bool:
        return self.fence is None or self.fence()

    def watched(self, namespace: str | None) -> bool:
        return not self.config.namespaces or namespace in self.config.namespaces

    # -- the pass ---------------------------------------------------------------------------------------------

    async def reconcile(self, key: inventory.ServingKey) -> reconciler.Decision | None:
        """One full pass for one serving. Raises kube.ApiError on API failures.

        Passes of one serving run one after the other; passes of different servings run side by side (up to
        ``Config.passes_at_once``), except that a pass that places groups holds the fleet lock from deciding to
        applying: where new groups go depends on every other serving's groups, so it decides again once it holds
        the lock, from caches that include every group placed before it (``Written``). Status and events are
        written after the lock is released."""
        api = self._api()
        async with self._serving_lock(key), self.passes:
            with self.metrics.reconciling(key.namespace, key.name):
                serving = await asyncio.to_thread(api.get, names.DEEPSEEK_SERVING, key.namespace, key.name)
                if serving is None:
                    self.forget(key)
                    return None
                snap = await asyncio.to_thread(self._observe, api, serving)
                snap, decision, checked = await self._decide(api, serving, snap, frozenset())
                if decision.places_groups:
                    async with self.fleet_lock:
                        snap, decision, _ = await self._decide(api, serving, self._recached(snap), checked)
                        written = await self._write(api, key, serving, decision, self._apply)
                else:
                    written = await self._write(api, key, serving, decision, self._apply)
                if not written or not await self._write(api, key, serving, decision, self._report):
                    return None
        self.failures.pop(key, None)
        self._remember(key, serving, decision)
        if decision.requeue_after is not None:
            self.nudges.add(key, decision.requeue_after)
        return decision

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
        children stay as listed: only its own passes write them, and they run one at a time)."""
        return self._cached(dataclasses.replace(snap, view=None))

    def _cached(self, snap: reconciler.Snapshot) -> reconciler.Snapshot:
        """``snap`` with nodes, GPU pods and the fleet from the watch caches, and their ``reconciler.FleetView``:
        computed once and shared by every pass until one of those objects changes (``changed``)."""
        version = self._version  # read before the caches: a view is never filed under a newer version than its data
        lws = names.LEADER_WORKER_SET.kind in snap.served
        snap = dataclasses.replace(
            snap,
            nodes=list(_store(self.indices, "fleet_nodes")),
            pods=list(_store(self.indices, "gpu_pods")),
            bound=list(_store(self.indices, "bound_gpu_pods")),
            fleet=self.written.merged(_store(self.indices, "fleet_lws")) if lws else [],
        )
        spec = snap.serving.get("spec")
        placement = (spec.get("placement") or {}) if isinstance(spec, Mapping) else None
        label = placement.get("domainLabel", names.DEFAULT_DOMAIN_LABEL) if isinstance(placement, Mapping) else None
        if not isinstance(label, str):
            return snap  # an invalid spec (the reconciler reports it) or none given: computed by the reconciler
        filed = self._views.get(label)
        if filed is None or filed[0] != version:
            filed = self._views[label] = (version, reconciler.fleet_view(snap, label))
        return dataclasses.replace(snap, view=filed[1])

    def changed(self) -> None:
        """A node, GPU pod or nvlfleet LeaderWorkerSet changed (or this process applied one): views are stale."""
        self._version = next(self._versions)

    def _observe(self, api: kube.Api, serving: Mapping[str, Any]) -> reconciler.Snapshot:
        """What one pass looks at: the serving's children from the API server; nodes, GPU pods and other
        servings' LeaderWorkerSets from the watch caches, the last with this process's own writes the watch has
        not delivered yet (``Written``) — so a pass never plans against a rack as it was before the previous one."""
        meta = serving["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        served = frozenset(k.kind for k in names.CHILD_KINDS if k is names.SERVICE or self._is_served(api, k))
        selector = {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.SERVING_LABEL: name}
        children: list[dict[str, Any]] = []
        # A name longer than a label value cannot label a child, so none exists, and the API server would refuse
        # the selector itself (400): skip the lists, and the reconciler reports the name as InvalidSpec.
        labelable = len(name) <= LABEL_VALUE_MAX
        for kind in names.CHILD_KINDS:
            if kind.kind in served and labelable:
                children += api.list_objects(kind, namespace, selector)
        now = datetime.datetime.now(datetime.UTC)
        return self._cached(reconciler.Snapshot(serving=serving, now=now, children=children, served=served))

    def _is_served(self, api: kube.Api, kind: names.Kind) -> bool:
        """Whether an API is installed; a yes is trusted for a minute, a no is asked again every pass."""
        answer, at = self._served.get(kind.kind, (False, 0.0))
        if answer and time.monotonic() - at < 60:
            return True
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

    def _apply(self, api: kube.Api, serving: Mapping[str, Any], decision: reconciler.Decision) -> None:
        """The children: applied (LeaderWorkerSets noted in ``Written`` at once), then pruned."""
        meta = serving["metadata"]
        for obj in decision.apply:
            applied = api.apply(obj)
            if obj["kind"] == names.LEADER_WORKER_SET.kind:
                self.written.note(_trim_lws(applied))
                self.changed()
            log.info("applied %s", kube.describe(obj))
        for old in decision.delete:
            if api.delete_child(old, meta["name"], meta.get("uid", "")):
                log.info("deleted %s", kube.describe(old))

    def _report(self, api: kube.Api, serving: Mapping[str, Any], decision: reconciler.Decision) -> None:
        """The status patch, then the events."""
        meta = serving["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        if decision.status is not None:
            api.patch_status(names.DEEPSEEK_SERVING, namespace, name, decision.status)
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
            api.emit_event(serving, "Warning", "ApplyFailed", message)
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
        if key not in self.status_metrics:  # what the status says now: a restart rewrites nothing that holds
            observed = serving.get("status") or {}
            self.status_metrics[key] = {field: observed.get(field) for field in _status_metrics(None)}
        self._update_targets(key, serving)

    def forget(self, key: inventory.ServingKey) -> None:
        self.known.pop(key, None)
        self.failures.pop(key, None)
        self.status_metrics.pop(key, None)
        self.scraper.remove_serving(key.namespace, key.name)

    def _api(self) -> kube.Api:
        if self.api is None:
            self.api = kube.Api(kube.connect(os.environ.get("KUBECONFIG") or None))
        return self.api

    # -- routing watch events to servings -------------------------------------------------------------------

    def node_changed(self, name: str, summary: tuple[Any, ...] | None) -> None:
        """A node appeared, vanished, or changed in a way placement cares about."""
        before = self.nodes_seen.pop(name, None)
        if summary is not None:
            self.nodes_seen[name] = summary
        if before == summary:
            return  # a heartbeat: nothing the inventory reads
        self.changed()
        labels: dict[str, str] = {}
        for seen in (before, summary):
            if seen is not None:
                labels.update(seen[0])
        for key, known in self.known.items():
            domain = labels.get(known.domain_label) or labels.get(names.HOSTNAME_LABEL)
            if known.unplaced or domain in known.domains:
                self.nudges.add(key)

    def capacity_freed(self) -> None:
        for key, known in self.known.items():
            if known.unplaced:
                self.nudges.add(key)

    # -- telemetry ------------------------------------------------------------------------------------------

    def _update_targets(self, key: inventory.ServingKey, serving: Mapping[str, Any]) -> None:
        """Point the scraper at this serving's ready group leaders (vLLM's API port serves /metrics)."""
        try:
            parsed = models.DeepSeekServing.model_validate(dict(serving))
        except ValueError:
            return
        if not parsed.spec.monitoring.scrape:
            self.scraper.remove_serving(key.namespace, key.name)
            return
        targets = []
        for pod in _store(self.indices, "gpu_pods"):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if (meta.get("namespace"), labels.get(names.SERVING_LABEL)) != (key.namespace, key.name):
                continue
            if labels.get(LEADER_INDEX_LABEL) != "0" or not pod["status"].get("podIP") or not _ready(pod):
                continue
            role = labels.get(names.ROLE_LABEL, "decode")
            role_spec = parsed.spec.roles.prefill if role == "prefill" else parsed.spec.roles.decode
            if role_spec is None:
                continue
            topology = models.role_topology(parsed.spec.gpu, role_spec)
            node = self._node_labels(pod["spec"].get("nodeName"))
            domain = node.get(parsed.spec.placement.domain_label) or pod["spec"].get("nodeName") or "unknown"
            url = f"http://{pod['status']['podIP']}:{_api_port(pod)}"
            targets.append(telemetry.Target(role=role, domain=domain, url=url, gpus=topology.gpus_per_group))
        reference = parsed.spec.parity.reference_tokens_per_second_per_gpu if parsed.spec.parity else None
        try:
            self.scraper.set_serving(
                key.namespace,
                key.name,
                sorted(targets, key=lambda t: t.url),
                pricing=parsed.spec.pricing,
                parity_reference=reference,
            )
        except problems.InvalidSpec as err:
            log.warning("telemetry for %s disabled: %s", key, err)

    def _node_labels(self, name: object) -> Mapping[str, str]:
        node: inventory.Node
        for node in _store(self.indices, "fleet_nodes"):
            if node.name == name:
                return node.labels
        return {}

    async def recheck_all(self) -> None:
        """The periodic level check: a nudge for every serving this process knows, so each pass queues behind the
        lock like any other and a failed one is retried by the nudger; writes nothing when the fleet matches."""
        for key in list(self.known):
            self.nudges.add(key)

    async def write_status_metrics(self) -> None:
        """Copy tokens/s and revenue into each serving's status, only when they changed (rate-limited)."""
        api = self._api()
        for key in list(self.known):
            summary = self.scraper.summary(key.namespace, key.name)
            fields = _status_metrics(summary)
            if fields == self.status_metrics.get(key) or not self.may_write():
                continue
            try:
                await asyncio.to_thread(api.patch_status, names.DEEPSEEK_SERVING, key.namespace, key.name, fields)
            except kube.ApiError as err:
                if not err.not_found:
                    log.warning("could not write telemetry status of %s: %s", key, err)
                continue
            self.status_metrics[key] = fields


OPERATOR = Operator(Config.from_env())


def configure(config: Config) -> None:
    """Replace the settings before kopf starts (``nvlfleet run`` does this from its flags)."""
    global OPERATOR
    OPERATOR = Operator(config)


# ---------------------------------------------------------------------------------------------------------------
# Start-up and background tasks


class _WatchedDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff-base annotation, written only on servings this operator watches.

    kopf watches DeepSeekServings cluster-wide (GPU pods and nodes of every namespace count for placement) and
    stores its diff base on every object it sees, handled or not. With ``--namespace`` that would annotate
    servings another nvlfleet instance owns, and the chart's namespaced RBAC refuses it: so do not write there.
    """

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if OPERATOR.watched(body.metadata.namespace):
            super().store(body=body, patch=patch, essence=essence)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    decoding.install()  # before kopf's watchers start: no object, however deep, can end them
    op = OPERATOR
    op.indices = {
        name: kwargs[name] for name in ("fleet_nodes", "gpu_pods", "bound_gpu_pods", "fleet_lws") if name in kwargs
    }
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="nvlfleet.io")
    settings.persistence.diffbase_storage = _WatchedDiffBaseStorage(
        prefix="nvlfleet.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "nvlfleet.io/finalizer"
    settings.posting.level = logging.WARNING  # kopf's own events only for trouble; nvlfleet posts decisions
    settings.peering.standalone = True  # leader election is a Lease, see nvlfleet.commands.run
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    # kopf retries a failed watch request this many times, this far apart (about 2.5 minutes in all), before it
    # escalates: long enough to ride out an API server restart quietly.
    settings.networking.error_backoffs = (1, 1, 2, 3, 5, 8, 13, 21, 30, 30, 30)
    if op.config.webhook_port:
        _configure_webhook(settings, op.config)
    if op.config.metrics_port:
        runner = await telemetry.start_exporter(op.metrics, host=op.config.bind_address, port=op.config.metrics_port)
        op.tasks.append(asyncio.create_task(_hold(runner), name="metrics exporter"))
    op.tasks.append(asyncio.create_task(_work_nudges(op), name="nudges"))
    op.tasks.append(asyncio.create_task(op.scraper.run(op.config.scrape_seconds), name="scraper"))
    op.tasks.append(asyncio.create_task(_every(op.config.status_metrics_seconds, op.write_status_metrics)))
    op.tasks.append(asyncio.create_task(_every(op.config.recheck_seconds, op.recheck_all), name="re-check"))
    for task in op.tasks:
        task.add_done_callback(_ended)


@kopf.on.login()
def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    """kopf and nvlfleet.adapters.kube connect with the same credentials: $KUBECONFIG (read now, not at import time, so
    ``nvlfleet run --kubeconfig`` works), ~/.kube/config, or the in-cluster ServiceAccount."""
    config = kube.connect(os.environ.get("KUBECONFIG") or None).configuration
    header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix("authorization")
    scheme, _space, token = (header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert,
        insecure=not config.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
        trust_env=settings.networking.trust_env,
    )


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    for task in OPERATOR.tasks:
        task.cancel()
    await asyncio.gather(*OPERATOR.tasks, return_exceptions=True)
    await OPERATOR.scraper.close()


async def _hold(runner: Any) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@kopf.on.probe(id="background")
async def background(**_: Any) -> str:
    """kopf's ``/healthz`` fails while a background task (the nudge worker, the re-check, the scraper) is gone,
    so the liveness probe restarts a process that would otherwise stop reconciling without a word."""
    ended = [t.get_name() for t in OPERATOR.tasks if t.done()]
    if ended:
        raise RuntimeError(f"background task ended: {', '.join(ended)}")
    return "running"


def _ended(task: asyncio.Task[None]) -> None:
    """A background task is meant to run for the operator's lifetime: its end, other than at shutdown, is a bug
    that must be seen (an exception kept in a task nobody awaits is never printed)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %r ended", task.get_name(), exc_info=task.exception())


async def _every(seconds: float, job: Any) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except Exception:
            log.exception("periodic job failed")


async def _work_nudges(op: Operator) -> None:
    """Start a pass for every serving that falls due; ``Operator.reconcile`` bounds how many run at once. A
    serving nudged while its pass is still queued or running is due again after it, once, however many nudges."""
    in_flight: dict[inventory.ServingKey, asyncio.Task[None]] = {}  # also keeps the tasks referenced
    while True:
        for key in await op.nudges.next_batch():
            if not op.watched(key.namespace):
                continue
            if key in in_flight:
                op.nudges.add(key)
                continue
            task = in_flight[key] = asyncio.create_task(_nudged(op, key), name=f"pass {key}")
            task.add_done_callback(functools.partial(_landed, in_flight, key))


def _landed(in_flight: dict[inventory.ServingKey, asyncio.Task[None]], key: inventory.ServingKey, _: Any) -> None:
    in_flight.pop(key, None)


async def _nudged(op: Operator, key: inventory.ServingKey) -> None:
    try:
        await op.reconcile(key)
    except kube.ApiError as err:
        log.warning("reconcile of %s failed, retrying in %.0fs: %s", key, op.config.retry_seconds, err)
        op.nudges.add(key, op.config.retry_seconds)
    except Exception:
        log.exception("reconcile of %s failed, retrying in %.0fs", key, op.config.retry_seconds)
        op.nudges.add(key, op.config.retry_seconds)


# ---------------------------------------------------------------------------------------------------------------
# DeepSeekServing handlers


def _watched(namespace: str | None, **_: Any) -> bool:
    return OPERATOR.watched(namespace)


@kopf.on.resume(*DSS, id="reconcile", when=_watched)
@kopf.on.create(*DSS, id="reconcile", when=_watched)
@kopf.on.update(*DSS, id="reconcile", when=_watched)
async def reconcile_serving(namespace: str | None, name: str, **_: Any) -> None:
    await _reconcile_or_retry(inventory.ServingKey(namespace or "default", name))


@kopf.on.delete(*DSS, id="forget", optional=True)
async def forget_serving(namespace: str | None, name: str, **_: Any) -> None:
    """Drop telemetry and routing state; the children go with garbage collection (owner references)."""
    OPERATOR.forget(inventory.ServingKey(namespace or "default", name))


async def _reconcile_or_retry(key: inventory.ServingKey) -> None:
    try:
        await OPERATOR.reconcile(key)
    except kube.ApiError as err:
        raise kopf.TemporaryError(f"API server refused a step: {err}", delay=OPERATOR.config.retry_seconds) from err


def admit_serving(
    body: kopf.Body, old: Mapping[str, Any] | None = None, operation: str | None = None, **_: Any
) -> None:
    """Refuse a serving ``nvlfleet validate`` would refuse, naming each field path."""
    if operation == "UPDATE" and old is not None and old.get("spec") == body.get("spec"):
        return
    try:
        found = validation.validate(dict(body))
    except Exception as err:  # with failurePolicy Ignore, an error here would admit what nobody checked
        log.exception("admission check of %s failed", body.get("metadata", {}).get("name"))
        raise kopf.AdmissionError(f"nvlfleet could not analyse this DeepSeekServing ({type(err).__name__})") from err
    if found:
        raise kopf.AdmissionError(problems.summary(found), code=422)


if OPERATOR.config.webhook_port:  # kopf refuses to start with admission handlers but no webhook server
    kopf.on.validate(*DSS, id=WEBHOOK_ID, operations=["CREATE", "UPDATE"], ignore_failures=True)(admit_serving)


# ---------------------------------------------------------------------------------------------------------------
# Nodes, GPU pods, LeaderWorkerSets: the indexes the planner reads, and the nudges they cause


def _requests_gpus(spec: Mapping[str, Any], **_: Any) -> bool:
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                if str((resources.get(kind) or {}).get(names.GPU_RESOURCE, "0")) not in ("0", ""):
                    return True
    return False


@kopf.index("nodes")
def fleet_nodes(name: str, body: kopf.Body, **_: Any) -> dict[None, inventory.Node]:
    """Each node parsed once, when its watch event arrives: parsing a thousand nodes on every pass was a quarter
    of the operator's CPU. A node the API server should never return (a malformed field) is left out, as the
    reconciler would leave it out."""
    found: list[problems.Problem] = []
    node = inventory.parse_node(_trim_node(body), f"nodes[{name}]", found)
    if node is None:
        log.debug("node %s left out of the inventory: %s", name, problems.summary(found))
        return {}
    return {None: node}


@kopf.index("pods", when=_requests_gpus)
def gpu_pods(body: kopf.Body, **_: Any) -> dict[None, dict[str, Any]]:
    return {None: _trim_pod(body)}


@kopf.index("pods", when=_requests_gpus)
def bound_gpu_pods(name: str, body: kopf.Body, **_: Any) -> dict[None, inventory.GpuPod]:
    """The GPUs each bound pod holds, parsed once per watch event (as ``fleet_nodes``); unbound and finished
    pods hold none and are left out, as the reconciler would leave them out."""
    pod = inventory.parse_pod(_trim_pod(body), f"pods[{name}]", [])
    return {} if pod is None else {None: pod}


# The event handlers are coroutines so that kopf runs them on the event loop, where the nudge queue and the
# routing state live: a plain function would run in kopf's thread pool, and a nudge added from a thread raced the
# queue's own iteration (a "dictionary changed size" that silently ended the nudge worker) and could not wake it.
@kopf.on.event("nodes")
async def node_event(name: str, body: kopf.Body, type: str, **_: Any) -> None:
    OPERATOR.node_changed(name, None if type == "DELETED" else _node_summary(body))


@kopf.on.event("pods", when=_requests_gpus)
async def gpu_pod_event(namespace: str | None, body: kopf.Body, type: str, **_: Any) -> None:
    OPERATOR.changed()
    serving = (body.get("metadata", {}).get("labels") or {}).get(names.SERVING_LABEL)
    if serving and namespace and OPERATOR.watched(namespace):
        OPERATOR.nudges.add(inventory.ServingKey(namespace, serving))
    if type == "DELETED" or body.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        OPERATOR.capacity_freed()


@kopf.index("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels={names.MANAGED_BY_LABEL: names.MANAGED_BY})
def fleet_lws(body: kopf.Body, **_: Any) -> dict[None, dict[str, Any]]:
    return {None: _trim_lws(body)}


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels={names.MANAGED_BY_LABEL: names.MANAGED_BY})
async def lws_event(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, type: str, **_: Any) -> None:
    OPERATOR.written.seen(body, deleted=type == "DELETED")
    OPERATOR.changed()
    serving = labels.get(names.SERVING_LABEL)
    if serving and namespace and OPERATOR.watched(namespace):
        OPERATOR.nudges.add(inventory.ServingKey(namespace, serving))
    if type == "DELETED":
        OPERATOR.capacity_freed()


def _trim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields inventory reads, so the index holds a few hundred bytes per node."""
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
        "spec": {"unschedulable": bool(spec.get("unschedulable", False)), "taints": list(spec.get("taints") or [])},
        "status": {
            "allocatable": dict(status.get("allocatable") or {}),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")}
                for c in status.get("conditions") or []
                if c.get("type") == "Ready"
            ],
        },
    }


def _trim_lws(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the planner reads of another serving's LeaderWorkerSet: whose it is, where it is pinned (the
    domain annotation, else its pods' node affinity or selector), how many groups of how many nodes."""
    meta, spec = body.get("metadata", {}), body.get("spec", {})
    lwt = spec.get("leaderWorkerTemplate") or {}

    def placement_of(template: Mapping[str, Any] | None) -> dict[str, Any]:
        pod = (template or {}).get("spec") or {}
        return {"spec": {k: pod[k] for k in ("affinity", "nodeSelector") if k in pod}}

    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": {
            "replicas": spec.get("replicas", 1),
            "leaderWorkerTemplate": {
                "size": lwt.get("size", 1),
                **{k: placement_of(lwt.get(k)) for k in ("leaderTemplate", "workerTemplate") if k in lwt},
            },
        },
    }


def _node_summary(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What placement depends on, without heartbeats: a change here is worth a re-plan."""
    node = _trim_node(body)
    return (
        tuple(sorted(node["metadata"]["labels"].items())),
        node["spec"]["unschedulable"],
        tuple(sorted((t.get("key"), t.get("value"), t.get("effect")) for t in node["spec"]["taints"])),
        str(node["status"]["allocatable"].get(names.GPU_RESOURCE, "0")),
        tuple((c["type"], c["status"]) for c in node["status"]["conditions"]),
    )


def _trim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})

    def containers(field: str) -> list[dict[str, Any]]:
        return [
            {
                "name": c.get("name"),
                "resources": dict(c.get("resources") or {}),
                "ports": list(c.get("ports") or []),
                **({"restartPolicy": c["restartPolicy"]} if c.get("restartPolicy") else {}),
            }
            for c in spec.get(field) or []
        ]

    trimmed_meta = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "labels": dict(meta.get("labels") or {}),
    }
    if meta.get("deletionTimestamp"):
        trimmed_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": trimmed_meta,
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": containers("containers"),
            "initContainers": containers("initContainers"),
        },
        "status": {
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "podIP": status.get("podIP"),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")}
                for c in status.get("conditions") or []
                if c.get("type") == "Ready"
            ],
            "containerStatuses": [
                {"name": c.get("name"), "state": {"waiting": (c.get("state") or {}).get("waiting")}}
                for c in status.get("containerStatuses") or []
                if (c.get("state") or {}).get("waiting")
            ],
        },
    }


def _store(indices: Mapping[str, Any], name: str) -> Iterable[Any]:
    index = indices.get(name)
    if index is None or None not in index:
        return ()
    store: Iterable[Any] = index[None]
    return store


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _api_port(pod: Mapping[str, Any]) -> int:
    """The vLLM API server's port on a leader: its container port named http, else its first port, else 8000."""
    ports = [p for c in pod["spec"].get("containers") or [] for p in c.get("ports") or []]
    for port in ports:
        if port.get("name") == "http":
            return int(port["containerPort"])
    return int(ports[0]["containerPort"]) if ports else 8000


def _status_metrics(summary: telemetry.GroupTelemetry | None) -> dict[str, Any]:
    """The status telemetry fields; a figure that cannot be computed is null (removed), never 0."""
    figures = summary.figures if summary is not None else None
    tokens = summary.tokens_per_second if summary is not None else None
    revenue = summary.revenue_per_hour if summary is not None else None

    def r(value: float | None) -> float | None:
        return None if value is None else float(f"{value:.4g}")

    measured = summary.measured_at if summary is not None else None
    return {
        "tokensPerSecond": r(tokens.total if tokens else None),
        "tokensPerSecondPerGpu": r(figures.tokens_per_second_per_gpu if figures else None),
        "revenuePerHour": r(revenue),
        "revenuePerGpuHour": r(figures.revenue_per_gpu_hour if figures else None),
        "parity": r(figures.parity if figures else None),
        "currency": figures.currency if figures else None,
        "metricsTime": (
            datetime.datetime.fromtimestamp(measured, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if measured is not None
            else None
        ),
    }


# ---------------------------------------------------------------------------------------------------------------
# The admission webhook server


def _configure_webhook(settings: kopf.OperatorSettings, config: Config) -> None:
    """With a certificate directory (the chart's Secret), serve with it; the chart owns the configuration.
    Without one (a local cluster), make a CA and a serving certificate for ``webhook_host`` and let kopf keep a
    ValidatingWebhookConfiguration ``nvlfleet.io`` pointing at this process (removed again on exit)."""
    if config.webhook_cert_dir:
        certs = pathlib.Path(config.webhook_cert_dir)
        ca = certs / "ca.crt"
        settings.admission.server = kopf.WebhookServer(
            addr=config.bind_address,
            port=config.webhook_port,
            certfile=str(certs / "tls.crt"),
            pkeyfile=str(certs / "tls.key"),
            cafile=str(ca) if ca.exists() else None,
        )
        return
    certs = pathlib.Path(tempfile.mkdtemp(prefix="nvlfleet-webhook-"))
    _self_signed(certs, config.webhook_host)
    settings.admission.server = kopf.WebhookServer(
        addr=config.webhook_host,
        port=config.webhook_port,
        host=config.webhook_host,
        certfile=str(certs / "tls.crt"),
        pkeyfile=str(certs / "tls.key"),
        cafile=str(certs / "ca.crt"),
    )
    settings.admission.managed = "nvlfleet.io"


def _self_signed(directory: pathlib.Path, host: str) -> None:
    """A throw-away CA and a serving certificate for ``host`` (an IP or a DNS name), made with openssl."""
    san = f"IP:{host}" if host.replace(".", "").isdigit() or ":" in host else f"DNS:{host}"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    d = str(directory)
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{d}/ca.key")
    openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        f"{d}/ca.key",
        "-subj",
        "/CN=nvlfleet-webhook-ca",
        "-days",
        "365",
        "-out",
        f"{d}/ca.crt",
    )
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{d}/tls.key")
    openssl("req", "-new", "-key", f"{d}/tls.key", "-subj", f"/CN={host}", "-out", f"{d}/tls.csr")
    (directory / "ext.cnf").write_text(
        f"subjectAltName={san}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        f"{d}/tls.csr",
        "-CA",
        f"{d}/ca.crt",
        "-CAkey",
        f"{d}/ca.key",
        "-CAcreateserial",
        "-days",
        "365",
        "-extfile",
        f"{d}/ext.cnf",
        "-out",
        f"{d}/tls.crt",
    )
