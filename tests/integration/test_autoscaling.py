"""Autoscaling on a real cluster without KEDA: the scale subresource an HPA reads, and an autoscaled serving that
runs and says why nothing scales it.

- The real kube-controller-manager's HPA controller reads the serving's scale subresource: AbleToScale=True, the
  current replicas are the ready decode groups, and the selector parses (an HPA on a target without one reports
  ``InvalidSelector``). ScalingActive needs a metrics API answering (none is installed on this cluster: no
  metrics-server, no adapter), so here it is False with the metric as its reason; with KEDA's metrics API server
  it turns True (tests/integration/test_autoscaling_keda.py).
- ``spec.autoscaling`` on a cluster without KEDA's ScaledObject API: the serving is placed and Ready at its spec's
  groups, and ``Autoscaling=False, KedaMissing`` says why; nothing crashes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from nvlfleet.api import names, reasons
from support.servings import Cluster, serving

pytestmark = pytest.mark.integration

Wait = Callable[..., Any]


def scale_of(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """GET /apis/nvlfleet.io/v1alpha1/namespaces/<ns>/deepseekservings/<name>/scale, what an HPA reads."""
    kind = names.DEEPSEEK_SERVING
    return dict(
        client.CustomObjectsApi(api_client).get_namespaced_custom_object_scale(
            kind.group, kind.version, namespace, kind.plural, name
        )
    )


def hpa_condition(api_client: client.ApiClient, namespace: str, name: str, ctype: str) -> Any:
    hpa = client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler(name, namespace)
    return next((c for c in (hpa.status.conditions or []) if c.type == ctype), None)


def test_an_hpa_reads_the_serving_scale_subresource_its_ready_decode_groups_and_its_selector(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    fleet = gb200_fleet(racks=1)
    start_operator()
    cluster.create(serving("hpa", fleet, groups=2, nodes=1))
    wait_for(lambda: cluster.ready("hpa"), 180, "the serving to report Ready")

    scale = scale_of(api_client, cluster.namespace, "hpa")
    selector = cluster.get("hpa")["status"]["selector"]
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (2, 2)
    assert scale["status"]["selector"] == selector
    leaders = client.CoreV1Api(api_client).list_namespaced_pod(cluster.namespace, label_selector=selector).items
    assert len(leaders) == 2, [p.metadata.name for p in leaders]  # one leader per decode group

    hpa = client.V2HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="hpa"),
        spec=client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V2CrossVersionObjectReference(
                api_version=names.API_VERSION, kind=names.KIND, name="hpa"
            ),
            min_replicas=1,
            max_replicas=4,
            metrics=[
                client.V2MetricSpec(
                    type="Resource",
                    resource=client.V2ResourceMetricSource(
                        name="cpu", target=client.V2MetricTarget(type="Utilization", average_utilization=80)
                    ),
                )
            ],
        ),
    )
    client.AutoscalingV2Api(api_client).create_namespaced_horizontal_pod_autoscaler(cluster.namespace, hpa)

    def judged() -> Any:
        active = hpa_condition(api_client, cluster.namespace, "hpa", "ScalingActive")
        return active if active is not None and active.reason != "" else None

    active = wait_for(judged, 120, "the HPA controller to judge the HPA")
    able = hpa_condition(api_client, cluster.namespace, "hpa", "AbleToScale")
    assert (able.status, able.reason) == ("True", "SucceededGetScale"), able
    # The selector parsed and the pods were looked up; only the metric (no metrics API here) is missing.
    assert active.reason not in ("InvalidSelector", "FailedGetScale"), active
    assert (active.status, active.reason) == ("False", "FailedGetResourceMetric"), active
    status = client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler("hpa", cluster.namespace)
    assert status.status.current_replicas == 2


def test_without_keda_an_autoscaled_serving_runs_at_its_spec_groups_and_a_condition_says_why(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    groups = client.ApisApi(api_client).get_api_versions().groups
    assert names.SCALED_OBJECT.group not in {g.name for g in groups}, "this test needs a cluster without KEDA's CRDs"
    fleet = gb200_fleet(racks=1)
    operator = start_operator()
    scaling = {"minGroups": 1, "maxGroups": 4, "signal": "waitingRequests", "target": 4}
    cluster.create(serving("nokeda", fleet, groups=2, nodes=1, autoscaling=scaling))

    wait_for(lambda: cluster.ready("nokeda"), 180, "the serving to report Ready")
    found = cluster.condition("nokeda", reasons.AUTOSCALING)
    # On a shared cluster another checkout may apply an older CRD, whose schema prunes spec.autoscaling: say so.
    stored = cluster.get("nokeda")["spec"].get("autoscaling")
    assert found is not None, f"no Autoscaling condition; stored spec.autoscaling: {stored}"
    assert (found["status"], found["reason"]) == ("False", reasons.KEDA_MISSING), found
    assert cluster.get("nokeda")["status"]["readyGroups"] == 2
    assert operator.running()
    assert "Traceback" not in operator.log.read_text()
