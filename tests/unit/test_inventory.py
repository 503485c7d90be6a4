"""Inventory: which nodes exist per NVLink domain, which a serving may use, which are free."""

from __future__ import annotations

import pytest

from nvlfleet.api import names, problems
from nvlfleet.core import inventory, kubeobjects
from support import fleetbuilder as fb

GB200 = inventory.NodeRequirements(gpu_product="NVIDIA-GB200", gpus_per_node=4)
H200 = inventory.NodeRequirements(gpu_product="NVIDIA-H200", gpus_per_node=8, scope="node")


def one(obj: dict) -> inventory.Node:
    return kubeobjects.from_objects([obj]).nodes[0]


def test_a_node_keeps_what_placement_needs() -> None:
    taint = {"key": "kubernetes.io/arch", "value": "arm64", "effect": "NoSchedule"}
    parsed = one(fb.node("rack-0-00", rack=0, taints=[taint], cordoned=True, ready=False))
    assert (parsed.name, parsed.gpu_product, parsed.gpus, parsed.ready, parsed.unschedulable) == (
        "rack-0-00",
        "NVIDIA-GB200",
        4,
        False,
        True,
    )
    assert parsed.taints == (inventory.Taint("kubernetes.io/arch", "arm64", "NoSchedule"),)
    assert parsed.labels[fb.CLIQUE_LABEL] == fb.clique(0)


def test_domains_group_nodes_by_clique_and_skip_unlabelled_nodes() -> None:
    inv = kubeobjects.from_objects([*fb.rack(1, nodes=2), *fb.rack(0, nodes=3), fb.node("loose", rack=None)])
    domains = inv.domains("clique")
    assert [(d.key, d.label, [n.name for n in d.nodes]) for d in domains] == [
        (fb.clique(0), fb.CLIQUE_LABEL, ["rack-0-00", "rack-0-01", "rack-0-02"]),
        (fb.clique(1), fb.CLIQUE_LABEL, ["rack-1-00", "rack-1-01"]),
    ]


def test_node_scope_makes_each_unlabelled_gpu_node_its_own_domain() -> None:
    inv = kubeobjects.from_objects(
        [
            fb.node("h200-b", product="NVIDIA-H200", gpus=8),
            fb.node("h200-a", product="NVIDIA-H200", gpus=8),
            fb.node("rack-0-00", rack=0),
            fb.node("cpu", product=None),
        ]
    )
    assert [(d.key, d.label, len(d.nodes)) for d in inv.domains("node")] == [
        ("h200-a", names.HOSTNAME_LABEL, 1),
        ("h200-b", names.HOSTNAME_LABEL, 1),
    ]


def test_a_custom_domain_label_is_honoured() -> None:
    objs = [fb.node(f"n{i}", labels={"example.com/rack": "r1"}) for i in range(2)]
    inv = kubeobjects.from_objects(objs, domain_label="example.com/rack")
    assert [(d.key, d.label, len(d.nodes)) for d in inv.domains()] == [("r1", "example.com/rack", 2)]


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (inventory.Toleration("k", "Equal", "v", "NoSchedule"), inventory.Taint("k", "v", "NoSchedule"), True),
        (inventory.Toleration("k", "Equal", "w", "NoSchedule"), inventory.Taint("k", "v", "NoSchedule"), False),
        (inventory.Toleration("k", "Exists", "", "NoSchedule"), inventory.Taint("k", "v", "NoSchedule"), True),
        (inventory.Toleration("k", "Exists", "", ""), inventory.Taint("k", "v", "NoExecute"), True),
        (inventory.Toleration("k", "Exists", "", "NoExecute"), inventory.Taint("k", "v", "NoSchedule"), False),
        (inventory.Toleration("other", "Exists"), inventory.Taint("k", "v", "NoSchedule"), False),
        (inventory.Toleration("", "Exists"), inventory.Taint("anything", "x", "NoExecute"), True),
        (inventory.Toleration("k", "Equal", "", ""), inventory.Taint("k", "", "NoSchedule"), True),
        # Only delays eviction: not usable for an engine that runs for days.
        (inventory.Toleration("k", "Exists", "", "NoExecute", 300), inventory.Taint("k", "", "NoExecute"), False),
        (inventory.Toleration("k", "Exists", "", "", 300), inventory.Taint("k", "", "NoSchedule"), True),
    ],
)
def test_toleration_matching_follows_kubernetes(
    toleration: inventory.Toleration, taint: inventory.Taint, tolerated: bool
) -> None:
    assert toleration.tolerates(taint) is tolerated


