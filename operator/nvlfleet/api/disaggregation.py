"""``spec.disaggregation``: how prefill engines hand their KV cache to decode engines, as a typed part of the API.

Pure API, beside ``models`` (which embeds ``DisaggregationSpec`` as ``DeepSeekServingSpec.disaggregation``) at the
start of the data flow (spec → validate → plan → render → apply → status). A serving with a ``roles.prefill`` is
disaggregated: its engines run vLLM's KV connector with the settings below (every field has the facts' default,
so ``prefill:`` alone is a working P/D serving). ``nvlfleet.core.validation`` checks the names against the pinned
vLLM's facts (``nvlfleet.facts.disaggregation``: the CRD cannot list them without copying those facts, so the
schema only bounds the spelling), ``nvlfleet.core.disaggregation`` renders the ``--kv-transfer-config`` JSON and
the NIXL side channel of every pod, and ``nvlfleet.core.router`` runs the router in P/D mode.
"""

from __future__ import annotations

from typing import Annotated

import pydantic

from nvlfleet.api import schema
from nvlfleet.facts import disaggregation, facts

_KV = disaggregation.load(facts.DEFAULT_VERSION)
_NAME = r"^[A-Za-z0-9_]*$"


class RoleTransfer(schema.Model):
    """The KV-transfer side of one engine role."""

    kv_role: Annotated[
        str | None,
        pydantic.Field(
            description="kv_role of --kv-transfer-config; unset: kv_producer on prefill, kv_consumer on decode.",
            pattern=r"^[a-z0-9_]+$",
            max_length=32,
        ),
    ] = None


class DisaggregationSpec(schema.Model):
    """Prefill/decode disaggregation: the KV connector both roles run and how a transfer behaves."""

    kv_connector: Annotated[
        str,
        pydantic.Field(
            description=f"KV connector (kv_connector of --kv-transfer-config), a name vLLM registers; default "
            f"{_KV.default_connector}. Empty: none, which a serving with a prefill role cannot run.",
            pattern=_NAME,
            max_length=64,
        ),
    ] = _KV.default_connector
    kv_load_failure_policy: Annotated[
        str,
        pydantic.Field(
            description=f"What decode does when a KV load fails: {' or '.join(_KV.load_failure_policies)} "
            f"(default {_KV.default_load_failure_policy}: the request ends with an error).",
            pattern=r"^[a-z0-9_]+$",
            max_length=32,
        ),
    ] = _KV.default_load_failure_policy
    kv_buffer_device: Annotated[
        str | None,
        pydantic.Field(
            description="kv_buffer_device of --kv-transfer-config (cuda or cpu); unset: the GPU (cuda).",
            pattern=r"^[a-z0-9_]+$",
            max_length=16,
        ),
    ] = None
    side_channel_port: Annotated[
        int,
        pydantic.Field(
            description=f"First NIXL side-channel port ({_KV.side_channel_port_env}); the engine of data-parallel "
            f"rank r listens on this port + r.",
            ge=1024,
            le=65535,
        ),
    ] = _KV.default_side_channel_port
    prefill: Annotated[RoleTransfer, pydantic.Field(description="The prefill engines' side.")] = pydantic.Field(
        default_factory=RoleTransfer
    )
    decode: Annotated[RoleTransfer, pydantic.Field(description="The decode engines' side.")] = pydantic.Field(
        default_factory=RoleTransfer
    )
