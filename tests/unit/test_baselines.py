"""The same fleet under nvlfleet, LWS exclusive topology and plain pod affinity, scored alike."""

from __future__ import annotations

import baselines
from hypothesis import given, settings
from hypothesis import strategies as st

from nvlfleet.core import inventory, kubeobjects, planner
from support import fleetbuilder as fb

GB200 = inventory.NodeRequirements(gpu_product="NVIDIA-GB200", gpus_per_node=4)
GPUS_PER_NODE = 4


def fleet(*nodes_per_rack: int) -> inventory.Inventory:
    return kubeobjects.from_objects([o for i, n in enumerate(nodes_per_rack) for o in fb.rack(i, nodes=n)])


def workload(npg: int, groups: int, name: str = "a") -> list[planner.Demand]:
    return [planner.Demand(inventory.ServingKey("default", name), "decode", npg, groups, GB200)]


def test_two_node_groups_on_empty_racks_exclusive_topology_strands_sixteen_trays_per_rack() -> None:
    racks, trays, npg, groups = 4, 18, 2, 40
    nvl, lws, affinity = baselines.compare(fleet(*[trays] * racks), workload(npg, groups))
    fit_per_rack = trays // npg
    assert nvl == baselines.Outcome(
        engine="nvlfleet",
        groups=groups,
        groups_placed=racks * fit_per_rack,
        groups_split=0,
        groups_waiting=0,
        pods_pending=0,
        gpus_placed=racks * fit_per_rack * npg * GPUS_PER_NODE,
        gpus_stranded=0,
    )
    assert lws == baselines.Outcome(
        engine="lws-exclusive-topology",
        groups=groups,
        groups_placed=racks,
        groups_split=0,
        groups_waiting=0,
        pods_pending=(groups - racks) * npg,
        gpus_placed=racks * npg * GPUS_PER_NODE,
        gpus_stranded=racks * (trays - npg) * GPUS_PER_NODE,
    )
    # On empty racks with an even tray count, first fit per pod happens to pack well too.
    assert (affinity.groups_placed, affinity.groups_waiting, affinity.pods_pending) == (
        racks * fit_per_rack,
        0,
        (groups - racks * fit_per_rack) * npg,
    )


def test_exclusive_topology_is_annotated_on_multi_tray_groups_only_so_single_tray_groups_share_a_rack() -> None:
    # Three racks of 4 trays: one 2-tray decode group, four single-tray prefill groups. The decode group holds
    # rack 0 alone; the prefill groups, not annotated (as a user would leave them), pack into rack 1 together.
    key = inventory.ServingKey("default", "a")
    work = [planner.Demand(key, "decode", 2, 1, GB200), planner.Demand(key, "prefill", 1, 4, GB200)]
    lws = baselines.lws_exclusive(fleet(4, 4, 4), work)
    assert (lws.groups_placed, lws.groups_waiting, lws.pods_pending) == (5, 0, 0)
    # Rack 0's two free trays are closed by the exclusive group; rack 2 could still take a group of either size.
    assert lws.gpus_stranded == 2 * GPUS_PER_NODE


def test_first_fit_pod_affinity_leaves_a_leader_holding_a_node_in_a_full_rack() -> None:
    # Two racks of 3 trays, two 2-node groups. Group 2's leader takes the third tray of rack 0 and its
    # worker waits there forever; rack 1 stays empty. nvlfleet puts one group in each rack.
    inv, work = fleet(3, 3), workload(2, 2)
    nvl, affinity = baselines.nvlfleet(inv, work), baselines.pod_affinity(inv, work)
    assert (nvl.groups_placed, nvl.gpus_stranded) == (2, 2 * GPUS_PER_NODE)  # one odd tray left per rack
    assert (affinity.groups_placed, affinity.groups_waiting, affinity.pods_pending) == (1, 1, 1)
    # The waiting leader's node plus rack 1 (3 free trays can still take a group, so they are not stranded).
    assert affinity.gpus_stranded == 1 * GPUS_PER_NODE


def test_preferred_pod_affinity_splits_a_group_across_racks_instead() -> None:
    split = baselines.pod_affinity(fleet(3, 3), workload(2, 2), affinity="preferred")
    assert (split.groups_placed, split.groups_split, split.groups_waiting, split.pods_pending) == (1, 1, 0, 0)
    assert split.groups_unplaced == 1


def test_only_nodes_the_workload_may_use_count_as_stranded() -> None:
    gb300_rack = [fb.node(f"gb300-{t}", rack=9, product="NVIDIA-GB300") for t in range(18)]
    inv = kubeobjects.from_objects([*fb.rack(0, nodes=3), *gb300_rack])
    nvl = baselines.nvlfleet(inv, workload(2, 1))
    assert nvl.gpus_stranded == 1 * GPUS_PER_NODE  # the odd GB200 tray, not the GB300 rack


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 18), min_size=1, max_size=6),
    st.integers(1, 6),
    st.integers(1, 30),
    st.lists(st.integers(0, 17), max_size=10),
)
def test_property_with_one_group_size_nvlfleet_places_at_least_as_many_and_never_splits_or_waits(
    racks: list[int], npg: int, groups: int, busy: list[int]
) -> None:
    objs = [o for i, n in enumerate(racks) for o in fb.rack(i, nodes=n)]
    pods = [fb.pod(f"job-{i}", objs[i % len(objs)]["metadata"]["name"]) for i in busy]
    inv = kubeobjects.from_objects(objs, pods)
    nvl, lws, affinity = baselines.compare(inv, workload(npg, groups))
    assert (nvl.groups_split, nvl.groups_waiting, nvl.pods_pending) == (0, 0, 0)
    assert nvl.groups_placed >= max(lws.groups_placed, affinity.groups_placed)
    assert nvl.gpus_stranded <= lws.gpus_stranded
    for outcome in (nvl, lws, affinity):
        assert outcome.gpus_placed == outcome.groups_placed * npg * GPUS_PER_NODE
