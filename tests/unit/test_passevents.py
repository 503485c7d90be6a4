"""A pass asks the API server for pod-creation refusals only while one can be what keeps a group from ready: its
LeaderWorkerSet is short of ready groups and one of the pods those groups hold does not exist (a refused pod is a
pod that is not there). While pods exist and start, a roll-out's passes ask nothing."""

from __future__ import annotations

from typing import Any

from nvlfleet.adapters import caches, passevents
from support import fleetbuilder as fb

NAMESPACE = "llm"


def lws(name: str, *, replicas: int = 2, size: int = 2, ready: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size}},
        "status": {"readyReplicas": ready},
    }


def pods_of(name: str, count: int, *, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """``count`` GPU pods of LeaderWorkerSet ``name``, as the pod index holds them (scheduled, not ready)."""
    return [
        caches.trim_pod(fb.pod(f"{name}-{i}", f"tray-{i}", namespace=namespace, lws=name, group=i // 2))
        for i in range(count)
    ]


def test_a_group_short_of_ready_with_every_pod_there_needs_no_events() -> None:
    assert not passevents.short_of_pods([lws("decode")], pods_of("decode", 4))


def test_a_group_short_of_ready_missing_a_pod_needs_the_refusals() -> None:
    assert passevents.short_of_pods([lws("decode")], pods_of("decode", 3))


def test_a_pod_being_deleted_is_not_there() -> None:
    pods = pods_of("decode", 4)
    pods[0]["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"

    assert passevents.short_of_pods([lws("decode")], pods)


def test_pods_of_a_namesake_in_another_namespace_do_not_count() -> None:
    assert passevents.short_of_pods([lws("decode")], pods_of("decode", 4, namespace="other"))


def test_every_group_ready_needs_no_events_whatever_the_pods_say() -> None:
    # (pods the index does not hold, e.g. a template that requests no GPU, never make a ready set look short)
    assert not passevents.short_of_pods([lws("decode", ready=2)], [])


def test_each_short_set_is_counted_on_its_own() -> None:
    children = [lws("decode"), lws("prefill", replicas=1, size=1)]

    assert passevents.short_of_pods(children, pods_of("decode", 5))
