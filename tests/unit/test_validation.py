"""Validation: every way a DeepSeekServing can be wrong yields the field path and a sentence, never a traceback."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvlfleet.api import models, problems
from nvlfleet.core import validation
from nvlfleet.core.validation import escapes
from support import servingbuilder as sb

HF_TOKEN = "hf_" + "a1B2c3D4e5" * 4  # shaped like a real token; not one
DELETE = object()


def serving(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A valid GB200 DeepSeek-V4.1-Flash serving (one decode group of 2 trays), with ``changes`` merged in."""
    base: dict[str, Any] = {
        "apiVersion": "nvlfleet.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": "flash", "namespace": "inference"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": {"decode": {"groups": 1, "parallelism": {"tensor": 1, "data": 8}}},
        },
    }
    return _merge(base, changes or {})


def spec(**changes: Any) -> dict[str, Any]:
    return serving({"spec": changes})


def _merge(base: Any, changes: Any) -> Any:
    if not isinstance(base, dict) or not isinstance(changes, dict):
        return copy.deepcopy(changes)
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is DELETE:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def decode(**changes: Any) -> dict[str, Any]:
    return {"roles": {"decode": changes}}


def latency_gb300(**changes: Any) -> dict[str, Any]:
    """The GB300 single-tray latency layout, on which the profile turns on latency_specialized decode."""
    return _merge(
        {
            "gpu": "GB300",
            "goal": "latency",
            "roles": {"decode": {"parallelism": {"tensor": 4, "data": 1, "expert": False}, "maxNumSeqs": 8}},
        },
        changes,
    )


def errors(obj: object) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validation.validate(obj)]


def warnings(obj: object) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validation.review(obj).warnings]


def assert_reported(found: list[tuple[str, str]], path: str, fragment: str) -> None:
    at_path = [message for p, message in found if p == path]
    assert any(fragment in message for message in at_path), (
        f"expected a problem at {path} containing {fragment!r}; got {found}"
    )


# --- valid objects -----------------------------------------------------------------------------------------------


def test_the_base_serving_is_valid_without_warnings() -> None:
    review = validation.review(serving())
    assert (review.errors, review.warnings) == ((), ())
    assert review.serving is not None and review.serving.metadata.name == "flash"


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(latency_gb300(), id="gb300 latency-specialized from the profile"),
        pytest.param({"extraArgs": ["--chat-template", "/t.jinja; rm -rf / $(id) `x` | y"]}, id="shell chars"),
        pytest.param({"extraArgs": ["--performance-mode=throughput", "-O3"]}, id="profile-only flags"),
        pytest.param(
            {"extraArgs": ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}']},
            id="kv-transfer keys vLLM has",
        ),
        pytest.param({"extraArgs": ["--additional-config", '{"my_plugin_knob":1}']}, id="additional config free-form"),
        pytest.param({"extraEnv": [{"name": "NCCL_NVLS_ENABLE", "value": "1"}]}, id="library env prefix"),
        pytest.param(
            {"extraEnv": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]},
            id="token by reference",
        ),
        pytest.param({"extraEnv": [{"name": "VLLM_MAX_BAD_WORDS_TOTAL_TOKENS", "value": "100"}]}, id="TOKENS word"),
        pytest.param({"speculative": {"enabled": False, "method": "mtp"}}, id="method ignored when disabled"),
        pytest.param({"gpu": "H200", "roles": {"decode": {"parallelism": {"tensor": 8, "data": 1}}}}, id="h200 tp8"),
        pytest.param(
            {"kernels": {"eplb": {"enabled": True, "numRedundantExperts": 16}}}, id="(384 + 16) divides by EP8"
        ),
        pytest.param({"roles": {"decode": {"parallelism": {"data": DELETE, "nodesPerGroup": 18}}}}, id="whole rack"),
        pytest.param(
            {"pod": {"resources": {"requests": {"cpu": 64, "memory": "512Gi"}, "limits": {"cpu": "120500m"}}}},
            id="quantities as integers and strings",
        ),
    ],
)
def test_valid_servings(changes: dict[str, Any]) -> None:
    assert errors(spec(**changes)) == []


# --- invalid objects: (changes to the base spec, path, fragment of the message) -----------------------------------

INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    # shape and types, as pydantic reports them
    (
        "tensor as string",
        decode(parallelism={"tensor": "4"}),
        "spec.roles.decode.parallelism.tensor",
        "must be a whole number, got '4'",
    ),
    ("tensor zero", decode(parallelism={"tensor": 0}), "spec.roles.decode.parallelism.tensor", "must be at least 1"),
    (
        "data fraction",
        decode(parallelism={"data": 1.5}),
        "spec.roles.decode.parallelism.data",
        "must be a whole number, got 1.5",
    ),
    ("unknown gpu", {"gpu": "GB100"}, "spec.gpu", "must be one of 'GB200', 'GB300', 'B200' or 'H200', got 'GB100'"),
    (
        "misspelt field",
        {"kernels": {"all2AllBackend": "pplx"}},
        "spec.kernels.all2AllBackend",
        "unknown field; did you mean all2allBackend?",
    ),
    ("unknown spec field", {"replicas": 3}, "spec.replicas", "unknown field"),
    (
        "inline token field",
        {"model": {"hfToken": HF_TOKEN}},
        "spec.model.hfToken",
        "unknown field; did you mean hfTokenSecretRef?",
    ),
    ("missing image", {"runtime": {"image": DELETE}}, "spec.runtime.image", "is required"),
    ("missing decode", {"roles": {"decode": DELETE}}, "spec.roles.decode", "is required"),
    (
        "unquoted time",
        {
            "pricing": {
                "inputCacheHitPerMillion": 1,
                "inputCacheMissPerMillion": 1,
                "outputPerMillion": 1,
                "schedule": [{"name": "p", "start": 60, "end": "04:00", "multiplier": 2}],
            }
        },
        "spec.pricing.schedule[0].start",
        "YAML reads an unquoted 01:00 as the number 60",
    ),
    (
        "bad time",
        {
            "pricing": {
                "inputCacheHitPerMillion": 1,
                "inputCacheMissPerMillion": 1,
                "outputPerMillion": 1,
                "schedule": [{"name": "p", "start": "01:00", "end": "24:00", "multiplier": 2}],
            }
        },
        "spec.pricing.schedule[0].end",
        "'24:00' is not a UTC time of day HH:MM",
    ),
    (
        "zero multiplier",
        {
            "pricing": {
                "inputCacheHitPerMillion": 1,
                "inputCacheMissPerMillion": 1,
                "outputPerMillion": 1,
                "schedule": [{"name": "p", "start": "01:00", "end": "02:00", "multiplier": 0}],
            }
        },
        "spec.pricing.schedule[0].multiplier",
        "must be greater than 0",
    ),
    (
        "price as text",
        {"pricing": {"inputCacheHitPerMillion": "cheap", "inputCacheMissPerMillion": 1, "outputPerMillion": 1}},
        "spec.pricing.inputCacheHitPerMillion",
        "must be a number, got 'cheap'",
    ),
    (
        "env name",
        {"extraEnv": [{"name": "1A", "value": "x"}]},
        "spec.extraEnv[0].name",
        "is not an environment variable name",
    ),
    (
        "pull secret name",
        {"runtime": {"imagePullSecrets": ["Bad_Name"]}},
        "spec.runtime.imagePullSecrets[0]",
        "is not a DNS-1123 label",
    ),
    ("shm size", {"pod": {"shmSize": "lots"}}, "spec.pod.shmSize", "is not a Kubernetes quantity"),
    ("roles as list", {"roles": ["decode"]}, "spec.roles", "must be a mapping, got a list"),
    ("too many args", {"extraArgs": ["--enforce-eager"] * 129}, "spec.extraArgs", "must have at most 128 items"),
    # topology: whole nodes, one NVLink domain
    (
        "tensor over a node",
        decode(parallelism={"tensor": 8}),
        "spec.roles.decode.parallelism.tensor",
        "decode: tensor-parallel size 8 is larger than the 4 GPUs of one GB200 node; use data parallelism across nodes",
    ),
    (
        "tensor not dividing",
        decode(parallelism={"tensor": 3}),
        "spec.roles.decode.parallelism.tensor",
        "does not divide the 4 GPUs of a GB200 node, so 1 GPU(s) of every node would sit idle; use tensor 1, 2 or 4",
    ),
    (
        "partial node",
        decode(parallelism={"data": 6}),
        "spec.roles.decode.parallelism.data",
        "tensor × data = 1 × 6 = 6 GPUs does not fill whole 4-GPU GB200 nodes (each node runs one vLLM pod on all its "
        "GPUs); use data: 4 or 8",
    ),
    (
        "data against nodes",
        decode(parallelism={"data": 6, "nodesPerGroup": 2}),
        "spec.roles.decode.parallelism.data",
        "data-parallel size 6 does not match nodesPerGroup 2: 2 GB200 nodes hold 8 GPUs, i.e. data 8 at tensor 1",
    ),
    (
        "group over a rack",
        decode(parallelism={"data": 80}),
        "spec.roles.decode.parallelism.data",
        "decode: a group of 20 nodes (80 GPUs) does not fit in one GB200 NVLink domain of 18 nodes (72 GPUs)",
    ),
    (
        "nodes over a rack",
        decode(parallelism={"data": DELETE, "nodesPerGroup": 19}),
        "spec.roles.decode.parallelism.nodesPerGroup",
        "a group of 19 nodes (76 GPUs) does not fit",
    ),
    (
        "multi-node on H200",
        {"gpu": "H200", **decode(parallelism={"tensor": 8, "data": 2})},
        "spec.roles.decode.parallelism.data",
        "decode: a group spanning 2 H200 nodes is refused: NVLink stops at the node on H200",
    ),
    (
        "multi-node on B200",
        {"gpu": "B200", **decode(parallelism={"data": DELETE, "nodesPerGroup": 2})},
        "spec.roles.decode.parallelism.nodesPerGroup",
        "a group spanning 2 B200 nodes is refused",
    ),
    (
        "prefill layout",
        {"roles": {"prefill": {"parallelism": {"tensor": 1, "data": 2}}}},
        "spec.roles.prefill.parallelism.data",
        "prefill: tensor × data = 1 × 2 = 2 GPUs does not fill whole",
    ),
    (
        "batched tokens below seqs",
        decode(maxNumSeqs=64, maxNumBatchedTokens=32),
        "spec.roles.decode.maxNumBatchedTokens",
        "maxNumBatchedTokens 32 is smaller than maxNumSeqs 64",
    ),
    (
        "graph window inverted",
        {"kernels": {"cudaGraph": {"minBatch": 300}}},
        "spec.kernels.cudaGraph.minBatch",
        "minBatch 300 must not exceed maxBatch 256",
    ),
    (
        "graph window above seqs",
        {"kernels": {"cudaGraph": {"minBatch": 16}}, **decode(maxNumSeqs=8)},
        "spec.kernels.cudaGraph.minBatch",
        "the CUDA-graph window starts at 16 requests, but maxNumSeqs is 8",
    ),
    # the pinned vLLM version and the model family
    (
        "unknown vLLM",
        {"runtime": {"vllmVersion": "0.34.0"}},
        "spec.runtime.vllmVersion",
        "nvlfleet has no facts for vLLM 0.34.0 (known versions: 0.33.0)",
    ),
    (
        "family mismatch",
        {"model": {"family": "deepseek-v3"}},
        "spec.model.family",
        "model deepseek-ai/DeepSeek-V4.1-Flash is a DeepSeek V4.1 model, but family is deepseek-v3",
    ),
    # speculative decoding
    (
        "mtp on V4.1",
        {"speculative": {"method": "mtp"}},
        "spec.speculative.method",
        "DeepSeek V4.1 accepts only speculative method dspark, not 'mtp'; README §1",
    ),
    (
        "mtp alias on V4.1",
        {"speculative": {"method": "deepseek_mtp"}},
        "spec.speculative.method",
        "not 'deepseek_mtp' (an alias of mtp)",
    ),
    (
        "unknown method",
        {"speculative": {"method": "dsprak"}},
        "spec.speculative.method",
        "vLLM 0.33.0 has no speculative method 'dsprak'; did you mean dspark?",
    ),
    (
        "dspark on V3",
        {"model": {"name": "deepseek-ai/DeepSeek-R1", "family": "deepseek-v3"}, "speculative": {"method": "dspark"}},
        "spec.speculative.method",
        "DeepSeek V3 accepts only speculative method mtp, not 'dspark'",
    ),
    # kernel rules of the facts, on the effective settings
    (
        "DBO on V4.1",
        {"kernels": {"dualBatchOverlap": {"enabled": True}}},
        "spec.kernels.dualBatchOverlap.enabled",
        "DeepSeek V4.1 cannot use dual batch overlap",
    ),
    (
        "DBO without batched all-to-all",
        {
            "model": {"name": "deepseek-ai/DeepSeek-R1", "family": "deepseek-v3"},
            "speculative": {"enabled": False},
            "kernels": {"dualBatchOverlap": {"enabled": True}, "all2allBackend": "allgather_reducescatter"},
        },
        "spec.kernels.all2allBackend",
        "dual batch overlap needs all-to-all backend deepep_low_latency, deepep_high_throughput or nixl_ep, but it is "
        "allgather_reducescatter",
    ),
    (
        "DBO with speculation",
        {
            "model": {"name": "deepseek-ai/DeepSeek-R1", "family": "deepseek-v3"},
            "kernels": {"dualBatchOverlap": {"enabled": True}, "all2allBackend": "deepep_low_latency"},
        },
        "spec.kernels.dualBatchOverlap.enabled",
        "dual batch overlap cannot be combined with speculative decoding",
    ),
    (
        "mega attention on H200",
        {
            "gpu": "H200",
            "kernels": {"attentionBackend": "FLASHMLA_MEGA_ATTN_DSV41"},
            **decode(parallelism={"tensor": 8, "data": 1}),
        },
        "spec.kernels.attentionBackend",
        "attention backend FLASHMLA_MEGA_ATTN_DSV41 needs a GB200, GB300 or B200 GPU "
        "(compute capability 10.0 or 10.3), but H200 has compute capability 9.0",
    ),
    (
        "nvfp4 KV on H200",
        {"gpu": "H200", "kernels": {"kvCacheDtype": "nvfp4_ds_mla"}, **decode(parallelism={"tensor": 8, "data": 1})},
        "spec.kernels.kvCacheDtype",
        "FlashMLA decodes only on SM100",
    ),
    (
        "mega attention with plain fp8 rows",
        {"kernels": {"attentionBackend": "FLASHMLA_MEGA_ATTN_DSV41", "kvCacheDtype": "fp8_e4m3"}},
        "spec.kernels.kvCacheDtype",
        "needs KV-cache dtype auto, fp8, fp8_ds_mla or nvfp4_ds_mla or left unset",
    ),
    (
        "rejected attention",
        {"kernels": {"attentionBackend": "FLASHINFER_MLA_SPARSE"}},
        "spec.kernels.attentionBackend",
        "DeepSeek V4.1 rejects attention backend FLASHINFER_MLA_SPARSE",
    ),
    (
        "foreign attention",
        {"kernels": {"attentionBackend": "FLASH_ATTN"}},
        "spec.kernels.attentionBackend",
        "attention backend FLASH_ATTN is not a DeepSeek V4.1 backend",
    ),
    (
        "removed all-to-all pplx",
        {"kernels": {"all2allBackend": "pplx"}},
        "spec.kernels.all2allBackend",
        "all-to-all backend pplx was removed in vLLM 0.17",
    ),
    (
        "removed all-to-all naive",
        {"kernels": {"all2allBackend": "naive"}},
        "spec.kernels.all2allBackend",
        "all-to-all backend naive no longer exists in vLLM 0.33.0",
    ),
    (
        "batched all-to-all on V4.1, which the facts say to avoid",
        {"kernels": {"all2allBackend": "deepep_low_latency"}},
        "spec.kernels.all2allBackend",
        "all-to-all backend deepep_low_latency makes DeepSeek V4.1 lose its fast MXFP4 expert kernels",
    ),
    (
        "NIXL-EP on V4.1, which the facts say to avoid",
        {"kernels": {"all2allBackend": "nixl_ep"}},
        "spec.kernels.all2allBackend",
        "facts say to avoid it for V4.1",
    ),
    (
        "unknown all-to-all",
        {"kernels": {"all2allBackend": "nvlink_magic"}},
        "spec.kernels.all2allBackend",
        "vLLM 0.33.0 has no all-to-all backend 'nvlink_magic'",
    ),
    (
        "unknown KV dtype",
        {"kernels": {"kvCacheDtype": "fp4"}},
        "spec.kernels.kvCacheDtype",
        "vLLM 0.33.0 has no KV-cache dtype 'fp4'",
    ),
    (
        "MNNVL all-to-all on H200",
        {
            "gpu": "H200",
            "kernels": {"all2allBackend": "flashinfer_nvlink_one_sided"},
            **decode(parallelism={"tensor": 8, "data": 1}),
        },
        "spec.kernels.all2allBackend",
        "needs NVLink across nodes (GB200 or GB300), but NVLink stops at the node on H200",
    ),
    (
        "moonep across nodes",
        {"kernels": {"all2allBackend": "moonep"}},
        "spec.kernels.all2allBackend",
        "all-to-all backend moonep needs nodes per group 1, but it is 2",
    ),
    ("ROCm MoE", {"kernels": {"moeBackend": "aiter"}}, "spec.kernels.moeBackend", "runs only on AMD ROCm GPUs"),
    (
        "mega MoE with EPLB",
        {"kernels": {"moeBackend": "flashinfer_moe_ep_mega_deep_gemm", "eplb": {"enabled": True}}},
        "spec.kernels.eplb.enabled",
        "MoE backend flashinfer_moe_ep_mega_deep_gemm needs expert load balancing (EPLB) off or left unset, "
        "but it is on",
    ),
    (
        "mega MoE with all-to-all",
        {
            "kernels": {
                "moeBackend": "flashinfer_moe_ep_mega_deep_gemm",
                "all2allBackend": "flashinfer_nvlink_one_sided",
            }
        },
        "spec.kernels.all2allBackend",
        "needs all-to-all backend left unset, but it is flashinfer_nvlink_one_sided",
    ),
    (
        "EPLB without EP",
        {"kernels": {"eplb": {"enabled": True}}, **decode(parallelism={"expert": False})},
        "spec.roles.decode.parallelism.expert",
        "expert load balancing needs expert parallelism on, but it is off",
    ),
    (
        "experts not dividing",
        {"kernels": {"eplb": {"enabled": True, "numRedundantExperts": 8}}, **decode(parallelism={"data": 16})},
        "spec.kernels.eplb.numRedundantExperts",
        "384 routed experts + 8 redundant = 392 do not divide evenly over the expert-parallel size 16 (tensor × data); "
        "use numRedundantExperts 0 or 16",
    ),
    (
        "redundant without EPLB",
        {"kernels": {"eplb": {"enabled": False, "numRedundantExperts": 16}}},
        "spec.kernels.eplb.enabled",
        "16 redundant experts need expert load balancing (EPLB) on, but it is off",
    ),
    (
        "latency_specialized on GB200",
        {"extraArgs": ["--additional-config", '{"decode_backend":"latency_specialized"}']},
        "spec.extraArgs[0]",
        "decode_backend latency_specialized needs a GB300 GPU (compute capability 10.3), but GB200 has compute "
        "capability 10.0",
    ),
    (
        "unknown decode backend",
        {"extraArgs": ['--additional-config={"decode_backend":"fast"}']},
        "spec.extraArgs[0]",
        "decode_backend fast does not exist",
    ),
    (
        "user batch over latency_specialized",
        latency_gb300(**decode(maxNumSeqs=128)),
        "spec.roles.decode.maxNumSeqs",
        "decode_backend latency_specialized needs maxNumSeqs of at most 64, but it is 128",
    ),
    (
        "user drafts over latency_specialized",
        latency_gb300(speculative={"numSpeculativeTokens": 7}),
        "spec.speculative.numSpeculativeTokens",
        "needs speculative tokens of at most 5, but it is 7",
    ),
    (
        "MXFP4 indexer on H200",
        {
            "gpu": "H200",
            **decode(parallelism={"tensor": 8, "data": 1}),
            "extraArgs": ["--attention-config", '{"indexer_kv_dtype":"mxfp4"}'],
        },
        "spec.extraArgs[0]",
        "indexer_kv_dtype mxfp4 needs a GB200, GB300 or B200 GPU",
    ),
    (
        "sparse logits without MXFP4 indexer",
        {"extraArgs": ["-ac", '{"indexer_sparse_logits":true}']},
        "spec.extraArgs[0]",
        "indexer_sparse_logits needs indexer_kv_dtype (--attention-config) mxfp4, but it is unset",
    ),
    (
        "microbatching on V4.1",
        {"extraArgs": ["--ubatch-size", "2"]},
        "spec.extraArgs[0]",
        "DeepSeek V4.1 cannot use --ubatch-size 2",
    ),
    # extraArgs
    ("unknown flag", {"extraArgs": ["--foo"]}, "spec.extraArgs[0]", "vLLM 0.33.0 has no flag --foo"),
    (
        "owned alias",
        {"extraArgs": ["--enforce-eager", "-tp", "4"]},
        "spec.extraArgs[1]",
        "-tp is managed by nvlfleet; use spec.roles.<role>.parallelism.tensor",
    ),
    ("owned port", {"extraArgs": ["--port=9000"]}, "spec.extraArgs[0]", "--port is managed by nvlfleet"),
    (
        "owned underscore spelling",
        {"extraArgs": ["--tensor_parallel_size", "4"]},
        "spec.extraArgs[0]",
        "--tensor_parallel_size is managed by nvlfleet; use spec.roles.<role>.parallelism.tensor",
    ),
    (
        "twice in two spellings",
        {"extraArgs": ["--kv-cache-metrics", "--kv_cache_metrics"]},
        "spec.extraArgs[1]",
        "--kv_cache_metrics repeats spec.extraArgs[0] (kv_cache_metrics); vLLM would silently keep the last",
    ),
    (
        "rule on an underscore spelling",
        {"extraArgs": ["--additional_config", '{"decode_backend":"latency_specialized"}']},
        "spec.extraArgs[0]",
        "decode_backend latency_specialized needs a GB300 GPU",
    ),
    (
        "owned negation",
        {"extraArgs": ["--disable-expert-parallel"]},
        "spec.extraArgs[0]",
        "use spec.roles.<role>.parallelism.expert",
    ),
    (
        "api key argument",
        {"extraArgs": ["--api-key", "abc"]},
        "spec.extraArgs[0]",
        "set extraEnv VLLM_API_KEY with valueFrom.secretKeyRef",
    ),
    (
        "token in an argument",
        {"extraArgs": ["--model-loader-extra-config", f'{{"token":"{HF_TOKEN}"}}']},
        "spec.extraArgs[1]",
        "looks like a credential",
    ),
    (
        "line break",
        {"extraArgs": ["--enforce-eager\n--port=1"]},
        "spec.extraArgs[0]",
        "contains a NUL byte or a line break",
    ),
    ("NUL byte", {"extraArgs": ["--chat-template", "a\x00b"]}, "spec.extraArgs[1]", "contains a NUL byte"),
    (
        "bad choice",
        {"extraArgs": ["--performance-mode", "fast"]},
        "spec.extraArgs[0]",
        "--performance-mode 'fast' is not one of: balanced, interactivity, throughput",
    ),
    ("missing value", {"extraArgs": ["--block-size"]}, "spec.extraArgs[0]", "--block-size needs a value"),
    (
        "wrong type",
        {"extraArgs": ["--gpu-memory-utilization", "most"]},
        "spec.extraArgs[0]",
        "--gpu-memory-utilization expects a number, got 'most'",
    ),
    (
        "twice",
        {"extraArgs": ["--enforce-eager", "--enforce-eager"]},
        "spec.extraArgs[1]",
        "--enforce-eager repeats spec.extraArgs[0] (enforce_eager); vLLM would silently keep the last",
    ),
    ("positional", {"extraArgs": ["serve"]}, "spec.extraArgs[0]", "unexpected positional argument 'serve'"),
    (
        "attention config not an object",
        {"extraArgs": ["--attention-config", "[]"]},
        "spec.extraArgs[0]",
        "--attention-config expects a JSON object",
    ),
    (
        "unknown key in a JSON flag",
        {
            "extraArgs": [
                "--enforce-eager",
                "--kv-transfer-config",
                '{"kv_connector":"NixlConnector","kv_rol":"kv_both"}',
            ]
        },
        "spec.extraArgs[1]",
        "vLLM 0.33.0 has no key 'kv_rol' in --kv-transfer-config; did you mean kv_role?",
    ),
    (
        "JSON flag given a name",
        {"extraArgs": ["--kv-transfer-config", "NixlConnector"]},
        "spec.extraArgs[0]",
        "--kv-transfer-config must be a JSON object",
    ),
    # extraEnv
    (
        "removed env var",
        {"extraEnv": [{"name": "VLLM_ALL2ALL_BACKEND", "value": "pplx"}]},
        "spec.extraEnv[0].name",
        "VLLM_ALL2ALL_BACKEND no longer exists in vLLM 0.33.0; it is the flag --all2all-backend now "
        "(use spec.kernels.all2allBackend)",
    ),
    (
        "removed attention env",
        {"extraEnv": [{"name": "VLLM_ATTENTION_BACKEND", "value": "X"}]},
        "spec.extraEnv[0].name",
        "it is the flag --attention-backend now (use spec.kernels.attentionBackend)",
    ),
    (
        "misspelt env var",
        {"extraEnv": [{"name": "VLLM_USE_V2_MODEL_RUNER", "value": "1"}]},
        "spec.extraEnv[0].name",
        "VLLM_USE_V2_MODEL_RUNER is not an env var vLLM 0.33.0 reads; did you mean VLLM_USE_V2_MODEL_RUNNER?",
    ),
    (
        "foreign env var",
        {"extraEnv": [{"name": "MY_SETTING", "value": "1"}]},
        "spec.extraEnv[0].name",
        "other names must belong to a library vLLM loads: NCCL_, NVSHMEM_",
    ),
    (
        "owned env var",
        {"extraEnv": [{"name": "VLLM_DP_SIZE", "value": "8"}]},
        "spec.extraEnv[0].name",
        "VLLM_DP_SIZE is managed by nvlfleet",
    ),
    (
        "literal HF token",
        {"extraEnv": [{"name": "HF_TOKEN", "value": HF_TOKEN}]},
        "spec.extraEnv[0].value",
        "HF_TOKEN looks like a secret and must not be written into the serving; use spec.model.hfTokenSecretRef",
    ),
    (
        "literal API key",
        {"extraEnv": [{"name": "VLLM_API_KEY", "value": "letmein"}]},
        "spec.extraEnv[0].value",
        "use valueFrom.secretKeyRef",
    ),
    (
        "token under another name",
        {"extraEnv": [{"name": "NCCL_DEBUG_FILE", "value": HF_TOKEN}]},
        "spec.extraEnv[0].value",
        "NCCL_DEBUG_FILE looks like a secret",
    ),
    (
        "value and valueFrom",
        {"extraEnv": [{"name": "NCCL_DEBUG", "value": "INFO", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]},
        "spec.extraEnv[0]",
        "NCCL_DEBUG: set exactly one of value and valueFrom",
    ),
    (
        "half a secret ref",
        {"extraEnv": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf"}}}]},
        "spec.extraEnv[0].valueFrom.secretKeyRef.key",
        "is required",
    ),
    (
        "unknown env source",
        {"extraEnv": [{"name": "HF_TOKEN", "valueFrom": {"vault": {"path": "x"}}}]},
        "spec.extraEnv[0].valueFrom.vault",
        "unknown field; known fields: configMapKeyRef, fieldRef, resourceFieldRef, secretKeyRef",
    ),
    (
        "same env twice",
        {"extraEnv": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBUG", "value": "WARN"}]},
        "spec.extraEnv[1].name",
        "NCCL_DEBUG is already set by spec.extraEnv[0]",
    ),
    (
        "breakable graphs off on V4.1",
        {"extraEnv": [{"name": "VLLM_USE_BREAKABLE_CUDAGRAPH", "value": "0"}]},
        "spec.extraEnv[0].value",
        "DeepSeek V4.1 must not run with VLLM_USE_BREAKABLE_CUDAGRAPH=0",
    ),
    (
        "DSpark on runner V1",
        {"extraEnv": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}]},
        "spec.extraEnv[0].value",
        "DSpark speculative decoding cannot run with VLLM_USE_V2_MODEL_RUNNER=0",
    ),
    (
        "DeepEP MNNVL without DeepEP",
        {"extraEnv": [{"name": "VLLM_DEEPEP_LOW_LATENCY_USE_MNNVL", "value": "1"}]},
        "spec.extraEnv[0].value",
        "needs all-to-all backend deepep_low_latency",
    ),
    # pricing and pod
    (
        "overlapping windows",
        {
            "pricing": {
                "inputCacheHitPerMillion": 1,
                "inputCacheMissPerMillion": 1,
                "outputPerMillion": 1,
                "schedule": [
                    {"name": "a", "start": "22:00", "end": "02:00", "multiplier": 2},
                    {"name": "b", "start": "01:00", "end": "03:00", "multiplier": 0.5},
                ],
            }
        },
        "spec.pricing.schedule[1]",
        "overlaps window 'a'",
    ),
    (
        "empty window",
        {
            "pricing": {
                "inputCacheHitPerMillion": 1,
                "inputCacheMissPerMillion": 1,
                "outputPerMillion": 1,
                "schedule": [{"name": "a", "start": "05:00", "end": "05:00", "multiplier": 2}],
            }
        },
        "spec.pricing.schedule[0]",
        "is empty",
    ),
    (
        "GPU request",
        {"pod": {"resources": {"limits": {"nvidia.com/gpu": "2"}}}},
        "spec.pod.resources.limits",
        "nvidia.com/gpu is nvlfleet's to request",
    ),
    (
        "not a quantity",
        {"pod": {"resources": {"requests": {"memory": "64 GiB"}}}},
        'spec.pod.resources.requests["memory"]',
        "'64 GiB' is not a Kubernetes quantity",
    ),
    (
        "negative quantity",
        {"pod": {"resources": {"limits": {"cpu": -4}}}},
        'spec.pod.resources.limits["cpu"]',
        "-4 is negative",
    ),
    (
        "resource claims",
        {"pod": {"resources": {"claims": {"name": "x"}}}},
        "spec.pod.resources.claims",
        "only limits and requests may be set",
    ),
    (
        "shm mount",
        {"pod": {"volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}]}},
        "spec.pod.volumeMounts[0].mountPath",
        "/dev/shm is already mounted for shm; size it with spec.pod.shmSize",
    ),
    (
        "pvc without claim",
        {"model": {"weights": {"cache": "pvc"}}},
        "spec.model.weights.pvc",
        "cache 'pvc' needs weights.pvc.claimName",
    ),
]


@pytest.mark.parametrize(("changes", "path", "fragment"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_servings_are_reported_at_the_field(changes: dict[str, Any], path: str, fragment: str) -> None:
    assert_reported(errors(spec(**changes)), path, fragment)


def test_a_bad_layout_is_one_problem_not_a_cascade() -> None:
    assert errors(spec(**decode(parallelism={"tensor": 8}))) == [
        (
            "spec.roles.decode.parallelism.tensor",
            "decode: tensor-parallel size 8 is larger than the 4 GPUs of one GB200 node; use data parallelism across "
            "nodes (e.g. tensor: 1, data: 64) with expert parallelism instead",
        )
    ]


def test_a_rule_every_role_breaks_is_said_once_without_a_role() -> None:
    both = spec(
        kernels={"attentionBackend": "FLASHINFER_MLA_SPARSE"},
        roles={"prefill": {"parallelism": {"tensor": 1, "data": 4}}},
    )
    found = [m for p, m in errors(both) if p == "spec.kernels.attentionBackend"]
    assert found == [
        "DeepSeek V4.1 rejects attention backend FLASHINFER_MLA_SPARSE; the V4.1 model code refuses it; the FlashInfer "
        "sparse-MLA backend for V4.1 is FLASHINFER_MLA_SPARSE_DSV41"
    ]


@pytest.mark.parametrize("backend", ["pplx", "naive"])
def test_a_removed_backend_is_not_said_to_be_removed_by_the_pinned_release(backend: str) -> None:
    """pplx went in vLLM 0.17 (vllm-project/vllm#33724); the facts say naive is gone by 0.33.0, not when."""
    path = "spec.kernels.all2allBackend"
    (message,) = [m for p, m in errors(spec(kernels={"all2allBackend": backend})) if p == path]
    assert "removed in vLLM 0.33.0" not in message and "removed from vLLM 0.33.0" not in message


def test_a_rule_one_role_breaks_names_the_role() -> None:
    only_decode = spec(kernels={"all2allBackend": "moonep"}, roles={"prefill": {"parallelism": {"data": 4}}})
    assert_reported(errors(only_decode), "spec.kernels.all2allBackend", "decode: all-to-all backend moonep needs")
    assert not any(m.startswith("prefill:") for _, m in errors(only_decode))


# --- warnings: accepted, but said ----------------------------------------------------------------------------------

WARNED: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "deprecated all-to-all alias",
        {"kernels": {"all2allBackend": "flashinfer_all2allv"}},
        "spec.kernels.all2allBackend",
        "flashinfer_all2allv is a deprecated alias",
    ),
    (
        "explicit TRTLLM MoE",
        {"kernels": {"moeBackend": "flashinfer_trtllm"}},
        "spec.kernels.moeBackend",
        "is not what auto picks for DeepSeek V4.1",
    ),
    (
        "custom all-reduce off",
        {"extraArgs": ["--disable-custom-all-reduce"]},
        "spec.extraArgs[0]",
        "--disable-custom-all-reduce turns off DeepSeek V4.1's fused all-reduce + mHC path",
    ),
    (
        "attention key the facts do not know",
        {"extraArgs": ["--attention-config", '{"indexer_kv_dtype":"mxfp4","no_such_key":1}']},
        "spec.extraArgs[0]",
        "'no_such_key' is not a key the facts of vLLM 0.33.0 know for --attention-config",
    ),
    (
        "unused claim",
        {"model": {"weights": {"pvc": {"claimName": "w"}}}},
        "spec.model.weights.pvc",
        "is ignored because cache is 'none'",
    ),
    (
        "prefill without decode",
        {"roles": {"decode": {"groups": 0}, "prefill": {"parallelism": {"data": 4}}}},
        "spec.roles.decode.groups",
        "prefill groups without decode groups serve no request",
    ),
]


@pytest.mark.parametrize(("changes", "path", "fragment"), [c[1:] for c in WARNED], ids=[c[0] for c in WARNED])
def test_warnings_accept_the_serving_but_say_why_it_is_slow(changes: dict[str, Any], path: str, fragment: str) -> None:
    obj = spec(**changes)
    assert errors(obj) == []
    assert_reported(warnings(obj), path, fragment)


# --- raw input that is not even an object --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "path", "fragment"),
    [
        (["a", "list"], "", "a DeepSeekServing is a mapping with apiVersion, kind, metadata and spec, not a list"),
        ("text", "", "not 'text'"),
        (None, "", "not null"),
        ({}, "spec", "is required"),
        (serving({"apiVersion": "v1"}), "apiVersion", "must be one of 'nvlfleet.io/v1alpha1', got 'v1'"),
        (serving({"metadata": {"name": DELETE}}), "metadata.name", "is required"),
        (serving({"metadata": {"name": "Bad_Name"}}), "metadata.name", "'Bad_Name' is not a valid name"),
        (serving({"metadata": {"namespace": "x.y"}}), "metadata.namespace", "is not a DNS-1123 label"),
        (serving({"spec": "nothing"}), "spec", "must be a mapping, got 'nothing'"),
    ],
)
def test_raw_objects_that_are_not_servings(obj: object, path: str, fragment: str) -> None:
    assert_reported(errors(obj), path, fragment)


def test_parse_returns_the_serving_or_the_problems() -> None:
    parsed, found = validation.parse(serving())
    assert found == [] and isinstance(parsed, models.DeepSeekServing)
    parsed, found = validation.parse(spec(gpu="GB100"))
    assert parsed is None and [p.path for p in found] == ["spec.gpu"]


def test_validate_serving_checks_a_parsed_object() -> None:
    parsed = models.DeepSeekServing.model_validate(spec(**decode(parallelism={"tensor": 3})))
    assert [p.path for p in validation.validate_serving(parsed)] == ["spec.roles.decode.parallelism.tensor"]


def test_every_api_pattern_has_a_meaning_for_messages() -> None:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "pattern" in node:
                found.add(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(models.DeepSeekServing.model_json_schema(by_alias=True))
    assert found <= set(validation.PATTERN_MEANINGS), found - set(validation.PATTERN_MEANINGS)


def test_every_owned_flag_exists_in_the_pinned_vllm() -> None:
    from nvlfleet.facts import facts

    dests = {flag.dest for flag in facts.load().flags.values()}
    assert set(escapes.OWNED_FLAGS) | set(escapes.SECRET_FLAGS) <= dests, set(escapes.OWNED_FLAGS) - dests


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token"])
def test_a_secret_flag_is_refused_as_a_secret_not_as_a_flag_nvlfleet_sets(flag: str) -> None:
    (message,) = [m for p, m in errors(spec(extraArgs=[flag, "abc"])) if p == "spec.extraArgs[0]"]

    assert message.startswith(f"{flag} would put a secret in the pod's arguments; ")
    assert "nvlfleet" not in message.split(";")[0]


# --- robustness: whatever is written where, validation answers with problems --------------------------------------

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 100_000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(
        ["GB200", "H200", "pvc", "dspark", "mtp", "-tp", "FLASHMLA_MEGA_ATTN_DSV41", "01:00", "HF_TOKEN"]
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["name", "value", "valueFrom", "tensor", "data", "enabled", "start", "x"]), inner
        )
    ),
    max_leaves=10,
)
_PLACES = [
    ("gpu",),
    ("roles", "decode", "parallelism"),
    ("roles", "prefill"),
    ("kernels",),
    ("kernels", "eplb"),
    ("extraArgs",),
    ("extraEnv",),
    ("pricing",),
    ("speculative",),
    ("pod",),
    ("model", "weights"),
]
_ARGS = st.lists(
    st.text(max_size=10)
    | st.sampled_from(
        ["--port", "-tp", "-O3", "--additional-config", '{"decode_backend":"latency_specialized"}', "--"]
    ),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PLACES), _JSON), max_size=3), _ARGS)
