"""Planner: whole groups per NVLink domain, best fit, never moved, never over-committed, deterministic."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvlfleet.api import models, names, servingstatus
from nvlfleet.core import capacity, demands, inventory, kubeobjects, pairing, placements, planner, shortfall
from support import fleetbuilder as fb

GB200 = inventory.NodeRequirements(gpu_product="NVIDIA-GB200", gpus_per_node=4)
H200 = inventory.NodeRequirements(gpu_product="NVIDIA-H200", gpus_per_node=8, scope="node")
RACK_OF = {fb.clique(i): i for i in range(64)}


# ---------------------------------------------------------------------------------------------------------------
# Builders


def fleet(*nodes_per_rack: int, pods: Iterable[dict] = (), **node_kwargs: object) -> inventory.Inventory:
    """Racks 0, 1, ... with the given number of healthy trays each."""
    objs = [o for i, n in enumerate(nodes_per_rack) for o in fb.rack(i, nodes=n, **node_kwargs)]
    return kubeobjects.from_objects(objs, list(pods))


def serving(name: str, namespace: str = "default") -> inventory.ServingKey:
    return inventory.ServingKey(namespace, name)


def demand(
    name: str,
    role: str = "decode",
    *,
    npg: int = 1,
    groups: int = 1,
    strategy: planner.Strategy = "pack",
    req: inventory.NodeRequirements = GB200,
) -> planner.Demand:
    return planner.Demand(serving(name), role, npg, groups, req, strategy)


def placed(name: str, role: str = "decode", *, npg: int = 1, racks: Mapping[int, int]) -> placements.Placement:
    return placements.Placement(serving(name), role, npg, {fb.clique(r): g for r, g in racks.items()})


def racks(plan: planner.Plan, name: str, role: str = "decode") -> dict[int, int]:
    """A role's placement with rack numbers instead of clique ids, for readable assertions."""
    return {RACK_OF[k]: g for k, g in plan.role(serving(name), role).placed.items()}


def usage(plan: planner.Plan) -> dict[int, tuple[int, int]]:
    """(free before, free after) per rack."""
    return {RACK_OF[d.key]: (d.free_before, d.free_after) for d in plan.domains}


def ours(name: str, node: str, role: str = "decode", group: int = 0, serving_name: str = "a") -> dict:
    return fb.pod(name, node, serving=serving_name, role=role, lws=f"{serving_name}-{role}", group=group)


# ---------------------------------------------------------------------------------------------------------------
# Whole groups, best fit


def test_a_group_is_never_split_across_domains() -> None:
    plan = planner.plan(fleet(2, 2), [demand("a", npg=3)])
    role = plan.role(serving("a"), "decode")
    assert (role.placed, role.unplaced) == ({}, 1)
    assert role.reasons[0] == (
        "decode needs 3 free nodes (12 GPUs) in one NVLink domain for each of 1 more group; "
        f"the largest free block is 2 nodes in domain {inventory.short_domain(fb.clique(0))}"
    )


def test_new_groups_go_to_the_domain_that_fits_with_the_fewest_nodes_left() -> None:
    # Rack 1 (5 free) leaves 1 node; then rack 2 (10 free) takes two groups; rack 0 stays whole.
    plan = planner.plan(fleet(18, 5, 10), [demand("a", npg=4, groups=3)])
    assert racks(plan, "a") == {1: 1, 2: 2}
    assert usage(plan) == {0: (18, 18), 1: (5, 1), 2: (10, 2)}
    assert plan.unplaced == 0


def test_two_servings_planned_together_never_over_commit_a_domain() -> None:
    plan = planner.plan(fleet(6), [demand("b", npg=4), demand("a", npg=4)])
    assert (racks(plan, "a"), racks(plan, "b")) == ({0: 1}, {})
    assert plan.role(serving("b"), "decode").unplaced == 1


def test_servings_are_planned_by_namespace_then_name() -> None:
    # If b went first it would take 5 of rack 0's 6 trays and leave a's unit (2 + 4 nodes) nowhere to go.
    plan = planner.plan(fleet(6, 4), [demand("b", npg=5), demand("a", "decode", npg=2), demand("a", "prefill", npg=4)])
    assert (racks(plan, "a", "prefill"), racks(plan, "a", "decode"), racks(plan, "b")) == ({0: 1}, {0: 1}, {})
    assert [(r.serving.name, r.role) for r in plan.roles] == [("a", "prefill"), ("a", "decode"), ("b", "decode")]


# ---------------------------------------------------------------------------------------------------------------
# Existing groups


def test_existing_groups_stay_where_they_are_even_when_a_better_fit_appears() -> None:
    plan = planner.plan(fleet(18, 2), [demand("a", npg=2)], [placed("a", npg=2, racks={0: 1})])
    assert racks(plan, "a") == {0: 1}


def test_scale_up_keeps_every_existing_group() -> None:
    plan = planner.plan(fleet(4, 18), [demand("a", npg=2, groups=4)], [placed("a", npg=2, racks={0: 1})])
    assert racks(plan, "a") == {0: 2, 1: 2}


def test_pack_scale_down_empties_the_least_filled_domain_first() -> None:
    existing = placed("a", npg=2, racks={0: 3, 1: 1, 2: 2})
    plan = planner.plan(fleet(18, 18, 18), [demand("a", npg=2, groups=3)], [existing])
    assert racks(plan, "a") == {0: 3}


