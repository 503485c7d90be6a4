"""Rendering: the manifests a serving becomes, their vLLM command lines, and the invariants of both."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvlfleet import cli
from nvlfleet.api import models, names, policy, problems
from nvlfleet.core import (
    commandline,
    demands,
    inventory,
    kubeobjects,
    planner,
    profile_data,
    profiles,
    render,
    validation,
)
from nvlfleet.facts import facts, hardware
from support import fleetbuilder as fb
from support import golden_cases
from support import servingbuilder as sb

FACTS = facts.load("0.33.0")
K8S_VERSION = "1.37.0"
ROOT = Path(__file__).resolve().parents[2]
COMPUTE_DOMAIN_CRD = ROOT / "cluster/localcluster/data/computedomain-crd.yaml"
DIALECT = profile_data.dialects()[0]


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def kinds(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def templates(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(leader pod template, worker pod template or None for one-node groups)."""
    spec = lws["spec"]["leaderWorkerTemplate"]
    if "leaderTemplate" in spec:
        return spec["leaderTemplate"], spec["workerTemplate"]
    return spec["workerTemplate"], None


def container(template: dict[str, Any]) -> dict[str, Any]:
    (only,) = template["spec"]["containers"]
    return only


def launched(command: list[str], worker_index: int) -> list[str]:
    """What the worker launcher execs for ``LWS_WORKER_INDEX=worker_index`` (run in-process, exec patched)."""
    assert command[:3] == [DIALECT.python, "-c", commandline.WORKER_LAUNCHER]
    seen: list[list[str]] = []

    def execvp(file: str, argv: list[str]) -> None:
        assert file == argv[0]
        seen.append(list(argv))

    with (
        mock.patch.object(os, "execvp", execvp),
        mock.patch.object(sys, "argv", ["-c", *command[3:]]),
        mock.patch.dict(os.environ, {"LWS_WORKER_INDEX": str(worker_index)}),
    ):
        exec(command[2], {})  # the launcher is a constant of render.py, not input
    (argv,) = seen
    return argv


def options(argv: list[str]) -> dict[str, Any]:
    """``vllm serve MODEL ...`` read by the facts' argparse model: canonical flag -> value (JSON parsed)."""
    assert argv[:2] == list(DIALECT.command)
    parsed = FACTS.parse_args(argv[3:])
    assert parsed.errors == (), parsed.errors
    out: dict[str, Any] = {}
    for arg in parsed.args:
        value = arg.value
        if arg.flag.type in ("parse_dataclass", "loads", "union_dict_and_str") and isinstance(value, str):
            value = json.loads(value)
        out[arg.flag.name] = value
    return out


def group_commands(lws: dict[str, Any]) -> list[list[str]]:
    """The vLLM argv of every node of one group, leader first, workers as their launcher would exec them."""
    leader, worker = templates(lws)
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    commands = [container(leader)["command"]]
    if worker is not None:
        commands += [launched(container(worker)["command"], k) for k in range(1, size)]
    return commands


def dp_ranks(lws: dict[str, Any]) -> list[int]:
    """Every data-parallel rank the nodes of one group run, in node order."""
    ranks: list[int] = []
    for argv in group_commands(lws):
        opts = options(argv)
        size = int(opts.get("--data-parallel-size", 1))
        local = int(opts.get("--data-parallel-size-local", size))
        start = int(opts.get("--data-parallel-start-rank", 0))
        ranks += range(start, start + local)
    return ranks


def as_pod(template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **template["metadata"]},
        "spec": template["spec"],
    }


