"""The one adapter that talks to the Kubernetes API server.

Data flow: … → render → **apply → prune → status** (and the reads that feed inventory and the reconciler).
Everything here is a thin, synchronous call over a urllib3 pool, with the credentials ``nvlfleet.adapters.connection``
reads (a kubeconfig or the in-cluster ServiceAccount); ``nvlfleet.adapters.operator`` runs these calls in a worker
thread so kopf's event loop never blocks.
No decisions are taken here: ``nvlfleet.core.reconciler`` decides, this module carries it out.

Rules this module enforces, whoever calls it:

* **One field manager.** Children are written with server-side apply as ``nvlfleet`` (``names.FIELD_MANAGER``),
  with ``force`` because nvlfleet owns every field it renders; fields nobody renders stay with whoever set them
  (LWS defaults, HPA).
* **Nothing nvlfleet did not create is ever deleted.** ``delete_child`` refuses an object unless it carries the
  ``app.kubernetes.io/managed-by=nvlfleet`` and ``nvlfleet.io/serving=<name>`` labels *and* a controller owner
  reference to that serving's uid (``nvlfleet.api.ownership``, the rule the reconciler decides by), and it deletes
  with a uid precondition so a same-named successor survives.
* **An unreachable API server is an ApiError** (503 Unavailable): callers retry it like any refusal.
* **Status is merge-patched** on the ``/status`` subresource, so the reconciler's fields and the telemetry
  fields (written separately, rate-limited) never erase each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import urllib3

from nvlfleet.adapters import connection, decoding
from nvlfleet.api import names, ownership

logger = logging.getLogger(__name__)

USER_AGENT = "nvlfleet"  # what the API server's audit log and metrics name nvlfleet's own calls by

# Every type nvlfleet reads or writes, by (apiVersion, kind): what an object's REST path is built from.
_BY_KIND = {
    (k.api_version, k.kind): k
    for k in (*names.CHILD_KINDS, names.DEEPSEEK_SERVING, names.POD, names.NODE, names.EVENT, names.LEASE)
}


def kind_of(obj: Mapping[str, Any]) -> names.Kind:
    """The Kind of an object by its apiVersion and kind; raises KeyError for a type nvlfleet never writes."""
    return _BY_KIND[(str(obj.get("apiVersion")), str(obj.get("kind")))]


class ApiError(Exception):
    """A non-2xx answer from the API server, with the server's own message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def refused(self) -> bool:
        """A verdict on the object itself (invalid, over quota, denied by admission), which retrying the same
        write will not change: unlike a conflict, a throttle, a missing API or an unreachable server."""
        return 400 <= self.status < 500 and self.status not in (404, 409, 429)


@dataclasses.dataclass(frozen=True)
class LeaseAnswer:
    """What asking for a Lease found: whether the asker holds it now, and, when another holder's Lease has not
    expired yet, the seconds until it does (by the asker's clock against the holder's renewTime)."""

    held: bool
    expires_in: float | None = None


def connect(kubeconfig: str | None = None) -> connection.Connection:
    """The connection ``kubeconfig`` (or $KUBECONFIG / ~/.kube/config) describes, else the in-cluster account's."""
    return connection.connect(kubeconfig)


