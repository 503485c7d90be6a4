"""Tuning profiles: what each (family, GPU, goal, topology) runs with, why, and that the spec always wins."""

from __future__ import annotations

import itertools
import json
from importlib import resources
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvlfleet.api import models, problems
from nvlfleet.core import profile_data, profiles, render, settings, validation
from nvlfleet.facts import facts, hardware
from support import servingbuilder as sb

DECODE = models.RoleName.DECODE
PREFILL = models.RoleName.PREFILL
FACTS = facts.load("0.33.0")
ALL2ALL = models.KernelSpec.model_fields["all2all_backend"].alias  # the wire name of spec.kernels.all2allBackend


def tuning(role: models.RoleName = DECODE, **kwargs: Any) -> profiles.Tuning:
    return profiles.effective(sb.serving(**kwargs).spec, role)


# ---------------------------------------------------------------------------------------------------------------
# The profile choices, against the README's recommendations


def test_gb200_wide_ep_throughput_is_recommendation_a() -> None:
    t = tuning(gpu="GB200", tensor=1, nodes=2)

    assert (t.topology.data, t.topology.data_local, t.ep_size) == (8, 4, 8)
    assert t.expert_parallel
    assert t.all2all_backend == "flashinfer_nvlink_one_sided"
    assert t.eplb == profiles.Eplb(
        enabled=True, num_redundant_experts=32, window_size=1000, step_interval=3000, use_async=True
    )
    assert t.speculative == profiles.Speculative(method="dspark", num_speculative_tokens=3)
    assert (t.attention_backend, t.moe_backend, t.kv_cache_dtype) == (None, None, None)
    assert not t.dbo.enabled
    assert (t.max_model_len, t.max_num_seqs, t.max_num_batched_tokens) == (131072, 64, 8192)
    assert t.api_server_count == 4
    assert dict(t.env) == {
        "NCCL_CUMEM_ENABLE": "1",
        "NCCL_MNNVL_ENABLE": "1",
        "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
        "VLLM_USE_V2_MODEL_RUNNER": "1",
    }


def test_gb300_takes_twice_the_requests_per_rank() -> None:
    assert tuning(gpu="GB300").max_num_seqs == 2 * tuning(gpu="GB200").max_num_seqs


