"""Prefill/decode disaggregation (spec.disaggregation and roles.prefill): a registered KV connector the router can
route for, kv_roles that fit their roles, the facts' choices, side-channel ports that collide with nothing, and
prefill and decode agreeing on what NIXL hashes into its handshake.

Pure core, inside the validate step (spec → **validate** → plan → render → apply → status), after the escape
hatches: it also refuses what extraArgs would do to the rendered ``--kv-transfer-config``. The DeepSeek-V4.1
restrictions (PCP, PP, latency-specialised decode, a CPU KV buffer) are rules of the facts (``rules.yaml``),
evaluated by ``rules`` on the settings ``rule_settings`` gives each role. Every name and reason comes from
``nvlfleet.facts.disaggregation``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence

from nvlfleet.api import models, problems
from nvlfleet.core import disaggregation, profiles
from nvlfleet.core.validation import findings
from nvlfleet.facts import disaggregation as kv_facts
from nvlfleet.facts import facts

_WHERE = "spec.disaggregation"
# Flags that would undo the rendered connector of a disaggregated serving, and why (disaggregation.md §1).
_UNDOING = {
    "kv_transfer_config": "nvlfleet renders --kv-transfer-config from spec.disaggregation; set the connector there",
    "kv_offloading_size": "--kv-offloading-size rewrites kv_connector to an offloading connector and kv_role to "
    "kv_both, silently replacing NixlConnector (disaggregation.md §1); combine them with MultiConnector instead",
}


def check_disaggregation(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, args: Sequence[facts.Arg], out: findings.Findings
) -> None:
    try:
        kv = disaggregation.facts_of(spec)
    except FileNotFoundError:
        if disaggregation.enabled(spec):
            out.error(_WHERE, f"nvlfleet has no P/D facts for vLLM {version_facts.version}")
        return
    if not disaggregation.enabled(spec):
        if spec.disaggregation is not None:
            out.error(
                _WHERE,
                "a KV connector without a prefill role: only prefill engines produce the KV cache decode loads "
                "(add spec.roles.prefill, or remove spec.disaggregation)",
            )
        _check_raw(args, kv, out)
        return
    chosen = disaggregation.settings(spec)
    connector = chosen.kv_connector
    if not connector:
        out.error(
            f"{_WHERE}.kvConnector",
            "a prefill role needs a KV connector: without one decode never receives the KV cache prefill computed "
            f"and recomputes every prompt (vLLM {kv.version}'s default here is {kv.default_connector})",
        )
    elif connector not in kv.connectors:
        close = difflib.get_close_matches(connector, kv.connectors, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        out.error(
            f"{_WHERE}.kvConnector",
            f"vLLM {kv.version} registers no KV connector {connector!r} (it fails at engine start with "
            f'"Unsupported connector type", disaggregation.md §1); {hint}it registers {", ".join(kv.connectors)}',
        )
    elif spec.router.enabled and kv.router_connector(connector) is None:
        out.error(
            f"{_WHERE}.kvConnector",
            f"vllm-router runs P/D only for the connectors its --kv-connector names "
            f"({', '.join(sorted(kv.router_connectors))}), not {connector} (disaggregation.md §7); "
            "or turn spec.router off and bring your own",
        )
    for role, _ in spec.roles_present():
        _check_kv_role(spec, role, kv, out)
    if chosen.kv_load_failure_policy not in kv.load_failure_policies:
        out.error(
            f"{_WHERE}.kvLoadFailurePolicy",
            f"vLLM {kv.version} has no kv_load_failure_policy {chosen.kv_load_failure_policy!r}; its choices: "
            f"{findings.either(list(kv.load_failure_policies))} (disaggregation.md §1)",
        )
    if chosen.kv_buffer_device is not None and chosen.kv_buffer_device not in kv.buffer_devices:
        out.error(
            f"{_WHERE}.kvBufferDevice",
            f"NIXL on CUDA accepts kv_buffer_device {findings.either(list(kv.buffer_devices))}, not "
            f"{chosen.kv_buffer_device!r} (disaggregation.md §1)",
        )
    _check_ports(spec, out)
    for arg in args:
        if arg.flag.dest in _UNDOING:
            out.error(problems.path("spec.extraArgs", arg.index), f"{arg.spelling}: {_UNDOING[arg.flag.dest]}")


def _check_raw(args: Sequence[facts.Arg], kv: kv_facts.KvFacts, out: findings.Findings) -> None:
    """A ``--kv-transfer-config`` given raw to a serving that is not disaggregated (e.g. KV offloading): a
    registered connector, with a kv_role (the parser refuses kv_connector without one, disaggregation.md §1)."""
    raw = next((a for a in args if a.flag.dest == "kv_transfer_config"), None)
    if raw is None or not raw.values:
        return
    loaded = json.loads(raw.values[0])
    where = problems.path("spec.extraArgs", raw.index)
    connector = loaded.get("kv_connector")
    if connector is not None and connector not in kv.connectors:
        out.error(
            where,
            f"vLLM {kv.version} registers no KV connector {connector!r}; it registers "
            f"{', '.join(kv.connectors)} (disaggregation.md §1, §2)",
        )
    if connector is not None and loaded.get("kv_role") is None:
        out.error(where, "kv_connector without kv_role is refused by vLLM's parser (disaggregation.md §1)")
    role = loaded.get("kv_role")
    if role is not None and role not in kv.kv_roles:
        out.error(where, f"vLLM {kv.version} has no kv_role {role!r}; its choices: {', '.join(kv.kv_roles)}")


def _check_kv_role(
    spec: models.DeepSeekServingSpec, role: models.RoleName, kv: kv_facts.KvFacts, out: findings.Findings
) -> None:
    chosen = getattr(disaggregation.settings(spec), role.value).kv_role
    if chosen is None:
        return
    where = f"{_WHERE}.{role.value}.kvRole"
    if chosen not in kv.kv_roles:
        out.error(where, f"vLLM {kv.version} has no kv_role {chosen!r}; its choices: {', '.join(kv.kv_roles)}")
    elif chosen not in kv.allowed_kv_roles(role.value):
        out.error(
            where,
            f"kv_role {chosen} contradicts the {role.value} role: {kv.roles_why.reason} ({kv.roles_why.source}); "
            f"use {kv.default_kv_role(role.value)}",
        )
    elif chosen in kv.deprecated_roles:
        out.warn(where, kv.deprecated_roles[chosen])


def _check_ports(spec: models.DeepSeekServingSpec, out: findings.Findings) -> None:
    """Each pod listens on port + its global data-parallel ranks (disaggregation.md §3): in range, and never on
    the API or data-parallel RPC port of the same pod."""
    first = disaggregation.settings(spec).side_channel_port
    where = f"{_WHERE}.sideChannelPort"
    for role, role_spec in spec.roles_present():
        topology = models.role_topology(spec.gpu, role_spec)
        last = first + topology.data - 1
        if last > 65535:
            out.error(where, f"{role.value}: DP rank {topology.data - 1} would listen on port {last}, above 65535")
            continue
        dialect = profiles.effective(spec, role).dialect
        taken = {dialect.port: "vLLM's API port", dialect.data_parallel_rpc_port: "the data-parallel RPC port"}
        for port, what in taken.items():
            if first <= port <= last:
                out.error(
                    where,
                    f"{role.value}: the side channel takes ports {first}-{last} (one per data-parallel rank), "
                    f"which include {what} {port}",
                )


def check_both_sides_agree(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: findings.Findings
) -> None:
    """Prefill and decode must agree on every setting NIXL hashes into its handshake (a mismatch fails the first
    transferred request, not the start-up, disaggregation.md §3)."""
    if not disaggregation.enabled(spec) or not disaggregation.settings(spec).kv_connector:
        return
    try:
        prefill = profiles.effective(spec, models.RoleName.PREFILL)
        decode = profiles.effective(spec, models.RoleName.DECODE)
    except problems.InvalidSpec:
        return  # reported by the rules
    for key, why in disaggregation.facts_of(spec).must_match.items():
        mine, theirs = _value(prefill, key), _value(decode, key)
        if mine != theirs:
            info = version_facts.settings[key]
            out.error(
                info.path,
                f"prefill and decode disagree on the {info.label} (prefill {_word(mine)}, decode {_word(theirs)}); "
                f"{why}; set it here so both roles run the same",
            )


def _value(tuning: profiles.Tuning, key: str) -> object:
    speculative = tuning.speculative
    return {
        "attentionBackend": tuning.attention_backend,
        "kvCacheDtype": tuning.kv_cache_dtype,
        "speculative": speculative is not None,
        "speculativeMethod": speculative.method if speculative else None,
        "speculativeTokens": speculative.num_speculative_tokens if speculative else None,
    }[key]


def _word(value: object) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def rule_settings(
    spec: models.DeepSeekServingSpec, role: models.RoleName, args: Sequence[facts.Arg]
) -> Iterator[tuple[str, facts.Scalar, str | None]]:
    """The KV-transfer settings the rules read, with where the user chose each: ``kvConnector``, ``kvRole`` and
    ``kvBufferDevice``, from spec.disaggregation or, for a serving that is not disaggregated, from a raw
    ``--kv-transfer-config`` in extraArgs."""
    config = disaggregation.transfer_config(spec, role)
    if config is not None:
        given = spec.disaggregation.model_fields_set if spec.disaggregation is not None else set()
        role_given = getattr(disaggregation.settings(spec), role.value).kv_role is not None
        yield "kvConnector", config["kv_connector"], f"{_WHERE}.kvConnector" if "kv_connector" in given else None
        yield "kvRole", config["kv_role"], f"{_WHERE}.{role.value}.kvRole" if role_given else None
        device = config.get("kv_buffer_device")
        yield "kvBufferDevice", device, f"{_WHERE}.kvBufferDevice" if device is not None else None
        return
    raw = next((a for a in args if a.flag.dest == "kv_transfer_config"), None)
    loaded = json.loads(raw.values[0]) if raw is not None and raw.values else {}
    where = problems.path("spec.extraArgs", raw.index) if raw is not None else None
    for key, name in (("kvConnector", "kv_connector"), ("kvRole", "kv_role"), ("kvBufferDevice", "kv_buffer_device")):
        value = loaded.get(name) if isinstance(loaded, dict) else None
        yield key, value if isinstance(value, str) else None, where if value is not None else None
