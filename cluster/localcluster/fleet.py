"""Simulated GPU fleets: kwok Node objects that look like GB200/GB300 NVL72 compute trays (or HGX nodes).

Last step of the local-cluster data flow (versions → binaries → PKI → processes → **fleet**). Node objects
here are what nvlfleet's inventory reads, so they carry what the real ones carry: GPU Feature Discovery
labels (product, count, memory, family, compute capability, and `nvidia.com/gpu.clique` = the NVLink domain
as `<ClusterUUID>.<CliqueID>`, one per rack of 18 trays), allocatable `nvidia.com/gpu` from the device plugin,
Grace (arm64) CPU and memory, and optional taints. Odd cases a placement engine must cope with can be asked
for: trays without a clique label (GPUs disagree), cordoned trays, tainted trays, and racks with trays
already occupied by a running 4-GPU pod.

The builders (`gpu_models`, `rack_nodes`, `fleet_nodes`, `clique`) are pure and deterministic — the same
fleet always gets the same names and clique IDs — so tests can compare whole objects; `apply_fleet`
creates them in the cluster. kwok adopts nodes annotated `kwok.x-k8s.io/node=fake`, marks them Ready,
keeps their Lease fresh and runs their pods (Running+Ready, IP from the node's podCIDR). Every node gets
its own loopback podCIDR 127.X.Y.0/24 (from 127.16.0.0/12) and InternalIP 127.1.X.Y, so a simulated
endpoint can listen on a pod's IP. A fleet where nothing listens (the benchmark's) can take its podCIDRs from
`BENCHMARK_PODS` instead: the Endpoints and EndpointSlice controllers refuse loopback addresses and retry every
Service's endpoints for as long as it exists, which a real cluster does not do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import ipaddress
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from localcluster import components, versions
from nvlfleet.facts import hardware

LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_FLEET = "localcluster.nvlfleet.io/fleet"
LABEL_RACK = "localcluster.nvlfleet.io/rack"
GPU_RESOURCE = "nvidia.com/gpu"
OCCUPIED_NAMESPACE = "fleet-occupied"
OCCUPIED_ANNOTATION = "localcluster.nvlfleet.io/occupied"

_POD_CIDR_POOL = ipaddress.ip_network("127.16.0.0/12")  # 4096 /24s: one per node


@dataclasses.dataclass(frozen=True)
class PodNetwork:
    """Where a fleet's podCIDRs come from: one subnet of ``prefix`` bits per node slot, out of ``pool``."""

    pool: ipaddress.IPv4Network
    prefix: int

    def cidr(self, slot: int) -> str:
        size = 2 ** (32 - self.prefix)
        subnets = self.pool.num_addresses // size
        if not 0 <= slot < subnets:
            raise ValueError(f"node slot {slot} is outside the {subnets} /{self.prefix}s of {self.pool}")
        return str(ipaddress.ip_network((int(self.pool.network_address) + slot * size, self.prefix)))


# Loopback: a simulated vLLM or router can listen on its pod's IP (the demo, the integration tests).
LOOPBACK_PODS = PodNetwork(_POD_CIDR_POOL, 24)
# RFC 2544's benchmarking range, 2048 /26s (62 pods a node, more than a GPU tray runs; the benchmark's largest
# run, convergence at N=1,000, needs 2,016 trays): addresses the Endpoints and EndpointSlice controllers accept,
# for a fleet where nothing listens on pod IPs.
BENCHMARK_PODS = PodNetwork(ipaddress.ip_network("198.18.0.0/15"), 26)
_NODE_IP_BASE = ipaddress.ip_address("127.1.0.0")
_UUID_NAMESPACE = uuid.UUID("5b0f3c1e-9a4d-4c61-8f59-6a1f2f6c7e01")


@dataclasses.dataclass(frozen=True)
class GpuModel:
    """What one node of a given GPU type looks like: nvlfleet's hardware facts (``nvlfleet.facts.hardware``, the one
    source of GPU shapes) plus what only a simulated node needs (GFD's family label, the host's CPU side)."""

    name: str
    product: str
    gpus_per_node: int
    memory_mib: int | None  # None where the reference facts give none: the node then carries no memory label
    family: str
    compute: tuple[int, int]
    nodes_per_domain: int  # 18 for an NVL72 rack; 1 where NVLink stops at the node
    arch: str
    cpu: int  # cores the node reports
    memory_gib: int

    @property
    def multi_node_nvlink(self) -> bool:
        return self.nodes_per_domain > 1


