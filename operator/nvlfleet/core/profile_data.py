"""Tuning-profile data: the vLLM dialects and the rules of each model family, loaded and matched.

Pure core, under ``profiles`` (spec → validate → plan → **profiles** → render): ``profiles.effective`` asks
this module for the rules of a serving's family and which of them match its context.

The knowledge is data, not code: ``data/profiles/vllm-<major.minor>/`` holds one directory per vLLM dialect
(``dialect.yaml``: how that version spells each flag; ``common.yaml``: rules every family shares;
``<family>.yaml``: the family's rules). A rule matches the group's context (GPU generation, goal, role,
multi-node, data/expert parallel, tensor size, NVLink fabric) and sets settings (keys of ``settings.TABLE``, or
``env.<NAME>``); every setting carries a one-line ``why`` citing its source. ``consequences`` are rules matched
against the merged settings too, after the spec's choices.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any, TypeAlias

import yaml

from nvlfleet.api import models, problems
from nvlfleet.core import settings

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

_PROFILES_DIR = "data/profiles"

# What a rule's ``when`` may test. ``expert`` is itself decided by rules (``expert_parallel``), so a rule that sets
# ``expert_parallel`` must not test it (the loader enforces this).
CONTEXT_KEYS: frozenset[str] = frozenset(
    {"gpu", "goal", "role", "multi_node", "data_parallel", "tensor", "expert", "fabric", "kv_transfer"}
)


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
        rule_settings: dict[str, tuple[JsonValue, Reason]] = {}
        for key, entry in (item.get("set") or {}).items():
            if key not in settings.PROFILE_KEYS and not key.startswith(settings.ENV_PREFIX):
                raise ProfileError(f"{where}: unknown setting {key!r}")
            value, why = _reason(entry, f"{where} {key}")
            rule_settings[key] = (value, Reason(why=why, source=f"{source}: {name}"))
        if "expert_parallel" in rule_settings and "expert" in when:
            raise ProfileError(f"{where}: a rule that decides expert_parallel cannot test expert")
        out.append(Rule(name=name, when=dict(when), settings=rule_settings))
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


def applies(when: Mapping[str, Any], view: Mapping[str, Any]) -> bool:
    return all(_matches(condition, _lookup(view, key)) for key, condition in when.items())
