"""The tuning settings: one row per setting nvlfleet tunes, naming it in every place it appears.

Pure core, read by the two steps that handle tuning (spec → validate → plan → **profiles** → render):
``profiles`` takes from this table which keys a profile rule may set, which spec field chooses each setting
(a user choice overrides the profile) and which ``Tuning`` attribute holds the effective value;
``validation`` takes the name the pinned vLLM's rules give each setting, and the flags nvlfleet owns because a
spec field sets them. A setting added to the spec model is added here once; a unit test fails until it is.

Spec fields are attribute paths below ``DeepSeekServingSpec``; ``role`` stands for the role's ``RoleSpec``
(``spec.roles.<role>``). Wire paths (``spec.kernels.all2allBackend``) come from the models' aliases.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

import pydantic

from nvlfleet.api import models

Field: typing.TypeAlias = tuple[str, ...]

ROLE = "role"  # the first part of a per-role field: the role's RoleSpec
ENV_PREFIX = "env."  # profile keys env.<NAME> set environment variables; they are open-ended, so not rows


@dataclasses.dataclass(frozen=True)
class Setting:
    """One tuning setting.

    ``key``: as profile YAML, ``Tuning.reasons`` and ``Tuning.user_set`` spell it.
    ``attribute``: the dotted ``profiles.Tuning`` attribute holding the effective value (None: the profile value
    only feeds another setting, e.g. the startup slack of the probes).
    ``field``: the spec field that chooses it (None: only profiles set it).
    ``rule``: the name the pinned vLLM's rules use (``facts`` rules.yaml ``settings``; None: no rule tests it).
    ``flag``: the argparse dest of the vLLM flag that carries it alone, refused in ``extraArgs`` in favour of
    ``field``.
    ``profiled``: a profile rule sets it (False: computed from other settings, e.g. the redundant experts).
    ``explained``: ``nvlfleet render --explain`` prints it.
    ``extra_arg``: ``extraArgs`` may override it. Its flag is the profile's alone (no spec field chooses it, and
    nvlfleet does not own it), so the user's flag wins as it would on vLLM's command line, where the last value
    is kept; the profile's flag is then left out of the argv.
    """

    key: str
    attribute: str | None
    field: Field | None = None
    rule: str | None = None
    flag: str | None = None
    profiled: bool = True
    explained: bool = False
    extra_arg: bool = False


# fmt: off
TABLE: tuple[Setting, ...] = (
    Setting("max_model_len", "max_model_len", ("max_model_len",), flag="max_model_len", explained=True),
    Setting("expert_parallel", "expert_parallel", (ROLE, "parallelism", "expert"), rule="expert",
            flag="enable_expert_parallel", explained=True),
    Setting("attention_backend", "attention_backend", ("kernels", "attention_backend"), rule="attentionBackend",
            flag="attention_backend", explained=True),
    Setting("moe_backend", "moe_backend", ("kernels", "moe_backend"), rule="moeBackend", flag="moe_backend",
            explained=True),
    Setting("all2all_backend", "all2all_backend", ("kernels", "all2all_backend"), rule="all2allBackend",
            flag="all2all_backend", explained=True),
    Setting("kv_cache_dtype", "kv_cache_dtype", ("kernels", "kv_cache_dtype"), rule="kvCacheDtype",
            flag="kv_cache_dtype", explained=True),
    Setting("dbo.enabled", "dbo.enabled", ("kernels", "dual_batch_overlap", "enabled"), rule="dbo",
            flag="enable_dbo", explained=True),
    Setting("dbo.decode_token_threshold", "dbo.decode_token_threshold",
            ("kernels", "dual_batch_overlap", "decode_token_threshold"), rule="dboDecodeTokenThreshold",
            flag="dbo_decode_token_threshold"),
    Setting("dbo.prefill_token_threshold", "dbo.prefill_token_threshold",
            ("kernels", "dual_batch_overlap", "prefill_token_threshold"), rule="dboPrefillTokenThreshold",
            flag="dbo_prefill_token_threshold"),
    Setting("eplb.enabled", "eplb.enabled", ("kernels", "eplb", "enabled"), rule="eplb", flag="enable_eplb",
            explained=True),
    Setting("eplb.window_size", "eplb.window_size", ("kernels", "eplb", "window_size")),
    Setting("eplb.step_interval", "eplb.step_interval", ("kernels", "eplb", "step_interval")),
    Setting("eplb.use_async", "eplb.use_async"),
    Setting("eplb.min_redundant_experts", None),
    Setting("eplb.num_redundant_experts", "eplb.num_redundant_experts", ("kernels", "eplb", "num_redundant_experts"),
            rule="redundantExperts", profiled=False, explained=True),
    Setting("cuda_graph.mode", "cuda_graph.mode", ("kernels", "cuda_graph", "mode"), rule="cudagraphMode",
            explained=True),
    Setting("cuda_graph.capture_sizes", "cuda_graph.capture_sizes", ("kernels", "cuda_graph", "capture_sizes"),
            flag="cudagraph_capture_sizes", explained=True),
    Setting("max_num_seqs", "max_num_seqs", (ROLE, "max_num_seqs"), rule="maxNumSeqs", flag="max_num_seqs",
            explained=True),
    Setting("max_num_batched_tokens", "max_num_batched_tokens", (ROLE, "max_num_batched_tokens"),
            flag="max_num_batched_tokens", explained=True),
    Setting("speculative.enabled", "speculative_enabled", ("speculative", "enabled"), rule="speculative"),
    Setting("speculative.method", "speculative.method", ("speculative", "method"), rule="speculativeMethod",
            flag="spec_method"),
    Setting("speculative.num_speculative_tokens", "speculative.num_speculative_tokens",
            ("speculative", "num_speculative_tokens"), rule="speculativeTokens", flag="spec_tokens"),
    Setting("performance_mode", "performance_mode", explained=True, extra_arg=True),
    Setting("attention_config", "attention_config", explained=True, extra_arg=True),
    Setting("additional_config", "additional_config", explained=True, extra_arg=True),
    Setting("api_server_count", "api_server_count", explained=True),
    Setting("reasoning_parser", "reasoning_parser", explained=True, extra_arg=True),
    Setting("tool_call_parser", "tool_call_parser", explained=True, extra_arg=True),
    Setting("enable_auto_tool_choice", "enable_auto_tool_choice", explained=True, extra_arg=True),
    Setting("probe.period_seconds", "probes.period_seconds"),
    Setting("probe.startup_slack_seconds", None),
    Setting("probe.timeout_seconds", "probes.timeout_seconds"),
    Setting("probe.readiness_failure_threshold", "probes.readiness_failure_threshold"),
    Setting("probe.liveness_period_seconds", "probes.liveness_period_seconds"),
    Setting("probe.liveness_failure_threshold", "probes.liveness_failure_threshold"),
)
# fmt: on

BY_KEY: Mapping[str, Setting] = {s.key: s for s in TABLE}

# Every key a profile rule may set (besides env.<NAME>), and must: the merged rules leave none unset.
PROFILE_KEYS: frozenset[str] = frozenset(s.key for s in TABLE if s.profiled)

# Fields that choose no setting of their own: minBatch..maxBatch ask for the capture window
# (cuda_graph.capture_sizes: window), which the profile computes from them.
WINDOW_FIELDS: tuple[Field, ...] = (("kernels", "cuda_graph", "min_batch"), ("kernels", "cuda_graph", "max_batch"))


def stated(spec: models.DeepSeekServingSpec, role_spec: models.RoleSpec, field: Field) -> object:
    """The value the spec states for ``field``; None when the spec as written leaves it out.

    "As written" is pydantic's ``model_fields_set``: a field left out is the profile's to choose even where the
    API has a default.
    """
    owner: object = role_spec if field[0] == ROLE else spec
    for part in field[1 if field[0] == ROLE else 0 : -1]:
        owner = getattr(owner, part)
        if owner is None:
            return None
    assert isinstance(owner, pydantic.BaseModel)
    if field[-1] not in owner.model_fields_set:
        return None
    value: object = getattr(owner, field[-1])
    return value


def wire_path(field: Field, role: str) -> str:
    """The field as the user writes it, e.g. ``spec.roles.decode.maxNumSeqs`` (``role`` fills the role part)."""
    model: type[pydantic.BaseModel] = models.DeepSeekServingSpec
    parts = ["spec"]
    for part in field:
        if part == ROLE:
            model = models.RoleSpec
            parts += ["roles", role]
            continue
        info = model.model_fields[part]
        parts.append(info.alias or part)
        model = _model_in(info.annotation) or model
    return ".".join(parts)


def owned_flags() -> dict[str, str]:
    """Flags (argparse dests) a spec field sets, with the field to use instead (for ``extraArgs``)."""
    return {s.flag: f"use {wire_path(s.field, '<role>')}" for s in TABLE if s.flag is not None and s.field}


def _model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The pydantic model inside X | None (None for a plain value)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [m for m in map(_model_in, typing.get_args(annotation)) if m is not None]
        return found[0] if found else None
    return None