def rendered(where: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
    """Render a builder serving with the placement ``where`` (None: unpinned), without its router unless
    ``router`` is given: these tests are about the engines (tests/unit/test_router.py is about the router)."""
    kwargs.setdefault("router", {"enabled": False})
    return render.render(sb.serving(**kwargs), where)


# ---------------------------------------------------------------------------------------------------------------
# Golden manifests


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_rendering_matches_the_golden_manifests(name: str) -> None:
    golden = golden_cases.GOLDEN / f"{name}.yaml"
    assert golden.exists(), f"no golden file for {name}: run `make golden` and review the new file"
    assert golden_cases.rendered(golden_cases.cases()[name]) == golden.read_text(), (
        f"rendering of {name} drifted from {golden.name}: run `make golden` and review the diff"
    )


# What the golden cases ask for beyond the default policy: the gb300 example's host path, a PriorityClass.
GOLDEN_POLICY = policy.Policy(weights_host_path_prefixes=("/mnt/nvme/models",), priority_classes=("inference",))


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_golden_servings_pass_validation(name: str) -> None:
    serving, _ = golden_cases.cases()[name]
    assert validation.review_serving(serving, GOLDEN_POLICY).errors == ()  # render's precondition


def test_every_golden_file_has_a_case() -> None:
    assert {p.stem for p in golden_cases.GOLDEN.glob("*.yaml")} == set(golden_cases.cases())


# ---------------------------------------------------------------------------------------------------------------
# The vLLM command lines agree with the README's validated examples


def example(name: str) -> dict[str, Any]:
    return FACTS.raw["examples_validated_by_vllm_parser"][name]  # type: ignore[no-any-return]


# Where nvlfleet's line differs from a validated example, and why (anything else must be equal).
LWS_ADDRESS = {"--data-parallel-address": commandline.LEADER_ADDRESS}  # the example's IP is the leader pod's address
DEFAULTS_SPELLED_OUT = {"--gpu-memory-utilization", "--async-scheduling"}  # 0.92 and "on" are vLLM's defaults


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    keys = set(ours) | set(theirs)
    return {k: (ours.get(k), theirs.get(k)) for k in sorted(keys) if ours.get(k) != theirs.get(k)}


def test_gb200_leader_and_worker_are_examples_a_and_b() -> None:
    (_, lws, _) = rendered({"decode": {sb.CLIQUE_A: 1}}, gpu="GB200", tensor=1, nodes=2)
    leader, worker = group_commands(lws)

    for argv, name in ((leader, "gb200_leader"), (worker, "gb200_worker")):
        diff = differences(options(argv), options(example(name)["args"]))
        graphs = diff.pop("--compilation-config")
        assert graphs[0] == {**graphs[1], "cudagraph_capture_sizes": [32, 64, 96, 128, 160, 192, 224, 256]}
        assert diff.pop("--data-parallel-address")[0] == commandline.LEADER_ADDRESS
        assert set(diff) == DEFAULTS_SPELLED_OUT and all(ours is None for ours, _ in diff.values())
    env = {e["name"]: e.get("value") for e in container(templates(lws)[0])["env"]}
    assert {
        k: v for k, v in example("gb200_leader")["env"].items() if k != "VLLM_DEEP_GEMM_WARMUP"
    }.items() <= env.items()


def test_gb300_dp16_leader_is_example_c_without_the_long_context_indexer() -> None:
    (_, lws, _) = rendered({"decode": {sb.CLIQUE_A: 1}}, gpu="GB300", tensor=1, nodes=4)
    leader = group_commands(lws)[0]

    diff = differences(options(leader), options(example("gb300_throughput_leader")["args"]))
    assert diff.pop("--attention-config") == (None, {"indexer_kv_dtype": "mxfp4", "indexer_sparse_logits": True})
    assert diff.pop("--data-parallel-address")[0] == commandline.LEADER_ADDRESS
    assert set(diff) == {
        "--compilation-config",
        "--reasoning-parser",
        "--tool-call-parser",
        "--enable-auto-tool-choice",
    }
    assert all(theirs is None for _, theirs in diff.values())  # only additions, no disagreement


@pytest.mark.parametrize(("gpu", "name"), [("GB300", "gb300_lowlat_tp4"), ("GB200", "gb200_lowlat_tp4")])
def test_latency_trays_are_examples_d_and_e(gpu: str, name: str) -> None:
    (_, lws, _) = rendered({"decode": {sb.CLIQUE_A: 1}}, gpu=gpu, goal="latency", tensor=4, nodes=1)
    (leader,) = group_commands(lws)

    diff = differences(options(leader), options(example(name)["args"]))
    if gpu == "GB200":  # Example E leaves the graph mode to the O2 default, which is the same mode
        assert diff.pop("--compilation-config") == ({"cudagraph_mode": "FULL_AND_PIECEWISE"}, None)
    assert diff == {}
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 1


# ---------------------------------------------------------------------------------------------------------------
# Data-parallel ranks, leader/worker symmetry, the launcher


@st.composite
def valid_servings(draw: st.DrawFn) -> tuple[models.DeepSeekServing, dict[str, dict[str, int]] | None]:
    gpu = draw(st.sampled_from(list(models.GpuGeneration)))
    gen = hardware.generation(gpu.value)
    tensor = draw(st.sampled_from([t for t in (1, 2, 4, 8) if t <= gen.gpus_per_node]))
    nodes = draw(st.integers(1, min(gen.nodes_per_domain, 6)))
    groups = draw(st.integers(0, 4))
    spec: dict[str, Any] = {
        "gpu": gpu.value,
        "family": draw(st.sampled_from([f.value for f in models.ModelFamily])),
        "goal": draw(st.sampled_from([g.value for g in models.Goal])),
        "tensor": tensor,
        "nodes": nodes,
        "groups": groups,
        "speculative": draw(
            st.sampled_from([{}, {"enabled": False}, {"numSpeculativeTokens": 1}, {"numSpeculativeTokens": 5}])
        ),
        "extraArgs": draw(
            st.sampled_from([[], ["--enable-log-requests"], ["--api-key", "k", "--kv-cache-metrics"], ["-O3"]])
        ),
    }
    if draw(st.booleans()):
        spec["prefill"] = sb.role(groups=draw(st.integers(0, 2)), tensor=tensor, nodes=1)
    serving = sb.serving(**spec)
    if draw(st.booleans()):
        return serving, None
    first = draw(st.integers(0, groups))
    where = [sb.CLIQUE_A, sb.CLIQUE_B] if gen.multi_node_nvlink else ["node-a", "node-b"]
    placement = {"decode": {where[0]: first, where[1]: groups - first}}
    if serving.spec.roles.prefill is not None:
        placement["prefill"] = {where[0]: serving.spec.roles.prefill.groups}
    return serving, placement


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=valid_servings())
def test_rendering_never_raises_and_every_group_runs_each_dp_rank_once(
    case: tuple[models.DeepSeekServing, dict[str, dict[str, int]] | None],
) -> None:
    serving, placement = case
    manifests = render.render(serving, placement)

    for lws in kinds(manifests, "LeaderWorkerSet"):
        role = models.RoleName(lws["metadata"]["labels"][names.ROLE_LABEL])
        topology = models.role_topology(serving.spec.gpu, profiles.role_spec(serving.spec, role))
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == topology.nodes_per_group
        assert sorted(dp_ranks(lws)) == list(range(topology.data))
        assert len(group_commands(lws)) == topology.nodes_per_group
    placed = sum(lws["spec"]["replicas"] for lws in kinds(manifests, "LeaderWorkerSet"))
    wanted = sum(r.groups for _, r in serving.spec.roles_present())
    assert placed == wanted


