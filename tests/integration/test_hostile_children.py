"""What others do to a serving's fleet, on the real cluster: fakes, tampering, refusals, nodes that change.

Each test is one attempt an attacker or an accident makes, and the outcome the operator must reach:

- LeaderWorkerSets with nvlfleet's labels that no live serving owns hold no capacity;
- a field another manager adds to a serving's LeaderWorkerSet (a hostPath volume) is removed, with an event
  naming the field;
- a child the API server refuses becomes ``Ready=False`` naming the child and the server's reason, and leaves
  no ComputeDomain without its LeaderWorkerSet;
- a node of a running group that is cordoned or loses its NVLink-domain label marks the serving ``Degraded``
  naming the node and why;
- text the API server accepts (an emoji) is applied like any other.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from localcluster import fleet as fleets

from support import servings
from support.servings import LWS, Cluster, groups_of, serving

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Wait = Callable[..., Any]
DOMAIN_ANNOTATION = "nvlfleet.io/domain-value"


def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True)


def lws_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return cluster.children(name)["LeaderWorkerSet"]


def fake_lws(name: str, clique: str, replicas: int, size: int) -> dict[str, Any]:
    """A hand-made LeaderWorkerSet dressed as nvlfleet's: its labels, its domain annotation, no owner."""
    pod = {
        "metadata": {"labels": {"app": "fake"}},
        # Pods that never schedule: they hold no GPU, only the labels claim capacity.
        "spec": {"nodeSelector": {"nowhere": "true"}, "containers": [{"name": "c", "image": "busybox"}]},
    }
    return {
        "apiVersion": "/".join(LWS[:2]),
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "nvlfleet",
                "nvlfleet.io/serving": name,
                "nvlfleet.io/role": "decode",
            },
            "annotations": {DOMAIN_ANNOTATION: clique},
        },
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": pod}},
    }


def test_leader_worker_sets_with_nvlfleet_labels_but_no_live_owner_hold_no_capacity(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    fleet = gb200_fleet(racks=1)
    custom = client.CustomObjectsApi(api_client)
    other = f"{namespace[:50]}-fakes"
    client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        for fake in ("fake-a", "fake-b"):
            custom.create_namespaced_custom_object(*LWS[:2], other, LWS[2], fake_lws(fake, fleet.clique(0), 9, 1))
        start_operator()

        cluster.create(serving("whole-rack", fleet, groups=1, nodes=18))

        wait_for(lambda: cluster.ready("whole-rack"), 180, "the 18-tray serving Ready beside the fakes")
        assert not cluster.is_("whole-rack", "InsufficientCapacity")
    finally:
        client.CoreV1Api(api_client).delete_namespace(other, propagation_policy="Background")


def test_a_field_another_manager_adds_to_a_leader_worker_set_is_removed_with_an_event(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=1)
    start_operator()
    cluster.create(serving("tamper", fleet, groups=1, nodes=2))
    wait_for(lambda: cluster.ready("tamper"), 180, "Ready")
    (lws,) = lws_of(cluster, "tamper")
    name = lws["metadata"]["name"]
    hostile = {"name": "host-root", "hostPath": {"path": "/"}}
    added = [{"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/spec/volumes/-", "value": hostile}]
    kubectl(
        "patch",
        "lws",
        name,
        "-n",
        cluster.namespace,
        "--type=json",
        "--field-manager=intruder",
        "-p",
        json.dumps(added),
    )

    def volumes() -> list[str]:
        (now,) = lws_of(cluster, "tamper")
        return [v["name"] for v in now["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]]

    assert "host-root" in volumes()
    wait_for(lambda: "host-root" not in volumes(), 30, "the intruder's volume removed")

    def reverted() -> list[str]:  # the event follows the update, after the pass's status patch
        return [m for t, r, m in cluster.events("tamper") if r == "Reverted"]

    (said,) = wait_for(reverted, 30, "a Reverted event")
    assert "volumes[name=host-root]" in said and "intruder" in said


def test_a_refused_child_is_a_ready_false_condition_naming_it_and_leaves_no_compute_domain_behind(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    fleet = gb200_fleet(racks=1)
    core = client.CoreV1Api(api_client)
    quota = {"metadata": {"name": "no-lws"}, "spec": {"hard": {"count/leaderworkersets.leaderworkerset.x-k8s.io": "0"}}}
    core.create_namespaced_resource_quota(namespace, quota)
    start_operator()

    cluster.create(serving("refused", fleet, groups=1, nodes=2))

    ready = wait_for(
        lambda: (c := cluster.condition("refused", "Ready")) and c["reason"] == "ApplyRefused" and c, 60, "refusal"
    )
    assert ready["status"] == "False"
    assert "LeaderWorkerSet refused-decode-" in ready["message"] and "exceeded quota" in ready["message"]
    assert not cluster.is_("refused", "Progressing")
    wait_for(lambda: cluster.children("refused")["ComputeDomain"] == [], 30, "no ComputeDomain without its LWS")
    time.sleep(15)  # retried every 10 s meanwhile: the same refusal is announced once
    refusals = [m for t, r, m in cluster.events("refused") if (t, r) == ("Warning", "ApplyRefused")]
    assert len(refusals) == 1 and "exceeded quota" in refusals[0]

    core.delete_namespaced_resource_quota("no-lws", namespace)
    wait_for(lambda: cluster.ready("refused"), 180, "Ready once the quota is gone")


@pytest.mark.parametrize("change", ["cordoned", "clique label removed"])
def test_a_node_of_a_running_group_that_changes_degrades_the_serving_naming_it(
    change: str,
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    fleet = gb200_fleet(racks=1)
    start_operator()
    cluster.create(serving("frail", fleet, groups=1, nodes=2))
    wait_for(lambda: cluster.ready("frail"), 180, "Ready")
    ((_, pods),) = groups_of(cluster.pods("frail")).items()
    victim = pods[0].spec.node_name

    patch = (
        {"spec": {"unschedulable": True}}
        if change == "cordoned"
        else {"metadata": {"labels": {fleets.LABEL_CLIQUE: None}}}
    )
    client.CoreV1Api(api_client).patch_node(victim, patch)

    wait_for(lambda: cluster.is_("frail", "Degraded"), 60, f"Degraded once a node is {change}")
    message = cluster.condition("frail", "Degraded")["message"]
    assert victim in message
    assert ("cordoned" if change == "cordoned" else "NVLink domain") in message


def test_text_the_api_server_accepts_is_applied_emoji_included(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=1)
    start_operator()
    body = serving("emoji", fleet, groups=1, nodes=1, extraArgs=["--root-path=/🔥"])
    body["spec"]["pod"]["annotations"] = {"example.com/n": "🔥 ü \u202e 中"}

    cluster.create(body)

    wait_for(lambda: cluster.ready("emoji"), 180, "Ready with an emoji in an annotation and an argument")
    (lws,) = lws_of(cluster, "emoji")
    template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert template["metadata"]["annotations"]["example.com/n"] == "🔥 ü \u202e 中"
    assert "--root-path=/🔥" in json.dumps(template["spec"]["containers"], ensure_ascii=False)
    assert servings.condition_of(cluster.get("emoji"), "Ready")["reason"] != "ApplyRefused"