def test_spread_scale_down_trims_the_most_filled_domain_first() -> None:
    existing = placed("a", npg=2, racks={0: 3, 1: 1, 2: 2})
    plan = planner.plan(fleet(18, 18, 18), [demand("a", npg=2, groups=4, strategy="spread")], [existing])
    assert racks(plan, "a") == {0: 1, 1: 1, 2: 2}


def test_groups_that_cannot_run_where_they_are_wait_and_are_removed_first() -> None:
    # Rack 0 shrank to 3 trays; its two 2-node groups need 4. Nothing moves; the plan says who waits.
    existing = placed("a", npg=2, racks={0: 2, 1: 1})
    kept = planner.plan(fleet(3, 18), [demand("a", npg=2, groups=3)], [existing])
    assert racks(kept, "a") == {0: 2, 1: 1}
    assert kept.role(serving("a"), "decode").reasons == (
        f"decode: 2 groups placed in domain {inventory.short_domain(fb.clique(0))} wait for nodes: "
        "groups placed there still need 4 free nodes but it has 3 they can use",
    )
    assert [(RACK_OF[d.key], d.short) for d in kept.domains] == [(0, 1), (1, 0)]
    shrunk = planner.plan(fleet(3, 18), [demand("a", npg=2, groups=2)], [existing])
    assert racks(shrunk, "a") == {0: 1, 1: 1}


def test_a_domain_that_vanished_is_reported_not_silently_dropped() -> None:
    gone = placements.Placement(serving("a"), "decode", 2, {"gone.1": 1})
    plan = planner.plan(fleet(18), [demand("a", npg=2)], [gone])
    assert plan.role(serving("a"), "decode").placed == {"gone.1": 1}
    assert plan.domains[-1] == planner.DomainUsage(
        key="gone.1", label=fb.CLIQUE_LABEL, nodes=0, schedulable=0, free_before=0, free_after=0, short=2
    )


def test_groups_placed_but_not_yet_scheduled_hold_their_nodes() -> None:
    other = placed("other", npg=3, racks={0: 1})
    unscheduled = planner.plan(fleet(4), [demand("a", npg=2)], [other])
    running = planner.plan(
        fleet(4, pods=[ours(f"o{i}", f"rack-0-{i:02d}", serving_name="other") for i in range(3)]),
        [demand("a", npg=2)],
        [other],
    )
    assert racks(unscheduled, "a") == racks(running, "a") == {}
    assert (usage(unscheduled), usage(running)) == ({0: (4, 1)}, {0: (1, 1)})


def test_running_groups_of_the_serving_itself_are_not_counted_twice() -> None:
    pods = [ours("d0-0", "rack-0-00"), ours("d0-1", "rack-0-01")]
    plan = planner.plan(fleet(4, pods=pods), [demand("a", npg=2, groups=2)], [placed("a", npg=2, racks={0: 1})])
    assert racks(plan, "a") == {0: 2}
    assert usage(plan) == {0: (2, 0)}


def test_nodes_released_by_a_scale_down_are_free_after_but_not_reused_in_the_same_plan() -> None:
    pods = [ours(f"d{g}-{w}", f"rack-0-{2 * g + w:02d}", group=g) for g in range(2) for w in range(2)]
    plan = planner.plan(
        fleet(4, pods=pods), [demand("a", npg=2, groups=1), demand("b", npg=2)], [placed("a", npg=2, racks={0: 2})]
    )
    assert (racks(plan, "a"), racks(plan, "b")) == ({0: 1}, {})
    assert usage(plan) == {0: (0, 2)}


def test_a_group_whose_pod_sits_on_a_cordoned_node_needs_a_replacement_node() -> None:
    objs = [fb.node("rack-0-00", rack=0, cordoned=True), *fb.rack(0, nodes=3)[1:]]
    pods = [ours("d0-0", "rack-0-00"), ours("d0-1", "rack-0-01")]
    inv = kubeobjects.from_objects(objs, pods)
    plan = planner.plan(inv, [demand("a", npg=2), demand("b")], [placed("a", npg=2, racks={0: 1})])
    assert (racks(plan, "a"), racks(plan, "b")) == ({0: 1}, {})
    assert usage(plan) == {0: (1, 0)}


# ---------------------------------------------------------------------------------------------------------------
# pack and spread


def test_pack_puts_prefill_next_to_its_decode_rather_than_in_the_tightest_hole() -> None:
    plan = planner.plan(fleet(10, 2, 8), [demand("a", "decode", npg=4), demand("a", "prefill", npg=2)])
    assert (racks(plan, "a", "decode"), racks(plan, "a", "prefill")) == ({2: 1}, {2: 1})


def test_spread_uses_every_domain_before_doubling_up_and_pack_fills_one() -> None:
    spread = planner.plan(fleet(18, 18, 18), [demand("a", npg=2, groups=5, strategy="spread")])
    pack = planner.plan(fleet(18, 18, 18), [demand("a", npg=2, groups=5)])
    assert (racks(spread, "a"), racks(pack, "a")) == ({0: 2, 1: 2, 2: 1}, {0: 5})


