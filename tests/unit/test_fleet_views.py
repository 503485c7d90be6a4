"""Fleet views made from the view before (``reconciler.fleet_view``'s ``base``, ``inventory.Builds``,
``leaderworkersets.Holds``): what a pass reads of them is what it reads of a view made anew."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Iterable
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nvlfleet.api import names, ownership
from nvlfleet.core import inventory, leaderworkersets, placements, reconciler

LABEL = names.DEFAULT_DOMAIN_LABEL
CLIQUES = ("clique-0", "clique-1", "clique-2")
SERVINGS = tuple(inventory.ServingKey("team", f"s{i}") for i in range(4))
ROLES = ("decode", "prefill")


def tray(name: str, clique: str) -> inventory.Node:
    labels = {names.HOSTNAME_LABEL: name, names.PRODUCT_LABEL: "NVIDIA-GB200", LABEL: clique}
    return inventory.Node(name, labels, gpus=4, ready=True, unschedulable=False)


def lws(
    serving: inventory.ServingKey, role: str, clique: str, replicas: int, size: int, version: int
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{serving.name}-{role}-{clique}",
            "namespace": serving.namespace,
            "uid": f"lws-{serving.name}-{role}-{clique}",
            "resourceVersion": str(version),
            "labels": {
                names.MANAGED_BY_LABEL: names.MANAGED_BY,
                names.SERVING_LABEL: serving.name,
                names.ROLE_LABEL: role,
            },
            "annotations": {names.DOMAIN_VALUE_ANNOTATION: clique},
            "ownerReferences": [ownership.owner_reference(serving.name, f"uid-{serving.name}")],
        },
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size}},
    }


def roles_written(sets: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    labels = [one["metadata"]["labels"] for one in sets]
    return {(mine[names.SERVING_LABEL], mine[names.ROLE_LABEL]) for mine in labels}


def sums(held: placements.Held) -> tuple[Any, ...]:
    return dict(held.need), dict(held.released), dict(held.placed), dict(held.scopes), held.owners


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["bind", "unbind", "write", "drop", "cordon", "same", "idle"]),
        st.integers(0, 1),  # serving (two, so that roles, domains and pods meet often)
        st.integers(0, 1),  # role
        st.integers(0, 2),  # domain
        st.integers(0, 5),  # node in it; of a set written: its groups and nodes per group
        st.booleans(),  # whether a pass read the view (its sums made) before the next one is built
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(STEPS)
@example([("write", 0, 0, 0, 1, True), ("bind", 0, 0, 0, 0, True), ("unbind", 0, 0, 0, 0, True)])  # pods all gone
@example([("write", 0, 0, 0, 2, True), ("bind", 0, 0, 0, 0, True), ("cordon", 0, 0, 0, 0, True)])
def test_a_view_made_from_the_one_before_sums_and_splits_the_fleet_as_a_view_made_anew(
    steps: list[tuple[str, int, int, int, int, bool]],
) -> None:
    nodes = [tray(f"n{c}-{i}", clique) for c, clique in enumerate(CLIQUES) for i in range(6)]
    pods: list[inventory.GpuPod] = []
    fleet: dict[str, dict[str, Any]] = {}
    holds, builds = leaderworkersets.Holds(), inventory.Builds()
    base: reconciler.FleetView | None = None
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    live = frozenset(f"uid-{key.name}" for key in SERVINGS)
    for version, (what, s, r, c, n, read) in enumerate(steps):
        serving, role, at = SERVINGS[s], ROLES[r], c * 6 + n
        if what == "bind":  # a pod of the role, or (on the last node of a domain) no serving's
            owner = inventory.RoleKey(serving, role) if n < 5 else None
            pods.append(inventory.GpuPod("team", f"p{version}", nodes[at].name, 4, owner))
        elif what == "unbind" and pods:
            pods.pop(n % len(pods))
        elif what == "write":  # a set written: new, or a new version of one
            one = lws(serving, role, CLIQUES[c], replicas=n % 3, size=1 + n // 3, version=version)
            fleet[one["metadata"]["name"]] = one
        elif what == "drop" and fleet:
            fleet.pop(sorted(fleet)[n % len(fleet)])
        elif what == "cordon":
            nodes[at] = dataclasses.replace(nodes[at], unschedulable=not nodes[at].unschedulable)
        elif what == "same" and fleet:  # the watch cache hands out a new object of the same set
            name = sorted(fleet)[n % len(fleet)]
            fleet[name] = copy.deepcopy(fleet[name])
        snap = reconciler.Snapshot(
            serving={}, now=now, nodes=list(nodes), bound=list(pods), fleet=list(fleet.values()), live_servings=live
        )

        view = reconciler.fleet_view(snap, LABEL, holds, builds, base)
        anew = reconciler.fleet_view(snap, LABEL)

        assert view.held == anew.held
        assert len(anew.held) == len(roles_written(fleet.values()))  # every set written holds: the test is not idle
        if read:
            assert sums(view.summed) == sums(anew.summed)
            for key in SERVINGS:
                assert sums(view.others(key)) == sums(anew.others(key))
        base = view
