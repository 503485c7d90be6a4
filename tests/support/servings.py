"""Builders and readers for integration tests that run the operator: a DeepSeekServing on a test's own fleet,
and the reads a test needs (conditions, children, pods, events) on the admin connection.

Shared by test_operator.py and the reliability tests (crash safety, control-plane faults, high availability,
bad input, security); the fixtures that start the operator and the IMEX stand-in are in conftest.py.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from localcluster import fleet as fleets

GROUP, VERSION, PLURAL = "nvlfleet.io", "v1alpha1", "deepseekservings"
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
CD = ("resource.nvidia.com", "v1beta1", "computedomains")
MANAGED = "app.kubernetes.io/managed-by=nvlfleet"


def serving(name: str, fleet: Any, *, groups: int, nodes: int = 2, **spec: Any) -> dict[str, Any]:
    """A GB200 serving of ``groups`` groups of ``nodes`` trays, confined to ``fleet`` by its node selector."""
    body: dict[str, Any] = {
        "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "servedName": "deepseek-v4.1-flash"},
        "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
        "gpu": "GB200",
        "roles": {"decode": {"groups": groups, "parallelism": {"tensor": 1, "nodesPerGroup": nodes}}},
        "pod": {"nodeSelector": {fleets.LABEL_FLEET: fleet.name}},
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DeepSeekServing", "metadata": {"name": name}, "spec": body}


class Cluster:
    """Reads and writes the test needs, on the admin connection."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.namespace = namespace

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, obj
        )
        return created

    def get(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        return obj

    def list(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)[
            "items"
        ]
        return items

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        return condition_of(self.get(name), ctype)

    def is_(self, name: str, ctype: str, value: str = "True") -> bool:
        cond = self.condition(name, ctype)
        return cond is not None and cond["status"] == value

    def ready(self, name: str) -> bool:
        return is_ready(self.get(name))

    def children(self, serving: str) -> dict[str, list[dict[str, Any]]]:
        selector = f"{MANAGED},nvlfleet.io/serving={serving}"
        return {
            "LeaderWorkerSet": self.custom.list_namespaced_custom_object(
                *LWS[:2], self.namespace, LWS[2], label_selector=selector
            )["items"],
            "ComputeDomain": self.custom.list_namespaced_custom_object(
                *CD[:2], self.namespace, CD[2], label_selector=selector
            )["items"],
            "Service": [
                s.to_dict() for s in self.core.list_namespaced_service(self.namespace, label_selector=selector).items
            ],
            # The router's (spec.router is on by default); the Service list above holds its Service too.
            "ServiceAccount": [
                a.to_dict()
                for a in self.core.list_namespaced_service_account(self.namespace, label_selector=selector).items
            ],
            "Role": [
                r.to_dict() for r in self.rbac.list_namespaced_role(self.namespace, label_selector=selector).items
            ],
            "RoleBinding": [
                b.to_dict()
                for b in self.rbac.list_namespaced_role_binding(self.namespace, label_selector=selector).items
            ],
            "Deployment": [
                d.to_dict() for d in self.apps.list_namespaced_deployment(self.namespace, label_selector=selector).items
            ],
        }

    def pods(self, serving: str) -> list[client.V1Pod]:
        """The serving's engine pods (not its router's)."""
        selector = f"nvlfleet.io/serving={serving},app.kubernetes.io/name=vllm"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def events(self, name: str) -> list[tuple[str, str, str]]:
        found = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.kind=DeepSeekServing,involvedObject.name={name}"
        ).items
        return [(e.type, e.reason, e.message) for e in found if e.source and e.source.component == "nvlfleet"]

    def resource_versions(self, serving: str) -> dict[str, str]:
        versions = {f"DeepSeekServing/{serving}": self.get(serving)["metadata"]["resourceVersion"]}
        for kind, objs in self.children(serving).items():
            for obj in objs:
                meta = obj["metadata"]
                versions[f"{kind}/{meta['name']}"] = meta.get("resourceVersion") or meta.get("resource_version")
        return versions


def condition_of(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    status = obj.get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), None)


def is_ready(obj: dict[str, Any]) -> bool:
    """Ready=True for the generation the object is at now."""
    status = obj.get("status") or {}
    ready = condition_of(obj, "Ready")
    return (
        status.get("observedGeneration") == obj["metadata"]["generation"]
        and ready is not None
        and ready["status"] == "True"
    )


def node_cliques(api_client: client.ApiClient, fleet: Any) -> dict[str, str]:
    nodes = client.CoreV1Api(api_client).list_node(label_selector=f"{fleets.LABEL_FLEET}={fleet.name}").items
    return {n.metadata.name: n.metadata.labels[fleets.LABEL_CLIQUE] for n in nodes}


def groups_of(pods: list[client.V1Pod]) -> dict[tuple[str, str], list[client.V1Pod]]:
    out: dict[tuple[str, str], list[client.V1Pod]] = {}
    for pod in pods:
        labels = pod.metadata.labels
        key = (labels["leaderworkerset.sigs.k8s.io/name"], labels["leaderworkerset.sigs.k8s.io/group-index"])
        out.setdefault(key, []).append(pod)
    return out
