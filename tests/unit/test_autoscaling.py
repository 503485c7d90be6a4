"""spec.autoscaling: prefill follows decode, the KEDA ScaledObject the operator renders, the Autoscaling condition
judged from what KEDA reports on it, and what capacity decides.

Reconciler-level tests build the snapshot the operator would read (a serving, kwok-like Nodes, its children) and
look at the decision; the KEDA side is the ScaledObject's wire shape, which KEDA turns into an HPA on the serving's
scale subresource (proved on a real cluster by tests/integration/test_autoscaling.py), and the status.conditions
KEDA v2.21.0 writes on it (facts.keda; met for real in tests/integration/test_autoscaling_keda.py).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from nvlfleet.api import autoscaling as autoscaling_api
from nvlfleet.api import names, reasons
from nvlfleet.core import autoscaling, reconciler, validation
from nvlfleet.facts import keda
from support import fleetbuilder as fb
from support import servingbuilder as sb

T0 = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
UID = "0b8e4c1a-5f5e-4c1e-9d7a-0000000000a5"
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
WITH_KEDA = frozenset({"LeaderWorkerSet", "ComputeDomain", "ScaledObject"})
WITHOUT_KEDA = frozenset({"LeaderWorkerSet", "ComputeDomain"})


def scaling(**extra: Any) -> dict[str, Any]:
    return {"minGroups": 2, "maxGroups": 4, "signal": "waitingRequests", "target": 8, **extra}


def autoscaled(groups: int = 2, prefill_groups: int = 1, **extra: Any) -> dict[str, Any]:
    obj = sb.serving_dict(
        groups=groups, nodes=1, prefill=sb.role(groups=prefill_groups, tensor=1, nodes=1), autoscaling=scaling(**extra)
    )
    obj["metadata"].update(uid=UID, generation=1)
    return obj


def decide(
    obj: dict[str, Any],
    *,
    served: frozenset[str] = WITH_KEDA,
    address: str | None = PROMETHEUS,
    nodes: list[dict[str, Any]] | None = None,
    children: list[dict[str, Any]] | None = None,
) -> reconciler.Decision:
    return reconciler.reconcile(
        reconciler.Snapshot(
            serving=obj,
            now=T0,
            nodes=nodes if nodes is not None else fb.rack(0) + fb.rack(1),
            children=children or [],
            served=served,
            prometheus_address=address,
        )
    )


def of_kind(decision: reconciler.Decision, kind: str) -> list[dict[str, Any]]:
    return [o for o in decision.apply if o["kind"] == kind]


def condition(decision: reconciler.Decision, ctype: str) -> dict[str, Any]:
    assert decision.status is not None
    return next(c for c in decision.status["conditions"] if c["type"] == ctype)


# ---------------------------------------------------------------------------------------------------------------
# Prefill follows decode


@pytest.mark.parametrize(
    ("decode", "ratio", "prefill"),
    [(4, 0.5, 2), (3, 0.5, 2), (1, 0.25, 1), (2, 1.5, 3), (0, 0.5, 0), (5, 0.1, 1)],
    ids=["exact", "half-rounds-up", "at-least-one", "more-prefill", "zero-decode", "small-ratio"],
)
def test_prefill_groups_are_decode_times_the_ratio_rounded_and_at_least_one_while_decode_runs(
    decode: int, ratio: float, prefill: int
) -> None:
    serving = validation.parse(autoscaled(groups=decode, prefillPerDecode=ratio))[0]
    assert serving is not None
    assert autoscaling.prefill_groups(serving.spec) == prefill
    assert autoscaling.followed(serving).spec.roles.prefill is not None
    assert autoscaling.followed(serving).spec.roles.prefill.groups == prefill  # type: ignore[union-attr]


def test_without_a_ratio_prefill_keeps_the_groups_its_spec_says() -> None:
    serving = validation.parse(autoscaled(groups=4, prefill_groups=3))[0]
    assert serving is not None
    assert autoscaling.followed(serving) is serving


def test_the_planner_places_the_followed_prefill_groups_and_the_status_counts_them() -> None:
    decision = decide(autoscaled(groups=4, prefill_groups=1, prefillPerDecode=0.5))
    assert {role: sum(per.values()) for role, per in decision.placement.items()} == {"prefill": 2, "decode": 4}
    assert decision.status is not None and decision.status["desiredGroups"] == 6


# ---------------------------------------------------------------------------------------------------------------
# The ScaledObject


def test_an_autoscaled_serving_gets_a_scaled_object_on_its_scale_subresource_owned_by_it() -> None:
    decision = decide(autoscaled(scaleDownStabilizationSeconds=30))
    (scaled,) = of_kind(decision, "ScaledObject")
    assert kinds_and_kinds(decision)[-1] == "ScaledObject"  # applied last, once what it scales exists
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": names.API_VERSION, "kind": names.KIND, "name": "dsv41"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 4)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"] == {"stabilizationWindowSeconds": 30}
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["serverAddress"] == PROMETHEUS
    assert trigger["metadata"]["threshold"] == "8"
    assert [r["uid"] for r in scaled["metadata"]["ownerReferences"]] == [UID]
    assert scaled["metadata"]["labels"][names.SERVING_LABEL] == "dsv41"


def test_the_scaled_object_carries_the_empty_scaling_modifiers_keda_writes_back_so_nvlfleet_owns_them() -> None:
    (scaled,) = of_kind(decide(autoscaled()), "ScaledObject")
    assert scaled["spec"]["advanced"]["scalingModifiers"] == {}


def kinds_and_kinds(decision: reconciler.Decision) -> list[str]:
    return [o["kind"] for o in decision.apply]


@pytest.mark.parametrize(
    ("signal", "query", "metric_type"),
    [
        (
            "waitingRequests",
            'sum(vllm:num_requests_waiting{namespace="llm",serving="dsv41",role="decode"})',
            "AverageValue",
        ),
        ("kvCacheUsage", 'avg(vllm:kv_cache_usage_perc{namespace="llm",serving="dsv41",role="decode"})', "Value"),
        (
            "generationTokensPerGpu",
            'sum(rate(vllm:generation_tokens_total{namespace="llm",serving="dsv41",role="decode"}[1m])) / 4',
            "AverageValue",
        ),
    ],
)
def test_each_signal_is_one_promql_query_over_the_servings_decode_engines(
    signal: str, query: str, metric_type: str
) -> None:
    (scaled,) = of_kind(decide(autoscaled(signal=signal)), "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert (trigger["metadata"]["query"], trigger["metricType"]) == (query, metric_type)


def test_the_specs_prometheus_address_wins_over_the_operators() -> None:
    mine = "http://my-prometheus.team.svc:9090"
    (scaled,) = of_kind(decide(autoscaled(prometheus={"address": mine})), "ScaledObject")
    assert scaled["spec"]["triggers"][0]["metadata"]["serverAddress"] == mine


def test_without_kedas_api_a_condition_says_so_and_the_serving_runs_at_its_spec_groups() -> None:
    decision = decide(autoscaled(groups=3), served=WITHOUT_KEDA)
    assert of_kind(decision, "ScaledObject") == []
    found = condition(decision, reasons.AUTOSCALING)
    assert (found["status"], found["reason"]) == ("False", reasons.KEDA_MISSING)
    assert "scaledobjects.keda.sh" in found["message"]
    assert sum(decision.placement["decode"].values()) == 3
    assert condition(decision, reasons.READY)["reason"] != reasons.MISSING_PREREQUISITE


def test_without_a_prometheus_address_a_condition_names_the_field_and_the_flag() -> None:
    decision = decide(autoscaled(), address=None)
    assert of_kind(decision, "ScaledObject") == []
    found = condition(decision, reasons.AUTOSCALING)
    assert (found["status"], found["reason"]) == ("False", reasons.NO_PROMETHEUS_ADDRESS)
    assert "spec.autoscaling.prometheus.address" in found["message"] and "--prometheus-address" in found["message"]


def test_turning_autoscaling_off_prunes_the_scaled_object_and_drops_the_condition() -> None:
    (scaled,) = of_kind(decide(autoscaled()), "ScaledObject")
    stored = {**scaled, "metadata": {**scaled["metadata"], "uid": "uid-so"}}
    plain = autoscaled()
    del plain["spec"]["autoscaling"]
    decision = decide(plain, children=[stored])
    assert [(o["kind"], o["metadata"]["name"]) for o in decision.delete] == [("ScaledObject", "dsv41")]
    assert decision.status is not None
    assert reasons.AUTOSCALING not in {c["type"] for c in decision.status["conditions"]}


def test_a_serving_without_autoscaling_has_no_autoscaling_condition() -> None:
    plain = autoscaled()
    del plain["spec"]["autoscaling"]
    decision = decide(plain)
    assert decision.status is not None
    assert reasons.AUTOSCALING not in [c["type"] for c in decision.status["conditions"]]


# ---------------------------------------------------------------------------------------------------------------
# What KEDA reports on the ScaledObject (KEDA v2.21.0's status.conditions, as its operator writes them)

KEDA_INITIALISED = [
    {"type": keda.READY, "status": "Unknown"},
    {"type": "Active", "status": "Unknown"},
    {"type": "Fallback", "status": "Unknown"},
    {"type": keda.PAUSED, "status": "False"},
]
KEDA_READY = ("True", "ScaledObjectReady", "ScaledObject is defined correctly and is ready for scaling")
TRIGGER_FAILS = ("False", keda.TRIGGER_ERROR, "Triggers defined in ScaledObject are not working correctly")
HPA_FAILS = (
    "False",
    "FailedGetExternalMetric",
    "HPA is not actively scaling: the HPA was unable to compute the replica count: unable to get external metric "
    "llm/s0-prometheus: dial tcp 127.0.0.1:9: connect: connection refused",
)


def keda_says(**conditions: tuple[str, str, str]) -> list[dict[str, str]]:
    """KEDA's status.conditions: the initialised four, with ``conditions`` (by type) set over them."""
    found = {c["type"]: dict(c) for c in KEDA_INITIALISED}
    for ctype, (status, reason, message) in conditions.items():
        found[ctype] = {"type": ctype, "status": status, "reason": reason, "message": message}
    return list(found.values())


