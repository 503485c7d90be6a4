"""The operator's caches over its watches: read-your-writes over the LeaderWorkerSet index (``caches.Written``) —
a group this process placed a moment ago holds its trays for the next pass even before the watch delivers it,
and stops overriding the index as soon as the index has caught up — and the fleet view shared by passes until
a watched object changes in a way the view reads (``Operator.changed``, ``fleetversion``)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from nvlfleet.adapters import caches, main, operator
from nvlfleet.adapters.config import Config
from nvlfleet.core import reconciler
from support import fleetbuilder as fb
from support import servingbuilder as sb


def lws(name: str, replicas: int, version: str, uid: str = "uid-1", namespace: str = "team") -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": version},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2}},
    }


def replicas(fleet: list[dict[str, Any]]) -> dict[str, int]:
    return {o["metadata"]["name"]: o["spec"]["replicas"] for o in fleet}


def test_a_write_the_watch_has_not_delivered_counts_over_the_older_cached_object() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "120"))

    fleet = written.merged([lws("a-decode", 1, "100"), lws("b-decode", 2, "90")])

    assert replicas(fleet) == {"a-decode": 3, "b-decode": 2}
    assert len(written) == 1


def test_the_objects_of_names_this_process_did_not_write_are_passed_on_as_the_index_holds_them() -> None:
    written = caches.Written()
    indexed = [lws("a-decode", 1, "100"), lws("b-decode", 2, "90")]
    assert all(a is b for a, b in zip(written.merged(indexed), indexed, strict=True))  # nothing written

    written.note(lws("b-decode", 3, "95"))
    a, b = written.merged(indexed)
    assert a is indexed[0]
    assert b["spec"]["replicas"] == 3


def test_a_new_object_the_index_does_not_hold_yet_is_added() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "120"))

    assert replicas(written.merged([lws("b-decode", 2, "90")])) == {"b-decode": 2, "a-decode": 3}


def test_once_the_index_holds_the_write_or_a_later_state_the_index_wins_and_the_write_is_forgotten() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "120"))

    assert replicas(written.merged([lws("a-decode", 3, "120")])) == {"a-decode": 3}
    assert len(written) == 0

    written.note(lws("a-decode", 4, "130"))
    assert replicas(written.merged([lws("a-decode", 2, "150")])) == {"a-decode": 2}  # someone scaled it since
    assert len(written) == 0


def test_resource_versions_compare_as_numbers_not_strings() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "1000"))

    assert replicas(written.merged([lws("a-decode", 1, "999")])) == {"a-decode": 3}


def test_a_watch_event_at_or_after_the_write_forgets_it() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "120"))

    written.seen(lws("a-decode", 1, "110"))
    assert len(written) == 1
    written.seen(lws("a-decode", 3, "121"))
    assert len(written) == 0


def test_the_deletion_of_an_older_object_of_the_same_name_keeps_the_new_write() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "120", uid="new"))

    written.seen(lws("a-decode", 1, "115", uid="old"), deleted=True)

    assert len(written) == 1
    assert replicas(written.merged([])) == {"a-decode": 3}


def test_versions_that_are_not_numbers_count_only_when_equal() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "v2"))

    assert replicas(written.merged([lws("a-decode", 1, "v1")])) == {"a-decode": 3}
    written.seen(lws("a-decode", 3, "v2"))
    assert len(written) == 0

    written.note(lws("a-decode", 3, "v3", uid="same"))
    written.seen(lws("a-decode", 3, "v4", uid="same"), deleted=True)
    assert len(written) == 0


def test_the_same_name_in_another_namespace_is_another_object() -> None:
    written = caches.Written()
    written.note(lws("a-decode", 3, "120", namespace="one"))

    fleet = written.merged([lws("a-decode", 1, "130", namespace="two")])

    assert sorted((o["metadata"]["namespace"], o["spec"]["replicas"]) for o in fleet) == [("one", 3), ("two", 1)]


def _rack_snapshot(op: operator.Operator) -> reconciler.Snapshot:
    """Two racks' nodes in ``op``'s node index, and a serving's snapshot before the caches are read."""
    nodes = fb.rack(0) + fb.rack(1)
    op.indices = {"fleet_nodes": {None: [caches.parsed_node(n["metadata"]["name"], n, []) for n in nodes]}}
    return reconciler.Snapshot(
        serving=sb.serving_dict(), now=datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC), served=frozenset()
    )


def _node_lost(op: operator.Operator) -> None:
    """A node goes from the index, and the version views are filed under moves (as ``node_event`` does)."""
    op.indices["fleet_nodes"][None].pop()
    op.changed()


