"""The effective settings of every role against the rules of the pinned vLLM version.

Pure core, the last check of the validate step: ``profiles.effective`` gives each role's settings (the spec's
choices merged over the tuning profile), the extra arguments and env values override them, and every rule of the
version's facts is tried on the result, blaming the spec field the user chose where there is one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping, Sequence

from nvlfleet.api import models, problems
from nvlfleet.core import profile_data, profiles, settings
from nvlfleet.core.validation import disaggregation, findings
from nvlfleet.facts import facts, hardware

_CONTEXT_SETTINGS = frozenset({"family", "gpu", "computeCapability", "multiNodeNvlink"})


@dataclasses.dataclass(frozen=True)
class _Setting:
    value: facts.Scalar
    path: str | None  # where the user chose it; None: the tuning profile (or vLLM's default) decides


def _settings(
    spec: models.DeepSeekServingSpec,
    role: models.RoleName,
    tuning: profiles.Tuning,
    args: Sequence[facts.Arg],
    env: Mapping[str, tuple[str, str]],
) -> dict[str, _Setting]:
    gen = hardware.generation(spec.gpu.value)
    topology = tuning.topology
    par_path = f"spec.roles.{role.value}.parallelism"
    par = profiles.role_spec(spec, role).parallelism
    # Only what the user wrote is theirs to be blamed for; derived sizes point elsewhere.
    written = {
        "tensor": "tensor" in par.model_fields_set,
        "data": par.data is not None,
        "nodesPerGroup": par.nodes_per_group is not None,
    }
    out: dict[str, _Setting] = {}
    for setting in settings.TABLE:
        if setting.rule is None:
            continue
        reason = tuning.reasons.get(setting.key)
        chosen = setting.key in tuning.user_set and reason is not None
        out[setting.rule] = _Setting(_scalar(tuning.value(setting.key)), reason.source if chosen and reason else None)
    # EPLB off keeps no redundant experts; a count the spec states is the user's to be blamed for, even then.
    explicit = spec.kernels.eplb.num_redundant_experts if spec.kernels.eplb is not None else None
    if explicit is not None:
        out["redundantExperts"] = _Setting(explicit, "spec.kernels.eplb.numRedundantExperts")
    elif not tuning.eplb.enabled:
        out["redundantExperts"] = _Setting(None, None)
    out |= {
        "family": _Setting(spec.model.family.value, "spec.model.family"),
        "gpu": _Setting(gen.name, "spec.gpu"),
        "computeCapability": _Setting(gen.compute_capability, "spec.gpu"),
        "multiNodeNvlink": _Setting(gen.multi_node_nvlink, "spec.gpu"),
        "tensor": _Setting(topology.tensor, f"{par_path}.tensor" if written["tensor"] else None),
        "data": _Setting(topology.data, f"{par_path}.data" if written["data"] else None),
        "gpusPerGroup": _Setting(topology.gpus_per_group, par_path if any(written.values()) else None),
        "nodesPerGroup": _Setting(
            topology.nodes_per_group, f"{par_path}.nodesPerGroup" if written["nodesPerGroup"] else None
        ),
        "decodeBackend": _config_setting(tuning, "additional_config", "decode_backend"),
        "indexerKvDtype": _config_setting(tuning, "attention_config", "indexer_kv_dtype"),
        "indexerSparseLogits": _config_setting(tuning, "attention_config", "indexer_sparse_logits"),
        "ubatchSize": _Setting(None, None),
    }
    for key, kv_value, kv_path in disaggregation.rule_settings(spec, role, args):
        out[key] = _Setting(kv_value, kv_path)
    for name, value in tuning.env:
        out[f"env.{name}"] = _Setting(value, None)
    for name, (value, path) in env.items():
        out[f"env.{name}"] = _Setting(value, path)
    for arg in args:
        where = problems.path("spec.extraArgs", arg.index)
        out[f"arg.{arg.flag.dest}"] = _Setting(_typed(arg), where)
        if arg.flag.name == "--ubatch-size":
            out["ubatchSize"] = _Setting(_typed(arg), where)
    return out


def _config_setting(tuning: profiles.Tuning, config: str, key: str) -> _Setting:
    """A key of a JSON setting; blamed on the extraArgs item when that replaced the profile's object (the
    extra arguments come last on the command line, and vLLM keeps the last value)."""
    config_value = tuning.value(config)
    assert isinstance(config_value, Mapping)
    reason = tuning.reasons.get(config)
    path = reason.source if config in tuning.user_set and reason is not None else None
    return _Setting(_scalar(config_value.get(key)), path)


def _scalar(value: object) -> facts.Scalar:
    return value if value is None or isinstance(value, str | int | float | bool) else json.dumps(value)


def _typed(arg: facts.Arg) -> facts.Scalar:
    value = arg.value
    if isinstance(value, str) and arg.flag.type == "int":
        return int(value)
    if isinstance(value, str) and arg.flag.type == "float":
        return float(value)
    return value


def check_effective(
    spec: models.DeepSeekServingSpec,
    version_facts: facts.Facts,
    args: Sequence[facts.Arg],
    env: Mapping[str, tuple[str, str]],
    out: findings.Findings,
) -> None:
    roles = spec.roles_present()
    per_role: dict[tuple[facts.Severity, str, str], list[models.RoleName]] = {}
    for role, _ in roles:
        try:
            tuning = profiles.effective(spec, role)
        except problems.InvalidSpec as err:
            for problem in err.problems:
                out.error(problem.path, problem.message)
            return
        except profile_data.ProfileError as err:
            out.error("spec", f"the tuning profile for this spec is broken (an nvlfleet bug, please report): {err}")
            return
        settings = _settings(spec, role, tuning, args, env)
        for severity, path, message in _setting_problems(spec, version_facts, role, tuning, settings):
            per_role.setdefault((severity, path, message), []).append(role)
    everyone = [role for role, _ in roles]
    for (severity, path, message), hit in per_role.items():
        # Said once when every role of a disaggregated serving breaks the rule the same way.
        text = message if len(everyone) > 1 and hit == everyone else f"{' and '.join(r.value for r in hit)}: {message}"
        out.add(severity, path, text)


def _setting_problems(
    spec: models.DeepSeekServingSpec,
    version_facts: facts.Facts,
    role: models.RoleName,
    tuning: profiles.Tuning,
    settings: Mapping[str, _Setting],
) -> Iterable[tuple[facts.Severity, str, str]]:
    yield from _speculative_problems(spec, version_facts, settings)
    yield from _value_problems(version_facts, settings)
    seqs, tokens = tuning.max_num_seqs, tuning.max_num_batched_tokens
    if seqs is not None and tokens is not None and tokens < seqs:
        path = _blame(settings, ["maxNumSeqs"]) or f"spec.roles.{role.value}.maxNumBatchedTokens"
        yield "error", path, f"max-num-batched-tokens {tokens} is smaller than max-num-seqs {seqs}"
    values = {key: s.value for key, s in settings.items()}
    for rule in version_facts.rules:
        if not rule.applies(values):
            continue
        if rule.check is not None:
            yield from _named_check(rule, spec, version_facts, role, tuning, settings)
            continue
        failing = rule.failures(values) if rule.require else [None]
        for key in failing:
            path, note = _rule_path(rule, key, settings, version_facts, role)
            requirement = "" if key is None else _requirement(key, rule.require[key], settings, version_facts)
            message = rule.message.format_map(_Words(values, requirement=requirement))
            yield rule.severity, path, f"{message}; {rule.reason}{note}"


def _speculative_problems(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, settings: Mapping[str, _Setting]
) -> Iterable[tuple[facts.Severity, str, str]]:
    method = settings["speculativeMethod"].value
    if not isinstance(method, str):
        return
    path = settings["speculativeMethod"].path or "spec.speculative.method"
    family = version_facts.families.get(spec.model.family.value)
    accepted = ", ".join(family.speculative_methods) if family else ""
    if method not in version_facts.speculative_methods:
        close = difflib.get_close_matches(method, sorted(version_facts.speculative_methods), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        yield (
            "error",
            path,
            f"vLLM {version_facts.version} has no speculative method {method!r}{hint}"
            + (f" ({family.title} accepts {accepted})" if family else ""),
        )
        return
    canonical = version_facts.canonical_speculative_method(method)
    if family is not None and canonical not in family.speculative_methods:
        alias = f" (an alias of {canonical})" if canonical != method else ""
        yield (
            "error",
            path,
            f"{family.title} accepts only speculative method {accepted}, not {method!r}{alias}; "
            f"{family.speculative_source}",
        )


def _value_problems(
    version_facts: facts.Facts, settings: Mapping[str, _Setting]
) -> Iterable[tuple[facts.Severity, str, str]]:
    choices = {
        "all2allBackend": version_facts.all2all_backends,
        "moeBackend": version_facts.moe_backends,
        "kvCacheDtype": version_facts.kv_cache_dtypes,
    }
    for key, allowed in choices.items():
        value = settings[key].value
        if isinstance(value, str) and value not in allowed:
            label = version_facts.settings[key].label
            close = difflib.get_close_matches(value, sorted(allowed), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            yield (
                "error",
                settings[key].path or version_facts.settings[key].path,
                f"vLLM {version_facts.version} has no {label} {value!r}; {hint}it has {', '.join(sorted(allowed))}",
            )


def _named_check(
    rule: facts.Rule,
    spec: models.DeepSeekServingSpec,
    version_facts: facts.Facts,
    role: models.RoleName,
    tuning: profiles.Tuning,
    settings: Mapping[str, _Setting],
) -> Iterable[tuple[facts.Severity, str, str]]:
    if rule.check != "expertsDivideExpertParallel":
        raise ValueError(f"rule {rule.id} names an unknown check {rule.check}")
    family = version_facts.families.get(spec.model.family.value)
    count = family.experts_for(spec.model.name) if family else None
    if count is None:
        return  # the facts know no expert count for this model; the profile turns EPLB off rather than guess
    ep = tuning.ep_size
    redundant = settings["redundantExperts"].value
    r = redundant if isinstance(redundant, int) else 0
    if (count.experts + r) % ep == 0:
        return
    fit = (-count.experts) % ep
    options = sorted({fit, fit + ep} - {r})
    path = _blame(settings, ["redundantExperts", "eplb", "data"]) or f"spec.roles.{role.value}.parallelism.data"
    yield (
        rule.severity,
        path,
        f"{count.experts} routed experts + {r} redundant = {count.experts + r} do not divide evenly over the "
        f"expert-parallel size {ep} (tensor × data); use numRedundantExperts "
        f"{' or '.join(str(o) for o in options)} (or leave it unset for the profile to choose); {rule.reason}",
    )


def _blame(settings: Mapping[str, _Setting], keys: Sequence[str]) -> str | None:
    return next((settings[k].path for k in keys if k in settings and settings[k].path), None)


def _rule_path(
    rule: facts.Rule,
    failing: str | None,
    settings: Mapping[str, _Setting],
    version_facts: facts.Facts,
    role: models.RoleName,
) -> tuple[str, str]:
    """The spec field to point at, and a note when only the tuning profile chose the settings involved.

    Prefer what the user chose over the context it meets: for "mega attention on an H200", the attention backend
    the user set, not the GPU; for "latency_specialized needs tensor 4", the tensor size.
    """
    keys = [k for k in ([failing] if failing else []) + [*rule.when, *rule.require] if k]
    chosen = [k for k in keys if settings.get(k) is not None and settings[k].path]
    for k in chosen:
        if k not in _CONTEXT_SETTINGS:
            return str(settings[k].path), ""
    if chosen:
        return str(settings[chosen[0]].path), ""
    first = next((k for k in keys if k not in _CONTEXT_SETTINGS), keys[0])
    info = version_facts.settings.get(first)
    path = info.path.format(role=role.value) if info else "spec"
    return path, " (this comes from the tuning profile, not the spec: please report it; override it here)"


class _Words(dict[str, str]):
    """Setting values as message words; unknown placeholders stay visible rather than raising."""

    def __init__(self, values: Mapping[str, facts.Scalar], *, requirement: str) -> None:
        super().__init__({k: _word(v) for k, v in values.items()}, requirement=requirement)

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _word(value: facts.Scalar) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _label(key: str, version_facts: facts.Facts) -> str:
    if key in version_facts.settings:
        return version_facts.settings[key].label
    if key.startswith("arg."):
        return "--" + key.removeprefix("arg.").replace("_", "-")
    return key.removeprefix("env.")


def _requirement(key: str, matcher: facts.Matcher, settings: Mapping[str, _Setting], version_facts: facts.Facts) -> str:
    """``<what is needed>, but <what it is>`` for one failed requirement."""
    actual = settings[key].value if key in settings else None
    gpu = settings["gpu"].value
    if key == "computeCapability":
        ccs = [str(v) for v in matcher.values]
        gens = [g.name for g in hardware.generations().values() if g.compute_capability in ccs]
        return (
            f"a {findings.either(gens)} GPU (compute capability {findings.either(ccs)}), "
            f"but {gpu} has compute capability {_word(actual)}"
        )
    if key == "multiNodeNvlink":
        gens = [g.name for g in hardware.generations().values() if g.multi_node_nvlink]
        return f"NVLink across nodes ({findings.either(gens)}), but NVLink stops at the node on {gpu}"
    label = _label(key, version_facts)
    return f"{_expected(label, matcher)}, but it is {_word(actual)}"


def _expected(label: str, matcher: facts.Matcher) -> str:
    values = [v for v in matcher.values if v is not None]
    if matcher.kind == "min":
        return f"{label} of at least {matcher.values[0]}"
    if matcher.kind == "max":
        return f"{label} of at most {matcher.values[0]}"
    if matcher.kind == "not_in":
        return f"{label} other than {findings.either([_word(v) for v in values])}"
    if matcher.kind == "set":
        return f"{label} {'set' if matcher.values[0] else 'left unset'}"
    if not values:
        return f"{label} left unset"
    words = findings.either([_word(v) for v in values])
    return f"{label} {words}" + (" or left unset" if None in matcher.values else "")
