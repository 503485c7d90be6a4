"""Builders for DeepSeekServing objects in tests: a small valid serving, changed only where a test says.

``serving(gpu="GB300", goal="latency", tensor=4, nodes=1)`` is a parsed ``models.DeepSeekServing``;
``serving_dict(...)`` the same as the dict a user would write. Only fields a test passes are written, so
"left to the profile" stays distinguishable from "chosen by the user" (pydantic's ``model_fields_set``).
"""

from __future__ import annotations

from typing import Any

from nvlfleet.api import models, names

MODELS = {
    "deepseek-v4.1": "deepseek-ai/DeepSeek-V4.1-Flash",
    "deepseek-v4": "deepseek-ai/DeepSeek-V4-Flash",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
}
CLIQUE_A = "61248eac-4785-4fbf-9cbd-231635e37e9d.20663"
CLIQUE_B = "7235a0bd-4785-4fbf-9cbd-231635e37e9d.20664"


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, recursively for mappings."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def role(
    *, groups: int = 1, tensor: int | None = None, nodes: int | None = None, data: int | None = None, **extra: Any
) -> dict[str, Any]:
    parallelism: dict[str, Any] = {}
    if tensor is not None:
        parallelism["tensor"] = tensor
    if nodes is not None:
        parallelism["nodesPerGroup"] = nodes
    if data is not None:
        parallelism["data"] = data
    out: dict[str, Any] = {"groups": groups}
    if parallelism:
        out["parallelism"] = parallelism
    return merge(out, extra)


def serving_dict(
    *,
    name: str = "dsv41",
    namespace: str = "llm",
    gpu: str = "GB200",
    family: str = "deepseek-v4.1",
    goal: str | None = None,
    groups: int = 1,
    tensor: int | None = 1,
    nodes: int | None = 2,
    data: int | None = None,
    prefill: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": MODELS[family], "servedName": "deepseek-v4.1-flash", "family": family},
        "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
        "gpu": gpu,
        "roles": {"decode": role(groups=groups, tensor=tensor, nodes=nodes, data=data)},
    }
    if goal is not None:
        body["goal"] = goal
    if prefill is not None:
        body["roles"]["prefill"] = prefill
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": merge(body, spec),
    }


def serving(**kwargs: Any) -> models.DeepSeekServing:
    return models.DeepSeekServing.model_validate(serving_dict(**kwargs))
