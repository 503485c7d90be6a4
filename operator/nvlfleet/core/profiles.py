"""Tuning profiles: the effective vLLM settings for one role of a DeepSeekServing, each with the reason it is right.

Pure core. Sits between validation and rendering in the data flow
(spec → validate → plan → **profiles** → render → apply): ``validation`` checks the effective settings against
the vLLM facts, ``render`` turns them into ``vllm serve`` argv and env. Both call ``effective(spec, role)``, so
what is validated is exactly what is rendered.

The knowledge is data, not code: ``data/profiles/vllm-<major.minor>/`` holds one directory per vLLM dialect
(``dialect.yaml``: how that version spells each flag; ``common.yaml``: rules every family shares;
``<family>.yaml``: the family's rules). A rule matches the group's context (GPU
generation, goal, role, multi-node, data/expert parallel, tensor size, NVLink fabric) and sets settings; every
setting carries a one-line ``why`` citing its source. Rules apply in order (common first, then the family), later
ones win. Then the spec's explicit choices are merged over them, then ``consequences`` fix settings the merge
left inconsistent (only settings the user did not choose; a conflict with an explicit choice is reported by
``nvlfleet.core.validation``). Finally two values are computed rather than looked up:

- redundant experts ``r``: the smallest ``r >= eplb.min_redundant_experts`` with ``(experts + r) % EP == 0``
  (README §3 EPLB rule), EP being tensor × data, the routed-expert count coming from ``nvlfleet.facts`` (the
  model's repository name selects it). Where the facts know no count (DeepSeek-V4.0 today) the profile turns
  EPLB off rather than guess: a wrong count makes every rank fail at startup;
- CUDA-graph capture sizes (``cuda_graph.capture_sizes: window``): ``n·(1+K)`` tokens for request counts ``n``
  spaced like vLLM's own defaults (1, 2, 4, every 8 up to 256, every 16 beyond) across the spec's
  ``minBatch..maxBatch`` window, clipped to ``max-num-seqs`` (a rank never schedules more requests than that, so
  larger graphs would never be replayed) and to ``max-num-batched-tokens``. K is the speculative token count: a
  uniform decode step verifies 1+K rows per request (README §2, §5).

"User-set" means present in the spec as written (pydantic's ``model_fields_set``), so a field left out is the
profile's to choose even where the API has a default. The CRD must therefore not default those fields
server-side (``parallelism.expert``, ``speculative.*``, ``maxModelLen``, ``kernels.cudaGraph.minBatch/maxBatch``),
or every object read back from the API server would look user-set.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from importlib import resources
from typing import Any, TypeAlias

import yaml

from nvlfleet.api import models, problems
from nvlfleet.facts import facts, hardware

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

_PROFILES_DIR = "data/profiles"

# Every setting a profile may set. ``env.<NAME>`` keys are open-ended (one per environment variable).
SETTING_KEYS: frozenset[str] = frozenset(
    {
        "max_model_len",
        "expert_parallel",
        "attention_backend",
        "moe_backend",
        "kv_cache_dtype",
        "all2all_backend",
        "dbo.enabled",
        "dbo.decode_token_threshold",
        "dbo.prefill_token_threshold",
        "eplb.enabled",
        "eplb.window_size",
        "eplb.step_interval",
        "eplb.use_async",
        "eplb.min_redundant_experts",
        "cuda_graph.mode",
        "cuda_graph.capture_sizes",
        "max_num_seqs",
        "max_num_batched_tokens",
        "speculative.enabled",
        "speculative.method",
        "speculative.num_speculative_tokens",
        "performance_mode",
        "attention_config",
        "additional_config",
        "api_server_count",
        "reasoning_parser",
        "tool_call_parser",
        "enable_auto_tool_choice",
        "probe.period_seconds",
        "probe.startup_slack_seconds",
        "probe.timeout_seconds",
        "probe.readiness_failure_threshold",
        "probe.liveness_period_seconds",
        "probe.liveness_failure_threshold",
    }
)
ENV_PREFIX = "env."

# What a rule's ``when`` may test. ``expert`` is itself decided by rules (``expert_parallel``), so a rule that sets
# ``expert_parallel`` must not test it (the loader enforces this).
CONTEXT_KEYS: frozenset[str] = frozenset(
    {"gpu", "goal", "role", "multi_node", "data_parallel", "tensor", "expert", "fabric"}
)

# The request-count grid of the capture window mirrors vLLM's default capture list: 1, 2, 4, then every 8 up to
# 256, then every 16.
_FINE_STEP_LIMIT = 256
_FINE_STEP = 8
_COARSE_STEP = 16


class ProfileError(Exception):
    """The profile data itself is wrong (a packaging bug, caught by the unit tests), not the user's spec."""