def test_workers_run_the_leaders_engine_args_except_the_role_specific_ones() -> None:
    (_, lws, _) = rendered(
        {"decode": {sb.CLIQUE_A: 1}}, tensor=1, nodes=3, extraArgs=["--api-key", "k", "--kv-cache-metrics"]
    )
    leader, *workers = group_commands(lws)
    leader_only = DIALECT.frontend_flags
    worker_only = {"--headless", "--data-parallel-start-rank"}

    def engine(argv: list[str], drop: set[str] | frozenset[str]) -> dict[str, Any]:
        return {k: v for k, v in options(argv).items() if k not in drop}

    for worker in workers:
        assert engine(worker, worker_only) == engine(leader, leader_only)
        assert argv_order(worker, worker_only) == argv_order(leader, leader_only)
    assert "--api-key" in options(leader) and "--api-key" not in options(workers[0])  # front end: leader only
    assert "--kv-cache-metrics" in options(workers[0])  # engine flags from extraArgs reach every rank


def test_a_front_end_flag_in_its_underscore_spelling_stays_on_the_leader() -> None:
    (_, lws, _) = rendered({"decode": {sb.CLIQUE_A: 1}}, tensor=1, nodes=3, extraArgs=["--chat_template", "/t.jinja"])
    leader, *workers = group_commands(lws)
    assert "--chat_template" in leader and "--chat_template" not in workers[0]


