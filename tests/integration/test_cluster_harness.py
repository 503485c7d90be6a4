"""Proof that the local cluster is the real thing, not a mock.

Each test exercises a component users run in production and that nvlfleet relies on: LWS's webhooks and
controller, kube-scheduler honouring node affinity on NVLink cliques, the controller-manager's StatefulSet
and garbage collector, kwok turning scheduled pods Running+Ready on loopback IPs, helm, CEL validation in
the API server, the ComputeDomain CRD, RBAC with ServiceAccount tokens, and fleet nodes shaped like NVL72
trays.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster import binaries, credentials, errors, fleet, versions

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]

LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
CD_GROUP, CD_VERSION, CD_PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
Wait = Callable[..., Any]


# --- builders ----------------------------------------------------------------------------------------


def leader_worker_set(name: str, clique: str, size: int = 2, **spec: Any) -> dict[str, Any]:
    """One group of `size` pods, each taking a whole 4-GPU tray, pinned to one NVLink clique."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": fleet.LABEL_CLIQUE, "operator": "In", "values": [clique]}]}
                ]
            }
        }
    }
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.33.0",
        "resources": {"limits": {fleet.GPU_RESOURCE: "4"}},
    }
    return {
        "apiVersion": f"{LWS_GROUP}/{LWS_VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "workerTemplate": {"spec": {"affinity": affinity, "containers": [container]}},
            },
            **spec,
        },
    }


def compute_domain(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{CD_GROUP}/{CD_VERSION}",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}, **spec},
    }


def pod_env(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def rejection(call: Callable[[], Any]) -> tuple[int, str]:
    """HTTP status and message of a request the API server must refuse."""
    with pytest.raises(ApiException) as refused:
        call()
    return refused.value.status, json.loads(refused.value.body)["message"]


# --- LeaderWorkerSet, scheduler, kwok ------------------------------------------------------------------


def test_an_lws_group_is_admitted_expanded_placed_in_its_clique_and_becomes_ready(
    api_client: client.ApiClient, namespace: str, fleet_factory: Callable[..., Any], wait_for: Wait
) -> None:
    racks = fleet_factory(racks=2, gpu="GB200")
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)

    custom.create_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, leader_worker_set("decode", racks.clique(1))
    )

    def group_ready() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector="leaderworkerset.sigs.k8s.io/name=decode").items
        return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

    pods = sorted(wait_for(group_ready, 90, "both pods of the LWS group Ready"), key=lambda p: p.metadata.name)
    assert [p.metadata.name for p in pods] == ["decode-0", "decode-0-1"]
    # LWS's pod webhook injected the group's coordinates into both pods.
    assert [pod_env(p)["LWS_WORKER_INDEX"] for p in pods] == ["0", "1"]
    assert {pod_env(p)["LWS_GROUP_SIZE"] for p in pods} == {"2"}
    assert {pod_env(p)["LWS_LEADER_ADDRESS"] for p in pods} == {f"decode-0.decode.{namespace}"}
    # kube-scheduler put one pod per tray, both inside rack 1's NVLink domain.
    nodes = [p.spec.node_name for p in pods]
    assert len(set(nodes)) == 2
    assert set(nodes) <= racks.node_names(rack=1)
    # kwok gave each pod a loopback IP from its node's podCIDR, and a simulated endpoint can listen on it.
    for pod in pods:
        ip = ipaddress.ip_address(pod.status.pod_ip)
        node = core.read_node(pod.spec.node_name)
        assert ip in ipaddress.ip_network(node.spec.pod_cidr)
        assert ip.is_loopback
        with socket.create_server((str(ip), 0)):
            pass

    def lws_status() -> dict[str, Any]:
        lws = custom.get_namespaced_custom_object(LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, "decode")
        return lws.get("status", {})

    status = wait_for(lambda: (s := lws_status()).get("readyReplicas") == 1 and s, 60, "LWS readyReplicas=1")
    assert status["replicas"] == 1