# The host side by CPU architecture: a compute tray has 2 Grace CPUs (72 Neoverse V2 cores and 480 GB LPDDR5X
# each) beside its 4 GPUs; an HGX node 2 x86 sockets. GFD's family label by compute capability major.
_HOSTS = {"arm64": (144, 960), "amd64": (224, 2048)}
_FAMILIES = {10: "blackwell", 9: "hopper"}


def _model(generation: hardware.Generation) -> GpuModel:
    major, minor = (int(part) for part in generation.compute_capability.split("."))
    cpu, memory_gib = _HOSTS[generation.arch]
    return GpuModel(
        name=generation.name,
        product=generation.product,
        gpus_per_node=generation.gpus_per_node,
        memory_mib=generation.memory_mib,
        family=_FAMILIES[major],
        compute=(major, minor),
        nodes_per_domain=generation.nodes_per_domain,
        arch=generation.arch,
        cpu=cpu,
        memory_gib=memory_gib,
    )


GPU_MODELS: dict[str, GpuModel] = {name: _model(g) for name, g in hardware.generations().items()}


@dataclasses.dataclass(frozen=True)
class Oddities:
    """Imperfections to put into one rack (default: the last); each takes its own trays from the rack's end."""

    rack: int = -1
    without_clique: int = 0  # GFD leaves the label off when a node's GPUs disagree
    cordoned: int = 0
    tainted: int = 0  # nvidia.com/gpu=maintenance:NoSchedule
    occupied: int = 0  # a running pod already holds all the tray's GPUs (apply_fleet creates it)


MAINTENANCE_TAINT = {"key": GPU_RESOURCE, "value": "maintenance", "effect": "NoSchedule"}
KWOK_TAINT = {"key": components.KWOK_NODE_ANNOTATION[0], "value": "fake", "effect": "NoSchedule"}


def gpu_model(name: str) -> GpuModel:
    try:
        return GPU_MODELS[name.upper()]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}: expected one of {', '.join(GPU_MODELS)}") from None


def clique(fleet: str, gpu: str, rack: int) -> str:
    """The rack's `nvidia.com/gpu.clique` value: a stable ClusterUUID per (fleet, GPU, rack) and a CliqueID."""
    cluster_uuid = uuid.uuid5(_UUID_NAMESPACE, f"{fleet}/{gpu.upper()}/rack-{rack}")
    clique_id = int.from_bytes(hashlib.sha256(str(cluster_uuid).encode()).digest()[:2], "big") % 32767 + 1
    return f"{cluster_uuid}.{clique_id}"


def node_name(fleet: str, gpu: str, rack: int, tray: int) -> str:
    model = gpu_model(gpu)
    if model.multi_node_nvlink:
        return f"{fleet}-{model.name.lower()}-r{rack:02d}-t{tray:02d}"
    return f"{fleet}-{model.name.lower()}-n{rack:02d}"


def rack_nodes(
    gpu: str,
    rack: int,
    *,
    fleet: str = "sim",
    first_slot: int = 0,
    taints: Sequence[dict[str, str]] = (),
    oddities: Oddities | None = None,
    pods: PodNetwork = LOOPBACK_PODS,
) -> list[dict[str, Any]]:
    """The Node objects of one NVLink domain (18 trays for GB200/GB300, one node for H200/B200).

    `first_slot` numbers the node's network (podCIDR from `pods`, loopback InternalIP), see `apply_fleet`.
    """
    model = gpu_model(gpu)
    count = model.nodes_per_domain
    marks = _odd_marks(oddities or Oddities(), count)
    nodes = []
    for tray in range(count):
        node = _node(model, fleet, rack, tray, first_slot + tray, list(taints), pods)
        mark = marks.get(count - 1 - tray)
        if mark == "without_clique":
            del node["metadata"]["labels"][LABEL_CLIQUE]
        elif mark == "cordoned":
            node["spec"]["unschedulable"] = True
        elif mark == "tainted":
            node["spec"]["taints"].append(dict(MAINTENANCE_TAINT))
        elif mark == "occupied":
            node["metadata"]["annotations"][OCCUPIED_ANNOTATION] = "true"
        if not node["spec"]["taints"]:
            del node["spec"]["taints"]
        nodes.append(node)
    return nodes


