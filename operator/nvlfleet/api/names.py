"""Every name nvlfleet shares with the cluster: resource types, label and annotation keys, the field manager.

Pure API vocabulary, below every step of the data flow (inventory + spec → validate → plan → render → apply →
prune → status): inventory reads these labels off Nodes and Pods, render writes them onto children, the reconciler
recognises its children and LeaderWorkerSets by them, the adapters build REST paths and watches from the resource
types. Each string is spelled here once, so a label render writes and the label the reconciler reads cannot drift.

Names owned by others (LeaderWorkerSet's labels, GPU Feature Discovery's node labels, the NVIDIA device plugin's
resource) are here too: nvlfleet depends on their exact spelling as much as on its own.
"""

from __future__ import annotations

import dataclasses
from typing import Final

# ---------------------------------------------------------------------------------------------------------------
# Resource types


@dataclasses.dataclass(frozen=True)
class Kind:
    """A resource type: enough to build its REST paths without discovery."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def base(self) -> str:
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.base]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


# nvlfleet's own resource, DeepSeekServing (its schema is ``nvlfleet.api.models``).
GROUP: Final = "nvlfleet.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "nvlfleet.io/v1alpha1"  # GROUP/VERSION, spelled out so its type is a Literal
KIND: Final = "DeepSeekServing"
PLURAL: Final = "deepseekservings"
SINGULAR: Final = "deepseekserving"
SHORT_NAMES: Final = ("dss",)
CATEGORIES: Final = ("nvlfleet",)
DEEPSEEK_SERVING = Kind(API_VERSION, KIND, PLURAL)

LEADER_WORKER_SET = Kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets")
COMPUTE_DOMAIN = Kind("resource.nvidia.com/v1beta1", "ComputeDomain", "computedomains")
POD_MONITOR = Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors")
SCALED_OBJECT = Kind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects")
SERVICE = Kind("v1", "Service", "services")
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
ROLE = Kind("rbac.authorization.k8s.io/v1", "Role", "roles")
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
POD = Kind("v1", "Pod", "pods")
NODE = Kind("v1", "Node", "nodes", namespaced=False)
EVENT = Kind("v1", "Event", "events")
LEASE = Kind("coordination.k8s.io/v1", "Lease", "leases")

# Every kind a serving can own, in the order children are applied: ComputeDomains before the LeaderWorkerSets
# whose pods claim them; the router's ServiceAccount, Role and RoleBinding before the Deployment whose pods run as
# that account (a pod naming a missing ServiceAccount is refused, and a router started before its binding exists
# is refused its first watch); Services after what they select; the ScaledObject (spec.autoscaling) last, once
# what it scales exists.
CHILD_KINDS: tuple[Kind, ...] = (
    COMPUTE_DOMAIN,
    LEADER_WORKER_SET,
    SERVICE_ACCOUNT,
    ROLE,
    ROLE_BINDING,
    DEPLOYMENT,
    SERVICE,
    POD_MONITOR,
    SCALED_OBJECT,
)
# The child kinds every Kubernetes API server serves: no CRD to install, so never asked about through discovery.
BUILTIN_CHILD_KINDS: frozenset[Kind] = frozenset({SERVICE_ACCOUNT, ROLE, ROLE_BINDING, DEPLOYMENT, SERVICE})


# ---------------------------------------------------------------------------------------------------------------
# Labels and annotations nvlfleet writes on its children (and reads back to recognise them)

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "nvlfleet"
NAME_LABEL: Final = "app.kubernetes.io/name"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
SERVING_LABEL: Final = "nvlfleet.io/serving"
ROLE_LABEL: Final = "nvlfleet.io/role"
DOMAIN_LABEL: Final = "nvlfleet.io/domain"  # a short hash of the NVLink domain (label values are capped at 63)
DOMAIN_VALUE_ANNOTATION: Final = "nvlfleet.io/domain-value"  # the full NVLink domain value
PROFILE_ANNOTATION: Final = "nvlfleet.io/profile"
APPLIED_HASH_ANNOTATION: Final = "nvlfleet.io/applied-hash"
SPEC_HASH_ANNOTATION: Final = "nvlfleet.io/spec-hash"
# Prefixes of the label keys nvlfleet and LeaderWorkerSet set on pods; a user's pod labels may not use them.
RESERVED_LABEL_PREFIXES: Final = ("nvlfleet.io/", "app.kubernetes.io/", "leaderworkerset.sigs.k8s.io/")

FIELD_MANAGER: Final = "nvlfleet"  # of every server-side apply
COMPONENT: Final = "nvlfleet"  # the source of the Events nvlfleet records
ROUTER_COMPONENT: Final = "router"  # the app.kubernetes.io/component of the router's objects and pods
ROUTER_APP_NAME: Final = "vllm-router"  # their app.kubernetes.io/name (the engines' is "vllm")

# ---------------------------------------------------------------------------------------------------------------
# Labels LeaderWorkerSet puts on the pods of its groups

LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on a group's leader
LWS_GROUP_KEY_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-key"

# ---------------------------------------------------------------------------------------------------------------
# Node labels and resources of the GPU stack and Kubernetes

DEFAULT_DOMAIN_LABEL: Final = "nvidia.com/gpu.clique"  # GPU Feature Discovery's NVLink domain
PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
GPU_RESOURCE: Final = "nvidia.com/gpu"


def prometheus_pod_label(label: str) -> str:
    """Prometheus's Kubernetes service-discovery name for a pod label (every non-alphanumeric character becomes
    '_'): what a PodMonitor's relabeling reads."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)
