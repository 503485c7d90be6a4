"""What the operator keeps of the pods, nodes and servings kopf decodes for it (``caches.kept``): everything
nvlfleet and kopf read of them, nothing else — kopf holds every watched object as decoded until its indexes are
populated, so what is not kept costs no memory at start-up."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from nvlfleet.adapters import caches, decoding
from nvlfleet.api import names
from nvlfleet.core import fieldsets
from support import fleetbuilder as fb
from support import servingbuilder as sb

MANAGED = [{"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}}]


def as_served(obj: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """``obj`` as the API server returns it: with uid, resourceVersion, finalizers and managedFields."""
    served = copy.deepcopy(obj)
    served["metadata"].update(
        uid="u-1", resourceVersion="42", finalizers=["f"], annotations={"a": "b"}, managedFields=MANAGED, **metadata
    )
    return served


def gpu_pod() -> dict[str, Any]:
    pod = as_served(fb.pod("p", "node-0", namespace="team", serving="s", lws="s-decode", group=0))
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    pod["spec"]["containers"][0].update(args=["--model", "x"] * 50, env=[{"name": "E", "value": "v"}])
    pod["spec"]["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    pod["status"].update(podIP="10.0.0.1", hostIP="10.0.1.1", qosClass="Guaranteed")
    return pod


def test_a_pod_keeps_what_the_indexes_the_filter_and_kopf_read_and_nothing_else() -> None:
    pod = gpu_pod()
    kept = caches.kept(copy.deepcopy(pod))

    assert caches.trim_pod(kept) == caches.trim_pod(pod)
    assert caches.parsed_pod("p", kept) == caches.parsed_pod("p", pod)
    assert caches.requests_gpus(kept["spec"]) and caches.requests_gpus(pod["spec"])
    assert {k: kept["metadata"].get(k) for k in caches.KOPF_METADATA} == {
        k: pod["metadata"].get(k) for k in caches.KOPF_METADATA
    }
    assert "managedFields" not in kept["metadata"] and "volumes" not in kept["spec"]
    assert len(json.dumps(kept)) < len(json.dumps(pod)) / 2


def test_a_node_keeps_what_the_planner_and_the_node_events_read() -> None:
    node = as_served(fb.rack(0)[0])
    node["apiVersion"], node["kind"] = "v1", "Node"
    node.setdefault("status", {}).update(nodeInfo={"kubeletVersion": "v1.37.2"}, images=[{"names": ["x"]}])
    kept = caches.kept(copy.deepcopy(node))

    assert caches.trim_node(kept) == caches.trim_node(node)
    assert caches.node_summary(kept) == caches.node_summary(node)
    ours, theirs = caches.parsed_node("n", kept, []), caches.parsed_node("n", node, [])
    assert ours is not None and theirs is not None and dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    assert kept["metadata"]["uid"] == "u-1" and "managedFields" not in kept["metadata"]
    assert "nodeInfo" not in kept["status"]


def test_a_list_and_a_watch_event_are_kept_item_by_item_and_a_bookmark_whole() -> None:
    pod = gpu_pod()
    item = {k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}  # list items carry no kind
    listed = caches.kept({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [copy.deepcopy(item)]})
    event = caches.kept({"type": "MODIFIED", "object": copy.deepcopy(pod)})
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}}

    assert listed["items"] == [caches.kept(copy.deepcopy(pod))]
    assert event["object"] == caches.kept(copy.deepcopy(pod))
    assert caches.kept(copy.deepcopy(bookmark)) == bookmark


def test_a_serving_loses_only_its_managed_fields() -> None:
    serving = as_served(sb.serving_dict())

    kept = caches.kept(copy.deepcopy(serving))
    del serving["metadata"]["managedFields"]
    assert kept == serving


def lws_child(*entries: dict[str, Any]) -> dict[str, Any]:
    spec = {
        "replicas": 1,
        "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"volumes": [{"name": "h"}]}}},
    }
    child = as_served(
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "c"}}
    )
    child["spec"] = spec
    child["metadata"]["managedFields"] = [
        {"manager": names.FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "lws", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}},
        *entries,
    ]
    return child


def test_a_child_only_nvlfleet_set_the_spec_of_loses_its_managed_fields_and_nothing_else() -> None:
    child = lws_child()

    kept = caches.kept(copy.deepcopy(child))
    assert fieldsets.foreign(kept) is None and fieldsets.foreign(child) is None
    del child["metadata"]["managedFields"]
    assert kept == child


def test_a_child_another_manager_set_spec_fields_of_keeps_them_whole() -> None:
    volumes = {"f:leaderWorkerTemplate": {"f:workerTemplate": {"f:spec": {"f:volumes": {'k:{"name":"h"}': {}}}}}}
    child = lws_child({"manager": "kubectl-patch", "operation": "Update", "fieldsV1": {"f:spec": volumes}})

    kept = caches.kept(copy.deepcopy(child))
    assert kept == child
    assert fieldsets.foreign(kept) == fieldsets.foreign(child) is not None  # what the pass replaces the child for


def test_kopfs_watch_stream_is_decoded_into_what_is_kept() -> None:
    pod = gpu_pod()
    assert decoding.watched_loads(json.dumps({"type": "ADDED", "object": pod})) == {
        "type": "ADDED",
        "object": caches.kept(copy.deepcopy(pod)),
    }
    assert decoding.loads(json.dumps(pod)) == pod  # the webhook's requests are decoded whole
