"""What a pinned vLLM version says about prefill/decode disaggregation: its KV connectors, the kv-transfer-config
fields, the kv_role of each engine role, what NIXL needs in every pod, and what both sides must share, as data.

Pure facts, read by ``api.disaggregation`` (the defaults of ``spec.disaggregation``), ``core.validation`` (a
connector must be registered, a kv_role must fit its role, prefill and decode must agree on what NIXL hashes),
``core.disaggregation`` (the ``--kv-transfer-config`` JSON and the NIXL env of every P/D pod) and ``core.router``
(the router's ``--kv-connector``). ``data/vllm/<version>/kv-connectors.json`` is copied verbatim from
``shared/reference`` (a test keeps it equal); ``disaggregation.yaml`` beside it is nvlfleet's reading of
``disaggregation.md`` (a test keeps its names equal to the JSON and its quotes present in the document). The
DeepSeek-V4.1 P/D restrictions are rules in ``rules.yaml``, evaluated with every other rule.

API::

    disaggregation.load("0.33.0") -> KvFacts     # FileNotFoundError for a version without P/D facts
    f.connectors, f.kv_roles, f.load_failure_policies, f.fields   # kv-connectors.json
    f.default_connector, f.default_kv_role(role), f.allowed_kv_roles(role)
    f.is_nixl(connector), f.router_connector(connector) -> str | None
    f.side_channel_host_env, f.side_channel_port_env, f.default_side_channel_port, f.lease_seconds
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

_DATA = "data/vllm"


@dataclasses.dataclass(frozen=True)
class Because:
    """A choice of the facts with its one-line reason and where it is written."""

    reason: str
    source: str


@dataclasses.dataclass(frozen=True)
class KvFacts:
    version: str
    connectors: tuple[str, ...]  # the names vLLM's connector factory registers
    fields: Mapping[str, Mapping[str, Any]]  # kv-transfer-config key -> {type, default, choices}
    kv_roles: tuple[str, ...]
    load_failure_policies: tuple[str, ...]
    default_load_failure_policy: str
    default_connector: str
    default_connector_why: Because
    role_kv_roles: Mapping[str, tuple[str, ...]]  # engine role -> allowed kv_role values, the default first
    roles_why: Because
    deprecated_roles: Mapping[str, str]
    buffer_devices: tuple[str, ...]
    nixl_connectors: frozenset[str]
    side_channel_host_env: str
    side_channel_port_env: str
    side_channel_host_field: str
    default_side_channel_port: int
    lease_seconds: float  # how long a producer holds a finished request's blocks for the consumer to read
    side_channel_why: Because
    nixl_capabilities: tuple[str, ...]
    nixl_env: Mapping[str, str]
    nixl_requirements_why: Because
    router_connectors: Mapping[str, str]
    must_match: Mapping[str, str]  # setting key (rules.yaml) -> why prefill and decode must agree

    def default_kv_role(self, role: str) -> str:
        return self.role_kv_roles[role][0]

    def allowed_kv_roles(self, role: str) -> tuple[str, ...]:
        return self.role_kv_roles[role]

    def is_nixl(self, connector: str | None) -> bool:
        return connector in self.nixl_connectors

    def router_connector(self, connector: str) -> str | None:
        """vllm-router's ``--kv-connector`` for a vLLM connector; None when the router cannot route for it."""
        return self.router_connectors.get(connector)


def _read(version: str, name: str) -> str:
    return resources.files("nvlfleet.facts").joinpath(f"{_DATA}/{version}/{name}").read_text()


def _because(entry: Mapping[str, Any], reason: str = "reason", source: str = "source") -> Because:
    return Because(" ".join(str(entry[reason]).split()), str(entry[source]))


@functools.cache
def load(version: str) -> KvFacts:
    """The P/D facts of vLLM ``version``."""
    raw: dict[str, Any] = json.loads(_read(version, "kv-connectors.json"))
    rules: dict[str, Any] = yaml.safe_load(_read(version, "disaggregation.yaml"))
    fields: dict[str, dict[str, Any]] = raw["kv_transfer_config_fields"]
    policy = fields["kv_load_failure_policy"]
    nixl, side = rules["nixl"], rules["nixl"]["sideChannel"]
    return KvFacts(
        version=version,
        connectors=tuple(raw["connectors"]),
        fields=fields,
        kv_roles=tuple(raw["kv_roles"]),
        load_failure_policies=tuple(policy["choices"]),
        default_load_failure_policy=str(policy["default"]),
        default_connector=str(rules["defaultConnector"]["name"]),
        default_connector_why=_because(rules["defaultConnector"]),
        role_kv_roles={
            role: (str(entry["default"]), *(str(r) for r in entry["allowed"] if r != entry["default"]))
            for role, entry in rules["roles"].items()
        },
        roles_why=_because(rules, "rolesReason", "rolesSource"),
        deprecated_roles={str(k): str(v) for k, v in rules["deprecatedRoles"].items()},
        buffer_devices=tuple(rules["bufferDevices"]),
        nixl_connectors=frozenset(nixl["connectors"]),
        side_channel_host_env=str(side["hostEnv"]),
        side_channel_port_env=str(side["portEnv"]),
        side_channel_host_field=str(side["hostFieldPath"]),
        default_side_channel_port=int(raw["nixl_env_vars"][side["portEnv"]]),
        lease_seconds=float(raw["nixl_kv_connector_extra_config_defaults"]["kv_lease_duration"]),
        side_channel_why=_because(side),
        nixl_capabilities=tuple(nixl["capabilities"]),
        nixl_env={str(k): str(v) for k, v in nixl["env"].items()},
        nixl_requirements_why=_because(nixl, "requirementsReason", "requirementsSource"),
        router_connectors={str(k): str(v) for k, v in rules["routerConnectors"].items()},
        must_match={str(k): " ".join(str(v).split()) for k, v in rules["mustMatch"].items()},
    )