# ---------------------------------------------------------------------------------------------------------------
# Data model


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why a setting has its value, and where that came from (a profile rule or a spec field path)."""

    why: str
    source: str

    def __str__(self) -> str:
        return f"{self.why} [{self.source}]"


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How one vLLM minor version spells the settings nvlfleet renders."""

    name: str  # directory name, e.g. "vllm-0.33"
    versions: str  # version prefix it applies to, e.g. "0.33."
    command: tuple[str, ...]
    python: str  # interpreter in the vLLM image, for the worker launcher
    host: str
    port: int
    health_path: str
    metrics_path: str
    data_parallel_rpc_port: int
    flags: Mapping[str, str]  # setting -> flag, e.g. "max_num_seqs" -> "--max-num-seqs"
    frontend_flags: frozenset[str]  # flags only the API-serving leader takes
    config_keys: Mapping[str, Mapping[str, str]]  # JSON keys inside --eplb-config, --speculative-config, ...

    def flag(self, setting: str) -> str:
        return self.flags[setting]

    def key(self, config: str, field: str) -> str:
        return self.config_keys[config][field]


@dataclasses.dataclass(frozen=True)
class Rule:
    """When the context matches ``when``, set ``settings`` (key -> (value, reason))."""

    name: str
    when: Mapping[str, Any]
    settings: Mapping[str, tuple[JsonValue, Reason]]


@dataclasses.dataclass(frozen=True)
class FamilyProfile:
    """One model family's rules on one vLLM dialect (common rules first, then the family's)."""

    family: models.ModelFamily
    dialect: Dialect
    rules: tuple[Rule, ...]
    consequences: tuple[Rule, ...]


@dataclasses.dataclass(frozen=True)
class Speculative:
    method: str
    num_speculative_tokens: int


@dataclasses.dataclass(frozen=True)
class DualBatchOverlap:
    enabled: bool
    decode_token_threshold: int
    prefill_token_threshold: int


@dataclasses.dataclass(frozen=True)
class Eplb:
    enabled: bool
    num_redundant_experts: int  # 0 when disabled
    window_size: int
    step_interval: int
    use_async: bool


@dataclasses.dataclass(frozen=True)
class CudaGraph:
    mode: str | None  # None: vLLM's default
    capture_sizes: tuple[int, ...] | None  # None: vLLM derives them (or --performance-mode does)


@dataclasses.dataclass(frozen=True)
class Probes:
    """HTTP probes on the leader (headless workers serve no HTTP: README §6)."""

    period_seconds: int
    timeout_seconds: int
    startup_failure_threshold: int
    readiness_failure_threshold: int
    liveness_period_seconds: int
    liveness_failure_threshold: int

    @property
    def startup_budget_seconds(self) -> int:
        return self.period_seconds * self.startup_failure_threshold


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The effective settings of one role's engine group. None means "leave it to vLLM" (flag not rendered)."""

    dialect: Dialect
    family: models.ModelFamily
    gpu: models.GpuGeneration
    goal: models.Goal
    role: models.RoleName
    topology: models.Topology
    fabric: bool  # multi-node NVLink with an IMEX channel (GB200/GB300 and spec.placement.computeDomain)
    routed_experts: int | None  # None: the vLLM facts know no count for this model
    expert_parallel: bool
    attention_backend: str | None
    moe_backend: str | None
    all2all_backend: str | None
    kv_cache_dtype: str | None
    dbo: DualBatchOverlap
    eplb: Eplb
    cuda_graph: CudaGraph
    max_model_len: int
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    speculative: Speculative | None  # None: no speculative decoding
    performance_mode: str | None
    attention_config: Mapping[str, JsonValue]  # empty: not rendered
    additional_config: Mapping[str, JsonValue]  # empty: not rendered
    api_server_count: int | None
    reasoning_parser: str | None
    tool_call_parser: str | None
    enable_auto_tool_choice: bool
    env: tuple[tuple[str, str], ...]  # sorted by name
    probes: Probes
    reasons: Mapping[str, Reason]  # setting key (see SETTING_KEYS, env.<NAME>, derived keys) -> reason
    user_set: frozenset[str]  # setting keys the spec chose explicitly

    @property
    def ep_size(self) -> int:
        """Expert-parallel size: every GPU of the group when EP is on (README §3: the EP group is DP×PCP×TP)."""
        return self.topology.tensor * self.topology.data if self.expert_parallel else 1

    @property
    def multi_node(self) -> bool:
        return self.topology.nodes_per_group > 1

    @property
    def engine_ready_timeout_seconds(self) -> int | None:
        value = dict(self.env).get("VLLM_ENGINE_READY_TIMEOUT_S")
        return int(value) if value is not None else None