def test_gb300_latency_tray_uses_the_sm103_specialized_decode() -> None:
    t = tuning(gpu="GB300", goal="latency", tensor=4, nodes=1)

    assert not t.expert_parallel
    assert t.attention_backend == "FLASHINFER_MLA_SPARSE_DSV41"
    assert t.kv_cache_dtype == "fp8"
    assert t.attention_config == {"indexer_kv_dtype": "mxfp4", "indexer_sparse_logits": True}
    assert t.additional_config == {"decode_backend": "latency_specialized"}
    assert (t.performance_mode, t.max_num_seqs, t.cuda_graph.capture_sizes) == ("interactivity", 8, None)
    assert dict(t.env)["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"


def test_gb200_latency_tray_leaves_kernels_to_vllm() -> None:
    t = tuning(gpu="GB200", goal="latency", tensor=4, nodes=1)

    assert not t.expert_parallel and not t.eplb.enabled and t.all2all_backend is None
    assert (t.attention_backend, t.kv_cache_dtype, t.additional_config) == (None, None, {})
    assert "NCCL_MNNVL_ENABLE" not in dict(t.env)


def test_every_setting_has_a_reason_citing_its_source() -> None:
    t = tuning()
    for key in settings.PROFILE_KEYS | {f"env.{name}" for name, _ in t.env}:
        reason = t.reasons[key]
        assert reason.why.strip() and reason.source, key
    assert "README" in t.reasons["all2all_backend"].why


def test_prefill_engines_speculate_as_decode_does_and_take_bigger_chunks() -> None:
    # NIXL hashes the speculative config into the handshake (disaggregation.md §5): both sides must run it.
    prefill = tuning(PREFILL, prefill=sb.role(tensor=1, nodes=1))
    decode = tuning(prefill=sb.role(tensor=1, nodes=1))

    assert prefill.speculative == decode.speculative is not None
    t = prefill
    assert t.cuda_graph.capture_sizes is None
    assert t.max_num_batched_tokens == 16384


def test_v3_and_v4_speculate_with_mtp() -> None:
    assert tuning(family="deepseek-v3").speculative == profiles.Speculative("mtp", 3)
    assert tuning(family="deepseek-v4").speculative == profiles.Speculative("mtp", 3)


def test_without_a_known_expert_count_eplb_stays_off() -> None:
    t = tuning(family="deepseek-v4")  # the facts give no routed-expert count for V4.0

    assert t.routed_experts is None
    assert not t.eplb.enabled
    assert "no routed-expert count" in t.reasons["eplb.enabled"].why


def test_single_node_gpus_have_no_fabric_all2all_or_nccl_mnnvl() -> None:
    t = tuning(gpu="H200", family="deepseek-v3", tensor=1, nodes=1)

    assert (t.topology.data, t.fabric, t.all2all_backend) == (8, False, None)
    assert not any(name.startswith("NCCL_") for name, _ in t.env)
    assert t.eplb.num_redundant_experts == profiles.redundant_experts(256, 8, 32)


def test_no_compute_domain_means_no_mnnvl() -> None:
    t = tuning(placement={"computeDomain": False})

    assert not t.fabric
    assert t.all2all_backend is None
    assert "NCCL_MNNVL_ENABLE" not in dict(t.env)


# The env var README §3 pairs each DeepEP backend with on an NVL72 fabric (facts.json expert_parallel.mnnvl_backends).
MNNVL_BACKENDS = json.loads(resources.files("nvlfleet.facts").joinpath("data/vllm/0.33.0/facts.json").read_text())[
    "expert_parallel"
]["mnnvl_backends"]
DEEPEP_COMPANIONS = {
    "deepep_high_throughput": "VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE",
    "deepep_low_latency": "VLLM_DEEPEP_LOW_LATENCY_USE_MNNVL",
}


@pytest.mark.parametrize(("backend", "companion"), DEEPEP_COMPANIONS.items())
def test_a_chosen_deepep_backend_brings_its_fabric_env_on_a_multi_node_nvl72_group(
    backend: str, companion: str
) -> None:
    t = tuning(family="deepseek-v4", gpu="GB200", tensor=1, nodes=2, kernels={ALL2ALL: backend})

    assert companion in FACTS.env_vars
    assert companion in MNNVL_BACKENDS[backend]
    assert (t.all2all_backend, dict(t.env).get(companion)) == (backend, "1")
    assert "README §3" in t.reasons[f"env.{companion}"].why


@pytest.mark.parametrize(("backend", "companion"), DEEPEP_COMPANIONS.items())
def test_a_deepep_backend_within_one_tray_or_without_the_fabric_gets_no_fabric_env(
    backend: str, companion: str
) -> None:
    one_tray = tuning(family="deepseek-v4", gpu="GB200", tensor=1, nodes=1, kernels={ALL2ALL: backend})
    no_fabric = tuning(family="deepseek-v4", nodes=2, kernels={ALL2ALL: backend}, placement={"computeDomain": False})

    assert companion not in dict(one_tray.env)
    assert companion not in dict(no_fabric.env)


def test_a_deepep_companion_the_user_sets_in_extra_env_is_theirs() -> None:
    chosen = sb.serving_dict(
        family="deepseek-v4",
        kernels={ALL2ALL: "deepep_high_throughput"},
        extraEnv=[{"name": "VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE", "value": "0"}],
    )
    (lws,) = [m for m in render.render(models.DeepSeekServing.model_validate(chosen)) if m["kind"] == "LeaderWorkerSet"]
    env = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"]

    assert [e["value"] for e in env if e["name"] == "VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE"] == ["0"]
    assert validation.validate(chosen) == []


def test_startup_probe_outlasts_the_engine_ready_timeout() -> None:
    t = tuning()
    assert t.engine_ready_timeout_seconds is not None
    assert t.probes.startup_budget_seconds >= t.engine_ready_timeout_seconds + 300


# ---------------------------------------------------------------------------------------------------------------
# The spec wins; consequences only touch what the user left open


def test_spec_kernels_override_the_profile_and_say_where_from() -> None:
    t = tuning(kernels={ALL2ALL: "deepep_high_throughput", "kvCacheDtype": "fp8"})

    assert (t.all2all_backend, t.kv_cache_dtype) == ("deepep_high_throughput", "fp8")
    assert t.reasons["all2all_backend"] == profile_data.Reason("chosen in the spec", f"spec.kernels.{ALL2ALL}")
    assert t.user_set >= {"all2all_backend", "kv_cache_dtype"}


def test_fused_moe_ep_backend_drops_the_all2all_and_eplb_it_cannot_use() -> None:
    t = tuning(kernels={"moeBackend": "flashinfer_moe_ep_mega_deep_gemm"})

    assert t.moe_backend == "flashinfer_moe_ep_mega_deep_gemm"
    assert t.all2all_backend is None
    assert not t.eplb.enabled


def test_consequences_never_undo_an_explicit_choice() -> None:
    t = tuning(kernels={"moeBackend": "flashinfer_moe_ep_mega_deep_gemm", ALL2ALL: "deepep_high_throughput"})

    assert t.all2all_backend == "deepep_high_throughput"  # nvlfleet.core.validation reports the conflict


def test_explicit_expert_parallelism_on_a_latency_tray_turns_off_specialized_decode() -> None:
    t = tuning(gpu="GB300", goal="latency", tensor=4, nodes=1, roles={"decode": {"parallelism": {"expert": True}}})

    assert t.expert_parallel and t.ep_size == 4
    assert t.additional_config == {}


def test_disabling_speculation_removes_the_specialized_decode_it_needs() -> None:
    t = tuning(gpu="GB300", goal="latency", tensor=4, nodes=1, speculative={"enabled": False})

    assert t.speculative is None
    assert t.additional_config == {}


def test_explicit_redundant_experts_are_taken_as_given() -> None:
    assert tuning(kernels={"eplb": {"numRedundantExperts": 16}}).eplb.num_redundant_experts == 16


def test_role_batch_limits_override_the_goal() -> None:
    t = tuning(roles={"decode": {"maxNumSeqs": 200, "maxNumBatchedTokens": 4096}})

    assert (t.max_num_seqs, t.max_num_batched_tokens) == (200, 4096)


def test_unknown_vllm_version_is_a_problem_at_its_field() -> None:
    with pytest.raises(problems.InvalidSpec) as err:
        tuning(runtime={"vllmVersion": "0.31.0"})

    assert [p.path for p in err.value.problems] == ["spec.runtime.vllmVersion"]


# ---------------------------------------------------------------------------------------------------------------
# Arithmetic


@given(experts=st.sampled_from([256, 384]), ep=st.integers(min_value=1, max_value=72), minimum=st.integers(0, 64))
def test_redundant_experts_are_the_smallest_that_divide(experts: int, ep: int, minimum: int) -> None:
    r = profiles.redundant_experts(experts, ep, minimum)

    assert (experts + r) % ep == 0
    assert minimum <= r < minimum + ep


@given(
    low=st.integers(1, 600),
    span=st.integers(0, 600),
    seqs=st.one_of(st.none(), st.integers(1, 1024)),
    spec_tokens=st.integers(0, 5),
)
def test_capture_sizes_cover_the_window_in_whole_decode_steps(
    low: int, span: int, seqs: int | None, spec_tokens: int
) -> None:
    graph = models.CudaGraphSpec(min_batch=low, max_batch=low + span)
    rows = 1 + spec_tokens
    sizes = profiles.capture_window(graph, seqs, None, spec_tokens)

    top = graph.max_batch if seqs is None else min(graph.max_batch, seqs)
    bottom = min(graph.min_batch, top)
    assert all(size % rows == 0 for size in sizes)
    assert sizes[-1] == top * rows and sizes[0] == bottom * rows
    for n in range(bottom, top + 1):  # every request count replays a graph at most one grid step larger
        padded = min(size for size in sizes if size >= n * rows) // rows
        assert padded - n < (8 if n <= 256 else 16)


def test_default_window_with_three_speculative_tokens() -> None:
    sizes = profiles.capture_window(models.CudaGraphSpec(), max_num_seqs=64, max_num_batched_tokens=8192, spec_tokens=3)

    assert sizes == tuple(n * 4 for n in range(8, 65, 8))


# ---------------------------------------------------------------------------------------------------------------
# Everything a profile can emit exists in the pinned vLLM facts


def test_every_dialect_flag_exists_in_the_facts() -> None:
    for dialect in profile_data.dialects():
        for flag in [*dialect.flags.values(), *dialect.frontend_flags]:
            assert FACTS.flag(flag).name == flag


def test_json_keys_are_fields_vllm_knows() -> None:
    (dialect,) = profile_data.dialects()
    for config, keys in dialect.config_keys.items():
        json_flag = FACTS.json_flags[dialect.flag(f"{config}_config")]
        for key in keys.values():
            assert json_flag.key_problem(key, FACTS.version) is None, (config, key)


def test_json_objects_the_profiles_set_hold_only_keys_vllm_knows() -> None:
    (dialect,) = profile_data.dialects()
    for family in models.ModelFamily:
        profile = profile_data.family_profile(dialect.name, family)
        for rule in (*profile.rules, *profile.consequences):
            for setting in ("attention_config", "additional_config"):
                value, _ = rule.settings.get(setting, ({}, None))
                json_flag = FACTS.json_flags[dialect.flag(setting)]
                for key in value if isinstance(value, dict) else ():
                    assert json_flag.key_problem(key, FACTS.version) is None, (family, rule.name, key)


# (tensor, nodes per group); groups spanning nodes only where NVLink spans nodes (validation refuses the rest)
COMBINATIONS = [
    (family, gpu, goal, (tensor, nodes))
    for family, gpu, goal, (tensor, nodes) in itertools.product(
        models.ModelFamily, models.GpuGeneration, models.Goal, [(4, 1), (1, 1), (2, 3), (1, 2), (1, 4)]
    )
    if nodes <= hardware.generation(gpu.value).nodes_per_domain
]


@pytest.mark.parametrize(("family", "gpu", "goal", "shape"), COMBINATIONS, ids=str)
@pytest.mark.parametrize("compute_domain", [True, False], ids=["computeDomain", "noComputeDomain"])
def test_profile_defaults_pass_validation_everywhere(
    family: models.ModelFamily,
    gpu: models.GpuGeneration,
    goal: models.Goal,
    shape: tuple[int, int],
    compute_domain: bool,
) -> None:
    tensor, nodes = shape
    serving = sb.serving(
        family=family.value,
        gpu=gpu.value,
        goal=goal.value,
        tensor=tensor,
        nodes=nodes,
        prefill=sb.role(tensor=tensor, nodes=nodes),
        placement={"computeDomain": compute_domain},
    )

    review = validation.review_serving(serving)

    assert (review.errors, review.warnings) == ((), ())


@pytest.mark.parametrize(("family", "gpu", "goal", "shape"), COMBINATIONS, ids=str)
def test_every_profile_combination_emits_only_known_settings(
    family: models.ModelFamily, gpu: models.GpuGeneration, goal: models.Goal, shape: tuple[int, int]
) -> None:
    tensor, nodes = shape
    t = tuning(family=family.value, gpu=gpu.value, goal=goal.value, tensor=tensor, nodes=nodes)

    for name, _ in t.env:
        assert FACTS.env_allowed(name), name
    assert t.all2all_backend is None or t.all2all_backend in FACTS.all2all_backends
    assert t.moe_backend is None or t.moe_backend in FACTS.moe_backends
    assert t.kv_cache_dtype is None or t.kv_cache_dtype in FACTS.kv_cache_dtypes
    assert t.cuda_graph.mode is None or t.cuda_graph.mode in FACTS.cudagraph_modes
    assert t.speculative is None or t.speculative.method in FACTS.family(family.value).speculative_methods
    if t.eplb.enabled and t.routed_experts is not None:
        assert (t.routed_experts + t.eplb.num_redundant_experts) % t.ep_size == 0


def test_explain_shows_an_extra_args_override_with_its_source() -> None:
    serving = sb.serving(
        gpu="GB300",
        goal="latency",
        tensor=4,
        nodes=1,
        extraArgs=["--enforce-eager", "--attention-config", '{"indexer_kv_dtype":"fp8"}', "--reasoning-parser", "x"],
    )
    lines = profiles.explain(profiles.effective(serving.spec, models.RoleName.DECODE))
    assert (
        "attention_config = {'indexer_kv_dtype': 'fp8'}  # overridden in extraArgs (vLLM keeps the last value) "
        "[spec.extraArgs[1]]" in lines
    )
    assert "reasoning_parser = 'x'  # overridden in extraArgs (vLLM keeps the last value) [spec.extraArgs[3]]" in lines
