"""The operator's own metrics: counted, timed and replaced as the operator works, each on its own registry."""

from __future__ import annotations

import asyncio

import prometheus_client
import pytest

from nvlfleet.adapters import exporter
from nvlfleet.api import metric_names as names
from nvlfleet.api import problems


def test_operator_metrics_live_on_their_own_registry() -> None:
    a, b = exporter.OperatorMetrics(), exporter.OperatorMetrics()

    with a.reconciling("ml", "flash"):
        pass
    with pytest.raises(problems.InvalidSpec), a.reconciling("ml", "flash"):
        raise problems.InvalidSpec([problems.Problem("spec.gpu", "bad")])
    with a.planning():
        pass
    a.set_free_nodes({"clique-a": 3, "clique-b": 0})
    a.set_free_nodes({"clique-a": 2})
    a.set_conditions("ml", "flash", {"Ready": False, "Placed": True, "Progressing": True})
    a.set_conditions("ml", "flash", {"Ready": True, "Placed": True})
    a.set_conditions("ml", "gone", {"Ready": True})
    a.forget_serving("ml", "gone")

    value = a.registry.get_sample_value
    assert value(names.RECONCILE_TOTAL, {"namespace": "ml", "serving": "flash"}) == 2
    assert value(names.RECONCILE_ERRORS_TOTAL, {"namespace": "ml", "serving": "flash", "reason": "InvalidSpec"}) == 1
    assert value(names.RECONCILE_DURATION + "_count") == 2
    assert value(names.PLANNER_DURATION + "_count") == 1
    assert value(names.DOMAIN_FREE_NODES, {"domain": "clique-a"}) == 2
    assert value(names.DOMAIN_FREE_NODES, {"domain": "clique-b"}) is None
    conditions = {
        s.labels["condition"]: s.value
        for s in a.serving_condition.collect()[0].samples
        if s.labels["serving"] == "flash"
    }
    assert conditions == {"Ready": 1.0, "Placed": 1.0}
    assert not [s for s in a.serving_condition.collect()[0].samples if s.labels["serving"] == "gone"]
    assert b.registry.get_sample_value(names.RECONCILE_DURATION + "_count") == 0


def test_the_free_node_gauges_follow_each_replacement() -> None:
    metrics = exporter.OperatorMetrics()
    value = metrics.registry.get_sample_value

    metrics.set_free_nodes({"clique-a": 3, "clique-b": 0})
    metrics.set_free_nodes({"clique-a": 3, "clique-b": 0})
    assert value(names.DOMAIN_FREE_NODES, {"domain": "clique-a"}) == 3
    metrics.set_free_nodes({"clique-b": 1, "clique-c": 4})

    assert value(names.DOMAIN_FREE_NODES, {"domain": "clique-a"}) is None
    assert value(names.DOMAIN_FREE_NODES, {"domain": "clique-b"}) == 1
    assert value(names.DOMAIN_FREE_NODES, {"domain": "clique-c"}) == 4


@pytest.mark.parametrize("port", [99999, -1])
def test_a_port_the_exporter_cannot_listen_on_is_one_line_not_an_overflow(port: int) -> None:
    async def start() -> None:
        await exporter.start_exporter(exporter.OperatorMetrics(), host="127.0.0.1", port=port)

    with pytest.raises(
        exporter.CannotListen, match=rf"^cannot listen on 127.0.0.1:{port}: bind\(\): port must be 0-65535"
    ):
        asyncio.run(start())


def test_group_gauges_follow_the_roles_and_the_ceiling_goes_with_autoscaling() -> None:
    metrics = exporter.OperatorMetrics()
    metrics.set_groups("ml", "flash", {"prefill": (2, 1), "decode": (4, 3)}, max_groups=6)
    metrics.set_groups("ml", "flash", {"decode": (4, 4)}, max_groups=None)
    text = prometheus_client.generate_latest(metrics.registry).decode()
    assert 'nvlfleet_groups_desired{namespace="ml",role="decode",serving="flash"} 4.0' in text
    assert 'nvlfleet_groups_ready{namespace="ml",role="decode",serving="flash"} 4.0' in text
    assert 'role="prefill"' not in text
    assert "nvlfleet_autoscaling_max_groups{" not in text