def test_lws_validating_webhook_refuses_a_rollout_that_could_never_progress(
    api_client: client.ApiClient, namespace: str
) -> None:
    stuck = leader_worker_set(
        "stuck",
        "any",
        rolloutStrategy={"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 0}},
    )
    status, message = rejection(
        lambda: client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, stuck
        )
    )
    assert status == 403  # controller-runtime answers a denied admission with Forbidden
    assert 'admission webhook "vleaderworkerset.kb.io" denied the request' in message
    assert "must not be 0 when `maxSurge` is 0" in message


def test_a_group_that_does_not_fit_its_clique_stays_pending(
    api_client: client.ApiClient, namespace: str, fleet_factory: Callable[..., Any], wait_for: Wait
) -> None:
    # 16 of the rack's 18 trays are taken by another tenant, cordoned or tainted: a 3-tray group cannot fit.
    rack = fleet_factory(racks=1, gpu="GB300", oddities=fleet.Oddities(cordoned=1, tainted=1, occupied=14))
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    custom.create_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, leader_worker_set("big", rack.clique(0), size=3)
    )

    def unschedulable_reason() -> str | None:
        for pod in core.list_namespaced_pod(namespace).items:
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    return condition.message
        return None

    message = wait_for(unschedulable_reason, 60, "an Unschedulable condition from kube-scheduler")
    assert "Insufficient nvidia.com/gpu" in message
    assert "node(s) were unschedulable" in message
    assert "untolerated taint" in message
    placed = [p.spec.node_name for p in core.list_namespaced_pod(namespace).items if p.spec.node_name]
    assert set(placed) <= rack.node_names()
    assert len(placed) <= 2


# --- controller-manager ------------------------------------------------------------------------------


def test_deleting_an_owner_garbage_collects_its_children(
    api_client: client.ApiClient, namespace: str, wait_for: Wait
) -> None:
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}, "data": {"k": "v"}})
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    for kind, create in (("ConfigMap", core.create_namespaced_config_map), ("Secret", core.create_namespaced_secret)):
        create(namespace, {"metadata": {"name": f"child-{kind.lower()}", "ownerReferences": [reference]}})

    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def children_left() -> list[str]:
        return [cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items] + [
            s.metadata.name for s in core.list_namespaced_secret(namespace).items
        ]

    wait_for(lambda: not {"child-configmap", "child-secret"} & set(children_left()), 60, "GC of both children")


def test_a_service_account_token_is_subject_to_rbac(
    api_client: client.ApiClient, namespace: str, kubeconfig: pathlib.Path, tmp_path: pathlib.Path, wait_for: Wait
) -> None:
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "operator"}})
    as_operator = credentials.service_account_kubeconfig(kubeconfig, namespace, "operator", tmp_path / "sa.kubeconfig")

    def can_list_pods() -> str:
        run = subprocess.run(
            ["kubectl", f"--kubeconfig={as_operator}", "auth", "can-i", "list", "pods", "-n", namespace],
            capture_output=True,
            text=True,
            check=False,
        )
        return run.stdout.strip()

    assert can_list_pods() == "no"
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "operator-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
        },
    )
    wait_for(lambda: can_list_pods() == "yes", 30, "the RoleBinding to take effect")


# --- helm, CRDs, CEL ---------------------------------------------------------------------------------


def test_helm_installs_and_uninstalls_a_tiny_chart(
    api_client: client.ApiClient, namespace: str, tmp_path: pathlib.Path
) -> None:
    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\nkubeVersion: '>=1.34.2-0'\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )

    def helm(*args: str) -> str:
        return subprocess.run(["helm", *args, "-n", namespace], capture_output=True, text=True, check=True).stdout

    helm("install", "demo", str(chart), "--set", "greeting=bonjour", "--wait", "--timeout", "60s")

    core = client.CoreV1Api(api_client)
    assert core.read_namespaced_config_map("demo-greeting", namespace).data == {"greeting": "bonjour"}
    releases = json.loads(helm("list", "-o", "json"))
    assert [(r["name"], r["status"], r["chart"]) for r in releases] == [("demo", "deployed", "tiny-0.1.0")]
    helm("uninstall", "demo", "--wait")
    assert [cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items] == ["kube-root-ca.crt"]