def _odd_marks(odd: Oddities, count: int) -> dict[int, str]:
    """Position from the rack's end → oddity; each odd case gets trays of its own, in field order."""
    marks: dict[int, str] = {}
    for kind in ("without_clique", "cordoned", "tainted", "occupied"):
        for _ in range(getattr(odd, kind)):
            marks[len(marks)] = kind
    if len(marks) > count:
        raise ValueError(f"{len(marks)} odd trays asked for, but a domain has only {count} node(s)")
    return marks


def fleet_nodes(
    gpu: str,
    racks: int,
    *,
    fleet: str = "sim",
    first_slot: int = 0,
    taints: Sequence[dict[str, str]] = (),
    oddities: Oddities | None = None,
    pods: PodNetwork = LOOPBACK_PODS,
) -> list[dict[str, Any]]:
    """All nodes of `racks` NVLink domains; `oddities` land in rack `oddities.rack`."""
    if racks < 1:
        raise ValueError(f"racks must be at least 1, got {racks}")
    odd_rack = (oddities.rack % racks) if oddities else None
    model = gpu_model(gpu)
    nodes: list[dict[str, Any]] = []
    for rack in range(racks):
        nodes += rack_nodes(
            gpu,
            rack,
            fleet=fleet,
            first_slot=first_slot + rack * model.nodes_per_domain,
            taints=taints,
            oddities=oddities if rack == odd_rack else None,
            pods=pods,
        )
    return nodes


def _node(
    model: GpuModel,
    fleet: str,
    rack: int,
    tray: int,
    slot: int,
    taints: list[dict[str, str]],
    pods: PodNetwork = LOOPBACK_PODS,
) -> dict[str, Any]:
    name = node_name(fleet, model.name, rack, tray)
    labels = {
        "kubernetes.io/arch": model.arch,
        "kubernetes.io/os": "linux",
        # The kubelet still sets the deprecated beta pair (and the node lifecycle controller adds it if absent).
        "beta.kubernetes.io/arch": model.arch,
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "type": "kwok",
        LABEL_FLEET: fleet,
        LABEL_RACK: str(rack),
        "nvidia.com/gpu.present": "true",
        LABEL_PRODUCT: model.product,
        LABEL_COUNT: str(model.gpus_per_node),
        LABEL_FAMILY: model.family,
        LABEL_MAJOR: str(model.compute[0]),
        LABEL_MINOR: str(model.compute[1]),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    if model.memory_mib is not None:
        labels[LABEL_MEMORY] = str(model.memory_mib)
    if model.multi_node_nvlink:
        labels[LABEL_CLIQUE] = clique(fleet, model.name, rack)
    pod_cidr = pods.cidr(slot)
    # What the kubelet reserves on such a node (system + kube reserved, eviction threshold).
    capacity = {
        "cpu": str(model.cpu),
        "memory": f"{model.memory_gib}Gi",
        "pods": "110",
        "ephemeral-storage": "3840Gi",
        GPU_RESOURCE: str(model.gpus_per_node),
    }
    allocatable = {
        **capacity,
        "cpu": str(model.cpu - 2),
        "memory": f"{model.memory_gib - 16}Gi",
        "ephemeral-storage": "3500Gi",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                components.KWOK_NODE_ANNOTATION[0]: components.KWOK_NODE_ANNOTATION[1],
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr], "taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": _node_ip(slot)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": model.arch,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.3 LTS",
                "kernelVersion": "6.8.0-1031-nvidia-64k" if model.arch == "arm64" else "6.8.0-1031-nvidia",
                "containerRuntimeVersion": "containerd://2.1.4",
                "kubeletVersion": versions.KUBERNETES,
                "kubeProxyVersion": versions.KUBERNETES,
                "machineID": "",
                "systemUUID": str(uuid.uuid5(_UUID_NAMESPACE, name)),
                "bootID": "",
            },
        },
    }


