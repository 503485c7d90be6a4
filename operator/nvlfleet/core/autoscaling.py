"""Autoscaling (``spec.autoscaling``): prefill sized from decode, and the KEDA ScaledObject that sizes decode.

Pure core, on both sides of the plan (spec → validate → **follow** → plan → render (+ **scaled object**) → apply →
status). The HorizontalPodAutoscaler KEDA creates changes only ``spec.roles.decode.groups``, through the serving's
scale subresource; prefill follows here, in the planner's input: ``followed`` returns the serving with
``prefill.groups = round(decode × prefillPerDecode)`` (at least 1 while decode runs, at most the role limit), and
the reconciler plans, renders and reports that serving. The stored spec keeps what its author wrote, so a scale
needs no second write, and a planner, a renderer and a status that all read the same followed spec cannot
disagree on how many prefill groups there are.

``scaled_object`` renders the ScaledObject (keda.sh/v1alpha1) with one Prometheus trigger whose PromQL reads the
serving's decode engines by the labels the PodMonitor gives them (namespace, serving, role). ``condition`` says
whether it could be rendered: with KEDA's API absent or no Prometheus address, the serving still runs at the
groups its spec says, and the ``Autoscaling`` condition says why nothing scales it.
"""

from __future__ import annotations

from typing import Any, Literal

from nvlfleet.api import autoscaling, models, names, reasons
from nvlfleet.facts import vllm_metrics

# (status, reason, message) of the Autoscaling condition, as report.Conditions holds them.
Condition = tuple[Literal["True", "False"], str, str]


def prefill_groups(spec: models.DeepSeekServingSpec) -> int | None:
    """The prefill groups decode's size asks for; None when prefill is sized by hand (or absent)."""
    scaling = spec.autoscaling
    if scaling is None or scaling.prefill_per_decode is None or spec.roles.prefill is None:
        return None
    decode = spec.roles.decode.groups
    if decode == 0:
        return 0
    # round() rounds halves to even; a ratio of 0.5 at 3 decode groups should give 2 prefill groups, not 1 or 2
    # depending on parity, so halves round up.
    wanted = int(decode * scaling.prefill_per_decode + 0.5)
    return min(max(1, wanted), autoscaling.MAX_GROUPS)


def followed(serving: models.DeepSeekServing) -> models.DeepSeekServing:
    """``serving`` with its prefill groups following decode (the planner's input); unchanged without a ratio."""
    groups = prefill_groups(serving.spec)
    prefill = serving.spec.roles.prefill
    if groups is None or prefill is None or groups == prefill.groups:
        return serving
    roles = serving.spec.roles.model_copy(update={"prefill": prefill.model_copy(update={"groups": groups})})
    return serving.model_copy(update={"spec": serving.spec.model_copy(update={"roles": roles})})


def address(spec: models.DeepSeekServingSpec, default: str | None) -> str | None:
    """The Prometheus the ScaledObject queries: the spec's, else the operator's ``--prometheus-address``."""
    scaling = spec.autoscaling
    if scaling is not None and scaling.prometheus is not None:
        return scaling.prometheus.address
    return default


def condition(spec: models.DeepSeekServingSpec, served: frozenset[str], default_address: str | None) -> Condition:
    """The Autoscaling condition of a serving with ``spec.autoscaling`` set."""
    if names.SCALED_OBJECT.kind not in served:
        return (
            "False",
            reasons.KEDA_MISSING,
            f"the ScaledObject API ({names.SCALED_OBJECT.crd_name}/{names.SCALED_OBJECT.version}) is not installed; "
            "install KEDA (https://keda.sh) — until then decode keeps spec.roles.decode.groups",
        )
    if address(spec, default_address) is None:
        return (
            "False",
            reasons.NO_PROMETHEUS_ADDRESS,
            "no Prometheus to read the signal from: set spec.autoscaling.prometheus.address or start the operator "
            "with --prometheus-address (chart value autoscaling.prometheusAddress)",
        )
    scaling = spec.autoscaling
    assert scaling is not None
    return (
        "True",
        reasons.SCALED_OBJECT_RENDERED,
        f"KEDA keeps decode between {scaling.min_groups} and {scaling.max_groups} groups at {scaling.signal.value} "
        f"{scaling.target:g}",
    )


def query(serving: models.DeepSeekServing) -> tuple[str, str]:
    """The PromQL of the serving's signal and KEDA's metric type for it (AverageValue: per group; Value: as is)."""
    scaling = serving.spec.autoscaling
    assert scaling is not None
    where = (
        f'namespace="{serving.metadata.namespace}",serving="{serving.metadata.name}",'
        f'role="{models.RoleName.DECODE.value}"'
    )
    if scaling.signal is autoscaling.Signal.WAITING_REQUESTS:
        # The HPA divides an AverageValue by the current groups: the sum over the decode engines is per group.
        return f"sum({vllm_metrics.exposed(vllm_metrics.NUM_REQUESTS_WAITING)}{{{where}}})", "AverageValue"
    if scaling.signal is autoscaling.Signal.KV_CACHE_USAGE:
        # A utilisation: the HPA scales by mean/target, so it is a Value, not divided by the groups.
        return f"avg({vllm_metrics.exposed(vllm_metrics.KV_CACHE_USAGE_PERC)}{{{where}}})", "Value"
    gpus = models.role_topology(serving.spec.gpu, serving.spec.roles.decode).gpus_per_group
    generated = vllm_metrics.exposed(vllm_metrics.GENERATION_TOKENS + "_total")
    # Per group ÷ GPUs per group = per GPU, so the target is tokens/s per GPU as the user wrote it.
    return f"sum(rate({generated}{{{where}}}[1m])) / {gpus}", "AverageValue"


def scaled_object(serving: models.DeepSeekServing, prometheus: str) -> dict[str, Any]:
    """The KEDA ScaledObject that scales ``serving``'s decode groups through its scale subresource."""
    scaling = serving.spec.autoscaling
    assert scaling is not None
    promql, metric_type = query(serving)
    name = serving.metadata.name
    return {
        "apiVersion": names.SCALED_OBJECT.api_version,
        "kind": names.SCALED_OBJECT.kind,
        "metadata": {"name": name, "namespace": serving.metadata.namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": names.API_VERSION, "kind": names.KIND, "name": name},
            "pollingInterval": scaling.polling_seconds,
            "minReplicaCount": scaling.min_groups,
            "maxReplicaCount": scaling.max_groups,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "name": name,
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": scaling.scale_up_stabilization_seconds},
                        "scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_stabilization_seconds},
                    },
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": metric_type,
                    "metadata": {"serverAddress": prometheus, "query": promql, "threshold": f"{scaling.target:g}"},
                }
            ],
        },
    }
