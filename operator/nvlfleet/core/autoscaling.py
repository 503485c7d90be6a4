"""Autoscaling (``spec.autoscaling``): prefill sized from decode, and the KEDA ScaledObject that sizes decode.

Pure core, on both sides of the plan (spec → validate → **follow** → plan → render (+ **scaled object**) → apply →
status). The HorizontalPodAutoscaler KEDA creates changes only ``spec.roles.decode.groups``, through the serving's
scale subresource; prefill follows here, in the planner's input: ``followed`` returns the serving with
``prefill.groups = round(decode × prefillPerDecode)`` (at least 1 while decode runs, at most the role limit), and
the reconciler plans, renders and reports that serving. The stored spec keeps what its author wrote, so a scale
needs no second write, and a planner, a renderer and a status that all read the same followed spec cannot
disagree on how many prefill groups there are.

``scaled_object`` renders the ScaledObject (keda.sh/v1alpha1) with one Prometheus trigger whose PromQL reads the
serving's decode engines by the labels the PodMonitor gives them (namespace, serving, role), in the shape KEDA's
operator writes it back (``facts.keda.ADVANCED_AS_WRITTEN``), so nvlfleet's apply owns every field KEDA adds and
the revert of other managers' fields (``core.fieldsets``) finds nothing to remove. ``blocked`` says why it cannot
be rendered (KEDA's API absent, no Prometheus address); ``condition`` is the ``Autoscaling`` condition, judged —
once it can be rendered — from what KEDA reports on the observed ScaledObject (its ``Ready``, ``Paused`` and
``HPAActive`` conditions, ``facts.keda``): KEDA polls the signal, so only KEDA can say whether the signal is read.
Whatever it says, the serving runs at the groups its spec says; the condition says why nothing scales it.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from nvlfleet.api import autoscaling, models, names, objects, problems, reasons
from nvlfleet.facts import keda, vllm_metrics

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


def blocked(spec: models.DeepSeekServingSpec, served: frozenset[str], default_address: str | None) -> Condition | None:
    """Why the ScaledObject cannot be rendered (the Autoscaling condition then), None when it can."""
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
    return None


def trigger_failing(observed: Mapping[str, Any] | None) -> bool:
    """Whether KEDA reports the trigger of ``observed`` (a ScaledObject) failing: only then are the Events about it
    worth reading (``condition``'s ``events``)."""
    ready = _keda_conditions(observed).get(keda.READY)
    return ready is not None and ready[1] in keda.TRIGGER_ERRORS


def condition(
    serving: models.DeepSeekServing,
    served: frozenset[str],
    default_address: str | None,
    observed: Mapping[str, Any] | None,
    events: Iterable[Mapping[str, Any]] = (),
) -> Condition:
    """The Autoscaling condition of a serving with ``spec.autoscaling`` set; ``observed``: its ScaledObject as the
    watch last saw it (None before it exists); ``events``: Events in the serving's namespace, of which those KEDA
    recorded about the ScaledObject's failing scaler say why the signal cannot be read."""
    scaling = serving.spec.autoscaling
    assert scaling is not None
    if (why := blocked(serving.spec, served, default_address)) is not None:
        return why
    name = serving.metadata.name
    found = _keda_conditions(observed)
    ready, paused, hpa = found.get(keda.READY), found.get(keda.PAUSED), found.get(keda.HPA_ACTIVE)
    if ready is None or (ready[0] == "Unknown" and not ready[1]):
        # Absent, or only initialised: KEDA's operator has not judged this ScaledObject (yet).
        return (
            "False",
            reasons.WAITING_FOR_KEDA,
            f"KEDA has not reported on ScaledObject {name} yet (it sets status.conditions once its operator "
            "reconciles it; is keda-operator running?) — until then decode keeps spec.roles.decode.groups",
        )
    if paused is not None and paused[0] == "True":
        return (
            "False",
            reasons.KEDA_PAUSED,
            f"KEDA reports ScaledObject {name} Paused ({_said(paused)}): one of the annotations "
            f"{', '.join(keda.PAUSED_ANNOTATIONS)} on it pauses scaling; remove it to resume",
        )
    hpa_failed = hpa is not None and hpa[0] == "False"
    if ready[1] in keda.TRIGGER_ERRORS or (ready[0] == "True" and hpa_failed):
        told = [f"Ready={ready[0]} ({_said(ready)})"] if ready[0] != "True" else []
        told += [f"HPAActive=False ({_said(hpa)})"] if hpa is not None and hpa_failed else []
        failed = _scaler_failure(events, name) if ready[1] in keda.TRIGGER_ERRORS else None
        # The root cause first: an Event carries only the first 1,024 bytes of the message.
        cause = f"its scaler failed ({keda.SCALER_FAILED}: {failed}); " if failed else ""
        return (
            "False",
            reasons.SIGNAL_UNAVAILABLE,
            problems.redacted(
                f"KEDA cannot read the {scaling.signal.value} signal from {_server_address(observed)}: {cause}"
                f"ScaledObject {name} says {'; '.join(told)} — the HPA holds decode where it is until the signal "
                "is read again"
            ),
        )
    if ready[0] != "True":
        return (
            "False",
            reasons.KEDA_NOT_READY,
            f"KEDA reports ScaledObject {name} Ready={ready[0]} ({_said(ready)}) — decode keeps the groups it has",
        )
    return (
        "True",
        reasons.KEDA_READY,
        f"KEDA keeps decode between {scaling.min_groups} and {scaling.max_groups} groups at {scaling.signal.value} "
        f"{scaling.target:g}",
    )


def _keda_conditions(observed: Mapping[str, Any] | None) -> dict[str, tuple[str, str, str]]:
    """KEDA's status.conditions of ``observed`` by type, as (status, reason, message); malformed entries skipped."""
    found: dict[str, tuple[str, str, str]] = {}
    conditions = objects.as_mapping(objects.as_mapping(observed).get("status")).get("conditions")
    for entry in conditions if isinstance(conditions, list) else []:
        entry = objects.as_mapping(entry)
        ctype, status = entry.get("type"), entry.get("status")
        if isinstance(ctype, str) and status in ("True", "False", "Unknown"):
            reason, message = entry.get("reason"), entry.get("message")
            found[ctype] = (status, _text(reason), _text(message))
    return found


def _scaler_failure(events: Iterable[Mapping[str, Any]], name: str) -> str | None:
    """The message of the latest Event KEDA recorded about ScaledObject ``name``'s failing scaler, if any."""
    latest: tuple[datetime.datetime, str] | None = None
    for event in events:
        involved = objects.as_mapping(event.get("involvedObject"))
        if (involved.get("kind"), involved.get("name")) != (names.SCALED_OBJECT.kind, name):
            continue
        message, when = event.get("message"), objects.event_time(event)
        if event.get("reason") != keda.SCALER_FAILED or not isinstance(message, str) or not message or when is None:
            continue
        if latest is None or when >= latest[0]:
            latest = (when, message.strip())
    return None if latest is None else latest[1]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _said(condition: tuple[str, str, str]) -> str:
    _, reason, message = condition
    return f"{reason}: {message}" if reason and message else reason or message or "no reason given"


def _server_address(observed: Mapping[str, Any] | None) -> str:
    """The Prometheus KEDA queried: the observed trigger's, which is what KEDA's conditions are about (the spec's
    may have changed since KEDA last polled)."""
    triggers = objects.as_mapping(objects.as_mapping(observed).get("spec")).get("triggers")
    first = objects.as_mapping(triggers[0]) if isinstance(triggers, list) and triggers else {}
    found = objects.as_mapping(first.get("metadata")).get("serverAddress")
    return found if isinstance(found, str) and found else "Prometheus"


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
                **copy.deepcopy(dict(keda.ADVANCED_AS_WRITTEN)),  # what KEDA writes back: nvlfleet's field, not KEDA's
                "horizontalPodAutoscalerConfig": {
                    "name": name,
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": scaling.scale_up_stabilization_seconds},
                        "scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_stabilization_seconds},
                    },
                },
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
