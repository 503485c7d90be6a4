"""Tuning profiles: the effective vLLM settings for one role of a DeepSeekServing, each with the reason it is right.

Pure core. Sits between validation and rendering in the data flow
(spec → validate → plan → **profiles** → render → apply): ``validation`` checks the effective settings against
the vLLM facts, ``render`` turns them into ``vllm serve`` argv and env. Both call ``effective(spec, role)``, so
what is validated is exactly what is rendered.

The rules come from ``profile_data`` (one vLLM dialect's common and family rules, every setting with a
one-line ``why`` citing its source); which settings exist, which spec field chooses each and which ``Tuning``
attribute holds it is ``settings.TABLE``. ``effective`` takes the steps in order: the profile rules matching the
group's context (common first, then the family; later ones win), the spec's explicit choices merged over them,
then ``consequences`` fix settings the merge left inconsistent (only settings the user did not choose; a
conflict with an explicit choice is reported by ``nvlfleet.core.validation``), then a profile-only flag that
extraArgs repeat (``settings.Setting.extra_arg``) takes the extraArgs value, as on vLLM's command line, where the
last one wins. Finally two values are computed rather than looked up:

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
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from nvlfleet.api import models, problems
from nvlfleet.core import profile_data, settings
from nvlfleet.facts import facts, hardware

# A setting's value and why, as profile rules and the spec's choices give it.
_Entry: TypeAlias = tuple[profile_data.JsonValue, profile_data.Reason]

# The request-count grid of the capture window mirrors vLLM's default capture list: 1, 2, 4, then every 8 up to
# 256, then every 16.
_FINE_STEP_LIMIT = 256
_FINE_STEP = 8
_COARSE_STEP = 16


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

    dialect: profile_data.Dialect
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
    attention_config: Mapping[str, profile_data.JsonValue]  # empty: not rendered
    additional_config: Mapping[str, profile_data.JsonValue]  # empty: not rendered
    api_server_count: int | None
    reasoning_parser: str | None
    tool_call_parser: str | None
    enable_auto_tool_choice: bool
    env: tuple[tuple[str, str], ...]  # sorted by name
    probes: Probes
    reasons: Mapping[str, profile_data.Reason]  # setting key (settings.TABLE, env.<NAME>, routed_experts) -> reason
    user_set: frozenset[str]  # setting keys the spec chose explicitly (a field, or extraArgs for the profile-only)

    @property
    def overridden_flags(self) -> frozenset[str]:
        """The profile's flags that extraArgs set: extraArgs render them, the profile's options are left out."""
        return frozenset(self.dialect.flag(s.key) for s in settings.TABLE if s.extra_arg and s.key in self.user_set)

    @property
    def ep_size(self) -> int:
        """Expert-parallel size: every GPU of the group when EP is on (README §3: the EP group is DP×PCP×TP)."""
        return self.topology.tensor * self.topology.data if self.expert_parallel else 1

    @property
    def speculative_enabled(self) -> bool:
        return self.speculative is not None

    @property
    def multi_node(self) -> bool:
        return self.topology.nodes_per_group > 1

    @property
    def engine_ready_timeout_seconds(self) -> int | None:
        value = dict(self.env).get("VLLM_ENGINE_READY_TIMEOUT_S")
        return int(value) if value is not None else None

    def value(self, key: str) -> object:
        """The effective value of a setting by its key (``settings.TABLE``); None where the group has none."""
        attribute = settings.BY_KEY[key].attribute
        if attribute is None:
            raise KeyError(f"{key} only feeds other settings; no Tuning attribute holds it")
        found: object = self
        for part in attribute.split("."):
            found = None if found is None else getattr(found, part)
        return found


# ---------------------------------------------------------------------------------------------------------------
# The effective settings


def role_spec(spec: models.DeepSeekServingSpec, role: models.RoleName) -> models.RoleSpec:
    """The spec of one role; raises InvalidSpec when the serving has no such role."""
    found = spec.roles.prefill if role is models.RoleName.PREFILL else spec.roles.decode
    if found is None:
        raise problems.InvalidSpec([problems.Problem(f"spec.roles.{role.value}", "the serving has no such role")])
    return found


def _user_choices(
    spec: models.DeepSeekServingSpec, role: models.RoleName, role_spec: models.RoleSpec
) -> dict[str, _Entry]:
    """The spec's choices: the settings it states explicitly, with the field path they came from."""
    chosen: dict[str, _Entry] = {}

    def take(key: str, value: profile_data.JsonValue, field: settings.Field) -> None:
        chosen[key] = (value, profile_data.Reason(why="chosen in the spec", source=settings.wire_path(field, role)))

    for setting in settings.TABLE:
        if not setting.profiled or setting.field is None:
            continue  # the redundant experts are computed, an explicit count is read where they are
        value = settings.stated(spec, role_spec, setting.field)
        if isinstance(value, list):
            take(setting.key, [v for v in value if isinstance(v, int)], setting.field)
        elif isinstance(value, bool | int | str):
            take(setting.key, value, setting.field)
    stated_window = any(settings.stated(spec, role_spec, field) is not None for field in settings.WINDOW_FIELDS)
    if "cuda_graph.capture_sizes" not in chosen and stated_window:
        take("cuda_graph.capture_sizes", "window", settings.WINDOW_FIELDS[0][:-1])
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