def test_spread_isolates_groups_of_the_same_role_before_groups_of_the_serving() -> None:
    # Rack 0 holds two groups of a's decode, rack 1 one of its other role: a's second group there goes to rack 0.
    existing = [placed("a", "decode", racks={0: 2}), placed("a", "other", racks={1: 1})]
    wanted = [demand("a", "decode", groups=2, strategy="spread"), demand("a", "other", groups=2, strategy="spread")]
    assert racks(planner.plan(fleet(18, 18), wanted, existing), "a", "other") == {0: 1, 1: 1}


# ---------------------------------------------------------------------------------------------------------------
# Prefill and decode as a unit


def pd(name: str = "a", *, prefill: tuple[int, int], decode: tuple[int, int], **kwargs: Any) -> list[planner.Demand]:
    """A serving's prefill and decode demands, each (groups, nodes per group)."""
    return [
        demand(name, "prefill", groups=prefill[0], npg=prefill[1], **kwargs),
        demand(name, "decode", groups=decode[0], npg=decode[1], **kwargs),
    ]


def test_the_prefill_groups_that_feed_a_decode_group_land_in_its_domain() -> None:
    # Alone, the decode group (4 nodes) fits rack 0 (6 free) best; with its 2 prefill groups it needs 8.
    plan = planner.plan(fleet(6, 18), pd(prefill=(2, 2), decode=(1, 4)))
    assert (racks(plan, "a", "prefill"), racks(plan, "a", "decode")) == ({1: 2}, {1: 1})


def test_units_follow_the_prefill_to_decode_ratio_as_evenly_as_whole_groups_allow() -> None:
    two_each = planner.plan(fleet(6, 6, 18), pd(prefill=(4, 1), decode=(2, 4)))
    uneven = planner.plan(fleet(6, 5, 18), pd(prefill=(3, 1), decode=(2, 4)))
    one_feeds_three = planner.plan(fleet(6, 7), pd(prefill=(1, 1), decode=(3, 2)))
    assert (racks(two_each, "a", "prefill"), racks(two_each, "a", "decode")) == ({0: 2, 1: 2}, {0: 1, 1: 1})
    assert (racks(uneven, "a", "prefill"), racks(uneven, "a", "decode")) == ({0: 2, 1: 1}, {0: 1, 1: 1})
    assert (racks(one_feeds_three, "a", "prefill"), racks(one_feeds_three, "a", "decode")) == ({1: 1}, {1: 3})


def test_a_unit_that_fits_no_domain_waits_whole_and_says_why() -> None:
    plan = planner.plan(fleet(6, 6), pd(prefill=(2, 2), decode=(1, 4)))
    prefill, decode = plan.role(serving("a"), "prefill"), plan.role(serving("a"), "decode")
    assert (prefill.placed, prefill.unplaced, decode.placed, decode.unplaced) == ({}, 2, {}, 1)
    assert decode.reasons == prefill.reasons
    assert decode.reasons[0] == (
        "prefill and decode are placed together (2 prefill : 1 decode groups): 1 decode group of 4 nodes with the "
        "2 prefill groups of 2 nodes it is fed by needs 8 free nodes (32 GPUs) in one NVLink domain for each of "
        f"1 more unit; the largest free block is 6 nodes in domain {inventory.short_domain(fb.clique(0))}"
    )


def test_a_scale_up_adds_prefill_groups_next_to_the_decode_group_they_feed() -> None:
    existing = [placed("a", "prefill", npg=2, racks={0: 1}), placed("a", "decode", npg=4, racks={0: 1})]
    plan = planner.plan(fleet(18, 2), pd(prefill=(2, 2), decode=(1, 4)), existing)
    assert racks(plan, "a", "prefill") == {0: 2}  # not rack 1, where a lone group would fit best


def test_a_prefill_group_that_cannot_join_its_running_decode_group_waits_rather_than_going_elsewhere() -> None:
    existing = [placed("a", "prefill", npg=1, racks={0: 1}), placed("a", "decode", npg=4, racks={0: 1})]
    plan = planner.plan(fleet(5, 18), pd(prefill=(2, 1), decode=(1, 4)), existing)
    prefill = plan.role(serving("a"), "prefill")
    assert (racks(plan, "a", "prefill"), prefill.unplaced) == ({0: 1}, 1)
    assert prefill.reasons[0] == (
        f"prefill: 1 more group must join the decode groups in domain {inventory.short_domain(fb.clique(0))} "
        "(2 prefill : 1 decode groups), which needs 1 free node there but it has 0 they can use"
    )


def test_a_pack_scale_down_removes_whole_units_from_the_least_filled_domain() -> None:
    existing = [placed("a", "prefill", racks={0: 2, 1: 1}), placed("a", "decode", racks={0: 2, 1: 1})]
    plan = planner.plan(fleet(18, 18), pd(prefill=(2, 1), decode=(2, 1)), existing)
    assert (racks(plan, "a", "prefill"), racks(plan, "a", "decode")) == ({0: 2}, {0: 2})


def test_spread_puts_units_in_different_domains_and_pack_in_one() -> None:
    spread = planner.plan(fleet(18, 18), pd(prefill=(2, 2), decode=(2, 4), strategy="spread"))
    pack = planner.plan(fleet(18, 18), pd(prefill=(2, 2), decode=(2, 4)))
    assert (racks(spread, "a", "prefill"), racks(spread, "a", "decode")) == ({0: 1, 1: 1}, {0: 1, 1: 1})
    assert (racks(pack, "a", "prefill"), racks(pack, "a", "decode")) == ({0: 2}, {0: 2})