def with_keda_status(conditions: list[dict[str, str]] | None, **extra: Any) -> reconciler.Decision:
    """The pass after the ScaledObject was applied, with the status KEDA gave it (None: no status at all)."""
    obj = autoscaled(**extra)
    (scaled,) = of_kind(decide(obj), "ScaledObject")
    observed = {**scaled, "metadata": {**scaled["metadata"], "uid": "uid-so"}}
    if conditions is not None:
        observed["status"] = {"conditions": conditions, "hpaName": "dsv41"}
    return decide(obj, children=[observed])


def autoscaling_condition(decision: reconciler.Decision) -> tuple[str, str, str]:
    found = condition(decision, reasons.AUTOSCALING)
    return found["status"], found["reason"], found["message"]


def test_before_the_scaled_object_exists_the_condition_waits_for_keda_and_the_object_is_applied() -> None:
    decision = decide(autoscaled())
    assert of_kind(decision, "ScaledObject")
    status, reason, message = autoscaling_condition(decision)
    assert (status, reason) == ("False", reasons.WAITING_FOR_KEDA)
    assert "ScaledObject dsv41" in message and "keda-operator" in message


def test_a_scaled_object_without_a_status_waits_for_keda() -> None:
    assert autoscaling_condition(with_keda_status(None))[:2] == ("False", reasons.WAITING_FOR_KEDA)


