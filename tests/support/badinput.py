"""Hypothesis strategies for DeepSeekServings that must not be run: one rule broken per example.

Two sources, so the examples are not just the ones somebody thought of:

- ``schema_violations()`` walks the generated CRD schema (``nvlfleet.api.crd.definition()``, the one the API server
  enforces) and, at a random field, breaks one of its constraints: below ``minimum``, above ``maximum``, longer
  than ``maxLength``, outside ``enum``, off ``pattern`` (with shell metacharacters, unicode, blanks), the wrong
  JSON type, or a field name the schema does not know.
- ``gb200_shapes()`` draws decode parallelism (tensor, data, nodesPerGroup) within the schema's bounds and
  ``breaks_gb200_rules`` says, from the GB200 NVL72 facts alone (4 GPUs per tray, 18 trays per NVLink domain),
  whether the shape can run: tensor parallelism inside one tray and dividing it, tensor × data filling whole
  trays, a group inside one domain.

``assert_no_shell(argv)`` is the check every rendered or running container command must pass.

Used by tests/unit/test_bad_input_properties.py (offline validation) and tests/integration/test_bad_input.py
(the real API server and a running operator).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from nvlfleet.api import crd
from nvlfleet.core import commandline
from nvlfleet.facts import hardware

GB200 = hardware.generation("GB200")
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh", "csh", "tcsh", "fish", "busybox", "env"}

# Characters that make a string interesting to a shell, a parser or a terminal.
NASTY = ";|&$`'\"\\<>(){}[]*?!#~ \t%éü中😀\u200b"


def base_serving(name: str = "bad") -> dict[str, Any]:
    """A valid single-tray GB200 serving (one group)."""
    return {
        "apiVersion": "nvlfleet.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": {"decode": {"groups": 1, "parallelism": {"tensor": 1, "nodesPerGroup": 1}}},
        },
    }


# ---------------------------------------------------------------------------------------------------------------
# Schema violations


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken constraint: ``path`` (wire names, from ``spec``) set to ``value``, breaking ``rule``."""

    path: tuple[str, ...]
    rule: str
    value: Any

    @property
    def field(self) -> str:
        return ".".join(("spec", *self.path))

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        node = out["spec"]
        for key in self.path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[self.path[-1]] = self.value
        return out