def test_prefer_no_schedule_taints_never_block() -> None:
    parsed = one(fb.node("n", rack=0, taints=[{"key": "soft", "effect": "PreferNoSchedule"}]))
    assert inventory.blocking_taint(parsed, ()) is None
    assert inventory.usable(parsed, GB200)


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (fb.node("n", rack=0), None),
        (fb.node("n", rack=0, product="NVIDIA-GB300"), "GPU product NVIDIA-GB300"),
        (fb.node("n", rack=None), "without the nvidia.com/gpu.clique label"),
        (fb.node("n", rack=0, ready=False), "not Ready"),
        (fb.node("n", rack=0, cordoned=True), "cordoned"),
        (fb.node("n", rack=0, gpus=3), "fewer than 4 allocatable nvidia.com/gpu"),
        (
            fb.node("n", rack=0, taints=[{"key": "gpu", "value": "bad", "effect": "NoExecute"}]),
            "with the taint gpu=bad:NoExecute not tolerated",
        ),
    ],
)
def test_why_a_node_is_not_usable(obj: dict, reason: str | None) -> None:
    assert inventory.unusable_reason(one(obj), GB200) == reason


def test_tolerations_and_node_selector_widen_and_narrow_the_usable_nodes() -> None:
    tainted = one(fb.node("n", rack=0, labels={"pool": "a"}, taints=[fb.MAINTENANCE_TAINT]))
    tolerant = inventory.NodeRequirements(
        "NVIDIA-GB200", 4, tolerations=(inventory.Toleration("nvidia.com/maintenance", "Exists"),)
    )
    picky = inventory.NodeRequirements(
        "NVIDIA-GB200", 4, tolerations=tolerant.tolerations, node_selector=(("pool", "b"),)
    )
    assert inventory.unusable_reason(tainted, GB200) == (
        "with the taint nvidia.com/maintenance=rack:NoSchedule not tolerated"
    )
    assert inventory.unusable_reason(tainted, tolerant) is None
    assert inventory.unusable_reason(tainted, picky) == "not matching the node selector pool=b"


def test_node_scope_leaves_nodes_inside_an_nvlink_domain_alone() -> None:
    h200_in_clique = one(fb.node("n", rack=0, product="NVIDIA-H200", gpus=8))
    assert inventory.unusable_reason(h200_in_clique, H200) == "inside an NVLink domain (nvidia.com/gpu.clique is set)"


def test_a_bound_gpu_pod_makes_its_node_busy_and_is_attributed_to_its_serving() -> None:
    inv = kubeobjects.from_objects(
        [fb.node("a", rack=0), fb.node("b", rack=0), fb.node("c", rack=0)],
        [
            fb.pod("flash-decode-0", "a", namespace="team", serving="flash", role="decode", lws="flash-d", group=0),
            fb.pod("other", "b"),
            fb.pod("cpu-only", "c", gpus=0),
            fb.pod("done", "c", phase="Succeeded"),
            fb.pod("unscheduled", None),
        ],
    )
    busy = {n.name: n.busy for n in inv.nodes}
    assert busy == {"a": True, "b": True, "c": False}
    owner = inventory.RoleKey(inventory.ServingKey("team", "flash"), "decode")
    assert inv.nodes[0].pods == (inventory.GpuPod("team", "flash-decode-0", "a", 4, owner, "flash-d/0"),)
    assert inv.nodes[1].pods[0].owner is None


def test_pod_gpus_count_containers_and_sidecars_but_only_the_peak_of_init_containers() -> None:
    obj = fb.pod("p", "a", gpus=2)
    obj["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"nvidia.com/gpu": 1}}},
    ]
    found: list[problems.Problem] = []
    parsed = kubeobjects.parse_pod(obj, "pod", found)
    assert found == []
    assert parsed is not None and parsed.gpus == 4  # max(2 + 1 running, 4 init)


