"""The operator's kopf wiring: the handlers, indexes, probe and start-up/clean-up that feed ``Operator``.

Adapter at the top of the data flow. Every path into the loop — a serving created, changed or resumed, the
periodic re-check, a Node or GPU pod or LeaderWorkerSet that changed — ends in
``nvlfleet.adapters.operator.Operator.reconcile`` (read → reconcile → apply → prune → status → events). This
module holds no state of its own: the ``Operator`` lives in kopf's ``memo``, which kopf hands every handler, filter,
probe and activity (a shallow copy per object, so all of them share the one operator).

* **Who builds the operator.** ``nvlfleet run`` builds it from its flags (``nvlfleet.commands.run``) and starts
  kopf with ``memo=kopf.Memo(operator=...)``. ``kopf run -m nvlfleet.adapters.main`` works too: its memo is
  empty, and ``startup`` builds the operator from ``Config.from_env`` (``NVLFLEET_*`` settings).
* **Nodes, GPU pods, DeepSeekServings and nvlfleet's children are watched through kopf indexes** (informer caches that
  kopf fills before any handler runs), each object trimmed and parsed once per watch event
  (``nvlfleet.adapters.caches``): parsing a thousand nodes on every pass was a quarter of the operator's CPU.
  Watch events nudge the servings they affect (``nvlfleet.adapters.nudges``). With ``--namespace``, kopf watches
  every namespaced kind (servings, children, GPU pods) in those namespaces only (``nvlfleet run`` starts it
  so), and nodes cluster-wide: the operator reads nothing of namespaces it does not serve.
* **Leader election** is a ``coordination.k8s.io`` Lease (``nvlfleet.adapters.election``), which fences the
  operator's writes; kopf's own peering is switched off (it pauses operators by priority but does not elect). A
  standby runs all of this, warm, and writes nothing: kopf writes on a DeepSeekServing only around its changing
  handlers (progress annotations when one fails or is retried, the finalizer when one requires it — none does:
  ``forget`` is optional; its diff base is kept in memory, ``_FencedDiffBases``), and every one of them is filtered
  out while this replica does not lead (``_reconciled``), so kopf is blind to the serving: it runs no handler,
  stores nothing and does not count the serving as handled, so it still resumes it later. The ``servings`` index,
  filled on a standby too, is how the new leader knows which servings to reconcile the moment it takes over
  (``Operator.take_over``). A handler that raised ``kopf.TemporaryError`` while standing by would not do: kopf
  records the retry in a progress annotation and touches the object while it waits.
* **The admission webhook** (``nvlfleet.adapters.webhook``) is registered at start-up, with its server, only when
  a webhook port is set: kopf refuses to run admission handlers without a server, and checks that only once
  the start-up handlers are done. kopf posts only warnings as Events; nvlfleet's own Events describe decisions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any, cast

import aiohttp
import kopf

from nvlfleet.adapters import (
    caches,
    connection,
    decoding,
    exporter,
    heap,
    heartbeats,
    kube,
    nudges,
    prepopulation,
    webhook,
)
from nvlfleet.adapters.config import Config
from nvlfleet.adapters.operator import Operator
from nvlfleet.api import names, problems
from nvlfleet.core import inventory

log = logging.getLogger("nvlfleet")

DSS = (names.GROUP, names.VERSION, names.PLURAL)
INDEXES = (
    "fleet_nodes",
    "serving_pods",
    "bound_gpu_pods",
    "fleet_lws",
    "servings",
    "live_servings",
    *caches.CHILD_INDEXES.values(),
)


def _operator(memo: Any) -> Operator:
    """The process's operator, from kopf's ``memo`` (put there by ``nvlfleet run``, else by ``startup``)."""
    op: Operator = memo.operator
    return op


def _listed(memo: Any) -> Operator:
    """The operator, from a resource handler: kopf runs one only once its index pre-population is over, so the
    nudge queue held since start-up may let passes start now (``prepopulation``)."""
    op = _operator(memo)
    if op.nudges.held:
        op.nudges.release()
        log.info("kopf's indexes are populated: passes may start")
    return op


# ---------------------------------------------------------------------------------------------------------------
# Start-up and background tasks


class _FencedDiffBases(kopf.DiffBaseStorage):
    """kopf's diff base kept in this process's memory (``caches.DiffBases``, so a new or changed serving costs no
    annotation write), stored only for servings this replica reconciles, and only while it may write.

    kopf stores its diff base on every object one of its handlers matches. The handlers' filter (``_reconciled``)
    keeps kopf off other namespaces' servings (``kopf run`` without ``--namespace`` watches them all, though
    ``NVLFLEET_NAMESPACES`` names some) and off every serving while this replica stands by; this is the same rule
    again at the moment of storing, for a leader whose Lease lapsed while a handler ran: the diff base is stored
    after it, and a serving with none is handled again (as new) once this replica leads.
    """

    def __init__(self, op: Operator) -> None:
        super().__init__()
        self._op = op

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        essence: kopf.BodyEssence | None = self._op.diff_bases.fetch(body.metadata.uid or "")
        return essence

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if self._op.reconciles(body.metadata.namespace):
            self._op.diff_bases.store(body.metadata.uid or "", essence)

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        """kopf's essence, without deep-copying what it throws away: kopf builds one on every watch event of every
        watched kind (nodes' and pods' too), and copies the whole object — status, ``managedFields`` — before it
        keeps the spec, labels and annotations. Only a handler's extra fields (none of nvlfleet's asks) could
        reach beyond those."""
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        lean = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        lean["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        return super().build(body=kopf.Body(cast(kopf.RawBody, lean)))


class _ProgressAnnotations(kopf.AnnotationsProgressStorage):
    """kopf's progress annotations (a handler's retries), with kopf's marker annotation written only with them.

    kopf records each handler's progress in the patch, purges it again in the same patch once the handler
    succeeded, and leaves behind the ``<prefix>/kopf-managed`` marker it added along the way: one write on every
    new serving for nothing. The marker only has to go with progress annotations that stay."""

    MARKER = "nvlfleet.io/kopf-managed"

    def purge(self, *, key: str, body: kopf.Body, patch: kopf.Patch) -> None:
        super().purge(key=key, body=body, patch=patch)  # type: ignore[arg-type]
        meta = patch.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        kept = [k for k, v in annotations.items() if k.startswith("nvlfleet.io/") and k != self.MARKER and v]
        if self.MARKER in annotations and self.MARKER not in body.metadata.annotations and not kept:
            del annotations[self.MARKER]
        if "annotations" in meta and not annotations:
            del meta["annotations"]  # an empty stanza would still be sent as a patch
        if "metadata" in patch and not meta:
            del patch["metadata"]


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    decoding.install()  # before kopf's watchers start: no object, however deep, can end them
    prepopulation.install()  # before they start too: their workers wait on kopf's index pre-population
    heartbeats.install()  # and a node's heartbeat, which changes nothing the operator keeps, never reaches them
    if "operator" not in memo:  # ``kopf run -m nvlfleet.adapters.main``: no ``nvlfleet run`` built one
        memo.operator = Operator(Config.from_env())
    op = _operator(memo)
    op.indices = {name: kwargs[name] for name in INDEXES if name in kwargs}
    settings.persistence.progress_storage = _ProgressAnnotations(prefix="nvlfleet.io")
    settings.persistence.diffbase_storage = _FencedDiffBases(op)
    settings.persistence.finalizer = "nvlfleet.io/finalizer"
    settings.posting.level = logging.WARNING  # kopf's own events only for trouble; nvlfleet posts decisions
    settings.peering.standalone = True  # leader election is a Lease, see nvlfleet.adapters.election
    settings.watching.server_timeout = 300
    # The API server sends only nvlfleet's own children of each child kind, which is all every handler on them
    # takes (the same label is their filter): another controller's — a LeaderWorkerSet's headless Service per
    # group — cost no watch event, no decoding and no per-object state in kopf.
    for kind in names.CHILD_KINDS:
        settings.watching.label_selectors[_resource(kind)] = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}"
    settings.networking.request_timeout = 60
    # kopf retries a failed watch request this many times, this far apart (about 2.5 minutes in all), before it
    # escalates: long enough to ride out an API server restart quietly.
    settings.networking.error_backoffs = (1, 1, 2, 3, 5, 8, 13, 21, 30, 30, 30)
    if op.config.webhook_port and settings.admission.server is None:  # not again if kopf retries this handler
        _serve_admission(settings, op.config)
    if op.config.metrics_port:
        try:
            runner = await exporter.start_exporter(op.metrics, host=op.config.bind_address, port=op.config.metrics_port)
        except exporter.CannotListen as err:  # kopf would retry the start-up forever; the port stays taken
            raise kopf.PermanentError(str(err)) from err
        op.tasks.append(asyncio.create_task(_hold(runner), name="metrics exporter"))
    op.nudges.hold()  # released by the first handler kopf runs: its index pre-population is then over
    worker = nudges.work(
        op.nudges,
        op.reconcile,
        watched=op.watched,
        waiting=op.in_flight.waiting,
        retry_seconds=op.config.retry_seconds,
    )
    op.tasks.append(asyncio.create_task(worker, name="nudges"))
    op.tasks.append(asyncio.create_task(op.telemetry.scraper.run(op.config.scrape_seconds), name="scraper"))
    op.tasks.append(asyncio.create_task(nudges.every(op.config.status_metrics_seconds, op.write_status_metrics)))
    op.tasks.append(asyncio.create_task(nudges.every(op.config.recheck_seconds, op.recheck_all), name="re-check"))
    op.tasks.append(asyncio.create_task(nudges.every(op.config.recheck_seconds, heap.trim), name="heap trim"))
    for task in op.tasks:
        task.add_done_callback(_ended)


def _serve_admission(settings: kopf.OperatorSettings, config: Config) -> None:
    """The webhook server, then the handler it serves. kopf checks that admission handlers have a server only
    once the start-up handlers are done, so registering here (not at import) keeps a process without a webhook
    port free of both, whichever way it was started."""
    webhook.configure_server(settings, config)
    kopf.on.validate(*DSS, id=webhook.WEBHOOK_ID, operations=["CREATE", "UPDATE"], ignore_failures=True)(
        webhook.admit_serving
    )


@kopf.on.login()
async def login(
    settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any
) -> kopf.ConnectionInfo | kopf.AiohttpSession:
    """kopf and nvlfleet.adapters.kube connect with the same credentials: the operator's kubeconfig,
    ~/.kube/config, or the in-cluster ServiceAccount (kopf logs in after the start-up handlers, so the operator
    is in ``memo`` by now). kopf logs in again when the API server refuses its token, or when an exec plugin's
    credential expires: the credentials are read again then (a rotated token file, a new exec credential; an exec
    plugin runs in a thread). The connection is the operator's own, which owns the private files its inline PEM
    data is in.

    A kubeconfig's ``tls-server-name`` has no field in ``kopf.ConnectionInfo``: kopf is then handed a session of
    nvlfleet's making, whose TLS names that server (``connection.ssl_context``), as kubectl and ``kube`` do."""
    conn = _operator(memo).api_connection()
    conn.expire()
    try:
        creds = await asyncio.to_thread(conn.credentials)
    except connection.CredentialsError as err:
        raise kopf.LoginError(str(err)) from err
    if creds.tls_server_name:
        headers = {"Authorization": f"Bearer {creds.token}"} if creds.token else {}
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=connection.ssl_context(creds)),
            headers=headers,
            proxy=creds.proxy_url,
            trust_env=settings.networking.trust_env,
        )
        return kopf.AiohttpSession(server=creds.server, expiration=creds.expiration, aiohttp_session=session)
    return kopf.ConnectionInfo(
        server=creds.server,
        ca_path=creds.ca_file,
        insecure=creds.insecure,
        scheme="Bearer" if creds.token else None,
        token=creds.token,
        certificate_path=creds.cert_file,
        private_key_path=creds.key_file,
        proxy_url=creds.proxy_url,
        trust_env=settings.networking.trust_env,
        expiration=creds.expiration,
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    op = _operator(memo)
    for task in op.tasks:
        task.cancel()
    await asyncio.gather(*op.tasks, return_exceptions=True)
    await op.telemetry.scraper.close()


async def _hold(runner: Any) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@kopf.on.probe(id="background")
async def background(memo: kopf.Memo, **_: Any) -> str:
    """kopf's ``/healthz`` fails while a background task (the nudge worker, the re-check, the scraper) is gone,
    so the liveness probe restarts a process that would otherwise stop reconciling without a word."""
    ended = [t.get_name() for t in _operator(memo).tasks if t.done()]
    if ended:
        raise RuntimeError(f"background task ended: {', '.join(ended)}")
    return "running"


@kopf.on.probe(id="leading")
async def leading(memo: kopf.Memo, **_: Any) -> bool:
    """In ``/healthz``: whether this replica leads (True without leader election); a standby is healthy too."""
    return _operator(memo).may_write()


def _ended(task: asyncio.Task[None]) -> None:
    """A background task is meant to run for the operator's lifetime: its end, other than at shutdown, is a bug
    that must be seen (an exception kept in a task nobody awaits is never printed)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %r ended", task.get_name(), exc_info=task.exception())


# ---------------------------------------------------------------------------------------------------------------
# DeepSeekServing handlers


def _watched(namespace: str | None, memo: kopf.Memo, **_: Any) -> bool:
    return _operator(memo).watched(namespace)


def _reconciled(namespace: str | None, memo: kopf.Memo, **_: Any) -> bool:
    """The filter of every DeepSeekServing handler: when no handler matches, kopf runs none and writes nothing
    on the serving (see the module's docstring), so a standby and other namespaces' servings stay untouched."""
    return _operator(memo).reconciles(namespace)


@kopf.index(*DSS, when=_watched)
async def servings(namespace: str | None, name: str, **_: Any) -> dict[None, inventory.ServingKey]:
    """Every watched serving, on a standby too: what the new leader reconciles when it takes over."""
    return {None: inventory.ServingKey(namespace or "default", name)}


@kopf.on.resume(*DSS, id="reconcile", when=_reconciled)
@kopf.on.create(*DSS, id="reconcile", when=_reconciled)
@kopf.on.update(*DSS, id="reconcile", when=_reconciled)
async def reconcile_serving(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    op = _listed(memo)
    try:
        await op.reconcile(inventory.ServingKey(namespace or "default", name))
    except kube.ApiError as err:
        raise kopf.TemporaryError(f"API server refused a step: {err}", delay=op.config.retry_seconds) from err


@kopf.on.delete(*DSS, id="forget", optional=True, when=_reconciled)
async def forget_serving(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """Drop telemetry and routing state; the children go with garbage collection (owner references)."""
    _listed(memo).forget(inventory.ServingKey(namespace or "default", name))


# ---------------------------------------------------------------------------------------------------------------
# Nodes, GPU pods, LeaderWorkerSets: the indexes the planner reads, and the nudges they cause


@kopf.index(*DSS)
async def live_servings(uid: str, **_: Any) -> dict[None, str]:
    """The uid of every DeepSeekServing that exists: a LeaderWorkerSet holds capacity only while one owns it."""
    return {None: uid}


@kopf.on.event(*DSS)
async def serving_event(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The serving as last seen, which passes read instead of asking the API server; a serving that appeared or
    went changes the groups counted as held (status updates change nothing)."""
    op = _listed(memo)
    op.serving_seen(body, deleted=type == "DELETED")
    if type in ("ADDED", "DELETED", None):
        op.changed()


# _LISTED: a watch event of type None is the object as kopf first listed it (at start-up, or listing again after
# the watch's resourceVersion expired): it nudges nobody. At start-up kopf runs every serving's own handler (its
# diff base is in memory, so each serving is new to it), and a thousand servings' children, pods and
# LeaderWorkerSets listed would otherwise pass each serving two or three times more; a child changed while the
# watch was away has a new resourceVersion, which the serving's next re-check sees (``Operator.inputs``).


def _resource(kind: names.Kind) -> tuple[str, str] | tuple[str, str, str]:
    """How kopf names ``kind``'s resource: (group, version, plural), or (version, plural) for the core group."""
    return (kind.group, kind.version, kind.plural) if kind.group else (kind.version, kind.plural)


def _child_index(kind: names.Kind) -> None:
    """An index of ``kind``'s nvlfleet children by (namespace, serving), and an event handler that nudges the
    serving when one changes or goes (by hand, by another controller): drift is seen by the watch, so the
    periodic re-check of a serving whose inputs are unchanged costs nothing (``Operator.recheck_all``)."""
    resource = _resource(kind)
    labels = {names.MANAGED_BY_LABEL: names.MANAGED_BY}

    async def index(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any) -> dict[Any, Any]:
        key = caches.child_key(namespace, labels)
        return {} if key is None else {key: caches.Packed(body)}

    async def event(
        namespace: str | None, labels: Mapping[str, str], body: kopf.Body, type: str, memo: kopf.Memo, **_: Any
    ) -> None:
        op = _listed(memo)
        op.child_seen(body, deleted=type == "DELETED")
        key = caches.child_key(namespace, labels)
        if key is not None and op.watched(key[0]) and type is not None:  # see _LISTED
            op.nudges.add(inventory.ServingKey(*key))

    kopf.index(*resource, id=caches.CHILD_INDEXES[kind.kind], labels=labels)(index)
    if kind != names.LEADER_WORKER_SET:  # lws_event below also nudges, and counts capacity
        kopf.on.event(*resource, id=f"{kind.plural}_event", labels=labels)(event)


for _kind in names.CHILD_KINDS:
    _child_index(_kind)


# The index handlers are coroutines too, though they only trim and parse: kopf runs a plain function in its thread
# pool, through a thread hop, a task and a shielded future per object and handler — at start-up, once for each of
# tens of thousands of (object, index) pairs, and every allocation of a worker thread fragments its own malloc arena.
@kopf.index("nodes")
async def fleet_nodes(name: str, body: kopf.Body, **_: Any) -> dict[None, inventory.Node]:
    """Each node parsed once, when its watch event arrives. A node the API server should never return (a
    malformed field) is left out, as the reconciler would leave it out."""
    found: list[problems.Problem] = []
    node = caches.parsed_node(name, body, found)
    if node is None:
        log.debug("node %s left out of the inventory: %s", name, problems.summary(found))
        return {}
    return {None: node}


@kopf.index("pods", when=caches.requests_gpus)
async def serving_pods(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each serving's GPU pods (trimmed), by (namespace, serving): a pass reads its own, not the fleet's — its
    health, router and telemetry looked at every GPU pod of the cluster, a thousand per pass at a thousand servings
    (the largest own-time frame of a start-up's profile). The fleet's pods reach passes parsed, as
    ``bound_gpu_pods``."""
    key = caches.child_key(namespace, labels)
    return {} if key is None else {key: caches.trim_pod(body)}


@kopf.index("pods", when=caches.requests_gpus)
async def bound_gpu_pods(name: str, body: kopf.Body, **_: Any) -> dict[None, inventory.GpuPod]:
    """The GPUs each bound pod holds, parsed once per watch event (as ``fleet_nodes``); unbound and finished
    pods hold none and are left out, as the reconciler would leave them out."""
    pod = caches.parsed_pod(name, body)
    return {} if pod is None else {None: pod}


# The event handlers are coroutines so that kopf runs them on the event loop, where the nudge queue and the
# routing state live: a plain function would run in kopf's thread pool, and a nudge added from a thread raced the
# queue's own iteration (a "dictionary changed size" that silently ended the nudge worker) and could not wake it.
@kopf.on.event("nodes")
async def node_event(name: str, body: kopf.Body, type: str, memo: kopf.Memo, **_: Any) -> None:
    _listed(memo).node_changed(name, None if type == "DELETED" else caches.node_summary(body))


@kopf.on.event("pods", when=caches.requests_gpus)
async def gpu_pod_event(
    namespace: str | None, name: str, body: kopf.Body, type: str, memo: kopf.Memo, **_: Any
) -> None:
    op = _listed(memo)
    op.fleet_object_seen("Pod", f"{namespace}/{name}", None if type == "DELETED" else caches.parsed_pod(name, body))
    serving = (body.get("metadata", {}).get("labels") or {}).get(names.SERVING_LABEL)
    if serving and namespace and op.watched(namespace) and type is not None:  # see _LISTED
        op.nudges.add(inventory.ServingKey(namespace, serving))
    if type == "DELETED" or body.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        op.capacity_freed()


@kopf.index("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels={names.MANAGED_BY_LABEL: names.MANAGED_BY})
async def fleet_lws(body: kopf.Body, **_: Any) -> dict[None, dict[str, Any]]:
    return {None: caches.trim_lws(body)}


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels={names.MANAGED_BY_LABEL: names.MANAGED_BY})
async def lws_event(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, type: str, memo: kopf.Memo, **_: Any
) -> None:
    op = _listed(memo)
    op.written.seen(body, deleted=type == "DELETED")
    op.child_seen(body, deleted=type == "DELETED")
    uid = str(body.get("metadata", {}).get("uid") or "")
    op.fleet_object_seen("LeaderWorkerSet", uid, None if type == "DELETED" else caches.lws_summary(body))
    serving = labels.get(names.SERVING_LABEL)
    if serving and namespace and op.watched(namespace) and type is not None:  # see _LISTED
        op.nudges.add(inventory.ServingKey(namespace, serving))
    if type == "DELETED":
        op.capacity_freed()