def _leaves(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every field under ``schema`` that is reached through objects only (no list items, no free-form maps)."""
    for key, sub in (schema.get("properties") or {}).items():
        here = (*path, key)
        if sub.get("type") == "object" and sub.get("properties"):
            yield here, sub
            yield from _leaves(sub, here)
        elif sub.get("type") in ("integer", "number", "string", "boolean", "array", "object"):
            yield here, sub


def spec_schema() -> dict[str, Any]:
    version = crd.definition()["spec"]["versions"][0]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


_WRONG_TYPE = {
    "integer": ["4", 1.5, True, [4], {"n": 4}],
    "number": ["0.6", True, [0.6]],
    "string": [7, True, ["x"], {"x": "y"}],
    "boolean": ["true", 1, [True]],
    "array": ["a", 1, {"a": 1}],
    "object": ["x", 1, ["x"]],
}


def _breaking(path: tuple[str, ...], sub: dict[str, Any]) -> list[st.SearchStrategy[Violation]]:
    kind = sub.get("type")
    out: list[st.SearchStrategy[Violation]] = [
        st.sampled_from(_WRONG_TYPE[kind]).map(lambda v: Violation(path, f"type {kind}", v))
    ]
    if kind in ("integer", "number") and "minimum" in sub:
        low = sub["minimum"]
        exclusive = sub.get("exclusiveMinimum", False)
        below = st.integers(max_value=int(low) - (0 if exclusive else 1), min_value=int(low) - 2**40)
        out.append(below.map(lambda v: Violation(path, "minimum", v)))
    if kind in ("integer", "number") and "maximum" in sub:
        high = int(sub["maximum"])
        out.append(st.integers(min_value=high + 1, max_value=2**62).map(lambda v: Violation(path, "maximum", v)))
    if kind == "string" and "maxLength" in sub:
        n = sub["maxLength"]
        out.append(
            st.text(alphabet="abc", min_size=n + 1, max_size=n + 40).map(lambda v: Violation(path, "maxLength", v))
        )
    if kind == "string" and "enum" in sub:
        enum = set(sub["enum"])
        wrong = st.sampled_from([*(e.lower() for e in enum), *(e.upper() for e in enum), "", "GB100", " GB200"])
        out.append(wrong.filter(lambda v: v not in enum).map(lambda v: Violation(path, "enum", v)))
    if kind == "string" and "pattern" in sub:
        # A nasty character where the pattern allows none; the pattern's own anchors make any of them fatal
        # except in the few free-text patterns, which the caller filters with the real regex.
        nasty = st.tuples(st.sampled_from(["deepseek", "07:00", "a"]), st.sampled_from(NASTY))
        out.append(nasty.map(lambda t: Violation(path, "pattern", f"{t[0]}{t[1]}")))
    if kind == "object" and sub.get("properties"):
        out.append(
            st.sampled_from(["tensorParallel", "Groups", "all2AllBackend", "nodes_per_group"]).map(
                lambda k: Violation((*path, k), "unknown field", 1)
            )
        )
    return out


def schema_violations() -> st.SearchStrategy[Violation]:
    """One constraint of the CRD's spec schema broken at one field (the rest of the serving stays valid)."""
    import re

    leaves = [(p, s) for p, s in _leaves(spec_schema()) if p[0] not in ("pod",) or len(p) == 2]
    choices = [strategy for path, sub in leaves for strategy in _breaking(path, sub)]

    def really_broken(v: Violation) -> bool:
        if v.rule != "pattern":
            return True
        sub = dict(_leaves(spec_schema()))[v.path]
        return re.fullmatch(sub["pattern"].strip("^$"), v.value) is None

    return st.one_of(choices).filter(really_broken)


# ---------------------------------------------------------------------------------------------------------------
# GB200 topology


@dataclasses.dataclass(frozen=True)
class Shape:
    tensor: int
    data: int | None
    nodes: int | None

    def parallelism(self) -> dict[str, int]:
        out = {"tensor": self.tensor}
        if self.data is not None:
            out["data"] = self.data
        if self.nodes is not None:
            out["nodesPerGroup"] = self.nodes
        return out

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        out["spec"]["roles"]["decode"]["parallelism"] = self.parallelism()
        return out


def gb200_shapes() -> st.SearchStrategy[Shape]:
    """Decode shapes inside the schema's bounds, data and nodesPerGroup each given or left out (not both out)."""
    small = st.integers(min_value=1, max_value=24)
    shape = st.builds(
        Shape,
        tensor=st.sampled_from([1, 2, 3, 4, 5, 6, 8, 16, 64]),
        data=st.none() | st.one_of(small, st.integers(min_value=1, max_value=1024)),
        nodes=st.none() | st.integers(min_value=1, max_value=64),
    )
    return shape.filter(lambda s: s.data is not None or s.nodes is not None)


def breaks_gb200_rules(shape: Shape) -> str | None:
    """Which GB200 NVL72 rule the shape breaks, from the hardware facts alone; None when it can run."""
    per_tray, per_domain = GB200.gpus_per_node, GB200.nodes_per_domain
    if shape.tensor > per_tray:
        return "tensor parallelism beyond one tray"
    if per_tray % shape.tensor:
        return "tensor parallelism not dividing the tray"
    if shape.data is not None and (shape.tensor * shape.data) % per_tray:
        return "tensor × data not filling whole trays"
    if shape.data is not None and shape.nodes is not None and shape.tensor * shape.data != shape.nodes * per_tray:
        return "tensor × data not equal to the trays' GPUs"
    nodes = shape.nodes if shape.nodes is not None else shape.tensor * (shape.data or 0) // per_tray
    if nodes > per_domain:
        return "a group larger than one NVLink domain"
    return None


# ---------------------------------------------------------------------------------------------------------------
# No shell


def assert_no_shell(command: list[str]) -> None:
    """argv that no shell parses: not a shell, and ``-c`` only as the fixed worker launcher's interpreter flag."""
    assert os.path.basename(command[0]) not in SHELLS, command[:3]
    if "-c" in command:
        at = command.index("-c")
        assert at == 1 and os.path.basename(command[0]).startswith("python"), command[:3]
        assert command[2] == commandline.WORKER_LAUNCHER


# ---------------------------------------------------------------------------------------------------------------
# Prefill/decode servings nvlfleet must refuse, each for one reason of the P/D facts (disaggregation.md), as spec
# changes to a GB200 serving with decode groups of 2 trays: (case, changes, field refused, words of the reason).
# Used by tests/unit/test_disaggregation.py (validation and the webhook handler) and test_bad_input.py (the API
# server with a running operator).

PREFILL = {"groups": 1, "parallelism": {"tensor": 1, "nodesPerGroup": 2}}
_PD = {"roles": {"prefill": PREFILL}}
_NIXL = "NixlConnector"


def _pd(**spec: Any) -> dict[str, Any]:
    return {**copy.deepcopy(_PD), **spec}


def _latency_gb300() -> dict[str, Any]:
    """GB300 latency: the profile gives decode (TP4, one tray) FlashInfer sparse MLA and FP8 KV, not prefill (DP8)."""
    return {
        "gpu": "GB300",
        "goal": "latency",
        "roles": {"prefill": PREFILL, "decode": {"groups": 1, "parallelism": {"tensor": 4, "nodesPerGroup": 1}}},
    }


PD_REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    ("connector without a prefill role", {"disaggregation": {"kvConnector": _NIXL}}, "spec.disaggregation",
     "a KV connector without a prefill role"),
    ("prefill role without a connector", _pd(disaggregation={"kvConnector": ""}), "spec.disaggregation.kvConnector",
     "a prefill role needs a KV connector"),
    ("unregistered connector", _pd(disaggregation={"kvConnector": "NixlConector"}), "spec.disaggregation.kvConnector",
     "registers no KV connector 'NixlConector'"),
    ("connector the router cannot route", _pd(disaggregation={"kvConnector": "LMCacheConnectorV1"}),
     "spec.disaggregation.kvConnector", "vllm-router runs P/D only for the connectors"),
    ("unknown kv_role", _pd(disaggregation={"decode": {"kvRole": "kv_reader"}}), "spec.disaggregation.decode.kvRole",
     "has no kv_role 'kv_reader'"),
    ("prefill as consumer", _pd(disaggregation={"prefill": {"kvRole": "kv_consumer"}}),
     "spec.disaggregation.prefill.kvRole", "kv_role kv_consumer contradicts the prefill role"),
    ("decode as producer", _pd(disaggregation={"decode": {"kvRole": "kv_producer"}}),
     "spec.disaggregation.decode.kvRole", "kv_role kv_producer contradicts the decode role"),
    ("unknown load failure policy", _pd(disaggregation={"kvLoadFailurePolicy": "retry"}),
     "spec.disaggregation.kvLoadFailurePolicy", "no kv_load_failure_policy 'retry'"),
    ("unknown KV buffer device", _pd(disaggregation={"kvBufferDevice": "disk"}), "spec.disaggregation.kvBufferDevice",
     "NIXL on CUDA accepts kv_buffer_device cuda or cpu"),
    ("side channel over the API port", _pd(disaggregation={"sideChannelPort": 7995}),
     "spec.disaggregation.sideChannelPort", "which include vLLM's API port 8000"),
    ("side channel above 65535", _pd(disaggregation={"sideChannelPort": 65530}), "spec.disaggregation.sideChannelPort",
     "above 65535"),
    ("raw kv-transfer-config on a P/D serving",
     _pd(extraArgs=["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']),
     "spec.extraArgs[0]", "nvlfleet renders --kv-transfer-config from spec.disaggregation"),
    ("KV offloading on a P/D serving", _pd(extraArgs=["--kv-offloading-size", "64"]), "spec.extraArgs[0]",
     "silently replacing NixlConnector"),
    ("unknown kv-transfer-config key", {"extraArgs": ["--kv-transfer-config", '{"kv_conector":"NixlConnector"}']},
     "spec.extraArgs[0]", "no key 'kv_conector' in --kv-transfer-config"),
    ("raw unregistered connector",
     {"extraArgs": ["--kv-transfer-config", '{"kv_connector":"FooConnector","kv_role":"kv_both"}']},
     "spec.extraArgs[0]", "registers no KV connector 'FooConnector'"),
    ("raw connector without kv_role", {"extraArgs": ["--kv-transfer-config", '{"kv_connector":"NixlConnector"}']},
     "spec.extraArgs[0]", "kv_connector without kv_role"),
    ("V4.1 PCP with KV transfer", _pd(extraArgs=["--prefill-context-parallel-size", "2"]), "spec.extraArgs[0]",
     "DeepSeek V4.1 cannot run prefill context parallelism above 1 with KV transfer"),
    ("NIXL consumer with PCP", _pd(extraArgs=["--prefill-context-parallel-size", "2"]), "spec.extraArgs[0]",
     "a NIXL kv_consumer cannot run prefill context parallelism"),
    ("V4.1 PP with NIXL", _pd(extraArgs=["--pipeline-parallel-size", "2"]), "spec.extraArgs[0]",
     "DeepSeek V4.1 with NixlConnector needs pipeline-parallel size 1"),
    ("V4.1 CPU KV buffer", _pd(disaggregation={"kvBufferDevice": "cpu"}), "spec.disaggregation.kvBufferDevice",
     "NIXL host staging does not preserve CSA-linear shared tensors"),
    ("V4.1 raw CPU KV buffer", {"extraArgs": [
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cpu"}']},
     "spec.extraArgs[0]", "NIXL host staging does not preserve CSA-linear shared tensors"),
    ("routed experts with NIXL", _pd(extraArgs=["--enable-return-routed-experts"]), "spec.extraArgs[0]",
     "--enable-return-routed-experts cannot run with NixlConnector"),
    ("V4.1 latency-specialized decode with KV transfer",
     {**_latency_gb300(), "extraArgs": ["--additional-config", '{"decode_backend":"latency_specialized"}']},
     "spec.extraArgs[0]", "decode_backend latency_specialized cannot run with KV transfer"),
    ("prefill and decode attention backends differ", _latency_gb300(), "spec.kernels.attentionBackend",
     "prefill and decode disagree on the attention backend (prefill auto, decode FLASHINFER_MLA_SPARSE_DSV41)"),
    ("prefill and decode KV-cache dtypes differ", _latency_gb300(), "spec.kernels.kvCacheDtype",
     "prefill and decode disagree on the KV-cache dtype (prefill auto, decode fp8)"),
    ("side channel host in extraEnv", _pd(extraEnv=[{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "0.0.0.0"}]),
     "spec.extraEnv[0].name", "nvlfleet sets it to each pod's own IP"),
]  # fmt: skip