def test_a_profile_flag_set_again_in_extra_args_is_rendered_once_with_the_override() -> None:
    override = '{"decode_backend":"auto"}'
    (_, lws, _) = rendered(
        {"decode": {sb.CLIQUE_A: 1}},
        gpu="GB300",
        goal="latency",
        tensor=4,
        nodes=1,
        extraArgs=["--additional-config", override, "--reasoning_parser", "deepseek_r1"],
    )
    (leader,) = group_commands(lws)
    spelt = [a.flag.name for a in FACTS.parse_args(leader[3:]).args]
    assert spelt.count("--additional-config") == 1 and spelt.count("--reasoning-parser") == 1
    assert options(leader)["--additional-config"] == {"decode_backend": "auto"}
    assert options(leader)["--reasoning-parser"] == "deepseek_r1"
    assert leader[-4:] == ["--additional-config", override, "--reasoning_parser", "deepseek_r1"]


def argv_order(argv: list[str], drop: set[str] | frozenset[str]) -> list[str]:
    return [a.flag.name for a in FACTS.parse_args(argv[3:]).args if a.flag.name not in drop]


def test_the_launcher_really_execs_vllm_with_the_start_rank(tmp_path: Path) -> None:
    (_, lws, _) = rendered({"decode": {sb.CLIQUE_A: 1}}, tensor=1, nodes=3)
    command = container(templates(lws)[1])["command"]  # type: ignore[index]
    fake_vllm = tmp_path / "vllm"
    fake_vllm.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake_vllm.chmod(0o755)

    result = subprocess.run(
        [sys.executable, *command[1:]],
        env={"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "LWS_WORKER_INDEX": "2"},
        capture_output=True,
        text=True,
        check=True,
    )

    argv = json.loads(result.stdout)
    assert argv[-2:] == ["--data-parallel-start-rank", "8"]  # worker 2 × 4 ranks per tray
    assert argv[:-2] == command[6:]  # everything else exactly as rendered


def test_user_strings_are_never_expanded_by_kubernetes() -> None:
    (_, lws, _) = rendered({"decode": {sb.CLIQUE_A: 1}}, extraArgs=["--root-path", "/$(HF_TOKEN)"])
    leader, worker = templates(lws)

    assert container(leader)["command"][-2:] == ["--root-path", "/$$(HF_TOKEN)"]
    assert "/$$(HF_TOKEN)" in container(worker)["command"]  # type: ignore[index]


# ---------------------------------------------------------------------------------------------------------------
# Objects: shape, names, labels, placement


def test_one_leaderworkerset_and_computedomain_per_domain_and_one_service_per_role() -> None:
    manifests = rendered({"decode": {sb.CLIQUE_B: 1, sb.CLIQUE_A: 2}}, groups=3, monitoring={"podMonitor": True})

    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == [
        ("ComputeDomain", f"dsv41-{render.short_hash(sb.CLIQUE_A)}"),
        ("ComputeDomain", f"dsv41-{render.short_hash(sb.CLIQUE_B)}"),
        ("LeaderWorkerSet", f"dsv41-decode-{render.short_hash(sb.CLIQUE_A)}"),
        ("LeaderWorkerSet", f"dsv41-decode-{render.short_hash(sb.CLIQUE_B)}"),
        ("Service", "dsv41-decode"),
        ("PodMonitor", "dsv41"),
    ]
    assert [lws["spec"]["replicas"] for lws in kinds(manifests, "LeaderWorkerSet")] == [2, 1]


def claimed_templates(lws: dict[str, Any]) -> set[str]:
    """The ComputeDomain channel templates the pods of one LeaderWorkerSet claim (leader and workers)."""
    return {
        claim["resourceClaimTemplateName"]
        for template in filter(None, templates(lws))
        for claim in template["spec"]["resourceClaims"]
    }


def test_prefill_and_decode_groups_in_one_domain_share_its_compute_domain() -> None:
    placement = {"prefill": {sb.CLIQUE_A: 2}, "decode": {sb.CLIQUE_A: 1, sb.CLIQUE_B: 1}}
    manifests = rendered(placement, prefill=sb.role(groups=2, tensor=1, nodes=2))
    domains = {
        cd["metadata"]["annotations"][names.DOMAIN_VALUE_ANNOTATION]: cd for cd in kinds(manifests, "ComputeDomain")
    }
    channel = {d: cd["spec"]["channel"]["resourceClaimTemplate"]["name"] for d, cd in domains.items()}

    assert {d: cd["metadata"]["name"] for d, cd in domains.items()} == {
        sb.CLIQUE_A: f"dsv41-{render.short_hash(sb.CLIQUE_A)}",
        sb.CLIQUE_B: f"dsv41-{render.short_hash(sb.CLIQUE_B)}",
    }
    assert {
        (lws["metadata"]["labels"][names.ROLE_LABEL], lws["metadata"]["annotations"][names.DOMAIN_VALUE_ANNOTATION]): (
            claimed_templates(lws)
        )
        for lws in kinds(manifests, "LeaderWorkerSet")
    } == {
        ("prefill", sb.CLIQUE_A): {channel[sb.CLIQUE_A]},
        ("decode", sb.CLIQUE_A): {channel[sb.CLIQUE_A]},
        ("decode", sb.CLIQUE_B): {channel[sb.CLIQUE_B]},
    }
    assert all(names.ROLE_LABEL not in cd["metadata"]["labels"] for cd in domains.values())


def test_unpinned_roles_share_one_compute_domain() -> None:
    manifests = rendered(None, prefill=sb.role(groups=1, tensor=1, nodes=1))
    (cd,) = kinds(manifests, "ComputeDomain")

    assert cd["metadata"]["name"] == "dsv41-unpinned"
    channel = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert [claimed_templates(lws) for lws in kinds(manifests, "LeaderWorkerSet")] == [{channel}, {channel}]


def test_pods_are_pinned_to_their_clique_and_gpu_product_and_claim_its_channel() -> None:
    cd, lws, _ = rendered({"decode": {sb.CLIQUE_A: 1}}, gpu="GB300")
    leader, worker = templates(lws)

    for template in (leader, worker):
        assert template is not None
        assert template["spec"]["affinity"] == {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu.clique", "operator": "In", "values": [sb.CLIQUE_A]},
                                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-GB300"]},
                            ]
                        }
                    ]
                }
            }
        }
        template_name = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
        assert template["spec"]["resourceClaims"] == [
            {"name": "compute-domain-channel", "resourceClaimTemplateName": template_name}
        ]
        assert container(template)["resources"] == {
            "limits": {"nvidia.com/gpu": "4"},
            "claims": [{"name": "compute-domain-channel"}],
        }
    assert cd["spec"]["numNodes"] == 0