def test_where_nvlink_stops_at_the_node_prefill_and_decode_are_placed_on_their_own() -> None:
    inv = kubeobjects.from_objects([fb.node(f"h{i}", product="NVIDIA-H200", gpus=8) for i in range(2)])
    plan = planner.plan(inv, pd(prefill=(1, 1), decode=(1, 1), req=H200))
    assert (plan.role(serving("a"), "prefill").placed, plan.role(serving("a"), "decode").placed) == (
        {"h1": 1},
        {"h0": 1},
    )  # a unit of both would need two nodes in one node's NVLink domain


# ---------------------------------------------------------------------------------------------------------------
# Who may use which node


def test_a_more_restricted_serving_is_never_starved_by_one_the_scheduler_could_put_anywhere() -> None:
    pool_a = {"pool": "a"}
    objs = [fb.node(f"rack-0-{i:02d}", rack=0, labels=pool_a if i < 2 else None) for i in range(6)]
    picky = dataclasses.replace(GB200, node_selector=(("pool", "a"),))
    wanted = [demand("a-picky", npg=2, req=picky), demand("b-any", npg=2, groups=2)]
    # Unbound, b's pods could land on the two pool=a trays and leave a Pending: b waits one round.
    first = planner.plan(kubeobjects.from_objects(objs), wanted)
    assert (racks(first, "a-picky"), racks(first, "b-any")) == ({0: 1}, {})
    # Once a's pods hold their trays, b fits in the other four.
    pods = [ours(f"p{i}", f"rack-0-{i:02d}", serving_name="a-picky") for i in range(2)]
    second = planner.plan(kubeobjects.from_objects(objs, pods), wanted, [placed("a-picky", npg=2, racks={0: 1})])
    assert (racks(second, "a-picky"), racks(second, "b-any")) == ({0: 1}, {0: 2})


def test_untolerated_taints_and_missing_cliques_are_explained() -> None:
    objs = [*fb.rack(0, nodes=4, taints=[fb.MAINTENANCE_TAINT]), fb.node("loose", rack=None)]
    plan = planner.plan(kubeobjects.from_objects(objs), [demand("a", npg=2)])
    assert plan.role(serving("a"), "decode").reasons == (
        "decode needs 2 free nodes (8 GPUs) in one NVLink domain for each of 1 more group; "
        "no domain has a free node it can use",
        "of 5 NVIDIA-GB200 nodes, 0 free and usable (0 of them needed by placed groups); 0 running GPU pods; "
        "5 not usable: 4 with the taint nvidia.com/maintenance=rack:NoSchedule not tolerated, "
        "1 without the nvidia.com/gpu.clique label",
    )
    tolerant = dataclasses.replace(GB200, tolerations=(inventory.Toleration("nvidia.com/maintenance", "Exists"),))
    assert racks(planner.plan(kubeobjects.from_objects(objs), [demand("a", npg=2, req=tolerant)]), "a") == {0: 1}


def test_a_gpu_product_missing_from_the_fleet_is_named() -> None:
    gb300 = dataclasses.replace(GB200, gpu_product="NVIDIA-GB300")
    plan = planner.plan(fleet(18, 18), [demand("a", req=gb300)])
    assert plan.role(serving("a"), "decode").reasons[1] == (
        "no node has nvidia.com/gpu.product=NVIDIA-GB300 (the fleet has NVIDIA-GB200 ×36)"
    )


def test_h200_groups_are_single_nodes_each_its_own_domain() -> None:
    inv = kubeobjects.from_objects([fb.node(f"h{i}", product="NVIDIA-H200", gpus=8) for i in range(3)])
    plan = planner.plan(inv, [demand("a", groups=4, req=H200), demand("b", npg=2, req=H200)])
    a, b = plan.role(serving("a"), "decode"), plan.role(serving("b"), "decode")
    assert (a.placed, a.unplaced) == ({"h0": 1, "h1": 1, "h2": 1}, 1)
    assert (
        b.reasons[0]
        == "decode needs 2 nodes per group, but NVLink stops at the node for NVIDIA-H200: 1 group cannot be placed"
    )
    assert [(d.key, d.label) for d in plan.domains] == [(f"h{i}", names.HOSTNAME_LABEL) for i in range(3)]


# ---------------------------------------------------------------------------------------------------------------
# The API around plan()


def test_plan_answers_in_the_shape_of_status_placement() -> None:
    plan = planner.plan(fleet(18), [demand("a", "decode", npg=2), demand("a", "prefill", npg=1, groups=2)])
    assert plan.placement(serving("a")) == {"decode": {fb.clique(0): 1}, "prefill": {fb.clique(0): 2}}
    assert (plan.domain(fb.clique(0)).label, plan.domain(fb.clique(0)).free_after) == (fb.CLIQUE_LABEL, 18 - 4)
    with pytest.raises(KeyError):
        plan.role(serving("nobody"), "decode")
    with pytest.raises(KeyError):
        plan.domain("nowhere")


def test_a_role_demanded_twice_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="default/a decode is demanded twice"):
        planner.plan(fleet(18), [demand("a"), demand("a", groups=2)])
    with pytest.raises(ValueError, match="groups >= 0"):
        demand("a", groups=-1)