def test_a_scaled_object_keda_only_initialised_waits_for_keda() -> None:
    assert autoscaling_condition(with_keda_status(keda_says()))[:2] == ("False", reasons.WAITING_FOR_KEDA)


def test_keda_ready_makes_the_condition_true_with_the_bounds_and_the_target() -> None:
    status, reason, message = autoscaling_condition(with_keda_status(keda_says(Ready=KEDA_READY)))
    assert (status, reason) == ("True", reasons.KEDA_READY)
    assert "between 2 and 4 groups at waitingRequests 8" in message


def test_a_failing_trigger_is_signal_unavailable_with_kedas_reason_and_message_and_the_address_it_queried() -> None:
    status, reason, message = autoscaling_condition(with_keda_status(keda_says(Ready=TRIGGER_FAILS)))
    assert (status, reason) == ("False", reasons.SIGNAL_UNAVAILABLE)
    assert f"Ready=False ({TRIGGER_FAILS[1]}: {TRIGGER_FAILS[2]})" in message
    assert PROMETHEUS in message and "waitingRequests" in message


def test_a_failing_trigger_says_why_the_hpa_cannot_read_the_metric_when_keda_mirrors_it() -> None:
    _, reason, message = autoscaling_condition(with_keda_status(keda_says(Ready=TRIGGER_FAILS, HPAActive=HPA_FAILS)))
    assert reason == reasons.SIGNAL_UNAVAILABLE
    assert f"HPAActive=False ({HPA_FAILS[1]}: {HPA_FAILS[2]})" in message


