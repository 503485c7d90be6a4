"""Inventories made from the one before (``inventory.Builds``): the same as built anew, whatever changed."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nvlfleet.api import names
from nvlfleet.core import inventory

GB200 = inventory.NodeRequirements(gpu_product="NVIDIA-GB200", gpus_per_node=4)
H200 = inventory.NodeRequirements(gpu_product="NVIDIA-H200", gpus_per_node=8, scope="node")
OWNERS = (
    None,
    inventory.RoleKey(inventory.ServingKey("team", "a"), "decode"),
    inventory.RoleKey(inventory.ServingKey("team", "b"), "decode"),
    inventory.RoleKey(inventory.ServingKey("team", "b"), "prefill"),
)


def tray(name: str, clique: str | None, **changes: Any) -> inventory.Node:
    labels = {names.HOSTNAME_LABEL: name, names.PRODUCT_LABEL: "NVIDIA-GB200" if clique else "NVIDIA-H200"}
    if clique:
        labels[names.DEFAULT_DOMAIN_LABEL] = clique
    node = inventory.Node(name, labels, gpus=4 if clique else 8, ready=True, unschedulable=False)
    return dataclasses.replace(node, **changes)


def fleet() -> list[inventory.Node]:
    return [tray(f"n{r}-{i}", f"clique-{r}") for r in range(3) for i in range(4)] + [
        tray(f"h{i}", None) for i in range(3)
    ]


def everything(inv: inventory.Inventory) -> dict[str, Any]:
    """What a plan reads of an inventory, in comparable form."""
    return {
        "nodes": [dataclasses.astuple(n) for n in inv.nodes],
        "by_name": {k: dataclasses.astuple(n) for k, n in inv.by_name().items()},
        **{
            f"domains {scope}": [
                (d.key, d.label, [dataclasses.astuple(n) for n in d.nodes]) for d in inv.domains(scope)
            ]
            for scope in ("clique", "node")
        },
        **{f"tally {scope}": inv.tally(scope) for scope in ("clique", "node")},
        "free": [inv.free_for(GB200), inv.free_for(H200)],
        "census": [inv.census(GB200), inv.census(H200)],
    }


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["pod", "unpod", "same", "notready", "cordon", "taint", "relabel", "add", "remove", "far"]),
        st.integers(0, 1000),
        st.integers(0, 1000),
        st.sampled_from(["none", "some", "all"]),  # what was read of the inventory before the next build
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(STEPS)
def test_an_inventory_made_from_the_last_one_is_the_inventory_built_anew(
    steps: list[tuple[str, int, int, str]],
) -> None:
    nodes = fleet()
    pods: list[inventory.GpuPod] = []
    builds = inventory.Builds()
    for made, (what, i, j, read) in enumerate(steps):
        at = i % len(nodes) if nodes else 0
        if what == "pod" and nodes:
            pods.append(inventory.GpuPod("team", f"p{made}", nodes[at].name, 4, OWNERS[j % len(OWNERS)], f"g{j % 3}"))
        elif what == "far":  # a pod on a node the inventory does not list
            pods.append(inventory.GpuPod("team", f"p{made}", "elsewhere", 4, OWNERS[j % len(OWNERS)]))
        elif what == "unpod" and pods:
            pods.pop(i % len(pods))
        elif what == "same" and nodes:
            nodes[at] = dataclasses.replace(nodes[at])
        elif what == "notready" and nodes:
            nodes[at] = dataclasses.replace(nodes[at], ready=not nodes[at].ready)
        elif what == "cordon" and nodes:
            nodes[at] = dataclasses.replace(nodes[at], unschedulable=not nodes[at].unschedulable)
        elif what == "taint" and nodes:
            nodes[at] = dataclasses.replace(nodes[at], taints=(inventory.Taint("gpu", "", "NoSchedule"),))
        elif what == "relabel" and nodes:
            labels = {k: v for k, v in nodes[at].labels.items() if k != names.DEFAULT_DOMAIN_LABEL}
            if j % 2:
                labels[names.DEFAULT_DOMAIN_LABEL] = f"clique-{j % 4}"
            nodes[at] = dataclasses.replace(nodes[at], labels=labels)
        elif what == "add":
            nodes.append(tray(f"x{made}", f"clique-{j % 4}" if j % 3 else None))
        elif what == "remove" and nodes:
            nodes.pop(at)

        inv = builds.build(nodes, pods, names.DEFAULT_DOMAIN_LABEL)

        anew = inventory.build(nodes, pods)
        if read == "all":
            assert everything(inv) == everything(anew)
        elif read == "some":
            assert inv.tally("clique") == anew.tally("clique")
            assert inv.free_for(GB200) == anew.free_for(GB200)
    last = builds.build(nodes, pods, names.DEFAULT_DOMAIN_LABEL)
    assert everything(last) == everything(inventory.build(nodes, pods))


def test_a_pod_bound_makes_again_only_its_node_and_counts_again_only_its_domain() -> None:
    nodes = fleet()
    builds = inventory.Builds()
    first = builds.build(nodes, [], names.DEFAULT_DOMAIN_LABEL)
    first.tally("clique")
    bound = inventory.GpuPod("team", "p0", "n1-2", 4, OWNERS[1])

    then = builds.build(nodes, [bound], names.DEFAULT_DOMAIN_LABEL)

    assert (builds.whole, builds.partial) == (1, 1)
    assert [a is b for a, b in zip(first.nodes, then.nodes, strict=True)].count(False) == 1
    assert then.by_name()["n1-2"].pods == (bound,)
    same = [d.key for d, e in zip(first.domains(), then.domains(), strict=True) if d is e]
    assert same == ["clique-0", "clique-2"]
    assert then.tally("clique").free == {"clique-0": 4, "clique-1": 3, "clique-2": 4}
    assert then.tally("clique").held == {OWNERS[1]: {"clique-1": 1}}


def test_an_inventory_is_built_whole_when_a_node_comes_goes_or_changes_domain() -> None:
    nodes = fleet()
    builds = inventory.Builds()
    builds.build(nodes, [], names.DEFAULT_DOMAIN_LABEL)
    builds.build([*nodes, tray("new", "clique-0")], [], names.DEFAULT_DOMAIN_LABEL)
    builds.build(nodes, [], names.DEFAULT_DOMAIN_LABEL)
    moved = dict(nodes[0].labels) | {names.DEFAULT_DOMAIN_LABEL: "clique-2"}
    builds.build([dataclasses.replace(nodes[0], labels=moved), *nodes[1:]], [], names.DEFAULT_DOMAIN_LABEL)

    assert (builds.whole, builds.partial) == (4, 0)