def test_unpinned_groups_require_a_domain_and_stay_inside_one() -> None:
    _, lws, _ = rendered(None, placement={"domainLabel": "example.com/rack"})
    leader, _ = templates(lws)

    affinity = leader["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0] == {"key": "example.com/rack", "operator": "Exists"}
    assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "labelSelector": {"matchLabels": {"nvlfleet.io/serving": "dsv41", "nvlfleet.io/role": "decode"}},
            "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
            "topologyKey": "example.com/rack",
        }
    ]
    assert lws["metadata"]["name"] == "dsv41-decode-unpinned"


def test_single_node_gpus_are_pinned_by_hostname_without_a_compute_domain() -> None:
    manifests = rendered({"decode": {"h200-07": 1}}, gpu="H200", family="deepseek-v3", nodes=1)

    assert [m["kind"] for m in manifests] == ["LeaderWorkerSet", "Service"]
    leader, worker = templates(manifests[0])
    terms = leader["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": "kubernetes.io/hostname",
        "operator": "In",
        "values": ["h200-07"],
    }
    assert worker is None and "resourceClaims" not in leader["spec"]
    assert container(leader)["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_the_users_requests_and_limits_sit_beside_the_gpus_as_written() -> None:
    pod = {"resources": {"requests": {"cpu": 64, "memory": "512Gi"}, "limits": {"memory": "600Gi"}}}
    manifests = rendered({"decode": {"h200-07": 1}}, gpu="H200", family="deepseek-v3", nodes=1, pod=pod)

    leader, _ = templates(manifests[0])
    assert container(leader)["resources"] == {
        "limits": {"nvidia.com/gpu": "8", "memory": "600Gi"},
        "requests": {"cpu": 64, "memory": "512Gi"},
    }


def test_service_selects_the_leaders_of_one_role() -> None:
    *_, svc = rendered({"decode": {sb.CLIQUE_A: 1}})

    assert svc["spec"]["selector"] == {
        "nvlfleet.io/serving": "dsv41",
        "nvlfleet.io/role": "decode",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_probes_run_on_the_leader_only() -> None:
    _, lws, _ = rendered({"decode": {sb.CLIQUE_A: 1}})
    leader, worker = templates(lws)

    assert container(leader)["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container(leader)["startupProbe"]["failureThreshold"] * 10 >= 3600
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(container(worker))  # type: ignore[arg-type]


def pod_templates(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod template of every LeaderWorkerSet: leaders and workers."""
    return [t for lws in kinds(manifests, "LeaderWorkerSet") for t in templates(lws) if t is not None]


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_every_vllm_container_drops_all_capabilities_and_cannot_escalate(name: str) -> None:
    serving, placement = golden_cases.cases()[name]
    pods = pod_templates(render.render(serving, placement))

    assert pods
    for pod in pods:
        assert container(pod)["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},  # the facts give no GPU generation a capability to add
            "privileged": False,
        }
        assert pod["spec"]["securityContext"] == {
            "fsGroup": render.CACHE_GROUP,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }


def test_a_capability_the_facts_require_is_added_back_and_nothing_else() -> None:
    gb200 = hardware.generation("GB200")
    needs_lock = dataclasses.replace(gb200, capabilities=("IPC_LOCK",))
    with mock.patch.object(hardware, "generation", lambda name: needs_lock if name == "GB200" else gb200):
        pods = pod_templates(rendered({"decode": {sb.CLIQUE_A: 1}}))

    assert [container(p)["securityContext"]["capabilities"] for p in pods] == [
        {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    ] * 2  # leader and worker


def test_hf_token_comes_from_the_secret_and_hf_home_from_the_cache() -> None:
    _, lws, _ = rendered(
        {"decode": {sb.CLIQUE_A: 1}},
        model={
            "hfTokenSecretRef": {"name": "hf", "key": "tok"},
            "weights": {"cache": "hostPath", "hostPath": {"path": "/nvme/hf"}, "mountPath": "/cache"},
        },
    )
    leader, _ = templates(lws)
    env = {e["name"]: e for e in container(leader)["env"]}

    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tok"}}}
    assert env["HF_HOME"] == {"name": "HF_HOME", "value": "/cache"}
    assert {"name": "model-cache", "hostPath": {"path": "/nvme/hf", "type": "DirectoryOrCreate"}} in leader["spec"][
        "volumes"
    ]
    assert {"name": "model-cache", "mountPath": "/cache"} in container(leader)["volumeMounts"]


def test_extra_env_replaces_nvlfleets_value_in_place() -> None:
    _, lws, _ = rendered(
        {"decode": {sb.CLIQUE_A: 1}}, extraEnv=[{"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": "7200"}]
    )
    env = container(templates(lws)[0])["env"]

    assert [e for e in env if e["name"] == "VLLM_ENGINE_READY_TIMEOUT_S"] == [
        {"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": "7200"}
    ]


def test_names_fit_the_leaderworkerset_budget_and_stay_distinct() -> None:
    long_a, long_b = "a" * 50 + "-serving-one", "a" * 50 + "-serving-two"
    names = {render.lws_name(n, role, sb.CLIQUE_A) for n in (long_a, long_b) for role in models.RoleName} | {
        render.service_name(n, role) for n in (long_a, long_b) for role in models.RoleName
    }
    domains = {render.compute_domain_name(n, d) for n in (long_a, long_b) for d in (sb.CLIQUE_A, sb.CLIQUE_B)}

    assert (len(names), len(domains)) == (8, 4)
    assert all(len(render.lws_name(n, models.RoleName.PREFILL, sb.CLIQUE_A)) <= 48 for n in (long_a, long_b))
    assert all(len(n) <= 48 for n in domains)
    assert all(len(n) <= 63 for n in names)


def test_a_name_chosen_to_look_like_a_cut_one_takes_no_other_servings_children() -> None:
    victim = "v" * 63
    cut = render.lws_name(victim, models.RoleName.DECODE, sb.CLIQUE_A)
    # Before, a cut name was <first characters>-<6 hex digits>-<suffix>: a 32-character serving named like the
    # victim's cut prefix got the victim's LeaderWorkerSet names, and a 56-character one its Service names.
    for mimic in {cut.rsplit("-decode-", 1)[0], cut[: cut.rindex("-")], "v" * 14 + "-" + cut[-16:]}:
        assert render.lws_name(mimic, models.RoleName.DECODE, sb.CLIQUE_A) != cut
    assert render.service_name("v" * 49 + "-" + render.short_hash(victim, 6), models.RoleName.DECODE) != (
        render.service_name(victim, models.RoleName.DECODE)
    )


def test_rendering_is_deterministic() -> None:
    serving = sb.serving(groups=2, prefill=sb.role(groups=1, tensor=1, nodes=1))
    placement = {"decode": {sb.CLIQUE_B: 1, sb.CLIQUE_A: 1}, "prefill": {sb.CLIQUE_A: 1}}

    assert golden_cases.dump(render.render(serving, placement)) == golden_cases.dump(render.render(serving, placement))


# ---------------------------------------------------------------------------------------------------------------
# Everything rendered is something vLLM and Kubernetes accept


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_every_flag_and_env_var_exists_in_the_pinned_vllm(name: str) -> None:
    manifests = render.render(*golden_cases.cases()[name])
    for lws in kinds(manifests, "LeaderWorkerSet"):
        for argv in group_commands(lws):
            options(argv)  # parses with no unknown flag, no bad choice, no bad JSON
        for template in filter(None, templates(lws)):
            for env in container(template)["env"]:
                assert FACTS.env_allowed(env["name"]), env["name"]


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_objects_validate_against_the_kubernetes_schemas(name: str) -> None:
    manifests = render.render(*golden_cases.cases()[name])
    crd = yaml.safe_load(COMPUTE_DOMAIN_CRD.read_text())
    compute_domain_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for manifest in manifests:
        if manifest["kind"] == "LeaderWorkerSet":
            for template in filter(None, templates(manifest)):
                kubernetes_validate.validate(as_pod(template), K8S_VERSION, strict=True)
        elif manifest["kind"] == "ComputeDomain":
            jsonschema.validate(manifest, compute_domain_schema)
        elif manifest["kind"] == "Service":
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


# ---------------------------------------------------------------------------------------------------------------
# What render cannot honour is a problem with a field path


def test_bad_input_is_reported_with_field_paths() -> None:
    serving = sb.serving(
        pod={
            "volumes": [{"name": "dshm", "emptyDir": {}}],
            "volumeMounts": [{"name": "x", "mountPath": "/models"}],
            "resources": {"limits": {"nvidia.com/gpu": "2"}},
            "labels": {"nvlfleet.io/role": "mine"},
        }
    )

    with pytest.raises(problems.InvalidSpec) as err:
        render.render(serving, {"decode": {"not a label value!": 1}, "prefill": {sb.CLIQUE_A: 1}})

    assert sorted(p.path for p in err.value.problems) == [
        "placement.decode",
        "placement.prefill",
        'spec.pod.labels["nvlfleet.io/role"]',
        'spec.pod.resources.limits["nvidia.com/gpu"]',
        "spec.pod.volumeMounts[0].mountPath",
        "spec.pod.volumes[0].name",
    ]


def test_a_name_that_cannot_name_a_service_is_a_problem() -> None:
    with pytest.raises(problems.InvalidSpec) as err:
        render.render(sb.serving(name="9-lives"))

    assert [p.path for p in err.value.problems] == ["metadata.name"]


# ---------------------------------------------------------------------------------------------------------------
# nvlfleet render


EXAMPLE = ROOT / "examples/gb200-wide-ep-throughput.yaml"
NODES = fb.DATA / "nodes-gb200-4racks.yaml"


def test_render_command_prints_unpinned_manifests_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "-f", str(EXAMPLE)]) == 0

    out, err = capsys.readouterr()
    serving = models.DeepSeekServing.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    assert list(yaml.safe_load_all(out)) == render.render(serving)
    assert "unpinned" in err and "nvidia.com/gpu.clique Exists" in err


def test_render_command_places_groups_on_the_given_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "-f", str(EXAMPLE), "--nodes", str(NODES), "-o", "json"]) == 0

    out, err = capsys.readouterr()
    manifests = json.loads(out)
    serving = models.DeepSeekServing.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    node_list = yaml.safe_load(NODES.read_text())["items"]
    plan = planner.plan(kubeobjects.from_objects(node_list), demands.of(serving))
    assert manifests == render.render(serving, plan.placement(inventory.ServingKey("inference", serving.metadata.name)))
    assert all(m["metadata"]["labels"]["nvlfleet.io/domain"] != "unpinned" for m in kinds(manifests, "LeaderWorkerSet"))
    assert err == ""


def test_render_command_reports_invalid_specs_with_field_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = sb.serving_dict(tensor=3)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))

    assert cli.main(["render", "-f", str(path)]) == 1

    out, err = capsys.readouterr()
    assert out == ""
    assert f"{path}: spec.roles.decode.parallelism.tensor: " in err and "Traceback" not in err


def test_render_command_says_which_groups_do_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(sb.serving_dict(tensor=1, nodes=4, groups=40)))

    assert cli.main(["render", "-f", str(path), "--nodes", str(NODES)]) == 2

    out, err = capsys.readouterr()
    placed = sum(lws["spec"]["replicas"] for lws in kinds(list(yaml.safe_load_all(out)), "LeaderWorkerSet"))
    assert 0 < placed < 40
    assert "group(s) not placed" in err