def serving_object(**spec_changes: object) -> models.DeepSeekServing:
    spec: dict[str, object] = {
        "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
        "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
        "gpu": "GB200",
        "roles": {
            "decode": {"groups": 3, "parallelism": {"nodesPerGroup": 2}},
            "prefill": {"groups": 1, "parallelism": {"nodesPerGroup": 1}},
        },
        "placement": {"strategy": "spread"},
        "pod": {
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"pool": "serving"},
        },
    }
    spec |= spec_changes
    return models.DeepSeekServing.model_validate(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {"name": "flash", "namespace": "llm"},
            "spec": spec,
        }
    )


def test_demands_come_from_the_spec_topology_and_pod_overrides() -> None:
    req = inventory.NodeRequirements(
        gpu_product="NVIDIA-GB200",
        gpus_per_node=4,
        tolerations=(inventory.Toleration("kubernetes.io/arch", "Exists", "", "NoSchedule"),),
        node_selector=(("pool", "serving"),),
    )
    key = serving("flash", "llm")
    assert demands.of(serving_object()) == [
        planner.Demand(key, "prefill", 1, 1, req, "spread"),
        planner.Demand(key, "decode", 2, 3, req, "spread"),
    ]


def test_current_placement_comes_from_status() -> None:
    obj = serving_object()
    obj.status = servingstatus.DeepSeekServingStatus(placement={"decode": {"x.1": 2, "y.2": 0}, "gone": {"z.3": 1}})
    assert demands.current(obj) == [placements.Placement(serving("flash", "llm"), "decode", 2, {"x.1": 2})]


# ---------------------------------------------------------------------------------------------------------------
# Properties over random fleets and demands


@dataclasses.dataclass(frozen=True)
class Scenario:
    inv: inventory.Inventory
    free: dict[str, int]  # free usable nodes per domain (no pods of servings in these fleets)
    before: list[planner.Demand]  # what was planned earlier: its result becomes the current placement
    after: list[planner.Demand]
    held: list[placements.Placement]  # servings sharing the fleet that are not re-planned


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    nodes: list[inventory.Node] = []
    for r in range(draw(st.integers(1, 8))):
        labels = {fb.CLIQUE_LABEL: fb.clique(r), names.PRODUCT_LABEL: GB200.gpu_product}
        for t in range(draw(st.integers(1, 18))):
            state = draw(st.sampled_from(["free"] * 6 + ["busy", "cordoned", "notready"]))
            name = f"rack-{r}-{t:02d}"
            busy = (inventory.GpuPod("batch", f"job-{name}", name, 4),) if state == "busy" else ()
            nodes.append(
                inventory.Node(name, labels, 4, ready=state != "notready", unschedulable=state == "cordoned", pods=busy)
            )
    inv = inventory.build(nodes)
    free = {d.key: sum(n.schedulable and not n.busy for n in d.nodes) for d in inv.domains()}
    servings = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    before, after = [], []
    for name in servings:
        strategy = draw(st.sampled_from(["pack", "spread"]))
        for role in draw(st.sampled_from([["decode"], ["decode", "prefill"]])):
            npg = draw(st.integers(1, 6))
            before.append(demand(name, role, npg=npg, groups=draw(st.integers(0, 8)), strategy=strategy))
            after.append(demand(name, role, npg=npg, groups=draw(st.integers(0, 12)), strategy=strategy))
    held_names = [n for n in "xyz" if draw(st.booleans())]
    held_demands = [demand(n, npg=draw(st.integers(1, 4)), groups=draw(st.integers(0, 4))) for n in held_names]
    first = planner.plan(inv, held_demands)
    held = [
        placements.Placement(d.serving, d.role, d.nodes_per_group, first.role(d.serving, d.role).placed)
        for d in held_demands
    ]
    return Scenario(inv, free, before, after, held)


def current_placements(s: Scenario) -> list[placements.Placement]:
    earlier = planner.plan(s.inv, s.before, s.held)
    return [*s.held, *(placements.Placement(r.serving, r.role, r.nodes_per_group, r.placed) for r in earlier.roles)]


