"""What the operator keeps of its watches: nodes, GPU pods and nvlfleet's LeaderWorkerSets trimmed to the fields
the planner reads, every serving's children, and this process's own writes the watch has not delivered yet.

Adapter, at the *read* step of the data flow (inventory + spec → validate → plan → …): kopf's indexes (see
``nvlfleet.adapters.main``) hold these objects, so a thousand nodes cost a few hundred bytes each, and a pass
reads them instead of listing the fleet or its own children from the API server. ``Written`` gives the pass
read-your-writes over an index: two servings placed back to back never count a tray twice, and a pass right
after an apply sees what it applied. ``DiffBases`` is what kopf would otherwise write on every serving as an
annotation (see ``nvlfleet.adapters.main``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from nvlfleet.api import names, problems
from nvlfleet.core import fieldsets, inventory, kubeobjects


def requests_gpus(spec: Mapping[str, Any], **_: Any) -> bool:
    """Whether a pod asks for GPUs (a kopf ``when=`` filter: only such pods are watched for the planner)."""
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                if str((resources.get(kind) or {}).get(names.GPU_RESOURCE, "0")) not in ("0", ""):
                    return True
    return False


def trim_node(body: Mapping[str, Any]) -> dict[str, Any]:
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


def trim_lws(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the planner reads of another serving's LeaderWorkerSet: whose it is (labels, and the owner reference
    that proves it: labels alone can be written by anyone), where it is pinned (the domain annotation, else its
    pods' node affinity or selector), how many groups of how many nodes."""
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
            "ownerReferences": [
                {k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
                for ref in meta.get("ownerReferences") or []
                if isinstance(ref, Mapping)
            ],
        },
        "spec": {
            "replicas": spec.get("replicas", 1),
            "leaderWorkerTemplate": {
                "size": lwt.get("size", 1),
                **{k: placement_of(lwt.get(k)) for k in ("leaderTemplate", "workerTemplate") if k in lwt},
            },
        },
    }


def lws_summary(body: Mapping[str, Any]) -> str:
    """What a fleet view reads of a LeaderWorkerSet (``trim_lws`` without its resourceVersion), as compact JSON: the
    controller's status writes leave it as it was (``fleetversion``)."""
    trimmed = trim_lws(body)
    del trimmed["metadata"]["resourceVersion"]
    return json.dumps(trimmed, sort_keys=True, separators=(",", ":"))