def test_passes_share_one_fleet_view_until_a_watched_object_changes() -> None:
    op = operator.Operator(Config())
    snapshot = _rack_snapshot(op)

    first, second = op._cached(snapshot, fresh=True), op._cached(snapshot, fresh=True)
    assert first.view is not None and second.view is first.view
    assert len(first.view.inventory.nodes) == 36

    _node_lost(op)
    third = op._cached(snapshot, fresh=True)
    assert third.view is not first.view
    assert third.view is not None and len(third.view.inventory.nodes) == 35


def test_a_pass_that_places_nothing_reads_a_view_younger_than_half_the_debounce_though_the_fleet_moved() -> None:
    op = operator.Operator(Config(debounce_seconds=60.0))
    snapshot = _rack_snapshot(op)
    first = op._cached(snapshot, fresh=False)

    _node_lost(op)

    assert op._cached(snapshot, fresh=False).view is first.view


def test_a_pass_that_places_nothing_reads_a_new_view_once_the_last_is_half_a_debounce_old() -> None:
    op = operator.Operator(Config(debounce_seconds=0.0))  # (a view is half a debounce old at once)
    snapshot = _rack_snapshot(op)
    first = op._cached(snapshot, fresh=False)

    _node_lost(op)
    later = op._cached(snapshot, fresh=False)

    assert later.view is not first.view
    assert later.view is not None and len(later.view.inventory.nodes) == 35


def test_a_decision_that_places_groups_is_made_again_from_a_view_of_the_fleet_as_it_is_now() -> None:
    op = operator.Operator(Config(debounce_seconds=60.0))
    snapshot = _rack_snapshot(op)
    first = op._cached(snapshot, fresh=False)

    _node_lost(op)
    again = op._recached(first)

    assert again.view is not first.view
    assert again.view is not None and len(again.view.inventory.nodes) == 35


def test_passes_share_the_merged_fleet_until_a_leaderworkerset_is_seen_or_written() -> None:
    op = operator.Operator(Config())
    op.indices = {"fleet_lws": {None: [lws("a", 1, "5")]}}
    snapshot = reconciler.Snapshot(
        serving=sb.serving_dict(),
        now=datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
        served=frozenset({"LeaderWorkerSet"}),
    )
    assert replicas(op._cached(snapshot, fresh=True).fleet) == {"a": 1}

    op.written.note(lws("b", 2, "6", uid="uid-2"))  # as ``Operator._apply`` does, then ``changed``
    op.changed()
    assert replicas(op._cached(snapshot, fresh=True).fleet) == {"a": 1, "b": 2}

    op.indices["fleet_lws"][None][0] = lws("a", 3, "7")  # the watch delivered a change: ``lws_event`` says so
    op.changed()
    assert replicas(op._cached(snapshot, fresh=True).fleet) == {"a": 3, "b": 2}


def _viewed(op: operator.Operator) -> reconciler.FleetView | None:
    snapshot = reconciler.Snapshot(
        serving=sb.serving_dict(),
        now=datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
        served=frozenset({"LeaderWorkerSet"}),
    )
    return op._cached(snapshot, fresh=True).view


def _event(handler: Any, op: operator.Operator, body: dict[str, Any], event_type: str = "MODIFIED") -> None:
    meta = body["metadata"]
    labels = meta.get("labels") or {}
    memo = _Memo(op)
    asyncio.run(
        handler(namespace=meta["namespace"], name=meta["name"], labels=labels, body=body, type=event_type, memo=memo)
    )


class _Memo:
    def __init__(self, op: operator.Operator) -> None:
        self.operator = op


def test_a_leaderworkersets_status_write_leaves_the_shared_fleet_view_as_it_was() -> None:
    op = operator.Operator(Config())
    op.indices = {"fleet_lws": {None: [lws("a", 1, "5")]}}
    _event(main.lws_event, op, lws("a", 1, "5"), "ADDED")
    first = _viewed(op)

    written = {**lws("a", 1, "6"), "status": {"readyReplicas": 1}}  # the controller's status write
    op.indices["fleet_lws"][None][0] = written
    _event(main.lws_event, op, written)
    assert _viewed(op) is first

    scaled = lws("a", 2, "7")
    op.indices["fleet_lws"][None][0] = scaled
    _event(main.lws_event, op, scaled)
    assert _viewed(op) is not first


def test_a_gpu_pod_coming_up_leaves_the_shared_fleet_view_as_it_was_until_it_is_bound_or_gone() -> None:
    op = operator.Operator(Config())
    pending = fb.pod("p", None, namespace="team", phase="Pending")
    _event(main.gpu_pod_event, op, pending, "ADDED")
    first = _viewed(op)

    bound = fb.pod("p", "rack-0-tray-0", namespace="team", phase="Pending")
    _event(main.gpu_pod_event, op, bound)
    second = _viewed(op)
    assert second is not first

    ready = {**fb.pod("p", "rack-0-tray-0", namespace="team"), "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    _event(main.gpu_pod_event, op, ready)
    assert _viewed(op) is second

    _event(main.gpu_pod_event, op, ready, "DELETED")
    assert _viewed(op) is not second