# ---------------------------------------------------------------------------------------------------------------
# Loading


def _reason(entry: Any, where: str) -> tuple[JsonValue, str]:
    if not isinstance(entry, dict) or set(entry) != {"value", "why"}:
        raise ProfileError(f"{where}: a setting is {{value, why}}, got {entry!r}")
    why = entry["why"]
    if not isinstance(why, str) or not why.strip():
        raise ProfileError(f"{where}: every setting needs a one-line why")
    value: JsonValue = entry["value"]
    return value, why


def _rules(raw: Any, source: str, *, consequence: bool) -> tuple[Rule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProfileError(f"{source}: rules must be a list")
    out: list[Rule] = []
    for index, item in enumerate(raw):
        name = str(item.get("name", f"#{index}"))
        where = f"{source} {'consequence' if consequence else 'rule'} {name!r}"
        when = item.get("if" if consequence else "when") or {}
        if not consequence and not set(when) <= CONTEXT_KEYS:
            raise ProfileError(f"{where}: unknown context keys {sorted(set(when) - CONTEXT_KEYS)}")
        settings: dict[str, tuple[JsonValue, Reason]] = {}
        for key, entry in (item.get("set") or {}).items():
            if key not in SETTING_KEYS and not key.startswith(ENV_PREFIX):
                raise ProfileError(f"{where}: unknown setting {key!r}")
            value, why = _reason(entry, f"{where} {key}")
            settings[key] = (value, Reason(why=why, source=f"{source}: {name}"))
        if "expert_parallel" in settings and "expert" in when:
            raise ProfileError(f"{where}: a rule that decides expert_parallel cannot test expert")
        out.append(Rule(name=name, when=dict(when), settings=settings))
    return tuple(out)


def _read_yaml(*parts: str) -> Any:
    return yaml.safe_load(resources.files("nvlfleet.facts").joinpath(_PROFILES_DIR, *parts).read_text())


@functools.cache
def dialects() -> tuple[Dialect, ...]:
    """Every vLLM dialect shipped in the package data, newest first."""
    root = resources.files("nvlfleet.facts").joinpath(_PROFILES_DIR)
    found: list[Dialect] = []
    for entry in root.iterdir():
        if not entry.is_dir() or not entry.joinpath("dialect.yaml").is_file():
            continue
        raw = _read_yaml(entry.name, "dialect.yaml")
        http = raw["http"]
        found.append(
            Dialect(
                name=entry.name,
                versions=str(raw["versions"]),
                command=tuple(str(part) for part in raw["command"]),
                python=str(raw["python"]),
                host=str(http["host"]),
                port=int(http["port"]),
                health_path=str(http["healthPath"]),
                metrics_path=str(http["metricsPath"]),
                data_parallel_rpc_port=int(raw["dataParallelRpcPort"]),
                flags={str(k): str(v) for k, v in raw["flags"].items()},
                frontend_flags=frozenset(str(f) for f in raw["frontendFlags"]),
                config_keys={str(k): {str(f): str(j) for f, j in v.items()} for k, v in raw["configKeys"].items()},
            )
        )
    return tuple(sorted(found, key=lambda d: d.name, reverse=True))


def dialect_for(vllm_version: str) -> Dialect:
    """The dialect for a vLLM version; raises InvalidSpec naming the known ones when there is none."""
    for dialect in dialects():
        if vllm_version.startswith(dialect.versions):
            return dialect
    known = ", ".join(f"{d.versions}x" for d in dialects())
    raise problems.InvalidSpec(
        [
            problems.Problem(
                "spec.runtime.vllmVersion",
                f"no tuning profile for vLLM {vllm_version}; nvlfleet knows {known}",
            )
        ]
    )


@functools.cache
def family_profile(dialect_name: str, family: models.ModelFamily) -> FamilyProfile:
    """Common rules + the family's rules of one dialect, as loaded from package data."""
    dialect = next((d for d in dialects() if d.name == dialect_name), None)
    if dialect is None:
        raise ProfileError(f"no dialect directory {dialect_name!r}")
    common = _read_yaml(dialect_name, "common.yaml")
    raw = _read_yaml(dialect_name, f"{family.value}.yaml")
    if raw.get("family") != family.value:
        raise ProfileError(f"{dialect_name}/{family.value}.yaml declares family {raw.get('family')!r}")
    common_src, family_src = f"{dialect_name}/common.yaml", f"{dialect_name}/{family.value}.yaml"
    return FamilyProfile(
        family=family,
        dialect=dialect,
        rules=_rules(common.get("rules"), common_src, consequence=False)
        + _rules(raw.get("rules"), family_src, consequence=False),
        consequences=_rules(common.get("consequences"), common_src, consequence=True)
        + _rules(raw.get("consequences"), family_src, consequence=True),
    )


# ---------------------------------------------------------------------------------------------------------------
# Matching


def _matches(condition: Any, actual: Any) -> bool:
    if isinstance(condition, dict) and set(condition) == {"not"}:
        return not _matches(condition["not"], actual)
    if isinstance(condition, list):
        return any(_matches(c, actual) for c in condition)
    # bool is an int in Python; keep `true` from matching tensor 1
    return type(condition) is type(actual) and bool(condition == actual)


def _lookup(view: Mapping[str, Any], key: str) -> Any:
    if key in view:
        return view[key]
    head, _, tail = key.partition(".")
    container = view.get(head)
    if tail and isinstance(container, dict):
        return container.get(tail)
    return None


def _applies(when: Mapping[str, Any], view: Mapping[str, Any]) -> bool:
    return all(_matches(condition, _lookup(view, key)) for key, condition in when.items())


# ---------------------------------------------------------------------------------------------------------------
# The effective settings


def role_spec(spec: models.DeepSeekServingSpec, role: models.RoleName) -> models.RoleSpec:
    """The spec of one role; raises InvalidSpec when the serving has no such role."""
    found = spec.roles.prefill if role is models.RoleName.PREFILL else spec.roles.decode
    if found is None:
        raise problems.InvalidSpec([problems.Problem(f"spec.roles.{role.value}", "the serving has no such role")])
    return found


def _kernel_path(field: str) -> str:
    """The wire path of a spec.kernels field, as the user wrote it (the models' alias, e.g. all2AllBackend)."""
    return f"spec.kernels.{models.KernelSpec.model_fields[field].alias}"


def _user_choices(
    spec: models.DeepSeekServingSpec, role: models.RoleName, role_spec: models.RoleSpec
) -> dict[str, tuple[JsonValue, Reason]]:
    """The settings the spec states explicitly, with the field path they came from."""
    chosen: dict[str, tuple[JsonValue, Reason]] = {}

    def take(key: str, value: JsonValue, path: str) -> None:
        chosen[key] = (value, Reason(why="chosen in the spec", source=path))

    role_path = f"spec.roles.{role.value}"
    if "expert" in role_spec.parallelism.model_fields_set:
        take("expert_parallel", role_spec.parallelism.expert, f"{role_path}.parallelism.expert")
    if role_spec.max_num_seqs is not None:
        take("max_num_seqs", role_spec.max_num_seqs, f"{role_path}.maxNumSeqs")
    if role_spec.max_num_batched_tokens is not None:
        take("max_num_batched_tokens", role_spec.max_num_batched_tokens, f"{role_path}.maxNumBatchedTokens")
    if "max_model_len" in spec.model_fields_set:
        take("max_model_len", spec.max_model_len, "spec.maxModelLen")
    spec_dec = spec.speculative
    if "enabled" in spec_dec.model_fields_set:
        take("speculative.enabled", spec_dec.enabled, "spec.speculative.enabled")
    if spec_dec.method is not None:
        take("speculative.method", spec_dec.method, "spec.speculative.method")
    if "num_speculative_tokens" in spec_dec.model_fields_set:
        take(
            "speculative.num_speculative_tokens",
            spec_dec.num_speculative_tokens,
            "spec.speculative.numSpeculativeTokens",
        )
    kernels = spec.kernels
    dbo, eplb = kernels.dual_batch_overlap, kernels.eplb
    optional: list[tuple[str, JsonValue, str]] = [
        ("attention_backend", kernels.attention_backend, _kernel_path("attention_backend")),
        ("moe_backend", kernels.moe_backend, _kernel_path("moe_backend")),
        ("all2all_backend", kernels.all2all_backend, _kernel_path("all2all_backend")),
        ("kv_cache_dtype", kernels.kv_cache_dtype, _kernel_path("kv_cache_dtype")),
    ]
    if dbo is not None:
        optional += [
            ("dbo.enabled", dbo.enabled, "spec.kernels.dualBatchOverlap.enabled"),
            (
                "dbo.decode_token_threshold",
                dbo.decode_token_threshold,
                "spec.kernels.dualBatchOverlap.decodeTokenThreshold",
            ),
            (
                "dbo.prefill_token_threshold",
                dbo.prefill_token_threshold,
                "spec.kernels.dualBatchOverlap.prefillTokenThreshold",
            ),
        ]
    if eplb is not None:
        optional += [
            ("eplb.enabled", eplb.enabled, "spec.kernels.eplb.enabled"),
            ("eplb.window_size", eplb.window_size, "spec.kernels.eplb.windowSize"),
            ("eplb.step_interval", eplb.step_interval, "spec.kernels.eplb.stepInterval"),
        ]
    for key, value, path in optional:
        if value is not None:
            take(key, value, path)
    if (graph := kernels.cuda_graph) is not None:
        if graph.mode is not None:
            take("cuda_graph.mode", graph.mode, "spec.kernels.cudaGraph.mode")
        if graph.capture_sizes is not None:
            take("cuda_graph.capture_sizes", list(graph.capture_sizes), "spec.kernels.cudaGraph.captureSizes")
        elif graph.model_fields_set & {"min_batch", "max_batch"}:
            take("cuda_graph.capture_sizes", "window", "spec.kernels.cudaGraph")
    return chosen


def request_grid(low: int, high: int) -> list[int]:
    """Request counts whose graphs cover low..high with vLLM's default spacing (both ends included)."""
    if high < low:
        return []
    grid = {low, high}
    grid.update(n for n in (1, 2, 4) if low <= n <= high)
    grid.update(range(max(_FINE_STEP, -(-low // _FINE_STEP) * _FINE_STEP), min(high, _FINE_STEP_LIMIT) + 1, _FINE_STEP))
    if high > _FINE_STEP_LIMIT:
        start = _FINE_STEP_LIMIT + max(0, -(-(low - _FINE_STEP_LIMIT) // _COARSE_STEP)) * _COARSE_STEP
        grid.update(range(start, high + 1, _COARSE_STEP))
    return sorted(grid)


def capture_window(
    graph: models.CudaGraphSpec, max_num_seqs: int | None, max_num_batched_tokens: int | None, spec_tokens: int
) -> tuple[int, ...]:
    """Token counts to capture: n·(1+K) for the request grid of the window, clipped as the module doc says."""
    high = graph.max_batch if max_num_seqs is None else min(graph.max_batch, max_num_seqs)
    low = min(graph.min_batch, high)
    rows = 1 + spec_tokens
    sizes = {n * rows for n in request_grid(low, high)}
    if max_num_batched_tokens is not None:
        sizes = {s for s in sizes if s <= max_num_batched_tokens} or {min(max_num_batched_tokens, low * rows)}
    return tuple(sorted(sizes))


def redundant_experts(experts: int, ep_size: int, minimum: int) -> int:
    """The smallest r >= minimum with (experts + r) divisible by the EP size (README §3 EPLB rule)."""
    return minimum + (-(experts + minimum)) % ep_size


def _as_int(value: JsonValue, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError(f"{key} must be an integer, got {value!r}")
    return value


def _as_opt_int(value: JsonValue, key: str) -> int | None:
    return None if value is None else _as_int(value, key)


def _as_bool(value: JsonValue, key: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(f"{key} must be true or false, got {value!r}")
    return value


def _as_opt_str(value: JsonValue, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ProfileError(f"{key} must be a string or null, got {value!r}")
    return value


def _as_mapping(value: JsonValue, key: str) -> dict[str, JsonValue]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(f"{key} must be a mapping, got {value!r}")
    return dict(value)


def _routed_experts(spec: models.DeepSeekServingSpec) -> facts.ExpertCount | None:
    """The model's routed-expert count from the pinned version's facts (by repository name), if known."""
    try:
        version_facts = facts.load(spec.runtime.vllm_version)
    except facts.UnknownVersion as err:
        raise problems.InvalidSpec([problems.Problem("spec.runtime.vllmVersion", str(err))]) from err
    family = version_facts.families.get(spec.model.family.value)
    return None if family is None else family.experts_for(spec.model.name)


def effective(spec: models.DeepSeekServingSpec, role: models.RoleName) -> Tuning:
    """The settings one role's engine group runs with: profile rules, then the spec's choices, then consequences.

    Raises ``problems.InvalidSpec`` only for what no profile can honour (unknown vLLM version, absent role);
    everything else that can be wrong with the result is for ``nvlfleet.core.validation`` to report.
    """
    dialect = dialect_for(spec.runtime.vllm_version)
    profile = family_profile(dialect.name, spec.model.family)
    experts = _routed_experts(spec)
    this_role = role_spec(spec, role)
    topology = models.role_topology(spec.gpu, this_role)
    fabric = hardware.generation(spec.gpu.value).multi_node_nvlink and spec.placement.compute_domain
    context: dict[str, Any] = {
        "gpu": spec.gpu.value,
        "goal": spec.goal.value,
        "role": role.value,
        "multi_node": topology.nodes_per_group > 1,
        "data_parallel": topology.data > 1,
        "tensor": topology.tensor,
        "fabric": fabric,
    }
    user = _user_choices(spec, role, this_role)

    # Expert parallelism first: other rules test it.
    if "expert_parallel" in user:
        expert = bool(user["expert_parallel"][0])
    else:
        expert = True
        for rule in profile.rules:
            if "expert_parallel" in rule.settings and _applies(rule.when, context):
                expert = bool(rule.settings["expert_parallel"][0])
    context["expert"] = expert

    merged: dict[str, tuple[JsonValue, Reason]] = {}
    for rule in profile.rules:
        if _applies(rule.when, context):
            merged.update(rule.settings)
    merged.update(user)
    missing = SETTING_KEYS - set(merged)
    if missing:
        raise ProfileError(f"{profile.dialect.name}/{profile.family.value}: no value for {sorted(missing)}")

    ep_size = topology.tensor * topology.data if _as_bool(merged["expert_parallel"][0], "expert_parallel") else 1
    for consequence in profile.consequences:
        view = {**context, "ep_size": ep_size, **{k: v for k, (v, _) in merged.items()}}
        if _applies(consequence.when, view):
            merged.update({k: v for k, v in consequence.settings.items() if k not in user})
    if experts is None and "eplb.enabled" not in user:
        merged["eplb.enabled"] = (
            False,
            Reason(
                why=f"the vLLM facts give no routed-expert count for {spec.model.name}, so (experts + r) % EP == 0 "
                "cannot be kept (README §3); enable it in spec.kernels.eplb with numRedundantExperts",
                source=f"nvlfleet.facts {spec.runtime.vllm_version}: families.{spec.model.family.value}",
            ),
        )

    def value(key: str) -> JsonValue:
        return merged[key][0]

    reasons: dict[str, Reason] = {k: r for k, (_, r) in merged.items()}
    if experts is not None:
        reasons["routed_experts"] = Reason(why=experts.source, source=f"nvlfleet.facts {spec.runtime.vllm_version}")

    speculative: Speculative | None = None
    if _as_bool(value("speculative.enabled"), "speculative.enabled"):
        method = _as_opt_str(value("speculative.method"), "speculative.method")
        if method is None:
            raise ProfileError(f"{profile.family.value}: speculative.method has no default")
        speculative = Speculative(
            method=method,
            num_speculative_tokens=_as_int(
                value("speculative.num_speculative_tokens"), "speculative.num_speculative_tokens"
            ),
        )

    max_num_seqs = _as_opt_int(value("max_num_seqs"), "max_num_seqs")
    max_num_batched_tokens = _as_opt_int(value("max_num_batched_tokens"), "max_num_batched_tokens")

    eplb_on = _as_bool(value("eplb.enabled"), "eplb.enabled")
    redundant = 0
    if eplb_on:
        explicit = spec.kernels.eplb.num_redundant_experts if spec.kernels.eplb is not None else None
        if explicit is not None:
            redundant = explicit
            reasons["eplb.num_redundant_experts"] = Reason(
                why="chosen in the spec", source="spec.kernels.eplb.numRedundantExperts"
            )
        elif experts is not None:
            minimum = _as_int(value("eplb.min_redundant_experts"), "eplb.min_redundant_experts")
            redundant = redundant_experts(experts.experts, ep_size, minimum)
            reasons["eplb.num_redundant_experts"] = Reason(
                why=f"smallest r >= {minimum} with ({experts.experts} + r) % EP{ep_size} == 0 (README §3 EPLB rule)",
                source=reasons["eplb.min_redundant_experts"].source,
            )

    sizes_setting = value("cuda_graph.capture_sizes")
    capture_sizes: tuple[int, ...] | None
    if isinstance(sizes_setting, list):
        capture_sizes = tuple(sorted({_as_int(s, "cuda_graph.capture_sizes") for s in sizes_setting}))
    elif sizes_setting == "window":
        graph = spec.kernels.cuda_graph or models.CudaGraphSpec()
        spec_tokens = speculative.num_speculative_tokens if speculative is not None else 0
        capture_sizes = capture_window(graph, max_num_seqs, max_num_batched_tokens, spec_tokens)
        reasons["cuda_graph.capture_sizes"] = Reason(
            why=f"{reasons['cuda_graph.capture_sizes'].why}; window {graph.min_batch}..{graph.max_batch} requests "
            f"× {1 + spec_tokens} rows",
            source=reasons["cuda_graph.capture_sizes"].source,
        )
    elif sizes_setting == "auto":
        capture_sizes = None
    else:
        raise ProfileError(f"cuda_graph.capture_sizes must be window, auto or a list, got {sizes_setting!r}")

    api_servers = value("api_server_count")
    if api_servers == "data_local":
        api_server_count = topology.data_local if topology.data > 1 else None
    else:
        api_server_count = _as_opt_int(api_servers, "api_server_count")

    env = tuple(
        sorted(
            (key.removeprefix(ENV_PREFIX), str(v))
            for key, (v, _) in merged.items()
            if key.startswith(ENV_PREFIX) and v is not None
        )
    )
    period = _as_int(value("probe.period_seconds"), "probe.period_seconds")
    timeout = int(dict(env).get("VLLM_ENGINE_READY_TIMEOUT_S", "600"))
    slack = _as_int(value("probe.startup_slack_seconds"), "probe.startup_slack_seconds")
    probes = Probes(
        period_seconds=period,
        timeout_seconds=_as_int(value("probe.timeout_seconds"), "probe.timeout_seconds"),
        startup_failure_threshold=math.ceil((timeout + slack) / period),
        readiness_failure_threshold=_as_int(
            value("probe.readiness_failure_threshold"), "probe.readiness_failure_threshold"
        ),
        liveness_period_seconds=_as_int(value("probe.liveness_period_seconds"), "probe.liveness_period_seconds"),
        liveness_failure_threshold=_as_int(
            value("probe.liveness_failure_threshold"), "probe.liveness_failure_threshold"
        ),
    )

    return Tuning(
        dialect=dialect,
        family=spec.model.family,
        gpu=spec.gpu,
        goal=spec.goal,
        role=role,
        topology=topology,
        fabric=fabric,
        routed_experts=None if experts is None else experts.experts,
        expert_parallel=_as_bool(value("expert_parallel"), "expert_parallel"),
        attention_backend=_as_opt_str(value("attention_backend"), "attention_backend"),
        moe_backend=_as_opt_str(value("moe_backend"), "moe_backend"),
        all2all_backend=_as_opt_str(value("all2all_backend"), "all2all_backend"),
        kv_cache_dtype=_as_opt_str(value("kv_cache_dtype"), "kv_cache_dtype"),
        dbo=DualBatchOverlap(
            enabled=_as_bool(value("dbo.enabled"), "dbo.enabled"),
            decode_token_threshold=_as_int(value("dbo.decode_token_threshold"), "dbo.decode_token_threshold"),
            prefill_token_threshold=_as_int(value("dbo.prefill_token_threshold"), "dbo.prefill_token_threshold"),
        ),
        eplb=Eplb(
            enabled=eplb_on,
            num_redundant_experts=redundant,
            window_size=_as_int(value("eplb.window_size"), "eplb.window_size"),
            step_interval=_as_int(value("eplb.step_interval"), "eplb.step_interval"),
            use_async=_as_bool(value("eplb.use_async"), "eplb.use_async"),
        ),
        cuda_graph=CudaGraph(
            mode=_as_opt_str(value("cuda_graph.mode"), "cuda_graph.mode"), capture_sizes=capture_sizes
        ),
        max_model_len=_as_int(value("max_model_len"), "max_model_len"),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        speculative=speculative,
        performance_mode=_as_opt_str(value("performance_mode"), "performance_mode"),
        attention_config=_as_mapping(value("attention_config"), "attention_config"),
        additional_config=_as_mapping(value("additional_config"), "additional_config"),
        api_server_count=api_server_count,
        reasoning_parser=_as_opt_str(value("reasoning_parser"), "reasoning_parser"),
        tool_call_parser=_as_opt_str(value("tool_call_parser"), "tool_call_parser"),
        enable_auto_tool_choice=_as_bool(value("enable_auto_tool_choice"), "enable_auto_tool_choice"),
        env=env,
        probes=probes,
        reasons=reasons,
        user_set=frozenset(user),
    )


def explain(tuning: Tuning) -> list[str]:
    """One line per setting: ``key = value  # why [source]``, sorted by key (for ``nvlfleet render --explain``)."""
    values: dict[str, object] = {
        "expert_parallel": tuning.expert_parallel,
        "ep_size": tuning.ep_size,
        "routed_experts": tuning.routed_experts,
        "attention_backend": tuning.attention_backend,
        "moe_backend": tuning.moe_backend,
        "all2all_backend": tuning.all2all_backend,
        "kv_cache_dtype": tuning.kv_cache_dtype,
        "dbo.enabled": tuning.dbo.enabled,
        "eplb.enabled": tuning.eplb.enabled,
        "eplb.num_redundant_experts": tuning.eplb.num_redundant_experts,
        "cuda_graph.mode": tuning.cuda_graph.mode,
        "cuda_graph.capture_sizes": tuning.cuda_graph.capture_sizes,
        "max_model_len": tuning.max_model_len,
        "max_num_seqs": tuning.max_num_seqs,
        "max_num_batched_tokens": tuning.max_num_batched_tokens,
        "speculative": tuning.speculative,
        "performance_mode": tuning.performance_mode,
        "attention_config": dict(tuning.attention_config),
        "additional_config": dict(tuning.additional_config),
        "api_server_count": tuning.api_server_count,
        **{f"env.{name}": val for name, val in tuning.env},
    }
    reason_key = {"speculative": "speculative.method", "ep_size": "expert_parallel"}
    lines = []
    for key in sorted(values):
        reason = tuning.reasons.get(reason_key.get(key, key))
        lines.append(f"{key} = {values[key]!r}" + (f"  # {reason}" if reason else ""))
    return lines
