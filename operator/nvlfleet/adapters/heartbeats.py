"""Watch events of nodes and pods that change nothing the operator keeps of them: dropped before kopf queues them.

Adapter, at the first step of the data flow, right after decoding (``decoding.watched_loads`` has already cut each
pod and node down to what the operator reads, ``caches.kept``). A node's agent reports it alive by rewriting its
status: a kubelet every five minutes, kwok every ten, each write a MODIFIED event on the cluster-wide node watch
whose only change is a heartbeat time and the resourceVersion. After trimming, such an event is the same object
the operator already holds. kopf still spent about 5 ms of CPU on each (an object stream and its worker task,
the index handlers, the event handler, its batching timers): on the benchmark's 1,008 nodes, a py-spy profile of
an idle operator showed its CPU jump from 0.007 to 0.06 cores for the two minutes each heartbeat round lasts.

``install`` wraps kopf's ``continuous_watch`` (one generator per watched resource, living across the watch's
reconnections): for pods and nodes (``caches.trimmed``), a MODIFIED event whose kept object, without its
resourceVersion, is the one last seen for that uid never reaches kopf. Every other event does: ADDED, DELETED,
the listing (type None), and every kind the operator keeps whole — a child's or a serving's resourceVersion is
compared with the operator's own writes (``caches.Written``), so none of theirs may be dropped. The
resourceVersion the watch resumes from is kopf's own, taken before this filter. The patch point is a kopf 1.x
internal; ``install`` fails loudly at start-up if it moves, and a unit test pins it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from kopf._cogs.clients import watching

from nvlfleet.adapters import caches

_PATCHED = "_nvlfleet_unchanged_dropped"


class LastSeen:
    """The digest of each trimmed object's kept form as last passed on, by uid (``caches.trimmed``: pods and
    nodes; other kinds are never recorded nor dropped): a 16-byte digest, not the object, so a fleet of thousands
    of pods and nodes costs a few hundred kilobytes."""

    def __init__(self) -> None:
        self._digests: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self._digests)

    def repeats(self, event: Any) -> bool:
        """Whether ``event`` changes nothing of its object but the resourceVersion (then it is to be dropped);
        records it otherwise."""
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            return False  # a bookmark, an error: kopf's to handle
        obj = event["object"]
        if not caches.trimmed(obj):
            return False  # kept whole: its resourceVersion is compared with the operator's writes
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid:
            return False
        if event.get("type") == "DELETED":
            self._digests.pop(uid, None)
            return False
        digest = _digest(obj)
        if event.get("type") == "MODIFIED" and self._digests.get(uid) == digest:
            return True
        self._digests[uid] = digest
        return False


def _digest(obj: dict[str, Any]) -> bytes:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    text = json.dumps({**obj, "metadata": meta}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


Watch = Callable[..., AsyncGenerator[Any, None]]


def dropping_repeats(original: Watch) -> Watch:
    """``continuous_watch`` that drops repeated pod and node events (see the module's docstring)."""

    async def continuous_watch(**kwargs: Any) -> AsyncGenerator[Any, None]:
        async with contextlib.aclosing(original(**kwargs)) as stream:
            seen = LastSeen()  # one per watched resource, across the watch's reconnections
            async for event in stream:
                if not seen.repeats(event):
                    yield event

    setattr(continuous_watch, _PATCHED, original)
    return continuous_watch


def unpatched(watch: Watch) -> Watch:
    """kopf's own ``continuous_watch`` behind ``watch`` (itself, if it is not the patched one)."""
    original: Watch = getattr(watch, _PATCHED, watch)
    return original


def install() -> None:
    """Drop repeated pod and node events in kopf's watch streams (idempotent). Raises RuntimeError if kopf's
    internals moved."""
    current = getattr(watching, "continuous_watch", None)
    if current is None or not inspect.isasyncgenfunction(unpatched(current)):
        raise RuntimeError(
            "kopf's continuous_watch is gone or no longer an async generator: update nvlfleet.heartbeats"
        )
    if hasattr(current, _PATCHED):
        return
    if any(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in inspect.signature(current).parameters.values()):
        raise RuntimeError(f"kopf's continuous_watch{inspect.signature(current)} takes more than keywords now")
    watching.continuous_watch = dropping_repeats(current)
