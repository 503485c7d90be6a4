"""``spec.autoscaling``: decode groups sized by a serving signal, prefill groups following by a ratio.

Pure API, beside ``models`` (which embeds ``AutoscalingSpec`` as ``DeepSeekServingSpec.autoscaling``) at the start
of the data flow (spec → validate → plan → render → apply → status). ``nvlfleet.core.autoscaling`` renders it as a
KEDA ``ScaledObject`` whose HorizontalPodAutoscaler drives the serving's scale subresource
(``spec.roles.decode.groups``), and sizes prefill from decode before the planner sees the spec; the CRD refuses
the shape errors at admission (bounds, ``minGroups <= maxGroups``), ``nvlfleet.core.validation`` what needs the
hardware facts (a ceiling no NVLink domain can hold).

The signals and the vLLM samples they read (``nvlfleet.facts.vllm_metrics``): ``waitingRequests`` — requests
waiting (``vllm:num_requests_waiting``) per decode group; ``kvCacheUsage`` — the mean KV-cache usage of the decode
engines (``vllm:kv_cache_usage_perc``, a fraction 0..1); ``generationTokensPerGpu`` — generated tokens/s
(``vllm:generation_tokens_total``) per decode GPU.
"""

from __future__ import annotations

import enum
from typing import Annotated

import pydantic

from nvlfleet.api import schema

# KEDA's defaults, spelled once: how often it asks Prometheus, and HPA's own scale-down stabilisation.
DEFAULT_POLLING_SECONDS = 15
DEFAULT_SCALE_UP_SECONDS = 0
DEFAULT_SCALE_DOWN_SECONDS = 300
MAX_WINDOW_SECONDS = 3600  # the HPA's own ceiling for a stabilisation window
MAX_GROUPS = 1000  # as RoleSpec.groups


class Signal(enum.StrEnum):
    """What the autoscaler holds at its target."""

    WAITING_REQUESTS = "waitingRequests"
    KV_CACHE_USAGE = "kvCacheUsage"
    GENERATION_TOKENS_PER_GPU = "generationTokensPerGpu"


class PrometheusSource(schema.Model):
    """Where KEDA reads the signal: a Prometheus (or compatible) query API scraping the engines."""

    address: Annotated[
        str,
        pydantic.Field(
            description="Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring.svc:9090.",
            pattern=r"^https?://[^\s]+$",
            max_length=512,
        ),
    ]


class AutoscalingSpec(schema.Model):
    """Decode groups between minGroups and maxGroups, holding one signal at its target (KEDA ScaledObject)."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(("self.minGroups <= self.maxGroups", "minGroups must not exceed maxGroups"))
    )

    min_groups: Annotated[
        int, pydantic.Field(description="Fewest decode groups the autoscaler keeps.", ge=1, le=MAX_GROUPS)
    ] = 1
    max_groups: Annotated[
        int, pydantic.Field(description="Most decode groups the autoscaler asks for.", ge=1, le=MAX_GROUPS)
    ]
    signal: Annotated[
        Signal,
        pydantic.Field(
            description="waitingRequests: waiting requests per decode group; kvCacheUsage: mean KV-cache usage of "
            "the decode engines (0..1); generationTokensPerGpu: generated tokens/s per decode GPU."
        ),
    ]
    target: Annotated[float, pydantic.Field(description="The value of the signal to hold.", gt=0, le=1e9)]
    prefill_per_decode: Annotated[
        float | None,
        pydantic.Field(
            description="Prefill groups per decode group: prefill = round(decode × this), at least 1 while decode "
            "runs. Unset: prefill keeps spec.roles.prefill.groups.",
            gt=0,
            le=100,
        ),
    ] = None
    scale_up_stabilization_seconds: Annotated[
        int, pydantic.Field(description="Scale-up stabilisation window.", ge=0, le=MAX_WINDOW_SECONDS)
    ] = DEFAULT_SCALE_UP_SECONDS
    scale_down_stabilization_seconds: Annotated[
        int, pydantic.Field(description="Scale-down stabilisation window.", ge=0, le=MAX_WINDOW_SECONDS)
    ] = DEFAULT_SCALE_DOWN_SECONDS
    polling_seconds: Annotated[int, pydantic.Field(description="How often KEDA queries the signal.", ge=1, le=3600)] = (
        DEFAULT_POLLING_SECONDS
    )
    prometheus: Annotated[
        PrometheusSource | None,
        pydantic.Field(description="Where the signal is read; unset: nvlfleet run --prometheus-address."),
    ] = None
