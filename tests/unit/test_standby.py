"""A warm standby writes nothing and takes over at once: kopf's own event processing, driven with nvlfleet's
handlers, patches nothing on a serving while the replica stands by (not even the diff-base annotation), and the
replica that wins the Lease reconciles every serving its watch knows.

kopf's processing is entered through ``kopf._core`` (not kopf's public API): what is proven is exactly what kopf
writes, so the test drives the function kopf runs for every watch event and records every patch it would send.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.actions import application, lifecycles
from kopf._core.engines import indexing, posting
from kopf._core.reactor import inventory as kopf_inventory
from kopf._core.reactor import processing

from nvlfleet.adapters import main, operator
from nvlfleet.adapters.config import Config
from nvlfleet.api import names
from nvlfleet.core import inventory

SERVINGS = references.Resource(
    names.GROUP,
    names.VERSION,
    names.PLURAL,
    kind="DeepSeekServing",
    namespaced=True,
    preferred=True,
    verbs=["list", "watch", "patch"],
)
DIFF_BASE = "nvlfleet.io/last-handled-configuration"


class Leading:
    """The fence ``nvlfleet run`` gives the operator, switched by hand."""

    def __init__(self, leading: bool) -> None:
        self.leading = leading

    def __call__(self) -> bool:
        return self.leading


class Replica:
    """One operator behind kopf's event processing: every patch kopf would send and every pass asked for."""

    def __init__(self, leading: bool) -> None:
        self.fence = Leading(leading)
        self.op = operator.Operator(Config(namespaces=frozenset({"team-a"})), fence=self.fence)
        self.passes: list[inventory.ServingKey] = []
        self.patches: list[dict[str, Any]] = []
        self.settings = kopf.OperatorSettings()
        self.memo = kopf.Memo(operator=self.op)
        self.memories = kopf_inventory.ResourceMemories()
        self.registry = kopf.get_default_registry()
        self.indexers = indexing.OperatorIndexers()
        self.indexers.ensure(self.registry._indexing.get_all_handlers())
        self.events: asyncio.Queue[Any] = asyncio.Queue()

        async def reconcile(key: inventory.ServingKey) -> None:
            self.passes.append(key)

        self.op.reconcile = reconcile  # type: ignore[method-assign]

    async def see(self, event_type: str | None, body: dict[str, Any]) -> None:
        """kopf's handling of one watch event (``None``: the object as first listed)."""
        posting.settings_var.set(self.settings)
        await processing.process_resource_event(
            lifecycle=lifecycles.all_at_once,
            indexers=self.indexers,
            registry=self.registry,
            settings=self.settings,
            memories=self.memories,
            memobase=self.memo,
            resource=SERVINGS,
            raw_event={"type": event_type, "object": body},
            event_queue=self.events,
            no_throttling=True,
        )


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Every patch kopf's processing would send to the API server."""
    patches: list[dict[str, Any]] = []

    async def patch_and_check(*, patch: Any, **_: Any) -> tuple[None, None]:
        if patch:
            patches.append(dict(patch))
        return None, None

    monkeypatch.setattr(application, "patch_and_check", patch_and_check)
    yield patches


def serving(name: str = "chat", groups: int = 2, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "DeepSeekServing",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "1", **metadata},
        "spec": {"roles": {"decode": {"groups": groups}}},
    }


def handled_before(groups: int) -> dict[str, str]:
    """The diff-base annotation a leader left on a serving it had reconciled at ``groups``."""
    return {DIFF_BASE: json.dumps({"spec": {"roles": {"decode": {"groups": groups}}}})}


def run_events(replica: Replica, *events: tuple[str | None, dict[str, Any]]) -> None:
    async def go() -> None:
        await main.startup(settings=replica.settings, memo=replica.memo, **replica.indexers.indices)
        try:
            for event_type, body in events:
                await replica.see(event_type, body)
        finally:
            await main.cleanup(memo=replica.memo)

    asyncio.run(go())


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([(None, serving())], id="listed, never handled"),
        pytest.param([(None, serving(annotations=handled_before(1)))], id="listed, changed since handled"),
        pytest.param([("ADDED", serving())], id="created"),
        pytest.param([(None, serving(annotations=handled_before(2))), ("MODIFIED", serving(groups=3))], id="updated"),
    ],
)
def test_a_standby_lets_kopf_patch_nothing_and_runs_no_pass(
    events: list[tuple[str | None, dict[str, Any]]], recorded: list[dict[str, Any]]
) -> None:
    standby = Replica(leading=False)
    run_events(standby, *events)
    assert (recorded, standby.passes, standby.events.qsize()) == ([], [], 0)


def test_a_leader_given_the_same_event_runs_the_pass_and_kopf_patches_nothing(
    recorded: list[dict[str, Any]],
) -> None:
    leader = Replica(leading=True)
    run_events(leader, ("ADDED", serving()))
    assert (leader.passes, recorded) == ([inventory.ServingKey("team-a", "chat")], [])


def test_kopf_keeps_the_diff_base_in_memory_so_a_status_write_runs_no_second_pass(
    recorded: list[dict[str, Any]],
) -> None:
    leader = Replica(leading=True)
    written = {**serving(), "status": {"ready": 1}}
    written["metadata"] = {**written["metadata"], "resourceVersion": "2"}
    run_events(leader, ("ADDED", serving()), ("MODIFIED", written))
    assert (leader.passes, recorded) == ([inventory.ServingKey("team-a", "chat")], [])


def test_a_spec_change_runs_a_pass_again(recorded: list[dict[str, Any]]) -> None:
    leader = Replica(leading=True)
    run_events(leader, ("ADDED", serving()), ("MODIFIED", serving(groups=3)))
    assert leader.passes == [inventory.ServingKey("team-a", "chat")] * 2


def test_a_standby_knows_every_watched_serving_from_its_watch_though_it_acted_on_none(
    recorded: list[dict[str, Any]],
) -> None:
    standby = Replica(leading=False)
    other_namespace = {**serving("theirs"), "metadata": {**serving("theirs")["metadata"], "namespace": "team-b"}}
    run_events(standby, (None, serving("chat")), (None, serving("code")), (None, other_namespace))
    assert standby.op.servings() == {inventory.ServingKey("team-a", "chat"), inventory.ServingKey("team-a", "code")}


def test_the_replica_that_wins_the_lease_nudges_every_serving_at_once() -> None:
    op = operator.Operator(Config(debounce_seconds=0.0), fence=lambda: True)
    op.indices = {"servings": {None: [inventory.ServingKey("team-a", "chat"), inventory.ServingKey("team-a", "code")]}}

    async def take_over() -> list[inventory.ServingKey]:
        await op.take_over()
        return await op.nudges.next_batch()

    assert asyncio.run(take_over()) == [inventory.ServingKey("team-a", "chat"), inventory.ServingKey("team-a", "code")]


def test_a_fenced_operator_runs_no_pass_and_asks_the_api_server_nothing() -> None:
    op = operator.Operator(Config(), fence=lambda: False)
    op.api = None  # a pass would connect first: with no cluster here, that would raise
    assert asyncio.run(op.reconcile(inventory.ServingKey("team-a", "chat"))) is None
    assert op.api is None