def nodes_planned(plan: planner.Plan, held: Sequence[placements.Placement]) -> dict[str, int]:
    out: dict[str, int] = {}
    for npg, where in [(r.nodes_per_group, r.placed) for r in plan.roles] + [
        (p.nodes_per_group, p.groups) for p in held
    ]:
        for key, groups in where.items():
            out[key] = out.get(key, 0) + groups * npg
    return out


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_property_never_over_commit_never_split_never_move(s: Scenario) -> None:
    current = current_placements(s)
    plan = planner.plan(s.inv, s.after, current)
    for key, nodes in nodes_planned(plan, s.held).items():
        assert nodes <= s.free[key], f"{key} over-committed: {nodes} > {s.free[key]}"
    for role in plan.roles:
        assert role.placed_groups + role.unplaced == role.groups
        assert all(key in s.free and groups > 0 for key, groups in role.placed.items())  # real domains, whole groups
        was = next(p.groups for p in current if p.owner == (role.serving, role.role))
        if role.groups >= sum(was.values()):
            assert all(role.placed.get(k, 0) >= g for k, g in was.items()), "an existing group moved"
        else:
            assert role.placed_groups == role.groups
            assert all(g <= was.get(k, 0) for k, g in role.placed.items()), "a scale-down added a group"


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_property_unplaced_groups_really_had_no_room(s: Scenario) -> None:
    plan = planner.plan(s.inv, s.after, current_placements(s))
    left = {d.key: d.free_after for d in plan.domains}
    units = paired(s.after)
    for role in plan.roles:
        pair = units.get(role.serving)
        if pair is None and role.unplaced:
            assert all(free < role.nodes_per_group for free in left.values())
        elif pair is not None and role.role == pair.anchor_role and role.unplaced:  # a whole unit had no room
            anchor, fed = (plan.role(role.serving, r) for r in (pair.anchor_role, pair.fed_role))
            largest_unit = anchor.nodes_per_group + -(-pair.fed // pair.anchors) * fed.nodes_per_group
            assert all(free < largest_unit for free in left.values())


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_property_plans_are_deterministic_whatever_the_input_order(s: Scenario, rnd: object) -> None:
    current = current_placements(s)
    shuffled_demands, shuffled_current = list(s.after), list(current)
    rnd.shuffle(shuffled_demands)  # type: ignore[attr-defined]
    rnd.shuffle(shuffled_current)  # type: ignore[attr-defined]
    assert planner.plan(s.inv, s.after, current) == planner.plan(s.inv, shuffled_demands, shuffled_current)


def paired(demands: Sequence[planner.Demand]) -> dict[inventory.ServingKey, pairing.Ratio]:
    """The servings of these scenarios placed in P/D units: both roles with groups (one requirement, one
    strategy per serving)."""
    groups: dict[inventory.ServingKey, dict[str, int]] = {}
    for d in demands:
        groups.setdefault(d.serving, {})[d.role] = d.groups
    return {
        key: r
        for key, roles in groups.items()
        if (r := pairing.ratio(roles.get("prefill", 0), roles.get("decode", 0))) is not None
    }


def reference_plan(
    free: Mapping[str, int], demands: Sequence[planner.Demand], current: Sequence[placements.Placement]
) -> dict[inventory.RoleKey, dict[str, int]]:
    """The rules applied literally, one group (or P/D unit) at a time (slow, obviously right; one requirement,
    no pods). The arithmetic of unit sizes is ``pairing``'s, tested on its own."""
    left = dict(free)
    groups: dict[inventory.RoleKey, dict[str, int]] = {}
    demanded = {d.owner for d in demands}
    for p in current:
        if p.owner not in demanded:
            for k, g in p.groups.items():
                left[k] -= g * p.nodes_per_group
    order = sorted(demands, key=lambda d: (d.serving, -d.nodes_per_group, d.role))
    for d in order:
        groups[d.owner] = dict(next((p.groups for p in current if p.owner == d.owner), {}))
        for k, g in groups[d.owner].items():
            left[k] -= g * d.nodes_per_group

    def of_serving(d: planner.Demand, k: str) -> int:
        return sum(g.get(k, 0) for o, g in groups.items() if o.serving == d.serving)

    units = paired(demands)
    by_role = {(d.serving, d.role): d for d in demands}

    def add(d: planner.Demand, k: str, n: int) -> None:
        groups[d.owner][k] = groups[d.owner].get(k, 0) + n
        left[k] -= n * d.nodes_per_group
        if not groups[d.owner][k]:
            del groups[d.owner][k]

    for d in order:
        if d.serving in units:
            if d.role == units[d.serving].anchor_role:
                pair = [by_role[d.serving, units[d.serving].anchor_role], by_role[d.serving, units[d.serving].fed_role]]
                ref_scale_down_pair(pair, groups, left, add)
            continue
        mine = groups[d.owner]
        while sum(mine.values()) > d.groups:
            sign = 1 if d.strategy == "pack" else -1
            k = min(mine, key=lambda k: (0 if left[k] < 0 else 1, sign * mine[k], k))
            add(d, k, -1)
    for d in order:
        mine = groups[d.owner]
        if d.serving in units:
            if d.role == units[d.serving].anchor_role:
                anchor, fed = by_role[d.serving, d.role], by_role[d.serving, units[d.serving].fed_role]
                ref_scale_up_pair(units[d.serving], anchor, fed, groups, left, add, of_serving)
            continue
        while sum(mine.values()) < d.groups:
            fits = [k for k in sorted(left) if left[k] >= d.nodes_per_group]
            if not fits:
                break
            if d.strategy == "pack":
                k = min(fits, key=lambda k: (0 if of_serving(d, k) else 1, left[k] - d.nodes_per_group, k))
            else:
                k = min(fits, key=lambda k: (mine.get(k, 0), of_serving(d, k), left[k] - d.nodes_per_group, k))
            add(d, k, 1)
    return groups


def ref_scale_down_pair(pair: list[planner.Demand], groups: Any, left: dict[str, int], add: Any) -> None:
    """One group of each role with a surplus at a time, from the domain the rule names."""
    sign = 1 if pair[0].strategy == "pack" else -1

    def surplus(d: planner.Demand) -> int:
        return sum(groups[d.owner].values()) - d.groups

    while any(surplus(d) > 0 for d in pair):
        held = {k for d in pair if surplus(d) > 0 for k in groups[d.owner]}
        total = {k: sum(groups[d.owner].get(k, 0) for d in pair) for k in held}
        k = min(held, key=lambda k: (0 if left[k] < 0 else 1, sign * total[k], k))
        for d in pair:
            if surplus(d) > 0 and groups[d.owner].get(k, 0):
                add(d, k, -1)


def ref_scale_up_pair(
    r: pairing.Ratio,
    anchor: planner.Demand,
    fed: planner.Demand,
    groups: Any,
    left: dict[str, int],
    add: Any,
    of_serving: Any,
) -> None:
    """Top up the anchors' domains one fed group at a time, then place new units one at a time."""
    shares = pairing.shares(r, groups[anchor.owner], groups[fed.owner])
    for k, owed in shares.deficit.items():
        for _ in range(owed):
            if left.get(k, 0) >= fed.nodes_per_group:
                add(fed, k, 1)
    new_anchors = r.anchors - sum(groups[anchor.owner].values())
    for count, fed_each in pairing.new_units(r, new_anchors, shares) if new_anchors > 0 else ():
        size = anchor.nodes_per_group + fed_each * fed.nodes_per_group
        for _ in range(count):
            fits = [k for k in sorted(left) if left[k] >= size]
            if not fits:
                break
            if anchor.strategy == "pack":
                k = min(fits, key=lambda k: (0 if of_serving(anchor, k) else 1, left[k] - size, k))
            else:
                mine = groups[anchor.owner]
                k = min(fits, key=lambda k: (mine.get(k, 0), of_serving(anchor, k), left[k] - size, k))
            add(anchor, k, 1)
            if fed_each:
                add(fed, k, fed_each)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_property_batched_planning_equals_the_rules_applied_one_group_at_a_time(s: Scenario) -> None:
    current = current_placements(s)
    plan = planner.plan(s.inv, s.after, current)
    expected = reference_plan(s.free, s.after, current)
    assert {(r.serving, r.role): dict(r.placed) for r in plan.roles} == {
        o: dict(sorted(g.items())) for o, g in expected.items()
    }


TOLERATE_MAINTENANCE = (inventory.Toleration("nvidia.com/maintenance", "Exists"),)
MIXED_REQUIREMENTS = [
    GB200,
    dataclasses.replace(GB200, tolerations=TOLERATE_MAINTENANCE),
    dataclasses.replace(GB200, node_selector=(("pool", "a"),)),
    dataclasses.replace(GB200, tolerations=TOLERATE_MAINTENANCE, node_selector=(("pool", "b"),)),
]


@st.composite
def mixed_fleets(draw: st.DrawFn) -> tuple[inventory.Inventory, list[planner.Demand]]:
    nodes = []
    for r in range(draw(st.integers(1, 4))):
        for t in range(draw(st.integers(1, 18))):
            labels = {fb.CLIQUE_LABEL: fb.clique(r), names.PRODUCT_LABEL: GB200.gpu_product}
            pool = draw(st.sampled_from(["a", "b", None]))
            if pool:
                labels["pool"] = pool
            taints = (inventory.Taint("nvidia.com/maintenance", "rack", "NoSchedule"),) if draw(st.booleans()) else ()
            nodes.append(inventory.Node(f"rack-{r}-{t:02d}", labels, 4, True, False, taints))
    demands = [
        demand(
            name,
            npg=draw(st.integers(1, 4)),
            groups=draw(st.integers(0, 6)),
            req=draw(st.sampled_from(MIXED_REQUIREMENTS)),
            strategy=draw(st.sampled_from(["pack", "spread"])),
        )
        for name in draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    ]
    return inventory.build(nodes), demands


@settings(max_examples=80, deadline=None)
@given(mixed_fleets(), st.randoms(use_true_random=False))
def test_property_every_planned_pod_finds_a_node_whatever_the_scheduler_picks(
    fleet_and_demands: tuple[inventory.Inventory, list[planner.Demand]], rnd: Any
) -> None:
    inv, demands = fleet_and_demands
    plan = planner.plan(inv, demands)
    for domain in inv.domains():
        free = list(domain.nodes)
        pods = [
            d.requirements
            for d in demands
            for _ in range(plan.role(d.serving, d.role).placed.get(domain.key, 0) * d.nodes_per_group)
        ]
        rnd.shuffle(pods)
        for req in pods:  # an adversarial scheduler: any order, any node the pod may use
            usable = [n for n in free if inventory.usable(n, req)]
            assert usable, f"a pod needing {req} found no node in {domain.key}"
            free.remove(rnd.choice(usable))


# ---------------------------------------------------------------------------------------------------------------
# The fast paths agree with the slow ones


def best_fit_by_scan(
    book: Any, scope: inventory.Scope, cls: int, size: int, mine: Mapping[str, int]
) -> tuple[Any, int]:
    """Best fit the straightforward way: every domain of the scope ranked (a domain of the serving first, then
    the fewest nodes left, then the smaller key); what the planner's capacity index must agree with."""
    fits = [(slot, capacity.claimable(slot, cls)) for slot in book.scope_slots[scope]]
    ranked = sorted((0 if mine.get(s.key, 0) > 0 else 1, cap, s.key, s) for s, cap in fits if cap >= size)
    return (ranked[0][3], ranked[0][1]) if ranked else (None, 0)


def spread_by_scan(
    book: Any,
    scope: inventory.Scope,
    cls: int,
    size: int,
    role: Mapping[str, int],
    mine: Mapping[str, int],
    count: int,
    place: Any,
) -> int:
    """Spread the straightforward way: one at a time, every domain of the scope ranked (fewest groups of the
    role, then of the serving, then the fewest nodes left, then the smaller key)."""
    while count > 0:
        fits = [(slot.key, capacity.claimable(slot, cls)) for slot in book.scope_slots[scope]]
        ranked = sorted((role.get(k, 0), mine.get(k, 0), cap - size, k) for k, cap in fits if cap >= size)
        if not ranked:
            break
        place(ranked[0][3])
        count -= 1
    return count


def largest_block_by_scan(book: Any, req: inventory.NodeRequirements, cls: int) -> str:
    """The domain with the most room the straightforward way: every domain of the scope, the first in key order
    with the most nodes the class can claim."""
    caps = [(capacity.claimable(slot, cls), slot.key) for slot in book.scope_slots[req.scope]]
    most = max((cap for cap, _ in caps), default=0)
    return (
        shortfall.largest(next((k for cap, k in caps if cap == most), ""), most)
        if most > 0
        else shortfall.largest("", 0)
    )


def planned_by_scans(inv: inventory.Inventory, wanted: list[planner.Demand], current: Any = ()) -> planner.Plan:
    with (
        mock.patch.object(planner._Book, "best_fit", best_fit_by_scan),
        mock.patch.object(planner._Book, "spread_over", spread_by_scan),
        mock.patch.object(planner._Book, "largest_block", largest_block_by_scan),
    ):
        return planner.plan(inv, wanted, current)


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_property_indexed_planning_plans_as_a_scan_of_every_domain(s: Scenario) -> None:
    current = current_placements(s)
    assert planner.plan(s.inv, s.after, current) == planned_by_scans(s.inv, s.after, current)


@settings(max_examples=80, deadline=None)
@given(mixed_fleets())
def test_property_indexed_planning_plans_as_a_scan_with_mixed_requirements(
    fleet_and_demands: tuple[inventory.Inventory, list[planner.Demand]],
) -> None:
    inv, wanted = fleet_and_demands
    assert planner.plan(inv, wanted) == planned_by_scans(inv, wanted)


@settings(max_examples=80, deadline=None)
@given(scenarios())
def test_property_an_inventory_planned_on_before_plans_as_a_fresh_one(s: Scenario) -> None:
    current = current_placements(s)  # plans on s.inv first, filling what it keeps
    fresh = inventory.Inventory(s.inv.nodes, s.inv.domain_label)
    assert planner.plan(s.inv, s.after, current) == planner.plan(fresh, s.after, current)


# ---------------------------------------------------------------------------------------------------------------
# Other servings' placements summed once (``placements.held``): a pass plans one serving against the fleet's sums


def planned_against_sums(
    inv: inventory.Inventory, wanted: Sequence[planner.Demand], current: Sequence[placements.Placement]
) -> planner.Plan:
    """``wanted``'s plan with the placements of servings not in it summed for the whole fleet, then their own
    taken out again, as a pass does (``reconciler.FleetView.summed``)."""
    planned = {d.serving for d in wanted}
    own = [p for p in current if p.serving in planned]
    return planner.plan(inv, wanted, own, placements.held(inv, current).without(own))


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_property_a_serving_planned_against_the_others_sums_plans_as_against_their_placements(s: Scenario) -> None:
    current = current_placements(s)
    for key in sorted({d.serving for d in s.after}):
        wanted = [d for d in s.after if d.serving == key]
        assert planned_against_sums(s.inv, wanted, current) == planner.plan(s.inv, wanted, current)


@pytest.mark.parametrize(
    ("pods", "other"),
    [
        pytest.param([], placed("other", npg=3, racks={0: 1}), id="placed, no pod bound yet"),
        pytest.param(
            [ours(f"o{i}", f"rack-0-{i:02d}", serving_name="other") for i in range(3)],
            placed("other", npg=3, racks={0: 1}),
            id="every pod bound",
        ),
        pytest.param(
            [ours(f"o{i}", f"rack-0-{i:02d}", serving_name="other", group=i // 2) for i in range(4)],
            placed("other", npg=2, racks={0: 1}),
            id="pods beyond its groups, released",
        ),
        pytest.param(
            [ours("o0", "rack-0-00", serving_name="other")],
            placed("other", npg=2, racks={0: 1, 1: 1}),
            id="one of two domains partly bound",
        ),
        pytest.param([], placed("other", npg=2, racks={5: 1}), id="in a domain the inventory no longer has"),
    ],
)
def test_a_held_placement_counts_the_same_summed_as_given(pods: list[dict], other: placements.Placement) -> None:
    inv = fleet(4, 4, pods=pods)
    wanted = [demand("a", npg=2, groups=2)]
    assert planned_against_sums(inv, wanted, [other]) == planner.plan(inv, wanted, [other])


def test_sums_taken_out_must_have_been_summed() -> None:
    inv = fleet(4)
    with pytest.raises(ValueError, match="not among the held placements"):
        placements.held(inv, [placed("b", racks={0: 1})]).without([placed("a", racks={0: 1})])


def test_sums_plan_only_on_the_inventory_they_were_summed_on() -> None:
    sums = placements.held(fleet(4), [placed("b", racks={0: 1})])
    with pytest.raises(ValueError, match="another inventory"):
        planner.plan(fleet(4), [demand("a")], (), sums)
