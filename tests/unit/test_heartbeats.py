"""A node's heartbeat changes nothing the operator keeps, so it never reaches kopf's queues; every other event does
(nvlfleet.adapters.heartbeats, after decoding.watched_loads has trimmed the object)."""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kopf._cogs.clients import watching

from nvlfleet.adapters import caches, heartbeats
from support import fleetbuilder


def watched_node(version: int, heartbeat: str = "2026-12-06T20:00:00Z", **kwargs: Any) -> dict[str, Any]:
    """A tray as the API server sends it (uid, resourceVersion, heartbeat times), kept as the watch decodes it."""
    body = fleetbuilder.node("tray-0", rack=0, **kwargs)
    body["metadata"] |= {"uid": "uid-tray-0", "resourceVersion": str(version)}
    for condition in body["status"]["conditions"]:
        condition |= {"lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-12-06T08:00:00Z"}
    kept: dict[str, Any] = caches.kept(body)
    return kept


def event(kind: str | None, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": copy.deepcopy(obj)}


def passed(events: list[Any]) -> list[Any]:
    """What kopf receives from a watch that yielded ``events``, through the patched ``continuous_watch``."""

    async def original(**_: Any) -> AsyncIterator[Any]:
        for e in events:
            yield e

    async def collect() -> list[Any]:
        watch = heartbeats.dropping_repeats(original)
        return [e async for e in watch(resource=None, settings=None, namespace=None)]

    return asyncio.run(collect())


def test_a_heartbeat_of_a_listed_node_is_dropped() -> None:
    listed = event(None, watched_node(1))
    beat = event("MODIFIED", watched_node(2, heartbeat="2026-12-06T20:10:00Z"))

    assert passed([listed, beat]) == [listed]


def test_a_node_turning_not_ready_passes_though_only_its_condition_changed() -> None:
    listed = event(None, watched_node(1))
    not_ready = event("MODIFIED", watched_node(2, ready=False))

    assert passed([listed, not_ready]) == [listed, not_ready]


def test_a_node_relabelled_passes_and_its_next_heartbeat_is_dropped() -> None:
    listed = event(None, watched_node(1))
    relabelled = event("MODIFIED", watched_node(2, labels={"team": "b"}))
    beat = event("MODIFIED", watched_node(3, heartbeat="2026-12-06T20:10:00Z", labels={"team": "b"}))

    assert passed([listed, relabelled, beat]) == [listed, relabelled]


def test_a_node_deleted_and_added_again_with_the_same_body_passes_both() -> None:
    node = watched_node(1)
    events = [event(None, node), event("DELETED", node), event("ADDED", node), event("MODIFIED", node)]

    assert passed(events) == events[:3]


def test_a_bookmark_and_an_object_without_uid_pass() -> None:
    no_uid = watched_node(1)
    del no_uid["metadata"]["uid"]
    events = [watching.Bookmark.LISTED, event("MODIFIED", no_uid), event("MODIFIED", no_uid)]

    assert passed(events) == events


def test_a_kind_kept_whole_passes_every_event_for_its_resource_version_is_compared_with_the_operators_writes() -> None:
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"uid": "u"}}
    events = [event(None, lws), event("MODIFIED", lws), event("MODIFIED", lws)]

    assert passed(events) == events


def test_a_deleted_object_is_forgotten() -> None:
    seen = heartbeats.LastSeen()
    node = watched_node(1)
    seen.repeats(event(None, node))
    seen.repeats(event(None, {**node, "metadata": {**node["metadata"], "uid": "other"}}))

    seen.repeats(event("DELETED", node))

    assert len(seen) == 1


def test_install_patches_kopfs_watch_once_where_kopfs_infinite_watch_looks_it_up() -> None:
    heartbeats.install()
    patched = watching.continuous_watch
    heartbeats.install()  # idempotent

    assert watching.continuous_watch is patched
    assert heartbeats.unpatched(patched) is not patched
    # kopf's infinite_watch calls it by its module-level name, with keywords only: the patch is used.
    assert "continuous_watch(" in inspect.getsource(watching.infinite_watch)
    kinds = {p.kind for p in inspect.signature(heartbeats.unpatched(patched)).parameters.values()}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}


def test_install_refuses_a_kopf_whose_continuous_watch_is_no_async_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    async def not_a_generator(**_: Any) -> None:
        return None

    monkeypatch.setattr(watching, "continuous_watch", not_a_generator)

    with pytest.raises(RuntimeError, match="async generator"):
        heartbeats.install()