def _as_int(value: profile_data.JsonValue, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise profile_data.ProfileError(f"{key} must be an integer, got {value!r}")
    return value


def _as_opt_int(value: profile_data.JsonValue, key: str) -> int | None:
    return None if value is None else _as_int(value, key)


def _as_bool(value: profile_data.JsonValue, key: str) -> bool:
    if not isinstance(value, bool):
        raise profile_data.ProfileError(f"{key} must be true or false, got {value!r}")
    return value


def _as_opt_str(value: profile_data.JsonValue, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise profile_data.ProfileError(f"{key} must be a string or null, got {value!r}")
    return value


def _as_mapping(value: profile_data.JsonValue, key: str) -> dict[str, profile_data.JsonValue]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise profile_data.ProfileError(f"{key} must be a mapping, got {value!r}")
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
    dialect = profile_data.dialect_for(spec.runtime.vllm_version)
    profile = profile_data.family_profile(dialect.name, spec.model.family)
    experts = _routed_experts(spec)
    this_role = role_spec(spec, role)
    topology = models.role_topology(spec.gpu, this_role)
    fabric = hardware.generation(spec.gpu.value).multi_node_nvlink and spec.placement.compute_domain
    context = _context(spec, role, topology, fabric)
    user = _user_choices(spec, role, this_role)
    context["expert"] = _expert_parallel(profile, context, user)
    merged = _profile_rules(profile, context, user)
    # The EP size as the rules and the spec's choices leave it: consequences and EPLB sizing both see this one.
    ep_size = topology.tensor * topology.data if _as_bool(merged["expert_parallel"][0], "expert_parallel") else 1
    _consequences(profile, context, ep_size, merged, user)
    if experts is None and "eplb.enabled" not in user:
        merged["eplb.enabled"] = _eplb_off_without_expert_count(spec)
    overridden = _extra_arg_overrides(spec, dialect, merged)
    merged |= overridden
    return _tuning(spec, role, dialect, topology, fabric, experts, ep_size, merged, frozenset([*user, *overridden]))


def _extra_arg_overrides(
    spec: models.DeepSeekServingSpec, dialect: profile_data.Dialect, merged: Mapping[str, _Entry]
) -> dict[str, _Entry]:
    """The profile-only settings extraArgs set (``settings.Setting.extra_arg``), the last one of each winning.

    They come after the consequences: a user's flag is theirs, and a clash is for validation to report. An
    argument the facts cannot read, or a JSON value that is not an object, overrides nothing (validation
    refuses it).
    """
    version_facts = facts.load(spec.runtime.vllm_version)
    by_dest = {version_facts.flag(dialect.flag(s.key)).dest: s.key for s in settings.TABLE if s.extra_arg}
    found: dict[str, _Entry] = {}
    for arg in version_facts.parse_args(spec.extra_args).args:
        key = by_dest.get(arg.flag.dest)
        if key is None:
            continue
        value: profile_data.JsonValue = arg.value
        if isinstance(merged[key][0], dict):
            try:
                value = json.loads(arg.values[0]) if arg.values else None
            except ValueError:
                continue
            if not isinstance(value, dict):
                continue
        where = problems.path("spec.extraArgs", arg.index)
        found[key] = (
            value,
            profile_data.Reason(why="overridden in extraArgs (vLLM keeps the last value)", source=where),
        )
    return found


def _context(
    spec: models.DeepSeekServingSpec, role: models.RoleName, topology: models.Topology, fabric: bool
) -> dict[str, Any]:
    """What a rule's ``when`` tests (``expert`` comes later: rules decide it)."""
    return {
        "gpu": spec.gpu.value,
        "goal": spec.goal.value,
        "role": role.value,
        "multi_node": topology.nodes_per_group > 1,
        "data_parallel": topology.data > 1,
        "tensor": topology.tensor,
        "fabric": fabric,
        "kv_transfer": spec.roles.prefill is not None,  # disaggregated: every engine runs a KV connector
    }


def _expert_parallel(
    profile: profile_data.FamilyProfile, context: Mapping[str, Any], user: Mapping[str, _Entry]
) -> bool:
    """Expert parallelism first, since other rules test it: the spec's choice, else the last matching rule's."""
    if "expert_parallel" in user:
        return bool(user["expert_parallel"][0])
    expert = True
    for rule in profile.rules:
        if "expert_parallel" in rule.settings and profile_data.applies(rule.when, context):
            expert = bool(rule.settings["expert_parallel"][0])
    return expert


def _profile_rules(
    profile: profile_data.FamilyProfile, context: Mapping[str, Any], user: Mapping[str, _Entry]
) -> dict[str, _Entry]:
    """The matching profile rules in order (later ones win), then the spec's choices over them."""
    merged: dict[str, _Entry] = {}
    for rule in profile.rules:
        if profile_data.applies(rule.when, context):
            merged.update(rule.settings)
    merged.update(user)
    missing = settings.PROFILE_KEYS - set(merged)
    if missing:
        raise profile_data.ProfileError(
            f"{profile.dialect.name}/{profile.family.value}: no value for {sorted(missing)}"
        )
    return merged


def _consequences(
    profile: profile_data.FamilyProfile,
    context: Mapping[str, Any],
    ep_size: int,
    merged: dict[str, _Entry],
    user: Mapping[str, _Entry],
) -> None:
    """Fix, in ``merged``, what the merge left inconsistent; never a setting the user chose."""
    for consequence in profile.consequences:
        view = {**context, "ep_size": ep_size, **{k: v for k, (v, _) in merged.items()}}
        if profile_data.applies(consequence.when, view):
            merged.update({k: v for k, v in consequence.settings.items() if k not in user})


def _eplb_off_without_expert_count(spec: models.DeepSeekServingSpec) -> _Entry:
    """EPLB off where the facts give no routed-expert count: a wrong guess makes every rank fail at startup."""
    return (
        False,
        profile_data.Reason(
            why=f"the vLLM facts give no routed-expert count for {spec.model.name}, so (experts + r) % EP == 0 "
            "cannot be kept (README §3); enable it in spec.kernels.eplb with numRedundantExperts",
            source=f"nvlfleet.facts {spec.runtime.vllm_version}: families.{spec.model.family.value}",
        ),
    )


class _Merged:
    """The merged settings, read with the type each needs; a wrong type is a broken profile (ProfileError)."""

    def __init__(self, merged: Mapping[str, _Entry]) -> None:
        self.merged = merged

    def __getitem__(self, key: str) -> profile_data.JsonValue:
        return self.merged[key][0]

    def get_int(self, key: str) -> int:
        return _as_int(self[key], key)

    def get_opt_int(self, key: str) -> int | None:
        return _as_opt_int(self[key], key)

    def get_bool(self, key: str) -> bool:
        return _as_bool(self[key], key)

    def get_opt_str(self, key: str) -> str | None:
        return _as_opt_str(self[key], key)

    def get_mapping(self, key: str) -> dict[str, profile_data.JsonValue]:
        return _as_mapping(self[key], key)


def _tuning(
    spec: models.DeepSeekServingSpec,
    role: models.RoleName,
    dialect: profile_data.Dialect,
    topology: models.Topology,
    fabric: bool,
    experts: facts.ExpertCount | None,
    ep_size: int,
    merged: Mapping[str, _Entry],
    user_set: frozenset[str],
) -> Tuning:
    """The merged settings as a typed Tuning, with the values computed from them (experts, graphs, probes)."""
    value = _Merged(merged)
    reasons: dict[str, profile_data.Reason] = {k: r for k, (_, r) in merged.items()}
    if experts is not None:
        reasons["routed_experts"] = profile_data.Reason(
            why=experts.source, source=f"nvlfleet.facts {spec.runtime.vllm_version}"
        )
    speculative = _speculative(value, spec.model.family)
    env = tuple(
        sorted(
            (key.removeprefix(settings.ENV_PREFIX), str(v))
            for key, (v, _) in merged.items()
            if key.startswith(settings.ENV_PREFIX) and v is not None
        )
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
        expert_parallel=value.get_bool("expert_parallel"),
        attention_backend=value.get_opt_str("attention_backend"),
        moe_backend=value.get_opt_str("moe_backend"),
        all2all_backend=value.get_opt_str("all2all_backend"),
        kv_cache_dtype=value.get_opt_str("kv_cache_dtype"),
        dbo=DualBatchOverlap(
            enabled=value.get_bool("dbo.enabled"),
            decode_token_threshold=value.get_int("dbo.decode_token_threshold"),
            prefill_token_threshold=value.get_int("dbo.prefill_token_threshold"),
        ),
        eplb=_eplb(spec, value, ep_size, experts, reasons),
        cuda_graph=CudaGraph(
            mode=value.get_opt_str("cuda_graph.mode"), capture_sizes=_capture_sizes(spec, value, speculative, reasons)
        ),
        max_model_len=value.get_int("max_model_len"),
        max_num_seqs=value.get_opt_int("max_num_seqs"),
        max_num_batched_tokens=value.get_opt_int("max_num_batched_tokens"),
        speculative=speculative,
        performance_mode=value.get_opt_str("performance_mode"),
        attention_config=value.get_mapping("attention_config"),
        additional_config=value.get_mapping("additional_config"),
        api_server_count=_api_server_count(value, topology),
        reasoning_parser=value.get_opt_str("reasoning_parser"),
        tool_call_parser=value.get_opt_str("tool_call_parser"),
        enable_auto_tool_choice=value.get_bool("enable_auto_tool_choice"),
        env=env,
        probes=_probes(value, env),
        reasons=reasons,
        user_set=user_set,
    )


def _speculative(value: _Merged, family: models.ModelFamily) -> Speculative | None:
    if not value.get_bool("speculative.enabled"):
        return None
    method = value.get_opt_str("speculative.method")
    if method is None:
        raise profile_data.ProfileError(f"{family.value}: speculative.method has no default")
    return Speculative(method=method, num_speculative_tokens=value.get_int("speculative.num_speculative_tokens"))


def _eplb(
    spec: models.DeepSeekServingSpec,
    value: _Merged,
    ep_size: int,
    experts: facts.ExpertCount | None,
    reasons: dict[str, profile_data.Reason],
) -> Eplb:
    """EPLB with its redundant experts: the spec's count, else the smallest that divides over EP (module doc)."""
    enabled = value.get_bool("eplb.enabled")
    redundant = 0
    explicit = spec.kernels.eplb.num_redundant_experts if spec.kernels.eplb is not None else None
    if enabled and explicit is not None:
        redundant = explicit
        reasons["eplb.num_redundant_experts"] = profile_data.Reason(
            why="chosen in the spec", source="spec.kernels.eplb.numRedundantExperts"
        )
    elif enabled and experts is not None:
        minimum = value.get_int("eplb.min_redundant_experts")
        redundant = redundant_experts(experts.experts, ep_size, minimum)
        reasons["eplb.num_redundant_experts"] = profile_data.Reason(
            why=f"smallest r >= {minimum} with ({experts.experts} + r) % EP{ep_size} == 0 (README §3 EPLB rule)",
            source=reasons["eplb.min_redundant_experts"].source,
        )
    return Eplb(
        enabled=enabled,
        num_redundant_experts=redundant,
        window_size=value.get_int("eplb.window_size"),
        step_interval=value.get_int("eplb.step_interval"),
        use_async=value.get_bool("eplb.use_async"),
    )


def _capture_sizes(
    spec: models.DeepSeekServingSpec,
    value: _Merged,
    speculative: Speculative | None,
    reasons: dict[str, profile_data.Reason],
) -> tuple[int, ...] | None:
    """The CUDA-graph capture sizes: a list as given, the window computed (module doc), or vLLM's (auto)."""
    sizes = value["cuda_graph.capture_sizes"]
    if isinstance(sizes, list):
        return tuple(sorted({_as_int(s, "cuda_graph.capture_sizes") for s in sizes}))
    if sizes == "auto":
        return None
    if sizes != "window":
        raise profile_data.ProfileError(f"cuda_graph.capture_sizes must be window, auto or a list, got {sizes!r}")
    graph = spec.kernels.cuda_graph or models.CudaGraphSpec()
    spec_tokens = speculative.num_speculative_tokens if speculative is not None else 0
    reasons["cuda_graph.capture_sizes"] = profile_data.Reason(
        why=f"{reasons['cuda_graph.capture_sizes'].why}; window {graph.min_batch}..{graph.max_batch} requests "
        f"× {1 + spec_tokens} rows",
        source=reasons["cuda_graph.capture_sizes"].source,
    )
    return capture_window(
        graph, value.get_opt_int("max_num_seqs"), value.get_opt_int("max_num_batched_tokens"), spec_tokens
    )


def _api_server_count(value: _Merged, topology: models.Topology) -> int | None:
    """``data_local``: one API server per local data-parallel rank, where there is data parallelism."""
    if value["api_server_count"] == "data_local":
        return topology.data_local if topology.data > 1 else None
    return value.get_opt_int("api_server_count")


def _probes(value: _Merged, env: Sequence[tuple[str, str]]) -> Probes:
    """The leader's probes; the startup budget covers the engine-ready timeout plus the profile's slack."""
    period = value.get_int("probe.period_seconds")
    timeout = int(dict(env).get("VLLM_ENGINE_READY_TIMEOUT_S", "600"))
    slack = value.get_int("probe.startup_slack_seconds")
    return Probes(
        period_seconds=period,
        timeout_seconds=value.get_int("probe.timeout_seconds"),
        startup_failure_threshold=math.ceil((timeout + slack) / period),
        readiness_failure_threshold=value.get_int("probe.readiness_failure_threshold"),
        liveness_period_seconds=value.get_int("probe.liveness_period_seconds"),
        liveness_failure_threshold=value.get_int("probe.liveness_failure_threshold"),
    )


def explain(tuning: Tuning) -> list[str]:
    """One line per setting: ``key = value  # why [source]``, sorted by key (for ``nvlfleet render --explain``)."""
    values: dict[str, object] = {
        "ep_size": tuning.ep_size,
        "routed_experts": tuning.routed_experts,
        "speculative": tuning.speculative,
        **{s.key: tuning.value(s.key) for s in settings.TABLE if s.explained},
        **{f"{settings.ENV_PREFIX}{name}": val for name, val in tuning.env},
    }
    reason_key = {"speculative": "speculative.method", "ep_size": "expert_parallel"}
    lines = []
    for key in sorted(values):
        reason = tuning.reasons.get(reason_key.get(key, key))
        lines.append(f"{key} = {values[key]!r}" + (f"  # {reason}" if reason else ""))
    return lines
