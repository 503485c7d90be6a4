"""The API models: wire names, defaults, refused typos, topology arithmetic and the CEL rules they carry."""

from __future__ import annotations

import pathlib
from typing import Any

import pydantic
import pytest
import yaml

from nvlfleet.api import models
from nvlfleet.facts import hardware

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def minimal(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nvlfleet.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": "flash"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": {"decode": {}},
            **spec,
        },
    }


def role(**parallelism: Any) -> models.RoleSpec:
    return models.RoleSpec.model_validate({"parallelism": parallelism})


def test_defaults_of_a_minimal_serving() -> None:
    serving = models.DeepSeekServing.model_validate(minimal())
    spec = serving.spec
    assert (spec.goal, spec.max_model_len, spec.runtime.vllm_version) == (models.Goal.THROUGHPUT, 131072, "0.33.0")
    assert (spec.model.family, spec.speculative.num_speculative_tokens) == (models.ModelFamily.DEEPSEEK_V4_1, 3)
    assert spec.placement.domain_label == "nvidia.com/gpu.clique"
    assert spec.kernels == models.KernelSpec()
    assert (spec.roles.decode.groups, spec.roles.decode.parallelism.tensor) == (1, 1)
    assert models.served_name(serving) == "flash"


def test_wire_names_are_camel_case_and_all2all_follows_vllm() -> None:
    kernels = models.KernelSpec.model_validate({"all2allBackend": "flashinfer_nvlink_one_sided", "kvCacheDtype": "fp8"})
    assert kernels.to_wire() == {"all2allBackend": "flashinfer_nvlink_one_sided", "kvCacheDtype": "fp8"}
    assert set(models.PricingSpec.model_json_schema(by_alias=True)["properties"]) == {
        "currency",
        "inputCacheHitPerMillion",
        "inputCacheMissPerMillion",
        "outputPerMillion",
        "schedule",
        "gpuHourCost",
    }


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_survive_a_round_trip_through_the_wire(example: pathlib.Path) -> None:
    serving = models.DeepSeekServing.model_validate(yaml.safe_load(example.read_text()))
    again = models.DeepSeekServing.model_validate(serving.model_dump(by_alias=True, mode="json"))
    assert again == serving


@pytest.mark.parametrize(
    ("where", "obj"),
    [
        (("spec", "kernels", "dbo"), minimal(kernels={"dbo": {"enabled": False}})),
        (("spec", "roles", "decode", "replicas"), minimal(roles={"decode": {"replicas": 2}})),
        (("spec", "extraEnv", 0, "valuefrom"), minimal(extraEnv=[{"name": "A", "valuefrom": {}}])),
    ],
)
def test_typos_are_refused_not_ignored(where: tuple[str | int, ...], obj: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError) as error:
        models.DeepSeekServing.model_validate(obj)
    assert [(e["type"], e["loc"]) for e in error.value.errors()] == [("extra_forbidden", where)]


def test_status_and_metadata_pass_unknown_fields_through() -> None:
    obj = minimal()
    obj["metadata"]["creationTimestamp"] = "2026-11-30T00:00:00Z"
    obj["status"] = {"ready": "1/1", "somethingNew": 1, "conditions": [{"type": "Ready", "status": "True", "x": 1}]}
    serving = models.DeepSeekServing.model_validate(obj)
    assert serving.status is not None and serving.status.ready == "1/1"


def test_roles_present_lists_prefill_first() -> None:
    spec = models.DeepSeekServing.model_validate(minimal(roles={"decode": {}, "prefill": {"groups": 2}})).spec
    assert [name for name, _ in spec.roles_present()] == [models.RoleName.PREFILL, models.RoleName.DECODE]


@pytest.mark.parametrize(
    ("gpu", "parallelism", "expected"),
    [
        # (tensor, data, data_local, nodes_per_group, gpus_per_node)
        ("GB200", {}, (1, 4, 4, 1, 4)),
        ("GB200", {"data": 16}, (1, 16, 4, 4, 4)),
        ("GB200", {"nodesPerGroup": 4}, (1, 16, 4, 4, 4)),
        ("GB300", {"tensor": 4, "data": 1}, (4, 1, 1, 1, 4)),
        ("GB200", {"tensor": 2, "nodesPerGroup": 3}, (2, 6, 2, 3, 4)),
        ("H200", {"tensor": 8}, (8, 1, 1, 1, 8)),
        ("B200", {}, (1, 8, 8, 1, 8)),
    ],
)
def test_role_topology_derives_the_missing_size(
    gpu: str, parallelism: dict[str, Any], expected: tuple[int, int, int, int, int]
) -> None:
    t = models.role_topology(models.GpuGeneration(gpu), role(**parallelism))
    assert (t.tensor, t.data, t.data_local, t.nodes_per_group, t.gpus_per_node) == expected
    assert t.gpus_per_group == t.tensor * t.data


def test_topology_cel_rules_cover_every_gpu_generation_and_role() -> None:
    rules = models.DeepSeekServingSpec.model_json_schema(by_alias=True)["x-kubernetes-validations"]
    assert {r["fieldPath"].split(".")[2] for r in rules} == {"decode", "prefill"}
    for rule in rules:
        for gen in hardware.generations().values():
            # the per-generation numbers come from the hardware data, as map lookups on self.gpu
            assert f"'{gen.name}': {gen.gpus_per_node}" in rule["rule"] or (
                f"'{gen.name}': {gen.nodes_per_domain}" in rule["rule"]
            ), rule["rule"]
        assert "string(" not in rule["messageExpression"]  # the API server's cost estimator refuses string(int)