def test_no_input_makes_validation_raise(edits: list[tuple[tuple[str, ...], Any]], args: list[str]) -> None:
    obj = spec(extraArgs=args)
    for place, value in edits:
        node = obj["spec"]
        for key in place[:-1]:
            node = node.setdefault(key, {}) if isinstance(node.get(key, {}), dict) else {}
        node[place[-1]] = value
    review = validation.review(obj)
    assert all(isinstance(p, problems.Problem) for p in (*review.errors, *review.warnings))


@pytest.mark.parametrize("name", ["a.b", "x" * 64, "9lives"])
def test_a_name_that_cannot_name_the_children_is_refused_with_the_reason(name: str) -> None:
    (problem,) = validation.validate(sb.serving_dict(name=name))
    assert problem.path == "metadata.name"
    assert "must be a DNS-1035 label" in problem.message and "names the serving's Services" in problem.message


@pytest.mark.parametrize("value", [float("inf"), float("nan"), float("-inf")])
def test_a_non_finite_price_is_refused_at_its_field(value: float) -> None:
    prices = {"inputCacheHitPerMillion": 0.01, "inputCacheMissPerMillion": 0.1, "outputPerMillion": value}
    (problem,) = validation.validate(sb.serving_dict(pricing=prices))
    assert problem.path == "spec.pricing.outputPerMillion"
    assert problem.message.startswith("must be a finite number")


def test_a_name_that_is_not_a_dns_subdomain_is_refused_whole_not_by_its_prefix() -> None:
    problems_ = validation.validate(sb.serving_dict(name="dsv41_Bad!"))
    assert [p.path for p in problems_] == ["metadata.name"]
    assert "is not a valid name" in problems_[0].message  # the whole name is checked (the regex was unanchored)


def test_a_user_label_under_a_reserved_prefix_is_refused_as_reserved_not_as_set_by_nvlfleet() -> None:
    path = 'spec.pod.labels["nvlfleet.io/team"]'
    (message,) = [m for p, m in errors(spec(pod={"labels": {"nvlfleet.io/team": "a"}})) if p == path]

    assert message.startswith(
        "labels under nvlfleet.io/, app.kubernetes.io/, leaderworkerset.sigs.k8s.io/ are reserved"
    )
