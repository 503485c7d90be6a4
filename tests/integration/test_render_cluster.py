"""Rendered manifests against the real local cluster: API server schemas, the LWS webhook, the ComputeDomain CRD,
the LWS controller and kube-scheduler.

- Every example renders into objects the API server accepts (server-side dry-run apply: CRD structural schemas,
  CEL, the LeaderWorkerSet admission webhook, core validation of the embedded pod templates and Services).
- A pinned serving, applied for real on a simulated two-rack GB200 fleet, becomes pods that the scheduler puts
  on the planned rack only, one per tray, with the LWS env the command lines rely on; the Service's selector
  picks exactly the leaders.
- An unpinned serving schedules (the pod affinity that keeps a group in one rack lets a group's first pod in),
  and a group that no single rack can hold stays pending rather than split across racks (pod affinity with
  matchLabelKeys on the LWS group key). Without that affinity the same group schedules across two racks.

ComputeDomains are switched off for the pods that must schedule: no NVIDIA DRA driver runs here, so a pod
claiming an IMEX channel can never be allocated. The dry-run tests cover the ComputeDomain objects themselves.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster import fleet as fleets

from nvlfleet.api import models, names, yamltext
from nvlfleet.core import commandline, demands, inventory, kubeobjects, planner, render
from support import servingbuilder as sb

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
Wait = Callable[..., Any]


def kubectl(cluster: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def apply(cluster: Any, manifests: list[dict[str, Any]], *, dry_run: bool) -> subprocess.CompletedProcess[str]:
    args = ["apply", "--server-side", "--field-manager=nvlfleet", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    return kubectl(cluster, *args, stdin=yamltext.dump_all(manifests))


def in_namespace(path: pathlib.Path, namespace: str) -> list[models.DeepSeekServing]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == names.KIND]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return [models.DeepSeekServing.model_validate(doc) for doc in docs]


def cluster_placement(
    api: client.ApiClient, serving: models.DeepSeekServing, fleet_name: str
) -> dict[str, dict[str, int]] | None:
    """The planner's placement on the cluster's real Node objects, as the operator computes it. None until every
    node of ``fleet_name`` is Ready and untainted: new nodes carry the node-lifecycle not-ready taint for a moment,
    and a plan made while only some are usable spreads groups that the whole fleet would pack."""
    nodes = [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]
    inv = kubeobjects.from_objects(nodes, domain_label=serving.spec.placement.domain_label)
    mine = [n for n in inv.nodes if n.labels.get(fleets.LABEL_FLEET) == fleet_name]
    if not mine or any(not n.schedulable or n.taints for n in mine):
        return None
    plan = planner.plan(inv, demands.of(serving))
    return (
        None
        if plan.unplaced
        else plan.placement(inventory.ServingKey(serving.metadata.namespace, serving.metadata.name))
    )


def serving_pods(api: client.ApiClient, namespace: str, name: str) -> list[client.V1Pod]:
    """The serving's engine pods (not its router's)."""
    selector = f"{names.SERVING_LABEL}={name},{names.NAME_LABEL}={render.APP_NAME}"
    return list(client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items)


def node_labels(api: client.ApiClient) -> dict[str, dict[str, str]]:
    return {n.metadata.name: n.metadata.labels or {} for n in client.CoreV1Api(api).list_node().items}


def groups_of(pods: list[client.V1Pod]) -> dict[tuple[str, str], list[client.V1Pod]]:
    out: dict[tuple[str, str], list[client.V1Pod]] = {}
    for pod in pods:
        labels = pod.metadata.labels
        key = (labels["leaderworkerset.sigs.k8s.io/name"], labels["leaderworkerset.sigs.k8s.io/group-index"])
        out.setdefault(key, []).append(pod)
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_renders_into_objects_the_api_server_accepts(
    local_cluster: Any, namespace: str, path: pathlib.Path
) -> None:
    for serving in in_namespace(path, namespace):
        # No Prometheus Operator runs here; its PodMonitor CRD is absent by design.
        manifests = [m for m in render.render(serving) if m["kind"] != "PodMonitor"]

        result = apply(local_cluster, manifests, dry_run=True)

        assert result.returncode == 0, result.stderr
        applied = [line for line in result.stdout.splitlines() if "serverside-applied (server dry run)" in line]
        assert len(applied) == len(manifests), result.stdout


def test_strings_go_yaml_would_read_as_numbers_reach_the_api_server_as_the_same_strings(
    local_cluster: Any, namespace: str
) -> None:
    # A domain label such as 09876543 (an 8-digit hash) written plain was refused by kubectl: a CI run saw it.
    values = {f"v{i}": value for i, value in enumerate(["12345e67", "09876543", "0o17", "1_0e5", "y", "N", ".5e3"])}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "go-strings", "namespace": namespace, "labels": {names.DOMAIN_LABEL: "09876543"}},
        "data": values,
    }

    result = kubectl(
        local_cluster,
        "apply",
        "--server-side",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        stdin=yamltext.dump(config_map),
    )

    assert result.returncode == 0, result.stderr
    applied = json.loads(result.stdout)
    assert applied["data"] == values
    assert applied["metadata"]["labels"][names.DOMAIN_LABEL] == "09876543"


def test_pinned_groups_run_on_their_rack_one_pod_per_tray(
    local_cluster: Any, api_client: client.ApiClient, namespace: str, fleet_factory: Any, wait_for: Wait
) -> None:
    fleet = fleet_factory(racks=2, gpu="GB200")
    serving = sb.serving(
        name="pinned",
        namespace=namespace,
        tensor=1,
        nodes=2,
        groups=2,
        placement={"computeDomain": False},
        pod={"nodeSelector": {"localcluster.nvlfleet.io/fleet": fleet.name}},  # other tests share the cluster
    )
    placement = wait_for(
        lambda: cluster_placement(api_client, serving, fleet.name), 60, "the fleet's nodes to be placeable"
    )
    manifests = render.render(serving, placement)

    result = apply(local_cluster, manifests, dry_run=False)
    assert result.returncode == 0, result.stderr

    pods = wait_for(
        lambda: (
            (p := serving_pods(api_client, namespace, "pinned"))
            and len(p) == 4
            and all(x.spec.node_name for x in p)
            and p
        ),
        120,
        "4 scheduled pods of 2 two-tray groups",
    )
    labels = node_labels(api_client)
    (planned,) = placement["decode"]  # both groups fit one rack: pack
    assert planned in {fleet.clique(0), fleet.clique(1)}
    assert {labels[p.spec.node_name]["nvidia.com/gpu.clique"] for p in pods} == {planned}
    assert len({p.spec.node_name for p in pods}) == 4  # all GPUs of a tray per pod: one pod per node

    for (_, _), group in groups_of(pods).items():
        by_index = {p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"]: p for p in group}
        assert set(by_index) == {"0", "1"}
        leader, worker = by_index["0"].spec.containers[0], by_index["1"].spec.containers[0]
        assert leader.command[:2] == ["vllm", "serve"] and commandline.LEADER_ADDRESS in leader.command
        assert worker.command[:3] == ["python3", "-c", commandline.WORKER_LAUNCHER]
        worker_env = {e.name: e.value for e in worker.env}
        assert worker_env["LWS_WORKER_INDEX"] == "1"  # what the launcher multiplies by the ranks per tray
        assert "LWS_LEADER_ADDRESS" in worker_env  # what $(LWS_LEADER_ADDRESS) in the command expands to

    # kwok gives pods loopback IPs, which EndpointSlices refuse, so the Service's selector is checked as the API
    # server evaluates it rather than through its endpoints.
    service = client.CoreV1Api(api_client).read_namespaced_service(
        render.service_name("pinned", models.RoleName.DECODE), namespace
    )
    selector = ",".join(f"{k}={v}" for k, v in service.spec.selector.items())
    selected = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items
    leaders = [p for p in pods if p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0"]
    assert sorted(p.metadata.name for p in selected) == sorted(p.metadata.name for p in leaders)
    assert len(leaders) == 2


def test_unpinned_groups_still_stay_inside_one_rack(
    local_cluster: Any, api_client: client.ApiClient, namespace: str, fleet_factory: Any, wait_for: Wait
) -> None:
    fleet = fleet_factory(racks=2, gpu="GB200")
    serving = sb.serving(
        name="loose",
        namespace=namespace,
        tensor=1,
        nodes=3,
        groups=3,
        placement={"computeDomain": False},
        pod={"nodeSelector": {"localcluster.nvlfleet.io/fleet": fleet.name}},
    )

    result = apply(local_cluster, render.render(serving), dry_run=False)
    assert result.returncode == 0, result.stderr

    pods = wait_for(
        lambda: (
            (p := serving_pods(api_client, namespace, "loose"))
            and len(p) == 9
            and all(x.spec.node_name for x in p)
            and p
        ),
        180,
        "9 scheduled pods of 3 three-tray groups",
    )
    labels = node_labels(api_client)
    for key, group in groups_of(pods).items():
        cliques = {labels[p.spec.node_name]["nvidia.com/gpu.clique"] for p in group}
        assert len(cliques) == 1, f"group {key} spans racks: {cliques}"
    assert len({p.spec.node_name for p in pods}) == 9


def test_an_unpinned_group_never_splits_across_racks(
    local_cluster: Any, api_client: client.ApiClient, namespace: str, fleet_factory: Any, wait_for: Wait
) -> None:
    fleet = fleet_factory(racks=2, gpu="GB200")
    # Only three trays are eligible: two in rack 0, one in rack 1. A three-tray group fits on them only split.
    pool = {"nvlfleet-test/pool": namespace[-6:]}
    eligible = sorted(fleet.node_names(0))[:2] + sorted(fleet.node_names(1))[:1]
    core = client.CoreV1Api(api_client)
    for name in eligible:
        core.patch_node(name, {"metadata": {"labels": pool}})
    # A fresh node carries the not-ready taint for a moment; an Unschedulable verdict must come from the rack rule.
    wait_for(lambda: all(not core.read_node(n).spec.taints for n in eligible), 60, "the eligible trays to be untainted")
    serving = sb.serving(
        name="split",
        namespace=namespace,
        tensor=1,
        nodes=3,
        groups=1,
        placement={"computeDomain": False},
        pod={"nodeSelector": pool},
    )

    result = apply(local_cluster, render.render(serving), dry_run=False)
    assert result.returncode == 0, result.stderr

    def settled() -> list[client.V1Pod] | None:
        pods = serving_pods(api_client, namespace, "split")
        refused = [
            c.message
            for p in pods
            for c in p.status.conditions or []
            if c.type == "PodScheduled" and c.reason == "Unschedulable"
        ]
        return pods if len(pods) == 3 and any("affinity" in (m or "") for m in refused) else None

    pods = wait_for(settled, 120, "the scheduler to refuse a pod of the group for pod affinity")
    labels = node_labels(api_client)
    scheduled = [p for p in pods if p.spec.node_name]
    assert len({labels[p.spec.node_name]["nvidia.com/gpu.clique"] for p in scheduled}) <= 1
    assert len(scheduled) < 3