class Api:
    """Synchronous REST calls on one connection; thread-safe (urllib3's pool is)."""

    def __init__(self, conn: connection.Connection, timeout: float = 30.0, pool_size: int = 16) -> None:
        self.connection = conn
        self.timeout = timeout
        self._pool_size = pool_size
        self._pooled: tuple[tuple[Any, ...], urllib3.PoolManager] | None = None  # (TLS settings, their pool)
        self._lock = threading.Lock()

    def _pool(self, credentials: connection.Credentials) -> urllib3.PoolManager:
        """The pool for the TLS settings of ``credentials``, built again when they change (an exec plugin's new
        client certificate)."""
        with self._lock:
            if self._pooled is None or self._pooled[0] != credentials.tls:
                if self._pooled is not None:
                    self._pooled[1].clear()
                self._pooled = (credentials.tls, self.connection.pool(credentials, self._pool_size))
            return self._pooled[1]

    # -- the one request primitive --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        try:
            credentials = self.connection.credentials()
        except connection.CredentialsError as err:  # a token file gone, an exec plugin failing: retried as a 503
            raise ApiError(503, "Unavailable", f"no credentials for the API server: {err}") from err
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        payload: bytes | None = None
        if body is not None:
            payload = body if isinstance(body, bytes) else json.dumps(body, default=_jsonable).encode("utf-8")
            headers["Content-Type"] = content_type or "application/json"
        params = list(query)
        url = credentials.server.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            response = self._pool(credentials).request(
                method,
                url,
                body=payload,
                headers=headers,
                timeout=urllib3.Timeout(total=self.timeout),
                retries=False,
                preload_content=True,
            )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            # Refused, reset or timed out (an API server restarting): an answer like a 503, so every caller retries
            # it on its own schedule instead of failing the pass with a traceback.
            raise ApiError(503, "Unavailable", f"the API server could not be reached: {err}") from err
        raw: bytes = response.data
        if response.status == 401:
            self.connection.expire()  # a rotated token: the next call reads it again
        if not 200 <= response.status < 300:
            raise _api_error(response.status, response.reason or "", raw)
        return decoding.loads(raw) if raw else None

    # -- reads ----------------------------------------------------------------------------------------------

    def get(self, kind: names.Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.request("GET", kind.path(namespace, name))
        except ApiError as err:
            if err.not_found:
                return None
            raise
        return obj

    def list_objects(
        self,
        kind: names.Kind,
        namespace: str | None = None,
        selector: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of ``kind`` (in ``namespace``, or everywhere), matching the label ``selector`` and the
        field selector ``fields``."""
        query = [
            (param, ",".join(f"{k}={v}" for k, v in sorted(given.items())))
            for param, given in (("labelSelector", selector), ("fieldSelector", fields))
            if given
        ]
        answer = self.request("GET", kind.path(namespace), query=query)
        items: list[dict[str, Any]] = answer.get("items") or []
        for item in items:  # list items come without their type
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items

    def served(self, kind: names.Kind) -> bool:
        """Whether the API server serves ``kind`` now (its CRD is installed and established)."""
        try:
            answer = self.request("GET", kind.base)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return any(r.get("name") == kind.plural for r in answer.get("resources") or [])

    # -- writes ---------------------------------------------------------------------------------------------

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply ``obj`` as the ``nvlfleet`` field manager, taking over conflicting fields."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        query = [("fieldManager", names.FIELD_MANAGER), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        answer: dict[str, Any] = self.request(
            "PATCH",
            kind.path(meta.get("namespace"), meta["name"]),
            query=query,
            body=yaml_safe_json(obj),
            content_type="application/apply-patch+yaml",
        )
        return answer

    def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Update ``obj`` whole (PUT, failing with a conflict if it changed since its ``resourceVersion``): how a
        child is rid of fields another manager set, which no apply removes (``core.fieldsets``)."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        query = [("fieldManager", names.FIELD_MANAGER)]
        answer: dict[str, Any] = self.request(
            "PUT", kind.path(meta.get("namespace"), meta["name"]), query=query, body=dict(obj)
        )
        return answer

    def delete_child(self, obj: Mapping[str, Any], serving_name: str, serving_uid: str) -> bool:
        """Delete a child of a serving, only if nvlfleet made it for that serving; False when it was not ours.

        Background propagation: the LeaderWorkerSet controller's pods go with their owner as usual.
        """
        if not ownership.is_child_of(obj, serving_name, serving_uid):
            logger.warning("refusing to delete %s: not a child of serving %s", describe(obj), serving_name)
            return False
        kind = kind_of(obj)
        meta = obj["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": meta["uid"]},
        }
        try:
            self.request("DELETE", kind.path(meta.get("namespace"), meta["name"]), body=body)
        except ApiError as err:
            if err.not_found or err.conflict:  # gone already, or a successor with another uid: leave it
                return False
            raise
        return True

    def patch_status(self, kind: names.Kind, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch ``status``: keys given are set (None removes one), keys not given are left alone."""
        answer: dict[str, Any] = self.request(
            "PATCH",
            kind.path(namespace, name, "status"),
            body={"status": dict(status)},
            content_type="application/merge-patch+json",
        )
        return answer

    def emit_event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str, action: str = "Reconcile"
    ) -> None:
        """Record a core/v1 Event on ``involved`` (shown by ``kubectl describe`` and ``kubectl events``)."""
        meta = involved["metadata"]
        namespace = meta.get("namespace", "default")
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": names.EVENT.api_version,
            "kind": names.EVENT.kind,
            "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta["name"],
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": event_message(message),
            "action": action,
            "source": {"component": names.COMPONENT},
            "reportingComponent": f"{names.COMPONENT}.io/operator",
            "reportingInstance": os.environ.get("HOSTNAME", names.COMPONENT),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "count": 1,
        }
        self.request("POST", names.EVENT.path(namespace), body=event)

    # -- leases (leader election) ---------------------------------------------------------------------------

    def acquire_lease(self, namespace: str, name: str, identity: str, duration_seconds: int) -> LeaseAnswer:
        """Take or renew the Lease ``name`` for ``identity``: whether ``identity`` holds it, and, when another
        holder's Lease has not expired, in how many seconds it will by this process's clock.

        Optimistic concurrency on resourceVersion makes two candidates racing for an expired lease agree: the
        second write fails with 409 and that candidate stays a follower.
        """
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = self.get(names.LEASE, namespace, name)
        if lease is None:
            body = {
                "apiVersion": names.LEASE.api_version,
                "kind": names.LEASE.kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "holderIdentity": identity,
                    "leaseDurationSeconds": duration_seconds,
                    "acquireTime": stamp,
                    "renewTime": stamp,
                    "leaseTransitions": 0,
                },
            }
            try:
                self.request("POST", names.LEASE.path(namespace), body=body)
            except ApiError as err:
                if err.conflict:
                    return LeaseAnswer(False)
                raise
            return LeaseAnswer(True)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse_time(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or duration_seconds)
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder not in (identity, None, "") and not expired:
            assert renewed is not None  # not expired
            return LeaseAnswer(False, duration - (now - renewed).total_seconds())
        if holder != identity:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=identity, renewTime=stamp, leaseDurationSeconds=duration_seconds)
        lease["spec"] = spec
        try:
            self.request("PUT", names.LEASE.path(namespace, name), body=lease)
        except ApiError as err:
            if err.conflict:
                return LeaseAnswer(False)
            raise
        return LeaseAnswer(True)

    def release_lease(self, namespace: str, name: str, identity: str) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once instead of after expiry."""
        lease = self.get(names.LEASE, namespace, name)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != identity:
            return
        lease["spec"]["holderIdentity"] = None
        try:
            self.request("PUT", names.LEASE.path(namespace, name), body=lease)
        except ApiError as err:
            if not err.conflict:
                raise


# ---------------------------------------------------------------------------------------------------------------
# Helpers


# Characters that ``json.dumps(ensure_ascii=False)`` leaves raw but YAML would not read back as themselves: DEL
# and the C1 controls (outside YAML's printable set), NEL and the Unicode line and paragraph separators (line
# breaks to YAML, folded into a space inside a quoted string), the byte-order mark and the BMP's non-characters.
_YAML_UNSAFE = re.compile("[\\x7f-\\x9f\\u2028\\u2029\\ufeff\\ufffe\\uffff]")


# The API server refuses an Event whose message is longer than this many bytes (Go's len of the UTF-8 string).
EVENT_MESSAGE_MAX_BYTES = 1024


def event_message(message: str) -> str:
    """``message`` as an Event can carry it: cut to ``EVENT_MESSAGE_MAX_BYTES`` of UTF-8, ending in "…" when cut
    (a condition's message, quoting KEDA's and the HPA's, runs longer; the status keeps it whole)."""
    raw = message.encode()
    if len(raw) <= EVENT_MESSAGE_MAX_BYTES:
        return message
    ellipsis = "…".encode()
    return raw[: EVENT_MESSAGE_MAX_BYTES - len(ellipsis)].decode(errors="ignore") + "…"


def yaml_safe_json(obj: Any) -> bytes:
    """``obj`` as JSON text that the API server's YAML decoder reads back as the same strings.

    A server-side apply body is YAML. The client's default ``json.dumps`` writes a character outside the Basic
    Multilingual Plane (an emoji) as a UTF-16 surrogate pair, ``"\\ud83d\\udd25"``, which is valid JSON but not
    valid YAML (a YAML escape names a code point; a surrogate is none), so every apply carrying one was refused.
    UTF-8 text with only those characters escaped means the same in both languages."""
    text = json.dumps(obj, ensure_ascii=False)
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def _jsonable(value: object) -> str:
    """A time in a request body as the API server reads it (RFC 3339)."""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"


def _api_error(status: int, reason: str, raw: bytes) -> ApiError:
    message = raw.decode("utf-8", "replace")
    with contextlib.suppress(ValueError, AttributeError):
        message = str(json.loads(raw).get("message") or message)
    return ApiError(status, reason, message)


def _parse_time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