def node_summary(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What placement depends on, without heartbeats: a change here is worth a re-plan."""
    node = trim_node(body)
    return (
        tuple(sorted(node["metadata"]["labels"].items())),
        node["spec"]["unschedulable"],
        tuple(sorted((t.get("key"), t.get("value"), t.get("effect")) for t in node["spec"]["taints"])),
        str(node["status"]["allocatable"].get(names.GPU_RESOURCE, "0")),
        tuple((c["type"], c["status"]) for c in node["status"]["conditions"]),
    )


def trim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """What inventory and the scraper read of a GPU pod: where it runs, what it holds, whether it is ready."""
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


# What kopf itself reads of an object's metadata (its per-object streams, resource versions, finalizers, filters,
# logs); everything else of a pod or a node it is handed is what ``trim_pod``/``trim_node`` keep.
KOPF_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "finalizers",
    "labels",
    "annotations",
    "ownerReferences",
)


# The (apiVersion, kind) of every kind a serving owns.
_CHILD_TYPES = frozenset((kind.api_version, kind.kind) for kind in names.CHILD_KINDS)


def kept(document: Any) -> Any:
    """What the operator keeps of a document kopf decoded from the API server (a list, a watch event, an object):
    pods and nodes as ``trim_pod``/``trim_node`` keep them, with the metadata kopf reads; a DeepSeekServing
    without its ``managedFields``; a child without them too when they name no manager but nvlfleet owning a
    field of its spec (all a pass reads of them: ``core.fieldsets.foreign``), else whole; other kinds whole.

    kopf holds every object of every watched kind as decoded until its indexes are populated. At start-up with
    1,000 servings that was about 28 MB of JSON at once (one object of each kind measured, times a thousand),
    decoded into Python objects, and the allocator kept the arenas it took long after they were freed; pods and
    nodes were about half of it, ``managedFields`` two fifths of each object."""
    if not isinstance(document, dict):
        return document
    kind = document.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(document.get("items"), list):
        item_kind, version = kind.removesuffix("List"), document.get("apiVersion")
        document["items"] = [
            _kept_object({**item, "kind": item_kind, "apiVersion": version}) if isinstance(item, dict) else item
            for item in document["items"]
        ]
        return document
    if document.get("type") in ("ADDED", "MODIFIED", "DELETED") and isinstance(document.get("object"), dict):
        document["object"] = _kept_object(document["object"])
        return document
    return _kept_object(document)


def trimmed(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is of a kind the operator keeps only in part (``trim_pod``, ``trim_node``): pods and nodes."""
    return obj.get("apiVersion") == "v1" and obj.get("kind") in ("Pod", "Node")


def _kept_object(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    if trimmed(obj):
        slim = trim_pod(obj) if obj["kind"] == "Pod" else trim_node(obj)
        slim["metadata"] = {k: meta[k] for k in KOPF_METADATA if k in meta}
        return slim
    if obj.get("kind") == names.KIND and str(obj.get("apiVersion", "")).startswith(names.GROUP + "/"):
        meta.pop("managedFields", None)
    elif (obj.get("apiVersion"), obj.get("kind")) in _CHILD_TYPES and not fieldsets.others_own_spec(obj):
        # nvlfleet's own entry lists every field it renders: two fifths of a LeaderWorkerSet's JSON, held by kopf
        # for every child at start-up and in the children's indexes (``Packed``) after.
        meta.pop("managedFields", None)
    return obj


def parsed_node(name: str, body: Mapping[str, Any], found: list[problems.Problem]) -> inventory.Node | None:
    """A node as the ``fleet_nodes`` index holds it: trimmed, then parsed (None, with ``found`` saying why, when a
    field is malformed: the reconciler would leave it out too)."""
    return kubeobjects.parse_node(trim_node(body), f"nodes[{name}]", found)


def parsed_pod(name: str, body: Mapping[str, Any]) -> inventory.GpuPod | None:
    """The GPUs a pod holds, as the ``bound_gpu_pods`` index holds them (None for an unbound or finished pod)."""
    return kubeobjects.parse_pod(trim_pod(body), f"pods[{name}]", [])


# One index of each child kind, by (namespace, serving): a pass reads its children there, not from the API server.
CHILD_INDEXES: Mapping[str, str] = {kind.kind: f"children_{kind.plural}" for kind in names.CHILD_KINDS}


class Written:
    """Objects this process applied that its watch has not delivered yet: read-your-writes over an index (the
    ``fleet_lws`` index, or a serving's children).

    Where a pass puts new groups depends on every other serving's groups. The index lags the API server by a
    watch round trip, and two servings are often placed back to back; without this, the second could count the
    first one's trays as free. An entry lasts until the index holds the same object at the same or a later
    resourceVersion (the API server issues them as increasing etcd revisions; when one is not an integer, only
    the same version counts), or until the watch reports it deleted.
    """

    def __init__(self) -> None:
        self._sets: dict[tuple[str, str, str], dict[str, Any]] = {}
        # Passes note and merge in worker threads while watch events arrive on the event loop.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sets)

    def note(self, applied: dict[str, Any]) -> None:
        """What the API server answered to an apply (trimmed like the index's entries)."""
        with self._lock:
            self._sets[_ident(applied)] = applied

    def pending(self, namespace: str, serving: str) -> tuple[tuple[str, str, str], ...]:
        """This process's writes of ``serving``'s children that the watch has not delivered: (kind, name,
        resourceVersion) each. Part of what a pass of that serving reads (``Operator.inputs``); another serving's
        writes are not, so one serving's catching up does not make every other serving's re-check run a pass."""
        with self._lock:
            return tuple(
                sorted(
                    (key[0], key[2], str((obj.get("metadata") or {}).get("resourceVersion") or ""))
                    for key, obj in self._sets.items()
                    if key[1] == namespace
                    and ((obj.get("metadata") or {}).get("labels") or {}).get(names.SERVING_LABEL) == serving
                )
            )

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

    def merged(
        self,
        indexed: Iterable[Mapping[str, Any]],
        *,
        kind: str | None = None,
        namespace: str | None = None,
        serving: str | None = None,
    ) -> list[Mapping[str, Any]]:
        """The index's objects, each replaced by this process's newer write where the index lags, and the writes
        it does not hold yet (only those of ``kind``, in ``namespace``, labelled as ``serving``'s, where given)."""
        fleet: list[Mapping[str, Any]] = []
        listed = set()
        with self._lock:
            if not self._sets:
                return list(indexed)  # nothing of this process's in flight, as mostly: the index as it is
            # Only an object of a name this process wrote can be replaced: the others are passed on untouched, at
            # one lookup each. Keying each of a thousand sets for every fleet view was about a tenth of what views
            # cost in the profile of a 1,000-serving roll-out, when views were made whole (10ebb7f).
            written = {key[2] for key in self._sets}
            for obj in list(indexed):
                if str((obj.get("metadata") or {}).get("name") or "") not in written:
                    fleet.append(obj)
                    continue
                key = _ident(obj)
                listed.add(key)
                mine = self._sets.get(key)
                if mine is not None and _caught_up(obj, mine):
                    del self._sets[key]
                    mine = None
                fleet.append(obj if mine is None else mine)
            fleet += [
                obj
                for key, obj in self._sets.items()
                if key not in listed
                and kind in (None, key[0])
                and namespace in (None, key[1])
                and serving in (None, ((obj.get("metadata") or {}).get("labels") or {}).get(names.SERVING_LABEL))
            ]
        return fleet


def _ident(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _caught_up(watched: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether ``watched`` is the object ``written`` describes, or a later state of it."""
    seen = (watched.get("metadata") or {}).get("resourceVersion")
    mine = (written.get("metadata") or {}).get("resourceVersion")
    if isinstance(seen, str) and isinstance(mine, str) and seen.isdigit() and mine.isdigit():
        return int(seen) >= int(mine)
    return seen == mine


def child_key(namespace: str | None, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """The key a child is indexed under: its namespace and the serving its label names (None without one)."""
    serving = labels.get(names.SERVING_LABEL)
    return (namespace, serving) if namespace and serving else None


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Packed:
    """A watched object kept as compact JSON, with the fields compared without decoding it (kind, uid,
    resourceVersion): a thousand servings' children and the servings themselves, as ``kept`` keeps them (a pass
    compares every field nvlfleet renders, and other managers' ``managedFields``), cost their JSON text rather
    than five to ten times as much in Python dicts. A pass decodes only its own serving's (``unpack``: a fresh
    copy, so no pass can alter the cache)."""

    __slots__ = ("kind", "resource_version", "text", "uid")

    def __init__(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self.kind = str(body.get("kind") or "")
        self.uid = str(meta.get("uid") or "")
        self.resource_version = str(meta.get("resourceVersion") or "")
        self.text = json.dumps(dict(body), separators=(",", ":"))  # kopf.Body is a Mapping, not a dict

    def unpack(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.text)
        return decoded


class DiffBases:
    """The last handled essence of each serving (kopf's diff base), in this process's memory, as compact JSON.

    kopf compares a serving's essence (spec, labels, annotations) with the stored one to tell a spec change from a
    status write. Its default stores it in an annotation: one more write on every new or changed serving. Every
    nvlfleet handler decides from the cluster as it is (create, update and resume run the same pass), so the diff
    base only has to last as long as the process: after a restart kopf finds none and runs the pass as for a new
    serving, which writes nothing when the fleet already matches.
    """

    def __init__(self) -> None:
        self._bases: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._bases)

    def fetch(self, uid: str) -> Any:
        text = self._bases.get(uid)
        return None if text is None else json.loads(text)

    def store(self, uid: str, essence: Mapping[str, Any]) -> None:
        self._bases[uid] = json.dumps(essence, separators=(",", ":"), sort_keys=True)

    def forget(self, uid: str) -> None:
        self._bases.pop(uid, None)