def test_observed_placements_count_lws_groups_per_domain() -> None:
    def ours(name: str, node: str, group: int, role: str = "decode") -> dict:
        return fb.pod(name, node, serving="flash", role=role, lws=f"flash-{role}", group=group)

    inv = kubeobjects.from_objects(
        [*fb.rack(0, nodes=4), *fb.rack(1, nodes=2)],
        [
            ours("d0-0", "rack-0-00", 0),
            ours("d0-1", "rack-0-01", 0),
            ours("d1-0", "rack-0-02", 1),
            ours("d1-1", "rack-0-03", 1),
            ours("d2-0", "rack-1-00", 2),
            fb.pod("p0", "rack-1-01", serving="flash", role="prefill"),  # no LWS labels: a group of its own
        ],
    )
    flash = inventory.ServingKey("default", "flash")
    assert inventory.observed_placements(inv) == {
        inventory.RoleKey(flash, "decode"): {fb.clique(0): 2, fb.clique(1): 1},
        inventory.RoleKey(flash, "prefill"): {fb.clique(1): 1},
    }


def test_short_domain_abbreviates_clique_ids_only() -> None:
    assert inventory.short_domain(fb.clique(0)) == fb.clique(0)[:8] + "." + fb.clique(0).rsplit(".", 1)[1]
    assert inventory.short_domain("gpu-node-7") == "gpu-node-7"


def test_malformed_nodes_are_reported_with_field_paths() -> None:
    bad_gpus = fb.node("a", rack=0)
    bad_gpus["status"]["allocatable"]["nvidia.com/gpu"] = "4x"
    bad_taint = fb.node("b", rack=0, taints=[{"key": "k", "effect": "Sometimes"}])
    nameless = fb.node("c", rack=0)
    del nameless["metadata"]["name"]
    with pytest.raises(problems.InvalidSpec) as err:
        kubeobjects.from_objects([fb.node("ok", rack=0), bad_gpus, bad_taint, nameless, "not a node"])
    assert [str(p) for p in err.value.problems] == [
        "nodes[1].status.allocatable[\"nvidia.com/gpu\"]: expected a whole number of GPUs, got '4x'",
        "nodes[2].spec.taints[0].effect: expected one of NoSchedule, PreferNoSchedule, NoExecute, got 'Sometimes'",
        "nodes[3].metadata.name: a Node needs a name",
        "nodes[4]: expected a mapping, got str 'not a node'",
    ]


def test_tolerations_are_parsed_with_field_paths() -> None:
    assert kubeobjects.parse_tolerations(
        [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}, {"key": "b", "value": "x"}], "tol"
    ) == (inventory.Toleration("a", "Exists", "", "NoSchedule"), inventory.Toleration("b", "Equal", "x", ""))
    with pytest.raises(problems.InvalidSpec) as err:
        kubeobjects.parse_tolerations([{"operator": "Equal"}, {"key": "a", "operator": "Maybe"}], "spec.tol")
    assert [str(p) for p in err.value.problems] == [
        "spec.tol[0].key: an empty key needs operator Exists",
        "spec.tol[1].operator: expected Equal or Exists, got 'Maybe'",
    ]


def test_a_label_key_that_is_not_a_string_is_reported_with_its_path() -> None:
    odd = fb.node("a", rack=0)
    odd["metadata"]["labels"][7] = "x"
    with pytest.raises(problems.InvalidSpec) as err:
        kubeobjects.from_objects([odd])
    assert [str(p) for p in err.value.problems] == ["nodes[0].metadata.labels: expected string keys, got int 7"]


def test_a_build_through_merges_reuses_a_busy_node_whose_node_and_pods_are_the_same_objects() -> None:
    a, b = one(fb.node("a", rack=0)), one(fb.node("b", rack=0))
    on_a, on_b = inventory.GpuPod("team", "p0", "a", 4), inventory.GpuPod("team", "p1", "b", 4)
    merges = inventory.Merges()
    first = inventory.build([a, b], [on_a, on_b], merges=merges)
    moved = inventory.GpuPod("team", "p1", "b", 4)  # b's pod changed: a new object, though equal
    then = inventory.build([a, b], [on_a, moved], merges=merges)

    assert then.nodes[0] is first.nodes[0]
    assert then.nodes[1] is not first.nodes[1]
    assert then.nodes[1].pods == (moved,)
    assert [n.pods for n in then.nodes] == [n.pods for n in inventory.build([a, b], [on_a, moved]).nodes]


def test_merges_keep_only_the_nodes_of_the_latest_build() -> None:
    a, b = one(fb.node("a", rack=0)), one(fb.node("b", rack=0))
    merges = inventory.Merges()
    inventory.build(
        [a, b], [inventory.GpuPod("team", "p0", "a", 4), inventory.GpuPod("team", "p1", "b", 4)], merges=merges
    )
    inventory.build([a, b], [inventory.GpuPod("team", "p0", "a", 4)], merges=merges)

    assert len(merges) == 1