def _node_ip(slot: int) -> str:
    # One address per slot in 127.1.0.0/16, skipping .0 and .255 so no address looks like a network/broadcast.
    return str(_NODE_IP_BASE + (slot // 254) * 256 + slot % 254 + 1)


def _slot_of(pod_cidr: str) -> int:
    return (int(ipaddress.ip_network(pod_cidr).network_address) - int(_POD_CIDR_POOL.network_address)) // 256


# --- applying to a cluster -------------------------------------------------------------------------------


def apply_fleet(
    api_client: Any,
    racks: int = 4,
    gpu: str = "GB200",
    *,
    fleet: str = "sim",
    taints: Sequence[dict[str, str]] = (),
    oddities: Oddities | None = None,
    timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """Create (or update the labels/taints of) a fleet's nodes and wait until kwok has made them Ready.

    Loopback network slots are allocated after the highest slot any existing node uses, so several fleets
    (e.g. GB200 and GB300) can live side by side. Returns the Node objects as built.
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    existing = {n.metadata.name: n for n in core.list_node().items}
    used = [_slot_of(n.spec.pod_cidr) for n in existing.values() if n.spec.pod_cidr and _in_pool(n.spec.pod_cidr)]
    first_slot = max(used) + 1 if used else 0
    wanted = fleet_nodes(gpu, racks, fleet=fleet, first_slot=first_slot, taints=taints, oddities=oddities)
    for node in wanted:
        name = node["metadata"]["name"]
        if name in existing:
            # podCIDR is immutable and status belongs to kwok: only metadata and scheduling fields move.
            labels: dict[str, str | None] = dict(node["metadata"]["labels"])
            if LABEL_CLIQUE not in labels:
                labels[LABEL_CLIQUE] = None  # a merge patch only removes what it names
            patch = {
                "metadata": {"labels": labels, "annotations": node["metadata"]["annotations"]},
                "spec": {
                    "taints": node["spec"].get("taints", []),
                    "unschedulable": node["spec"].get("unschedulable", False),
                },
            }
            core.patch_node(name, patch)
            node["spec"]["podCIDR"] = existing[name].spec.pod_cidr
        else:
            core.create_node(node)
    wait_ready(api_client, [n["metadata"]["name"] for n in wanted], timeout)
    _occupy(api_client, [n for n in wanted if OCCUPIED_ANNOTATION in n["metadata"]["annotations"]])
    return wanted


def _in_pool(pod_cidr: str) -> bool:
    try:
        return ipaddress.ip_network(pod_cidr).subnet_of(_POD_CIDR_POOL)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False


# The node lifecycle controller's taints: on every new node until it has seen the node Ready, and on a node that
# went silent. kwok marks a node Ready first; the controller lifts the taint later (seconds, under load longer).
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def wait_ready(api_client: Any, names: Iterable[str], timeout: float = 120.0) -> None:
    """Until every named node is Ready and the node lifecycle controller has lifted its taints: usable, as the
    scheduler and nvlfleet's planner see it (a planner shown a node still tainted not-ready places nothing on
    it). The taints a fleet was built with stay and are not waited for."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending:
        for node in core.list_node().items:
            conditions = {c.type: c.status for c in (node.status.conditions or [])}
            tainted = any(t.key in LIFECYCLE_TAINTS for t in (node.spec.taints or []))
            if node.metadata.name in pending and conditions.get("Ready") == "True" and not tainted:
                pending.discard(node.metadata.name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"nodes not Ready and untainted after {timeout:.0f}s (is kwok running?): {sorted(pending)[:5]}"
            )
        time.sleep(0.5)


def _occupy(api_client: Any, nodes: list[dict[str, Any]]) -> None:
    """Bind one pod holding all GPUs to each node, as another tenant's workload would."""
    if not nodes:
        return
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": OCCUPIED_NAMESPACE}})
    except ApiException as error:
        if error.status != 409:
            raise
    _wait_default_service_account(core, OCCUPIED_NAMESPACE)
    for node in nodes:
        name = node["metadata"]["name"]
        gpus = node["status"]["allocatable"][GPU_RESOURCE]
        pod = {
            "metadata": {"name": f"occupant-{name}", "labels": {LABEL_FLEET: node["metadata"]["labels"][LABEL_FLEET]}},
            "spec": {
                "nodeName": name,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "work",
                        "image": "registry.local/occupant:1",
                        "resources": {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}},
                    }
                ],
            },
        }
        try:
            core.create_namespaced_pod(OCCUPIED_NAMESPACE, pod)
        except ApiException as error:
            if error.status != 409:
                raise


def _wait_default_service_account(core: Any, namespace: str, timeout: float = 60.0) -> None:
    from kubernetes.client.rest import ApiException

    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def delete_fleet(api_client: Any, fleet: str = "sim") -> int:
    """Delete every node of `fleet` and the occupant pods on them (by label); returns how many nodes."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    selector = f"{LABEL_FLEET}={fleet}"
    with contextlib.suppress(client.ApiException):  # no occupant namespace yet: nothing to delete
        core.delete_collection_namespaced_pod(OCCUPIED_NAMESPACE, label_selector=selector, grace_period_seconds=0)
    nodes = core.list_node(label_selector=selector).items
    for node in nodes:
        core.delete_node(node.metadata.name)
    return len(nodes)
