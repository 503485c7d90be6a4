"""The idle re-check is free: a pass reads the serving and its children from the watch, a pass that changed
nothing marks the serving settled, and the periodic re-check runs no pass (asks the API server nothing) for a
settled serving until one of its inputs — its own version, a watched child's, the fleet's — changes."""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from nvlfleet.adapters import caches, main, operator
from nvlfleet.adapters.config import Config
from nvlfleet.api import names
from nvlfleet.core import inventory
from support import fleetbuilder as fb
from support import servingbuilder as sb

KEY = inventory.ServingKey("llm", "dsv41")


class FakeApi:
    """The API server's answers to a pass, counting every call: writes land in ``children`` / ``serving``."""

    def __init__(self, serving: dict[str, Any]) -> None:
        self.serving = serving
        self.calls: list[str] = []
        self.children: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._versions = itertools.count(10)

    def get(self, kind: Any, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get")
        return copy.deepcopy(self.serving)

    def served(self, kind: Any) -> bool:
        self.calls.append("served")
        return True

    def list_objects(self, kind: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append("list")
        return [e for e in self.events if kind.kind == "Event"]

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        self.calls.append("apply")
        stored = copy.deepcopy(dict(obj))
        stored["metadata"].update(uid=f"uid-{obj['metadata']['name']}", resourceVersion=str(next(self._versions)))
        if stored["kind"] == "LeaderWorkerSet":  # every group up, as the controller would report
            stored["status"] = {"readyReplicas": stored["spec"]["replicas"]}
        if not dry_run:
            self.children[(stored["kind"], stored["metadata"]["name"])] = stored
        return stored

    def patch_status(self, kind: Any, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append("patch_status")
        self.serving["status"] = {**self.serving.get("status", {}), **status}
        self.serving["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(self.serving)

    def emit_event(self, *args: Any) -> None:
        self.calls.append("event")


def operator_with_watch(**spec: Any) -> tuple[operator.Operator, FakeApi]:
    serving = sb.serving_dict(groups=1, nodes=2, **spec)
    serving["metadata"].update(uid="uid-serving", resourceVersion="1", generation=1)
    op = operator.Operator(Config(debounce_seconds=0.0, prometheus_address="http://prometheus:9090"))
    api = FakeApi(serving)
    op.api = api  # type: ignore[assignment]
    nodes = fb.rack(0)
    op.indices = {
        "fleet_nodes": {None: [caches.parsed_node(n["metadata"]["name"], n, []) for n in nodes]},
        "servings": {None: [KEY]},
        **{index: {} for index in caches.CHILD_INDEXES.values()},
    }
    op.serving_seen(serving)
    return op, api


def deliver(op: operator.Operator, api: FakeApi) -> None:
    """What the watches would deliver after the pass: every child in its index, the serving as written."""
    for index in caches.CHILD_INDEXES.values():
        op.indices[index].clear()
    for (kind, _), child in api.children.items():
        op.indices[caches.CHILD_INDEXES[kind]].setdefault((KEY.namespace, KEY.name), []).append(caches.Packed(child))
        op.child_seen(child)
    op.serving_seen(copy.deepcopy(api.serving))


def rechecked(op: operator.Operator) -> bool:
    async def go() -> bool:
        await op.recheck_all()
        return bool(op.nudges._due)

    return asyncio.run(go())


def settle(op: operator.Operator, api: FakeApi) -> None:
    for _ in range(3):
        asyncio.run(op.reconcile(KEY))
        deliver(op, api)


def test_a_settled_serving_is_not_passed_again_by_the_recheck() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    api.calls.clear()

    assert not rechecked(op)
    assert api.calls == []


def test_a_pass_that_wrote_only_the_status_leaves_the_serving_settled() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    del api.serving["status"]  # the status lost (an older CRD pruned it, a restore from backup)
    op.serving_seen(copy.deepcopy(api.serving))
    asyncio.run(op.reconcile(KEY))
    assert "patch_status" in api.calls  # the pass wrote the status again ...
    api.calls.clear()

    assert not rechecked(op)  # ... and the re-check runs no second pass to find it written
    assert asyncio.run(op.reconcile(KEY)) is not None and "patch_status" not in api.calls


def test_a_pass_reads_the_watch_and_asks_the_api_server_nothing() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    api.calls.clear()

    asyncio.run(op.reconcile(KEY))

    assert [c for c in api.calls if c != "served"] == []  # an installed API is trusted for a minute


def test_a_child_changed_by_someone_else_makes_the_recheck_pass_the_serving_again() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    indexed = op.indices[caches.CHILD_INDEXES["LeaderWorkerSet"]][(KEY.namespace, KEY.name)]
    child = indexed[0].unpack()
    child["metadata"]["resourceVersion"] = "999"
    indexed[0] = caches.Packed(child)

    assert rechecked(op)


def test_the_recheck_says_at_debug_level_which_input_made_it_run_a_pass(caplog: Any) -> None:
    op, api = operator_with_watch()
    settle(op, api)
    indexed = op.indices[caches.CHILD_INDEXES["LeaderWorkerSet"]][(KEY.namespace, KEY.name)]
    child = indexed[0].unpack()
    was = child["metadata"]["resourceVersion"]
    child["metadata"]["resourceVersion"] = "999"
    indexed[0] = caches.Packed(child)

    with caplog.at_level(logging.DEBUG, logger="nvlfleet"):
        assert rechecked(op)

    (said,) = [r.getMessage() for r in caplog.records if "re-check" in r.getMessage()]
    assert f"{KEY} runs a pass: its children's versions" in said
    assert f"'LeaderWorkerSet', '{was}'" in said and "'LeaderWorkerSet', '999'" in said
    assert "the serving's version" not in said


def test_a_spec_change_makes_the_recheck_pass_the_serving_again() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    api.serving["metadata"]["resourceVersion"] = "998"
    op.serving_seen(copy.deepcopy(api.serving))

    assert rechecked(op)


def test_a_fleet_change_elsewhere_leaves_a_placed_serving_settled() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    op.changed()  # another serving's pod or LeaderWorkerSet

    assert not rechecked(op)


def test_another_servings_write_the_watch_catches_up_with_leaves_this_serving_settled() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    written = {
        "kind": "Service",
        "metadata": {
            "name": "other-decode",
            "namespace": KEY.namespace,
            "resourceVersion": "500",
            "labels": {names.SERVING_LABEL: "other"},
        },
    }
    op.applied.note(written)  # the other serving's pass applied it ...
    assert not rechecked(op)
    op.applied.seen(written)  # ... and its watch delivered it

    assert not rechecked(op)


def test_this_servings_own_write_the_watch_has_not_delivered_makes_the_recheck_pass_it() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    op.applied.note(
        {
            "kind": "Service",
            "metadata": {
                "name": f"{KEY.name}-extra",
                "namespace": KEY.namespace,
                "resourceVersion": "500",
                "labels": {names.SERVING_LABEL: KEY.name},
            },
        }
    )

    assert rechecked(op)


def test_a_fleet_change_makes_the_recheck_pass_a_serving_waiting_for_room() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    op.known[KEY].unplaced = 1
    op.changed()

    assert rechecked(op)


def test_after_a_restart_a_serving_whose_first_pass_wrote_nothing_is_settled() -> None:
    before, api = operator_with_watch()
    settle(before, api)
    after = operator.Operator(Config(debounce_seconds=0.0))  # a new process on the unchanged fleet
    after.api, after.indices = api, before.indices  # type: ignore[assignment]
    after.serving_seen(copy.deepcopy(api.serving))
    after.changed()  # the nodes and pods it listed at start-up
    api.calls.clear()

    asyncio.run(after.reconcile(KEY))  # it knows nothing of the serving's placement until this pass

    assert "patch_status" not in api.calls and "apply" not in api.calls
    assert not rechecked(after)


async def waiting_behind_a_running_pass(op: operator.Operator) -> tuple[asyncio.Lock, asyncio.Task[Any]]:
    """A pass of ``KEY`` that waits to start: another one holds the serving's lock."""
    lock = op._serving_lock(KEY)
    await lock.acquire()
    waiting = asyncio.create_task(op.reconcile(KEY))
    await asyncio.sleep(0)
    return lock, waiting


def test_a_pass_asked_for_while_another_of_the_serving_waits_to_start_is_that_pass() -> None:
    op, api = operator_with_watch()

    async def go() -> tuple[bool, Any, Any]:
        lock, waiting = await waiting_behind_a_running_pass(op)
        asked = asyncio.create_task(op.reconcile(KEY))
        await asyncio.sleep(0)
        answered_at_once = asked.done()
        lock.release()
        return answered_at_once, await waiting, await asked

    answered_at_once, waited, asked = asyncio.run(go())
    assert answered_at_once and asked is None and waited is not None
    assert api.calls.count("patch_status") == 1


def test_the_recheck_leaves_a_serving_whose_pass_waits_to_start_alone() -> None:
    op, _ = operator_with_watch()  # never passed: nothing settled (at start-up, a thousand wait for a slot)

    async def go() -> bool:
        lock, waiting = await waiting_behind_a_running_pass(op)
        await op.recheck_all()
        lock.release()
        await waiting
        return bool(op.nudges._due)

    assert not asyncio.run(go())


def lws_event(op: operator.Operator, event_type: str | None) -> bool:
    """Whether a LeaderWorkerSet watch event of ``event_type`` nudged its serving."""
    body = {
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "dsv41-decode", "namespace": KEY.namespace, "uid": "u", "resourceVersion": "5"},
    }
    labels = {"nvlfleet.io/serving": KEY.name}

    async def go() -> bool:
        await main.lws_event(namespace=KEY.namespace, labels=labels, body=body, type=event_type, memo=_Memo(op))
        return bool(op.nudges._due)

    return asyncio.run(go())


class _Memo:
    def __init__(self, op: operator.Operator) -> None:
        self.operator = op


def test_a_child_as_first_listed_nudges_nobody_kopf_passes_every_serving_at_start() -> None:
    assert not lws_event(operator.Operator(Config(debounce_seconds=0.0)), None)


def test_a_child_that_changed_nudges_its_serving() -> None:
    assert lws_event(operator.Operator(Config(debounce_seconds=0.0)), "MODIFIED")


def test_a_watched_object_is_kept_as_kopf_hands_it_over() -> None:
    body = kopf.Body({"kind": "Service", "metadata": {"name": "s", "uid": "u", "resourceVersion": "7"}, "spec": {}})
    packed = caches.Packed(body)
    assert (packed.kind, packed.uid, packed.resource_version) == ("Service", "u", "7")
    assert packed.unpack() == dict(body)


SCALING = {"minGroups": 1, "maxGroups": 2, "signal": "waitingRequests", "target": 8}
TRIGGER_ERROR = {"type": "Ready", "status": "False", "reason": "TriggerError", "message": "Triggers defined in ..."}


def test_a_pass_over_a_failing_scaler_reads_what_keda_said_and_the_recheck_reads_it_again() -> None:
    op, api = operator_with_watch(autoscaling=SCALING)
    settle(op, api)
    api.children[("ScaledObject", KEY.name)]["status"] = {"conditions": [TRIGGER_ERROR]}
    api.children[("ScaledObject", KEY.name)]["metadata"]["resourceVersion"] = "900"
    api.events = [
        {
            "involvedObject": {"kind": "ScaledObject", "name": KEY.name},
            "reason": "KEDAScalerFailed",
            "message": "dial tcp 10.0.0.9:9090: connect: connection refused",
            "eventTime": "2026-12-01T00:00:00Z",
        }
    ]
    deliver(op, api)
    api.calls.clear()

    asyncio.run(op.reconcile(KEY))

    assert "list" in api.calls
    conditions = {c["type"]: c for c in api.serving["status"]["conditions"]}
    assert "connection refused" in conditions["Autoscaling"]["message"]
    deliver(op, api)
    assert rechecked(op)  # Events are not watched: a new one is read at the next re-check


def rolling_out(op: operator.Operator, api: FakeApi, pods: int) -> None:
    """The serving's LeaderWorkerSet with no group ready yet, and ``pods`` of its two pods in the pod index."""
    (name, lws), *_ = [(n, c) for (k, n), c in api.children.items() if k == "LeaderWorkerSet"]
    lws["status"] = {"readyReplicas": 0}
    lws["metadata"]["resourceVersion"] = "901"
    op.indices["serving_pods"] = {
        (KEY.namespace, KEY.name): [
            caches.trim_pod(
                fb.pod(f"{name}-{i}", f"tray-{i}", namespace=KEY.namespace, serving=KEY.name, lws=name, group=0)
            )
            for i in range(pods)
        ]
    }
    deliver(op, api)
    api.calls.clear()


def test_a_pass_over_a_rolling_out_group_whose_pods_all_exist_lists_no_events() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    rolling_out(op, api, pods=2)

    asyncio.run(op.reconcile(KEY))

    assert "list" not in api.calls


def test_a_pass_over_a_rolling_out_group_missing_a_pod_lists_the_refusals() -> None:
    op, api = operator_with_watch()
    settle(op, api)
    rolling_out(op, api, pods=1)

    asyncio.run(op.reconcile(KEY))

    assert "list" in api.calls
