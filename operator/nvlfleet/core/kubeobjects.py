"""Node and Pod objects as the API server returns them, read into the inventory's records (``inventory.Node``,
``inventory.GpuPod``, their taints and tolerations), each malformed field a ``problems.Problem`` with its path.

Pure core, at the start of the data flow (**inventory** + spec → validate → plan → …): the adapter parses each
node and GPU pod once per watch event (``adapters.caches``), ``nvlfleet plan`` and ``nvlfleet render --nodes``
parse a listing (``from_objects``), and the reconciler parses what it is handed unparsed. It reads plain dicts
(``kubectl get -o yaml``, or a client's ``to_dict`` in camelCase) and keeps only what placement reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from nvlfleet.api import names, problems
from nvlfleet.core import inventory

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def from_objects(
    nodes: Iterable[object], pods: Iterable[object] = (), domain_label: str = names.DEFAULT_DOMAIN_LABEL
) -> inventory.Inventory:
    """Parse Node and Pod objects (dicts); raises ``problems.InvalidSpec`` naming ``nodes[i].field`` paths."""
    found: list[problems.Problem] = []
    parsed_nodes = [parse_node(obj, f"nodes[{i}]", found) for i, obj in enumerate(nodes)]
    parsed_pods = [parse_pod(obj, f"pods[{i}]", found) for i, obj in enumerate(pods)]
    if found:
        raise problems.InvalidSpec(found)
    return inventory.build(
        [n for n in parsed_nodes if n is not None], [p for p in parsed_pods if p is not None], domain_label
    )


def parse_node(obj: object, path: str, found: list[problems.Problem]) -> inventory.Node | None:
    """One Node object; appends a problem per malformed field to ``found`` and returns None when unusable."""
    before = len(found)
    node = _mapping(obj, path, found)
    if len(found) > before:
        return None
    meta = _mapping(node.get("metadata", {}), _at(path, "metadata"), found)
    spec = _mapping(node.get("spec", {}) or {}, _at(path, "spec"), found)
    status = _mapping(node.get("status", {}) or {}, _at(path, "status"), found)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        found.append(problems.Problem(_at(path, "metadata.name"), "a Node needs a name"))
    labels = _string_map(meta.get("labels", {}) or {}, _at(path, "metadata.labels"), found)
    allocatable = _mapping(status.get("allocatable", {}) or {}, _at(path, "status.allocatable"), found)
    gpus = _count(
        allocatable.get(names.GPU_RESOURCE, 0), _at(path, f'status.allocatable["{names.GPU_RESOURCE}"]'), found
    )
    taints = tuple(
        t
        for i, item in enumerate(_list(spec.get("taints", []) or [], _at(path, "spec.taints"), found))
        if (t := _taint(item, _at(path, f"spec.taints[{i}]"), found)) is not None
    )
    ready = False
    for i, item in enumerate(_list(status.get("conditions", []) or [], _at(path, "status.conditions"), found)):
        cond = _mapping(item, _at(path, f"status.conditions[{i}]"), found)
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        found.append(
            problems.Problem(_at(path, "spec.unschedulable"), f"expected true or false, got {unschedulable!r}")
        )
    if len(found) > before or not isinstance(name, str):
        return None
    return inventory.Node(
        name=name, labels=labels, gpus=gpus, ready=ready, unschedulable=bool(unschedulable), taints=taints
    )


def parse_pod(obj: object, path: str, found: list[problems.Problem]) -> inventory.GpuPod | None:
    """One Pod object, or None when it holds no GPU of a node (no GPUs, not bound, or finished)."""
    before = len(found)
    pod = _mapping(obj, path, found)
    if len(found) > before:
        return None
    meta = _mapping(pod.get("metadata", {}), _at(path, "metadata"), found)
    spec = _mapping(pod.get("spec", {}) or {}, _at(path, "spec"), found)
    status = _mapping(pod.get("status", {}) or {}, _at(path, "status"), found)
    labels = _string_map(meta.get("labels", {}) or {}, _at(path, "metadata.labels"), found)
    name, namespace, node = meta.get("name"), meta.get("namespace", "default"), spec.get("nodeName")
    gpus = _pod_gpus(spec, _at(path, "spec"), found)
    if len(found) > before or not isinstance(name, str) or not isinstance(namespace, str):
        return None
    if not isinstance(node, str) or not node or gpus == 0 or status.get("phase") in ("Succeeded", "Failed"):
        return None
    serving, role = labels.get(names.SERVING_LABEL), labels.get(names.ROLE_LABEL)
    owner = inventory.RoleKey(inventory.ServingKey(namespace, serving), role) if serving and role else None
    lws, index = labels.get(names.LWS_NAME_LABEL), labels.get(names.LWS_GROUP_INDEX_LABEL)
    group = f"{lws}/{index}" if lws and index is not None else None
    return inventory.GpuPod(namespace=namespace, name=name, node=node, gpus=gpus, owner=owner, group=group)


def parse_tolerations(items: Sequence[object], path: str) -> tuple[inventory.Toleration, ...]:
    """Tolerations as written in a pod spec; raises ``problems.InvalidSpec`` with field paths."""
    found: list[problems.Problem] = []
    out = tuple(t for i, item in enumerate(items) if (t := _toleration(item, f"{path}[{i}]", found)) is not None)
    if found:
        raise problems.InvalidSpec(found)
    return out


def _pod_gpus(spec: Mapping[str, object], path: str, found: list[problems.Problem]) -> int:
    """GPUs the scheduler reserves for the pod: containers (and sidecars) add up, plain init containers peak."""

    def requested(field: str) -> Iterator[tuple[int, bool]]:
        for i, item in enumerate(_list(spec.get(field, []) or [], _at(path, field), found)):
            container = _mapping(item, _at(path, f"{field}[{i}]"), found)
            res = _mapping(container.get("resources", {}) or {}, _at(path, f"{field}[{i}].resources"), found)
            amount = 0
            for kind in ("limits", "requests"):
                quantities = _mapping(res.get(kind, {}) or {}, _at(path, f"{field}[{i}].resources.{kind}"), found)
                if names.GPU_RESOURCE in quantities:
                    where = _at(path, f'{field}[{i}].resources.{kind}["{names.GPU_RESOURCE}"]')
                    amount = max(amount, _count(quantities[names.GPU_RESOURCE], where, found))
            yield amount, container.get("restartPolicy") == "Always"

    running = sum(amount for amount, _ in requested("containers"))
    init_peak = 0
    for amount, sidecar in requested("initContainers"):
        if sidecar:
            running += amount
        else:
            init_peak = max(init_peak, amount)
    return max(running, init_peak)


def _taint(obj: object, path: str, found: list[problems.Problem]) -> inventory.Taint | None:
    taint = _mapping(obj, path, found)
    key, value, effect = taint.get("key"), taint.get("value", "") or "", taint.get("effect")
    if not isinstance(key, str) or not key:
        found.append(problems.Problem(_at(path, "key"), "a taint needs a key"))
        return None
    if effect not in _EFFECTS:
        found.append(problems.Problem(_at(path, "effect"), f"expected one of {', '.join(_EFFECTS)}, got {effect!r}"))
        return None
    return inventory.Taint(key=key, value=str(value), effect=str(effect))


def _toleration(obj: object, path: str, found: list[problems.Problem]) -> inventory.Toleration | None:
    tol = _mapping(obj, path, found)
    key, operator, value = tol.get("key", "") or "", tol.get("operator", "Equal") or "Equal", tol.get("value", "")
    effect, seconds = tol.get("effect", "") or "", tol.get("tolerationSeconds")
    before = len(found)
    if not isinstance(key, str):
        found.append(problems.Problem(_at(path, "key"), f"expected a string, got {key!r}"))
    if operator not in ("Equal", "Exists"):
        found.append(problems.Problem(_at(path, "operator"), f"expected Equal or Exists, got {operator!r}"))
    if operator == "Exists" and value:
        found.append(problems.Problem(_at(path, "value"), "must be empty when operator is Exists"))
    if operator == "Equal" and not key:
        found.append(problems.Problem(_at(path, "key"), "an empty key needs operator Exists"))
    if not isinstance(value, str | None):
        found.append(problems.Problem(_at(path, "value"), f"expected a string, got {value!r}"))
    if effect and effect not in _EFFECTS:
        found.append(problems.Problem(_at(path, "effect"), f"expected one of {', '.join(_EFFECTS)}, got {effect!r}"))
    if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
        found.append(problems.Problem(_at(path, "tolerationSeconds"), f"expected an integer, got {seconds!r}"))
    if len(found) > before:
        return None
    return inventory.Toleration(
        key=str(key),
        operator="Exists" if operator == "Exists" else "Equal",
        value=str(value or ""),
        effect=str(effect),
        toleration_seconds=seconds if isinstance(seconds, int) else None,
    )


def _at(path: str, field: str) -> str:
    """``path.field``, or just ``field`` at the top of a document."""
    return f"{path}.{field}" if path else field


def _mapping(obj: object, path: str, found: list[problems.Problem]) -> Mapping[str, object]:
    # Keys are only looked up by name here, so a stray non-string key is harmless and is not scanned for: checking
    # every key of every Node and Pod was over a third of a reconcile pass on a 1,000-node fleet (bench/run.py
    # --profile). ``_string_map``, whose keys become label names, does check them. ``type is dict`` first: the
    # API server's JSON is plain dicts, and the ABC ``isinstance`` is slow.
    if type(obj) is dict or isinstance(obj, Mapping):
        return obj
    found.append(problems.Problem(path, f"expected a mapping, got {_kind(obj)}"))
    return {}


def _list(obj: object, path: str, found: list[problems.Problem]) -> Sequence[object]:
    if isinstance(obj, list | tuple):
        return obj
    found.append(problems.Problem(path, f"expected a list, got {_kind(obj)}"))
    return ()


def _string_map(obj: object, path: str, found: list[problems.Problem]) -> dict[str, str]:
    raw = _mapping(obj, path, found)
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            found.append(problems.Problem(path, f"expected string keys, got {_kind(key)}"))
        elif isinstance(value, str):
            out[key] = value
        else:
            found.append(problems.Problem(f'{path}["{key}"]', f"expected a string, got {_kind(value)}"))
    return out


def _count(obj: object, path: str, found: list[problems.Problem]) -> int:
    """An extended-resource quantity: Kubernetes only allows whole numbers for ``nvidia.com/gpu``."""
    if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 0:
        return obj
    if isinstance(obj, str) and obj.isdigit():
        return int(obj)
    found.append(problems.Problem(path, f"expected a whole number of GPUs, got {obj!r}"))
    return 0


def _kind(obj: object) -> str:
    if obj is None:
        return "nothing"
    if isinstance(obj, Mapping):
        return "a mapping"
    if isinstance(obj, list | tuple):
        return "a list"
    return f"{type(obj).__name__} {obj!r}"