def scaler_failed(message: str, at: str, about: str = "dsv41") -> dict[str, Any]:
    """The Event KEDA's scale loop records about a ScaledObject whose scaler failed, as core/v1 lists it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{about}.{at}", "namespace": "llm"},
        "involvedObject": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": about},
        "reason": keda.SCALER_FAILED,
        "type": "Warning",
        "message": message,
        "eventTime": at,
    }


REFUSED_BY_PROMETHEUS = (
    'error inspecting prometheus metrics: error when getting metric values: Get "http://127.0.0.1:9/api/v1/query'
    '?query=x": dial tcp 127.0.0.1:9: connect: connection refused'
)


def with_scaler_events(*events: dict[str, Any]) -> tuple[str, str, str]:
    obj = autoscaled()
    (scaled,) = of_kind(decide(obj), "ScaledObject")
    scaled = {**scaled, "metadata": {**scaled["metadata"], "uid": "uid-so"}}
    scaled["status"] = {"conditions": keda_says(Ready=TRIGGER_FAILS, HPAActive=HPA_FAILS)}
    snap = reconciler.Snapshot(
        serving=obj,
        now=T0,
        nodes=fb.rack(0) + fb.rack(1),
        children=[scaled],
        served=WITH_KEDA,
        prometheus_address=PROMETHEUS,
        events=list(events),
    )
    return autoscaling_condition(reconciler.reconcile(snap))


def test_a_failing_trigger_says_what_kedas_scaler_said_in_its_latest_event() -> None:
    _, reason, message = with_scaler_events(
        scaler_failed("an older failure", "2026-01-01T00:00:00Z"),
        scaler_failed(REFUSED_BY_PROMETHEUS, "2026-01-01T00:05:00Z"),
    )
    assert reason == reasons.SIGNAL_UNAVAILABLE
    assert f"its scaler failed ({keda.SCALER_FAILED}: {REFUSED_BY_PROMETHEUS})" in message
    assert "an older failure" not in message
    assert message.index(REFUSED_BY_PROMETHEUS) < message.index("dsv41 says")  # in what an Event carries of it


def test_events_about_another_scaled_object_are_not_this_servings_cause() -> None:
    _, _, message = with_scaler_events(scaler_failed(REFUSED_BY_PROMETHEUS, "2026-01-01T00:05:00Z", about="other"))
    assert "its scaler failed" not in message


def test_a_credential_or_a_password_in_kedas_message_is_redacted() -> None:
    token = "hf_" + "a" * 34
    said = f'Get "https://admin:s3cret@prom.example/api/v1/query": 401 for token {token}'
    _, _, message = with_scaler_events(scaler_failed(said, "2026-01-01T00:05:00Z"))
    assert "s3cret" not in message and token not in message
    assert "https://<redacted>@prom.example" in message


def test_a_partly_failing_trigger_is_signal_unavailable() -> None:
    partial = ("Unknown", keda.PARTIAL_TRIGGER_ERROR, "Some triggers defined in ScaledObject are not working correctly")
    assert autoscaling_condition(with_keda_status(keda_says(Ready=partial)))[:2] == (
        "False",
        reasons.SIGNAL_UNAVAILABLE,
    )


def test_an_hpa_that_cannot_read_the_metric_is_signal_unavailable_though_keda_says_ready() -> None:
    # KEDA's metrics server unreachable: KEDA's own poll works, the HPA's query through the aggregation layer fails.
    status, reason, message = autoscaling_condition(with_keda_status(keda_says(Ready=KEDA_READY, HPAActive=HPA_FAILS)))
    assert (status, reason) == ("False", reasons.SIGNAL_UNAVAILABLE)
    assert HPA_FAILS[2] in message and "Ready=" not in message


def test_an_hpa_actively_scaling_keeps_the_condition_true() -> None:
    active = ("True", "HPAActive", "HPA is actively scaling")
    assert autoscaling_condition(with_keda_status(keda_says(Ready=KEDA_READY, HPAActive=active)))[:2] == (
        "True",
        reasons.KEDA_READY,
    )


def test_a_scaled_object_keda_cannot_use_is_keda_not_ready_with_its_reason_and_message() -> None:
    failed = ("False", "ScaledObjectCheckFailed", "Target resource doesn't expose /scale subresource")
    status, reason, message = autoscaling_condition(with_keda_status(keda_says(Ready=failed)))
    assert (status, reason) == ("False", reasons.KEDA_NOT_READY)
    assert f"Ready=False ({failed[1]}: {failed[2]})" in message


def test_a_paused_scaled_object_says_paused_and_names_the_annotations_that_pause_it() -> None:
    paused = ("True", "ScaledObjectPaused", "ScaledObject is paused")
    status, reason, message = autoscaling_condition(with_keda_status(keda_says(Ready=KEDA_READY, Paused=paused)))
    assert (status, reason) == ("False", reasons.KEDA_PAUSED)
    assert all(annotation in message for annotation in keda.PAUSED_ANNOTATIONS)


def test_a_malformed_keda_status_waits_for_keda_rather_than_crashing() -> None:
    malformed: Any = [None, "Ready", {"type": keda.READY, "status": "Maybe"}, {"type": 3}]
    assert autoscaling_condition(with_keda_status(malformed))[:2] == ("False", reasons.WAITING_FOR_KEDA)


def test_whatever_keda_reports_the_serving_keeps_the_decode_groups_its_spec_says() -> None:
    for said in (None, keda_says(Ready=TRIGGER_FAILS, HPAActive=HPA_FAILS), keda_says(Ready=KEDA_READY)):
        assert sum(with_keda_status(said).placement["decode"].values()) == 2


def test_a_scaled_object_another_serving_owns_is_not_read() -> None:
    obj = autoscaled()
    (scaled,) = of_kind(decide(obj), "ScaledObject")
    meta = {**scaled["metadata"], "uid": "uid-so", "ownerReferences": [{**scaled["metadata"]["ownerReferences"][0]}]}
    meta["ownerReferences"][0]["uid"] = "someone-else"
    stranger = {**scaled, "metadata": meta, "status": {"conditions": keda_says(Ready=KEDA_READY)}}
    assert autoscaling_condition(decide(obj, children=[stranger]))[:2] == ("False", reasons.WAITING_FOR_KEDA)


# ---------------------------------------------------------------------------------------------------------------
# Capacity decides


def test_a_scale_up_that_does_not_fit_places_what_fits_says_what_is_missing_and_moves_nothing() -> None:
    # One NVL72 rack, 14 of its 18 trays taken by another tenant: 4 trays for single-tray groups. Running: 2 decode
    # and 1 prefill. The autoscaler asks for 4 decode: one more fits, one does not.
    nodes = fb.rack(0)
    others = [fb.pod(f"tenant-{i}", f"rack-0-{i:02d}", namespace="other") for i in range(14)]
    running = snapshot(autoscaled(groups=2), nodes, others, [])
    before = reconciler.reconcile(running)
    assert before.unplaced == 0
    lws = [{**o, "metadata": {**o["metadata"], "uid": "uid-" + o["metadata"]["name"]}} for o in before.apply]

    decision = reconciler.reconcile(snapshot(autoscaled(groups=4), nodes, others, lws))

    assert decision.placement == {"prefill": before.placement["prefill"], "decode": {fb.clique(0): 3}}
    assert decision.unplaced == 1
    missing = condition(decision, reasons.INSUFFICIENT_CAPACITY)
    assert missing["status"] == "True" and "1 more" in missing["message"], missing["message"]
    assert decision.status is not None
    assert (decision.status["desiredGroups"], decision.status["replicas"]) == (5, 0)  # HPA: ready < desired
    placed = condition(decision, reasons.PLACED)
    assert (placed["status"], placed["reason"]) == ("False", reasons.INSUFFICIENT_CAPACITY)


def snapshot(
    obj: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]], children: list[dict[str, Any]]
) -> reconciler.Snapshot:
    return reconciler.Snapshot(
        serving=obj,
        now=T0,
        nodes=nodes,
        pods=pods,
        children=children,
        fleet=[c for c in children if c["kind"] == "LeaderWorkerSet"],
        served=WITH_KEDA,
        prometheus_address=PROMETHEUS,
    )


# ---------------------------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"minGroups": 5, "maxGroups": 4}, "spec.autoscaling.minGroups"),
        ({"prefillPerDecode": 0}, "spec.autoscaling.prefillPerDecode"),
        ({"prefillPerDecode": -0.5}, "spec.autoscaling.prefillPerDecode"),
        ({"signal": "gpuUtilisation"}, "spec.autoscaling.signal"),
        ({"target": 0}, "spec.autoscaling.target"),
        ({"target": -1}, "spec.autoscaling.target"),
        ({"maxGroups": 0}, "spec.autoscaling.maxGroups"),
        ({"prometheus": {"address": "prometheus:9090"}}, "spec.autoscaling.prometheus.address"),
    ],
    ids=[
        "min-above-max",
        "zero-ratio",
        "negative-ratio",
        "unknown-signal",
        "zero-target",
        "negative-target",
        "zero-max",
        "address-without-scheme",
    ],
)
def test_bad_autoscaling_is_refused_with_the_field_path(change: dict[str, Any], path: str) -> None:
    found = validation.validate(autoscaled(**change))
    assert path in {p.path for p in found}, found


def test_a_max_groups_no_nvlink_domain_can_hold_is_refused_at_max_groups() -> None:
    # H200: NVLink stops at the node, so a two-node decode group never fits one domain however many racks there are.
    obj = sb.serving_dict(gpu="H200", groups=2, tensor=8, nodes=2, autoscaling=scaling())
    found = {p.path: p.message for p in validation.validate(obj)}
    assert "spec.autoscaling.maxGroups" in found and "can never be placed" in found["spec.autoscaling.maxGroups"]


def test_a_ratio_without_a_prefill_role_is_refused() -> None:
    obj = sb.serving_dict(groups=2, nodes=1, autoscaling=scaling(prefillPerDecode=0.5))
    assert "spec.autoscaling.prefillPerDecode" in {p.path for p in validation.validate(obj)}


def test_the_crd_refuses_min_groups_above_max_groups_with_a_cel_rule() -> None:
    from nvlfleet.api import crd

    node = crd.schema()["properties"]["spec"]["properties"]["autoscaling"]
    assert {"rule": "self.minGroups <= self.maxGroups", "message": "minGroups must not exceed maxGroups"} in node[
        "x-kubernetes-validations"
    ]
    assert node["properties"]["signal"]["enum"] == [s.value for s in autoscaling_api.Signal]
    assert node["properties"]["prefillPerDecode"]["exclusiveMinimum"] is True


def test_the_decision_carries_desired_and_ready_groups_per_role_and_the_ceiling_for_the_gauges() -> None:
    decision = decide(autoscaled(groups=4, prefillPerDecode=0.5))
    assert decision.groups == {"prefill": (2, 0), "decode": (4, 0)}
    assert decision.max_groups == 4
    plain = autoscaled()
    del plain["spec"]["autoscaling"]
    assert decide(plain).max_groups is None


# ---------------------------------------------------------------------------------------------------------------
# Events: decode stopping or resuming to follow its signal is told once, when the reason changes


def pass_after(previous: reconciler.Decision, conditions: list[dict[str, str]]) -> reconciler.Decision:
    """The next pass of the serving ``previous`` wrote the status of, with KEDA now saying ``conditions``."""
    obj = autoscaled()
    assert previous.status is not None
    obj["status"] = previous.status
    (scaled,) = of_kind(decide(obj), "ScaledObject")
    observed = {**scaled, "metadata": {**scaled["metadata"], "uid": "uid-so"}, "status": {"conditions": conditions}}
    return decide(obj, children=[observed])


def autoscaling_events(decision: reconciler.Decision) -> list[tuple[str, str]]:
    return [(e.type, e.message) for e in decision.events if e.reason == reasons.AUTOSCALING]


def test_waiting_for_kedas_first_report_posts_no_event() -> None:
    assert autoscaling_events(decide(autoscaled())) == []


def test_autoscaling_turning_false_posts_a_warning_with_the_conditions_message() -> None:
    ready = with_keda_status(keda_says(Ready=KEDA_READY))
    failing = pass_after(ready, keda_says(Ready=TRIGGER_FAILS, HPAActive=HPA_FAILS))

    assert autoscaling_events(failing) == [("Warning", autoscaling_condition(failing)[2])]
    assert HPA_FAILS[2] in autoscaling_events(failing)[0][1]


def test_a_signal_still_unavailable_posts_nothing_more_though_kedas_message_changed() -> None:
    failing = pass_after(with_keda_status(keda_says(Ready=KEDA_READY)), keda_says(Ready=TRIGGER_FAILS))
    other = (*HPA_FAILS[:2], HPA_FAILS[2].replace("127.0.0.1:9", "127.0.0.1:10"))

    assert autoscaling_events(pass_after(failing, keda_says(Ready=TRIGGER_FAILS, HPAActive=other))) == []


def test_autoscaling_turning_true_again_posts_a_normal_event() -> None:
    failing = pass_after(with_keda_status(keda_says(Ready=KEDA_READY)), keda_says(Ready=TRIGGER_FAILS))
    recovered = pass_after(failing, keda_says(Ready=KEDA_READY))

    assert autoscaling_events(recovered) == [("Normal", autoscaling_condition(recovered)[2])]


def test_keda_reporting_ready_the_first_time_posts_nothing() -> None:
    assert autoscaling_events(pass_after(decide(autoscaled()), keda_says(Ready=KEDA_READY))) == []
