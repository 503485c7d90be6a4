"""What the pinned vllm-router (the vLLM project's router, PyPI ``vllm-router``) accepts and how it behaves, as data.

Pure facts, read by ``api.router`` (the default image's tag), ``core.validation`` (a routing policy must be one the
router knows and not one the facts say cannot work) and ``core.router`` (every flag rendered onto the router's
command line exists in these facts; a unit test proves it, and another runs the argv through the installed
wheel's own parser). The folder ``data/vllm-router/<version>/`` holds ``cli-flags.json``, read from the wheel's
argparse definition (``tests/support/routerflags.py`` writes it; a test keeps it equal to the installed wheel), and
``rules.yaml``, nvlfleet's reading of ``shared/reference/vllm-0.33.0/disaggregation.md``: the defaults it states,
the policy nvlfleet chooses and why, the policies it refuses and why, discovery and health endpoints.

API::

    vllm_router.load() -> RouterFacts     # the pinned version, VERSION
    f.flag("--policy") -> RouterFlag      # KeyError if the router has no such flag
    f.knows(spelling) -> bool
    f.policies                            # the --policy choices
    f.default_policy, f.default_policy_reason
    f.refused_policies -> {policy: why}
    f.defaults -> {flag: value}           # as disaggregation.md states them
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

VERSION = "0.1.17"  # the one vllm-router release nvlfleet renders for (PyPI vllm-router==0.1.17)

_DATA = "data/vllm-router"


@dataclasses.dataclass(frozen=True)
class RouterFlag:
    """One ``vllm-router`` option as the launcher's argparse defines it."""

    name: str
    dest: str
    takes_value: bool
    nargs: str | None  # None: exactly one value; "0": none; "+": one or more; "*": any number
    choices: tuple[str, ...] | None
    default: Any


@dataclasses.dataclass(frozen=True)
class RouterFacts:
    version: str
    binary: str
    flags: Mapping[str, RouterFlag]
    defaults: Mapping[str, Any]
    default_policy: str
    default_policy_reason: str
    refused_policies: Mapping[str, str]
    discovery_pod_verbs: tuple[str, ...]
    liveness_path: str
    readiness_path: str

    def flag(self, name: str) -> RouterFlag:
        return self.flags[name]

    def knows(self, name: str) -> bool:
        return name in self.flags

    @property
    def policies(self) -> tuple[str, ...]:
        return self.flags["--policy"].choices or ()


def _read(version: str, name: str) -> str:
    return resources.files("nvlfleet.facts").joinpath(f"{_DATA}/{version}/{name}").read_text()


@functools.cache
def load(version: str = VERSION) -> RouterFacts:
    """The facts of one packaged vllm-router version (FileNotFoundError for a version nvlfleet does not package)."""
    raw_flags: dict[str, dict[str, Any]] = json.loads(_read(version, "cli-flags.json"))["flags"]
    rules: dict[str, Any] = yaml.safe_load(_read(version, "rules.yaml"))
    flags = {
        name: RouterFlag(
            name=name,
            dest=str(spec["dest"]),
            takes_value=bool(spec["takes_value"]),
            nargs=spec["nargs"],
            choices=tuple(spec["choices"]) if spec["choices"] is not None else None,
            default=spec["default"],
        )
        for name, spec in raw_flags.items()
    }
    return RouterFacts(
        version=str(rules["version"]),
        binary=str(rules["binary"]),
        flags=flags,
        defaults=dict(rules["defaults"]),
        default_policy=str(rules["default_policy"]["policy"]),
        default_policy_reason=" ".join(str(rules["default_policy"]["reason"]).split()),
        refused_policies={str(k): " ".join(str(v).split()) for k, v in rules["refused_policies"].items()},
        discovery_pod_verbs=tuple(rules["discovery"]["pod_verbs"]),
        liveness_path=str(rules["health"]["liveness"]),
        readiness_path=str(rules["health"]["readiness"]),
    )
