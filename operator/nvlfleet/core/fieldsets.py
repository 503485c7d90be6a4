"""Fields of a child that another field manager set, read from its ``managedFields``, and the child without them.

Pure core, between diff and apply (… → render → **diff** → apply → prune → status). Server-side apply with
``force`` takes over fields another manager set to a *different* value, but a field nvlfleet does not render at
all — a hostPath volume, a sidecar container, an env var or a securityContext patched into a LeaderWorkerSet by
someone else — stays as long as its manager owns it: applying again changes nothing. The reconciler finds such
fields here (``foreign``), and the adapter replaces the child (an update, with ``resourceVersion``) by
``without_foreign``: the live object with those fields removed and the other managers' entries dropped from
``managedFields``, so nvlfleet's own apply owns exactly what it renders again and later applies prune as usual.

Only ``spec`` is looked at: metadata belongs to many (finalizers, controllers' annotations) and status to the
controllers; entries written through a subresource (``status``, ``scale``) are left alone. A field another
manager shares with nvlfleet (same value) is desired and kept.

``managedFields`` encodes a set of field paths as nested maps: ``f:<name>`` a map field, ``k:<json>`` a list item
by its keys, ``v:<json>`` a set item by value, ``i:<n>`` an item by index, ``.`` the node itself.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from nvlfleet.api import names


@dataclasses.dataclass(frozen=True)
class Foreign:
    """What other managers set under ``spec`` that nvlfleet does not render."""

    managers: tuple[str, ...]
    paths: tuple[str, ...]  # readable: spec.leaderWorkerTemplate.workerTemplate.spec.volumes[name=host]


def foreign(obj: Mapping[str, Any]) -> Foreign | None:
    """The fields of ``obj``'s spec only other managers own, or None when there are none."""
    ours = _our_spec_fields(obj)
    managers: list[str] = []
    paths: list[str] = []
    for entry in _foreign_entries(obj):
        spec_fields = _spec_fields(entry)
        found = [p for p in _only_theirs(spec_fields, ours, _as_mapping(obj.get("spec")), "spec")]
        if found:
            managers.append(str(entry.get("manager") or "unknown"))
            paths += found
    if not paths:
        return None
    return Foreign(tuple(dict.fromkeys(managers)), tuple(dict.fromkeys(paths)))


def without_foreign(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as an update body: spec without the fields only other managers own, ``managedFields`` without
    their entries, no status (an update of the main resource ignores it anyway)."""
    body: dict[str, Any] = copy.deepcopy(dict(obj))
    body.pop("status", None)
    ours = _our_spec_fields(obj)
    for entry in _foreign_entries(obj):
        _strip(body.get("spec"), _spec_fields(entry), ours)
    meta = body.setdefault("metadata", {})
    drop = {id(e) for e in _foreign_entries(obj)}
    meta["managedFields"] = [
        copy.deepcopy(e) for e in _as_list(_as_mapping(obj.get("metadata")).get("managedFields")) if id(e) not in drop
    ]
    return body


def others_own_spec(obj: Mapping[str, Any]) -> bool:
    """Whether a manager other than nvlfleet owns any field of ``obj``'s spec (outside subresources): when none
    does, ``foreign`` is None whatever the rest of ``managedFields`` says, and a cache may drop them."""
    return bool(_foreign_entries(obj))


# ---------------------------------------------------------------------------------------------------------------


def _foreign_entries(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        e
        for e in _as_list(_as_mapping(obj.get("metadata")).get("managedFields"))
        if isinstance(e, Mapping)
        and e.get("manager") != names.FIELD_MANAGER
        and not e.get("subresource")
        and _spec_fields(e)
    ]


def _our_spec_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    merged: dict[str, Any] = {}
    for e in _as_list(_as_mapping(obj.get("metadata")).get("managedFields")):
        if isinstance(e, Mapping) and e.get("manager") == names.FIELD_MANAGER and not e.get("subresource"):
            _merge(merged, _spec_fields(e))
    return merged


def _spec_fields(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    return _as_mapping(_as_mapping(entry.get("fieldsV1")).get("f:spec"))


def _merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, sub in other.items():
        if isinstance(sub, Mapping):
            _merge(into.setdefault(key, {}), sub)


def _only_theirs(theirs: Mapping[str, Any], ours: Mapping[str, Any] | None, live: Any, where: str) -> list[str]:
    """Readable paths of what ``theirs`` holds and ``ours`` does not, that exist in ``live``."""
    found: list[str] = []
    for key, sub in theirs.items():
        if key == ".":
            continue
        child, label = _locate(live, key)
        if child is _MISSING:
            continue
        path = f"{where}.{label}" if key.startswith("f:") else f"{where}[{label}]"
        mine = None if ours is None else ours.get(key)
        if mine is None:
            found.append(path)
        elif isinstance(sub, Mapping) and sub:
            found += _only_theirs(sub, _as_mapping(mine), child, path)
    return found


def _strip(live: Any, theirs: Mapping[str, Any], ours: Mapping[str, Any] | None) -> None:
    """Remove from ``live`` (in place) what ``theirs`` holds and ``ours`` does not."""
    for key, sub in theirs.items():
        if key == ".":
            continue
        child, _ = _locate(live, key)
        if child is _MISSING:
            continue
        mine = None if ours is None else ours.get(key)
        if mine is None:
            _remove(live, key, child)
        elif isinstance(sub, Mapping) and sub:
            _strip(child, sub, _as_mapping(mine))


_MISSING = object()


def _locate(live: Any, key: str) -> tuple[Any, str]:
    """The node ``key`` names inside ``live`` and a readable label for it, or ``_MISSING``."""
    kind, _, raw = key.partition(":")
    if kind == "f" and isinstance(live, dict):
        return live.get(raw, _MISSING), raw
    if kind == "k" and isinstance(live, list):
        wanted = json.loads(raw)
        label = ",".join(f"{k}={v}" for k, v in wanted.items())
        for item in live:
            if isinstance(item, Mapping) and all(item.get(k) == v for k, v in wanted.items()):
                return item, label
        return _MISSING, label
    if kind == "v" and isinstance(live, list):
        value = json.loads(raw)
        return (value if value in live else _MISSING), json.dumps(value)
    if kind == "i" and isinstance(live, list) and raw.isdigit() and int(raw) < len(live):
        return live[int(raw)], raw
    return _MISSING, raw


def _remove(live: Any, key: str, child: Any) -> None:
    kind, _, raw = key.partition(":")
    if kind == "f":
        del live[raw]
    else:
        live[:] = [item for item in live if item is not child and not (kind == "v" and item == child)]


def _as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
