"""RouterReady: whether a client can reach a serving's engines through its router, and how many it finds."""

from __future__ import annotations

from typing import Any

from nvlfleet.api import models, names, reasons
from nvlfleet.core import render, routerstatus
from support import fleetbuilder, servingbuilder

DECODE, PREFILL = models.RoleName.DECODE, models.RoleName.PREFILL


def router_deployment(serving: models.DeepSeekServing, ready: int) -> dict[str, Any]:
    name = render.router_name(serving.metadata.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": serving.metadata.namespace},
        "status": {"replicas": 1, "readyReplicas": ready},
    }


def leaders(serving: models.DeepSeekServing, role: models.RoleName, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    labels = render.leader_labels(serving, role)
    return [fleetbuilder.leader_pod(labels, f"{role.value}-{i}", **kwargs) for i in range(count)]


def test_a_ready_router_with_ready_leaders_is_routing_and_counts_them() -> None:
    serving = servingbuilder.serving(groups=2)
    found = routerstatus.condition(serving, [router_deployment(serving, 1)], leaders(serving, DECODE, 2))
    assert found == ("True", reasons.ROUTING, "1/1 router pods ready, routing to 2 decode group leaders")


def test_a_disaggregated_router_counts_both_roles() -> None:
    serving = servingbuilder.serving(prefill=servingbuilder.role(groups=2, tensor=1, nodes=2))
    pods = [*leaders(serving, PREFILL, 2), *leaders(serving, DECODE, 1)]
    found = routerstatus.condition(serving, [router_deployment(serving, 1)], pods)
    assert found is not None and found[0] == "True"
    assert "2 prefill group leaders, 1 decode group leader" in found[2]


def test_no_ready_router_pod_is_not_ready() -> None:
    serving = servingbuilder.serving()
    found = routerstatus.condition(serving, [router_deployment(serving, 0)], leaders(serving, DECODE, 1))
    assert found is not None and found[:2] == ("False", reasons.ROUTER_NOT_READY)


def test_a_router_not_yet_created_is_not_ready_in_the_words_of_one_just_created() -> None:
    serving = servingbuilder.serving()
    absent = routerstatus.condition(serving, [], [])
    created = routerstatus.condition(serving, [router_deployment(serving, 0)], [])
    assert absent is not None and absent[:2] == ("False", reasons.ROUTER_NOT_READY) and "0/1 router pods" in absent[2]
    assert absent == created


def test_leaders_that_are_not_ready_or_have_no_ip_are_not_engines_the_router_finds() -> None:
    serving = servingbuilder.serving(groups=2)
    pods = [*leaders(serving, DECODE, 1, ready=False), *leaders(serving, DECODE, 1, ip=None)]
    found = routerstatus.condition(serving, [router_deployment(serving, 1)], pods)
    assert found is not None and found[:2] == ("False", reasons.NO_ENGINES)
    assert "no ready decode group leader" in found[2]


def test_a_disaggregated_router_without_prefill_leaders_has_no_engines_for_prefill() -> None:
    serving = servingbuilder.serving(prefill=servingbuilder.role(groups=1, tensor=1, nodes=2))
    found = routerstatus.condition(serving, [router_deployment(serving, 1)], leaders(serving, DECODE, 1))
    assert found is not None and found[:2] == ("False", reasons.NO_ENGINES) and "prefill" in found[2]


def test_workers_do_not_count_as_engines() -> None:
    serving = servingbuilder.serving()
    worker_labels = {**render.leader_labels(serving, DECODE), names.LWS_WORKER_INDEX_LABEL: "1"}
    pods = [fleetbuilder.leader_pod(worker_labels, "decode-0-1")]
    found = routerstatus.condition(serving, [router_deployment(serving, 1)], pods)
    assert found is not None and found[1] == reasons.NO_ENGINES


def test_a_serving_without_a_router_has_no_router_condition() -> None:
    serving = servingbuilder.serving(router={"enabled": False})
    assert routerstatus.condition(serving, [], []) is None
