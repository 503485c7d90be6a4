"""The KV data path of a disaggregated serving: each role's ``--kv-transfer-config`` and the NIXL side channel of
every engine pod, with the reason and source of each.

Pure core, inside the render step (spec → validate → plan → **render** → apply): ``commandline`` puts ``options``
on the leader's and the headless workers' ``vllm serve`` (the connector runs in every engine core, so workers need
it as much as leaders), ``render`` puts ``env`` into both pod templates, ``nvlfleet render --explain`` prints
``explain``; ``nvlfleet.core.validation`` checks the same ``settings`` before anything is rendered. Every name
comes from the pinned vLLM's P/D facts (``nvlfleet.facts.disaggregation``).

A serving is disaggregated when it has ``roles.prefill``; ``spec.disaggregation`` unset means the facts' defaults
(NixlConnector, kv_producer on prefill and kv_consumer on decode, ``fail`` on a KV load failure, side-channel port
5600). What NIXL needs in a pod is its side channel, nothing more the facts name: ``VLLM_NIXL_SIDE_CHANNEL_HOST``
from the pod's own IP (the downward API's ``status.podIP``; each engine core advertises that address to its peers)
and ``VLLM_NIXL_SIDE_CHANNEL_PORT`` (the engine of global data-parallel rank r listens on port + r). No Linux
capability and no ``UCX_*`` variable is rendered: vLLM sets the one UCX knob it needs itself and the facts name no
capability (``facts/data/vllm/<version>/disaggregation.yaml`` says which sources were read).
"""

from __future__ import annotations

import json
from typing import Any

from nvlfleet.api import disaggregation as disaggregation_api
from nvlfleet.api import models
from nvlfleet.facts import disaggregation as kv_facts

KV_TRANSFER_SETTING = "kv_transfer_config"  # the dialect's name of --kv-transfer-config


def enabled(spec: models.DeepSeekServingSpec) -> bool:
    """Whether the serving is disaggregated (it has a prefill role)."""
    return spec.roles.prefill is not None


def settings(spec: models.DeepSeekServingSpec) -> disaggregation_api.DisaggregationSpec:
    """``spec.disaggregation``, or the facts' defaults when it is unset."""
    return spec.disaggregation or disaggregation_api.DisaggregationSpec()


def facts_of(spec: models.DeepSeekServingSpec) -> kv_facts.KvFacts:
    return kv_facts.load(spec.runtime.vllm_version)


def kv_role(spec: models.DeepSeekServingSpec, role: models.RoleName) -> str:
    """The role's kv_role: the spec's, else the facts' default for the role."""
    chosen = getattr(settings(spec), role.value).kv_role
    return chosen if chosen is not None else facts_of(spec).default_kv_role(role.value)


def transfer_config(spec: models.DeepSeekServingSpec, role: models.RoleName) -> dict[str, Any] | None:
    """The ``--kv-transfer-config`` object of ``role``; None for a serving that is not disaggregated."""
    chosen = settings(spec)
    if not enabled(spec) or not chosen.kv_connector:
        return None
    config: dict[str, Any] = {
        "kv_connector": chosen.kv_connector,
        "kv_role": kv_role(spec, role),
        "kv_load_failure_policy": chosen.kv_load_failure_policy,
    }
    if chosen.kv_buffer_device is not None:
        config["kv_buffer_device"] = chosen.kv_buffer_device
    return config


def options(spec: models.DeepSeekServingSpec, role: models.RoleName) -> list[str]:
    """The ``--kv-transfer-config`` value of ``role`` as one compact, key-sorted JSON argument (or none)."""
    config = transfer_config(spec, role)
    return [] if config is None else [json.dumps(config, sort_keys=True, separators=(",", ":"))]


def env(spec: models.DeepSeekServingSpec) -> list[dict[str, Any]]:
    """The NIXL side channel of every engine pod of a disaggregated serving running a NIXL connector."""
    facts = facts_of(spec)
    chosen = settings(spec)
    if not enabled(spec) or not facts.is_nixl(chosen.kv_connector):
        return []
    return [
        {
            "name": facts.side_channel_host_env,
            "valueFrom": {"fieldRef": {"fieldPath": facts.side_channel_host_field}},
        },
        {"name": facts.side_channel_port_env, "value": str(chosen.side_channel_port)},
        *({"name": name, "value": value} for name, value in facts.nixl_env.items()),
    ]


def explain(spec: models.DeepSeekServingSpec, role: models.RoleName) -> list[str]:
    """What ``nvlfleet render --explain`` says about the role's KV data path."""
    config = transfer_config(spec, role)
    if config is None:
        return []
    facts, chosen = facts_of(spec), settings(spec)
    given = spec.disaggregation.model_fields_set if spec.disaggregation is not None else set()
    role_given = getattr(chosen, role.value).kv_role is not None
    connector_why = (
        "spec.disaggregation.kvConnector"
        if "kv_connector" in given
        else f"{facts.default_connector_why.reason} [{facts.default_connector_why.source}]"
    )
    lines = [
        f"kv_transfer_config = {options(spec, role)[0]}",
        f"  kv_connector = {config['kv_connector']}  # {connector_why}",
        f"  kv_role = {config['kv_role']}  # "
        + (
            f"spec.disaggregation.{role.value}.kvRole"
            if role_given
            else f"{facts.roles_why.reason} [{facts.roles_why.source}]"
        ),
        f"  kv_load_failure_policy = {config['kv_load_failure_policy']}  # "
        + ("spec.disaggregation.kvLoadFailurePolicy" if "kv_load_failure_policy" in given else "vLLM's default"),
    ]
    side = f"{facts.side_channel_why.reason} [{facts.side_channel_why.source}]"
    for item in env(spec):
        if "valueFrom" in item:
            lines.append(f"env.{item['name']} = the pod's {facts.side_channel_host_field}  # {side}")
        else:
            port_why = "spec.disaggregation.sideChannelPort" if "side_channel_port" in given else "vLLM's default"
            lines.append(f"env.{item['name']} = {item['value']}  # {port_why}; data-parallel rank r listens on it + r")
    if facts.is_nixl(chosen.kv_connector):
        why = facts.nixl_requirements_why
        lines.append(f"no capability and no UCX_* env added  # {why.reason} [{why.source}]")
    return lines