@pytest.fixture
def replica_range_crd(api_client: client.ApiClient, namespace: str, wait_for: Wait) -> dict[str, str]:
    """A CRD (its group unique to the test) whose CEL rule forbids minReplicas > maxReplicas."""
    group = f"{namespace}.localcluster.test"
    ext = client.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": f"replicaranges.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "replicaranges", "singular": "replicarange", "kind": "ReplicaRange"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "properties": {
                                            "minReplicas": {"type": "integer"},
                                            "maxReplicas": {"type": "integer"},
                                        },
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "self.minReplicas <= self.maxReplicas",
                                                "message": "minReplicas must not exceed maxReplicas",
                                                "fieldPath": ".minReplicas",
                                            }
                                        ],
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }
    )

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"replicaranges.{group}")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, 30, "the CRD to be Established")
    yield {"group": group, "version": "v1", "plural": "replicaranges"}
    ext.delete_custom_resource_definition(f"replicaranges.{group}")


def test_cel_validation_on_a_crd_rejects_a_bad_object(
    api_client: client.ApiClient, namespace: str, replica_range_crd: dict[str, str]
) -> None:
    custom = client.CustomObjectsApi(api_client)
    kind = {"apiVersion": f"{replica_range_crd['group']}/v1", "kind": "ReplicaRange"}

    def create(name: str, low: int, high: int) -> Any:
        body = {**kind, "metadata": {"name": name}, "spec": {"minReplicas": low, "maxReplicas": high}}
        return custom.create_namespaced_custom_object(
            replica_range_crd["group"], "v1", namespace, replica_range_crd["plural"], body
        )

    assert create("good", 1, 3)["spec"] == {"minReplicas": 1, "maxReplicas": 3}
    status, message = rejection(lambda: create("bad", 4, 3))
    assert status == 422
    assert "spec.minReplicas: Invalid value" in message
    assert "minReplicas must not exceed maxReplicas" in message


def test_a_compute_domain_is_accepted_defaulted_and_its_spec_is_immutable(
    api_client: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)

    created = custom.create_namespaced_custom_object(CD_GROUP, CD_VERSION, namespace, CD_PLURAL, compute_domain("cd"))

    assert created["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "cd-channel"}, "allocationMode": "Single"},
    }
    status, message = rejection(
        lambda: custom.patch_namespaced_custom_object(
            CD_GROUP, CD_VERSION, namespace, CD_PLURAL, "cd", {"spec": {"numNodes": 2}}
        )
    )
    assert status == 422
    assert "A computeDomain.spec is immutable" in message
    bad_mode = compute_domain("cd-bad", channel={"resourceClaimTemplate": {"name": "x"}, "allocationMode": "Many"})
    status, message = rejection(
        lambda: custom.create_namespaced_custom_object(CD_GROUP, CD_VERSION, namespace, CD_PLURAL, bad_mode)
    )
    assert status == 422
    assert 'spec.channel.allocationMode: Unsupported value: "Many"' in message


def test_the_dra_api_a_compute_domain_channel_needs_is_served(api_client: client.ApiClient, namespace: str) -> None:
    # What the NVIDIA controller would create for a ComputeDomain; here only the API is real, no driver runs.
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "cd-channel"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}
                    ]
                }
            }
        },
    }
    custom = client.CustomObjectsApi(api_client)
    created = custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template
    )
    assert created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"


# --- the simulated fleet -----------------------------------------------------------------------------


def test_fleet_nodes_in_the_cluster_are_the_nvl72_trays_the_builder_describes(
    api_client: client.ApiClient, fleet_factory: Callable[..., Any]
) -> None:
    odd = fleet.Oddities(without_clique=1, cordoned=1, tainted=1, occupied=1)
    racks = fleet_factory(racks=2, gpu="GB300", oddities=odd)
    core = client.CoreV1Api(api_client)
    live = {n.metadata.name: n for n in core.list_node(label_selector=f"{fleet.LABEL_FLEET}={racks.name}").items}

    assert set(live) == racks.node_names()
    assert len(racks.rack(0)) == len(racks.rack(1)) == 18
    for built in racks.nodes:
        node = live[built["metadata"]["name"]]
        assert node.metadata.labels == built["metadata"]["labels"]
        assert node.status.allocatable == built["status"]["allocatable"]
        assert node.status.node_info.architecture == "arm64"
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    cliques = {n.metadata.labels.get(fleet.LABEL_CLIQUE) for n in live.values()}
    assert cliques == {racks.clique(0), racks.clique(1), None}
    # The odd cases sit on distinct trays at the end of the last rack.
    last = {n: live[n] for n in sorted(racks.node_names(rack=1))[-4:]}
    occupied, tainted, cordoned, unlabeled = last.values()
    assert fleet.LABEL_CLIQUE not in unlabeled.metadata.labels
    assert cordoned.spec.unschedulable is True
    # (node.kubernetes.io/* taints come and go with the node lifecycle controller; they are not ours.)
    ours = [t for t in tainted.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")]
    assert [{"key": t.key, "value": t.value, "effect": t.effect} for t in ours] == [fleet.MAINTENANCE_TAINT]
    tenant = core.list_namespaced_pod(
        fleet.OCCUPIED_NAMESPACE, field_selector=f"spec.nodeName={occupied.metadata.name}"
    ).items
    assert [p.status.phase for p in tenant] == ["Running"]


@pytest.mark.parametrize(
    ("gpu", "product", "memory"), [("H200", "NVIDIA-H200", "143771"), ("B200", "NVIDIA-B200", None)]
)
def test_hgx_nodes_are_single_eight_gpu_nodes_without_a_clique(
    api_client: client.ApiClient, fleet_factory: Callable[..., Any], gpu: str, product: str, memory: str | None
) -> None:
    nodes = fleet_factory(racks=2, gpu=gpu)
    live = client.CoreV1Api(api_client).list_node(label_selector=f"{fleet.LABEL_FLEET}={nodes.name}").items

    assert sorted(n.metadata.name for n in live) == [
        f"{nodes.name}-{gpu.lower()}-n00",
        f"{nodes.name}-{gpu.lower()}-n01",
    ]
    for node in live:
        labels = node.metadata.labels
        assert (labels[fleet.LABEL_PRODUCT], labels[fleet.LABEL_COUNT], labels.get(fleet.LABEL_MEMORY)) == (
            product,
            "8",
            memory,
        )
        assert fleet.LABEL_CLIQUE not in labels
        assert node.status.allocatable[fleet.GPU_RESOURCE] == "8"
        assert node.status.node_info.architecture == "amd64"


# --- the harness's own faults and lifecycle ----------------------------------------------------------


def localcluster_cli(*args: str, cluster_dir: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO / "cluster"), "NVLFLEET_CLUSTER_DIR": str(cluster_dir), **env}
    return subprocess.run(
        [sys.executable, "-m", "localcluster", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def running_binary(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def test_a_second_cluster_comes_up_beside_the_first_is_reused_and_down_leaves_no_process(
    local_cluster: Any, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    scratch = tmp_path / "cluster"
    request.addfinalizer(lambda: localcluster_cli("down", cluster_dir=scratch))

    first = localcluster_cli("up", cluster_dir=scratch)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == f"KUBECONFIG={scratch / 'kubeconfig'}"
    pids = {p.stem: int(p.read_text()) for p in (scratch / "pids").glob("*.pid")}
    state = json.loads((scratch / "state.json").read_text())
    assert sorted(pids) == sorted(c.name for c in versions.GO_COMPONENTS if not c.on_demand)
    assert set(state["ports"].values()).isdisjoint(local_cluster.ports.values())

    again = localcluster_cli("up", cluster_dir=scratch)
    assert again.returncode == 0, again.stderr
    assert "reusing the healthy cluster" in again.stderr
    assert {p.stem: int(p.read_text()) for p in (scratch / "pids").glob("*.pid")} == pids
    status = localcluster_cli("status", cluster_dir=scratch)
    assert status.returncode == 0
    assert status.stdout.splitlines()[-1] == f"KUBECONFIG={scratch / 'kubeconfig'}"

    down = localcluster_cli("down", cluster_dir=scratch)
    assert down.returncode == 0, down.stderr
    assert {name: running_binary(pid) for name, pid in pids.items()} == dict.fromkeys(pids)
    assert sorted(p.name for p in scratch.iterdir()) == [".lock", "logs"]


def test_a_port_in_use_is_one_line_naming_the_component_and_its_log(tmp_path: pathlib.Path) -> None:
    scratch = tmp_path / "cluster"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = localcluster_cli("up", cluster_dir=scratch, NVLFLEET_PORT_ETCD=str(port))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"localcluster: etcd: port 127.0.0.1:{port} (etcd) is in use (log: {scratch / 'logs' / 'etcd.log'})"
    )
    assert "KUBECONFIG=" not in result.stdout
    assert not list((scratch / "pids").glob("*.pid"))


def test_a_failed_build_is_one_line_naming_the_component_and_its_log(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVLFLEET_CACHE", str(tmp_path / "cache"))
    unreleased = dataclasses.replace(versions.go_component("etcd"), version="v3.7.999")
    monkeypatch.setattr(versions, "GO_COMPONENTS", (unreleased,))

    with pytest.raises(errors.ComponentError) as failed:
        binaries.ensure_all(progress=lambda _: None)

    log = tmp_path / "cache" / "logs" / "modules-etcd.log"
    assert failed.value.line() == f"localcluster: etcd: downloading Go modules for etcd failed (log: {log})"
    assert "v3.7.999" in log.read_text()


# --- Kueue (on demand) ---------------------------------------------------------------------------------


@pytest.fixture
def kueue_namespace(local_cluster: Any, api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """Kueue started for this test (built on first use), managing ``namespace`` only; stopped by its PID after."""
    from localcluster import cluster, kueue

    running, _ = cluster.status()
    assert running is not None
    kueue.ensure_running(running.layout, progress=lambda _: None)
    key, value = kueue.MANAGED_LABEL
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": {key: value}}})
    yield namespace
    kueue.stop(running.layout.root, running.layout)


def test_kueue_admits_an_lws_group_into_one_clique_and_holds_back_one_no_clique_fits(
    api_client: client.ApiClient, kueue_namespace: str, fleet_factory: Callable[..., Any], wait_for: Wait
) -> None:
    import compare_placement

    racks = fleet_factory(racks=2, gpu="GB200")
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    objects = compare_placement.kueue_objects(racks.name, kueue_namespace)
    try:
        for plural, body in objects:
            if plural == "localqueues":
                custom.create_namespaced_custom_object(*compare_placement.KUEUE, kueue_namespace, plural, body)
            else:
                custom.create_cluster_custom_object(*compare_placement.KUEUE, plural, body)
        for name, size in (("fits", 2), ("toobig", 19)):  # a rack has 18 trays
            lws = leader_worker_set(name, "unused", size=size)
            lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].pop("affinity")
            lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["nodeSelector"] = {
                fleet.LABEL_FLEET: racks.name
            }
            compare_placement.queue_to_kueue(lws, racks.name)
            custom.create_namespaced_custom_object(LWS_GROUP, LWS_VERSION, kueue_namespace, LWS_PLURAL, lws)

        def group(name: str) -> list[client.V1Pod]:
            selector = f"leaderworkerset.sigs.k8s.io/name={name}"
            return core.list_namespaced_pod(kueue_namespace, label_selector=selector).items

        fits = wait_for(lambda: (p := group("fits")) and len(p) == 2 and all(is_ready(x) for x in p) and p, 120, "fits")
        cliques = {racks.clique(r) for r in (0, 1) if {p.spec.node_name for p in fits} <= racks.node_names(rack=r)}
        assert len(cliques) == 1  # Kueue's topology assignment kept the group in one NVLink domain
        toobig = group("toobig")
        assert toobig and not any(p.spec.node_name for p in toobig)  # held back by Kueue: gated, never bound
        assert all(p.spec.scheduling_gates for p in toobig)
    finally:
        compare_placement.remove_kueue_objects(api_client, racks.name, kueue_namespace)
