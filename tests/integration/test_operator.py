"""The operator against the real local cluster: kube-scheduler places the pods, kwok runs them, LWS groups them.

Every test gets its own namespace, its own kwok fleet (servings select it with ``spec.pod.nodeSelector``, so
tests running side by side never share racks) and its own ``nvlfleet run`` process reconciling only that
namespace. A stand-in for the NVIDIA driver's ComputeDomain side (localcluster.computedomains) lets pods that claim an
IMEX channel schedule, as they would on a real GB200 cluster. Fixtures are in conftest.py, builders and
readers in tests/support/servings.py.
"""

from __future__ import annotations

import copy
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster import fleet as fleets

from support.servings import Cluster, groups_of, node_cliques, serving

pytestmark = pytest.mark.integration

Wait = Callable[..., Any]
LEADER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


# ---------------------------------------------------------------------------------------------------------------
# A serving, end to end


def test_a_serving_becomes_leader_worker_sets_and_compute_domains_whose_groups_each_sit_in_one_rack(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    fleet = gb200_fleet(racks=2)
    start_operator()
    cluster.create(serving("flash", fleet, groups=10, nodes=2))  # 20 trays: 9 groups fill rack 0, 1 spills

    wait_for(lambda: cluster.ready("flash"), 180, "the serving to report Ready")

    status = cluster.get("flash")["status"]
    assert (status["ready"], status["readyGroups"], status["desiredGroups"], status["gpus"]) == ("10/10", 10, 10, 80)
    placement = status["placement"]["decode"]
    assert sorted(placement.values()) == [1, 9] and set(placement) == {fleet.clique(0), fleet.clique(1)}
    children = cluster.children("flash")
    lws_by_domain = {
        lws["metadata"]["annotations"]["nvlfleet.io/domain-value"]: lws for lws in children["LeaderWorkerSet"]
    }
    assert {d: lws["spec"]["replicas"] for d, lws in lws_by_domain.items()} == placement
    assert sorted(cd["metadata"]["annotations"]["nvlfleet.io/domain-value"] for cd in children["ComputeDomain"]) == (
        sorted(lws_by_domain)
    )  # one per rack the serving uses
    assert sorted(s["metadata"]["name"] for s in children["Service"]) == ["flash-decode", "flash-router"]
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Deployment"):
        assert [o["metadata"]["name"] for o in children[kind]] == ["flash-router"], kind
    assert status["endpoint"] == f"http://flash-router.{cluster.namespace}.svc:8000"
    uid = cluster.get("flash")["metadata"]["uid"]
    for objs in children.values():
        for obj in objs:
            refs = obj["metadata"].get("ownerReferences") or obj["metadata"].get("owner_references")
            assert [r["uid"] for r in refs] == [uid]

    cliques = node_cliques(api_client, fleet)
    groups = groups_of(cluster.pods("flash"))
    assert len(groups) == 10
    for (lws_name, index), pods in groups.items():
        lws = next(x for x in children["LeaderWorkerSet"] if x["metadata"]["name"] == lws_name)
        domain = lws["metadata"]["annotations"]["nvlfleet.io/domain-value"]
        assert len(pods) == 2, f"group {lws_name}/{index}"
        assert {cliques[p.spec.node_name] for p in pods} == {domain}, f"group {lws_name}/{index} left its rack"
        assert all(p.status.phase == "Running" for p in pods)
    # A new serving's rollout is told by its status (conditions, placement, endpoint): no Event per child or step.
    reasons = [reason for _, reason, _ in cluster.events("flash")]
    assert not {"Applied", "Placed", "Ready"} & set(reasons), reasons


def test_a_prefill_decode_serving_lands_in_one_rack_and_both_roles_claim_its_compute_domain_channel(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    # Rack 0 keeps 6 usable trays: the decode group (4 trays) alone fits there best, but not with the 2 prefill
    # groups (2 trays each) that feed it; placed as a unit, all three need 8 trays of one rack: rack 1.
    fleet = gb200_fleet(racks=2, oddities=fleets.Oddities(rack=0, cordoned=12))
    start_operator()
    roles = {
        "decode": {"groups": 1, "parallelism": {"tensor": 1, "nodesPerGroup": 4}},
        "prefill": {"groups": 2, "parallelism": {"tensor": 1, "nodesPerGroup": 2}},
    }
    cluster.create(serving("pd", fleet, groups=1, roles=roles))

    wait_for(lambda: cluster.ready("pd"), 240, "the prefill/decode serving to report Ready")

    assert cluster.get("pd")["status"]["placement"] == {
        "decode": {fleet.clique(1): 1},
        "prefill": {fleet.clique(1): 2},
    }
    (compute_domain,) = cluster.children("pd")["ComputeDomain"]
    channel = compute_domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    cliques = node_cliques(api_client, fleet)
    pods = cluster.pods("pd")
    groups = groups_of(pods)
    assert sorted((key[0].rsplit("-", 1)[0], len(members)) for key, members in groups.items()) == [
        ("pd-decode", 4),
        ("pd-prefill", 2),
        ("pd-prefill", 2),
    ]
    assert {cliques[p.spec.node_name] for p in pods} == {fleet.clique(1)}
    assert {(c.name, c.resource_claim_template_name) for p in pods for c in p.spec.resource_claims} == {
        ("compute-domain-channel", channel)
    }
    # Each pod's claim was made from that template and allocated (the pod runs): prefill and decode hold
    # channels of one ComputeDomain.
    assert all(p.status.phase == "Running" and p.status.resource_claim_statuses for p in pods)


def test_the_periodic_recheck_writes_nothing_when_nothing_changed(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=1)
    operator = start_operator(recheck_seconds=2)
    cluster.create(serving("quiet", fleet, groups=2))
    wait_for(lambda: cluster.ready("quiet"), 120, "the serving to report Ready")
    # Quiet first: the serving and its children keep their versions across three re-checks (on a busy machine
    # the last readiness news can take a while). A re-check that wrote would keep this from ever holding.
    seen: list[dict[str, str]] = []

    def settled() -> bool:
        seen.append(cluster.resource_versions("quiet"))
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    wait_for(settled, 90, "the serving and its children to stop changing", interval=2.5)
    before, events_before, serving_before = seen[-1], cluster.events("quiet"), cluster.get("quiet")

    time.sleep(10)  # five more re-checks

    after = cluster.get("quiet")
    assert cluster.resource_versions("quiet") == before, {
        key: (serving_before[key], after[key]) for key in ("metadata", "status") if serving_before[key] != after[key]
    }
    assert cluster.events("quiet") == events_before
    # Once each: ComputeDomain, LeaderWorkerSet, the decode Service, and the router's ServiceAccount, Role,
    # RoleBinding, Deployment and Service.
    assert operator.log.read_text().count("applied ") == 8


# ---------------------------------------------------------------------------------------------------------------
# Capacity


def test_two_servings_on_a_tight_fleet_never_overcommit_and_the_loser_is_placed_when_room_appears(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    fleet = gb200_fleet(racks=1)  # 18 trays
    start_operator()
    cluster.create(serving("alpha", fleet, groups=4, nodes=4))  # 16 trays
    cluster.create(serving("beta", fleet, groups=4, nodes=4))  # 16 trays: only one of them fits

    def decided() -> bool:
        return all(cluster.condition(n, "InsufficientCapacity") is not None for n in ("alpha", "beta"))

    wait_for(decided, 60, "both servings to be planned")
    short = [n for n in ("alpha", "beta") if cluster.is_(n, "InsufficientCapacity")]
    assert len(short) == 1, "exactly one serving must wait for capacity"
    loser = short[0]
    winner = "beta" if loser == "alpha" else "alpha"
    wait_for(lambda: cluster.ready(winner), 120, f"{winner} to report Ready")

    message = cluster.condition(loser, "InsufficientCapacity")["message"]
    assert "decode needs 4 free nodes (16 GPUs) in one NVLink domain" in message
    assert cluster.get(loser)["status"]["placement"] == {"decode": {}}
    assert cluster.children(loser)["LeaderWorkerSet"] == []
    busy = [p for n in ("alpha", "beta") for p in cluster.pods(n)]
    assert all(p.spec.node_name for p in busy), "no pod of a placed group may wait for a node"
    assert len({p.spec.node_name for p in busy}) == len(busy) <= 18
    assert ("Warning", "InsufficientCapacity") in [(t, r) for t, r, _ in cluster.events(loser)]

    cluster.patch_spec(winner, {"roles": {"decode": {"groups": 2}}})  # frees 8 trays: 2 groups of the loser fit
    cluster.patch_spec(loser, {"roles": {"decode": {"groups": 2}}})

    wait_for(lambda: cluster.ready(loser), 180, f"{loser} to be placed and Ready once {winner} scaled down")
    assert not cluster.is_(loser, "InsufficientCapacity")
    busy = [p for n in ("alpha", "beta") for p in cluster.pods(n) if p.metadata.deletion_timestamp is None]
    assert len({p.spec.node_name for p in busy}) == len(busy) == 16


# ---------------------------------------------------------------------------------------------------------------
# Failures and restarts


def test_a_removed_node_degrades_exactly_the_group_that_ran_on_it(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    fleet = gb200_fleet(racks=1)
    start_operator()
    cluster.create(serving("frail", fleet, groups=3, nodes=2))
    wait_for(lambda: cluster.ready("frail"), 120, "the serving to report Ready")
    groups = groups_of(cluster.pods("frail"))
    (lws_name, index), pods = sorted(groups.items())[1]
    victim = pods[0].spec.node_name

    client.CoreV1Api(api_client).delete_node(victim)

    wait_for(lambda: cluster.is_("frail", "Degraded"), 60, "Degraded after the node was removed")
    degraded = cluster.condition("frail", "Degraded")
    assert f"decode group {index} in domain" in degraded["message"]
    assert victim in degraded["message"]
    others = [i for (_, i) in groups if i != index]
    assert not any(f"decode group {i} in" in degraded["message"] for i in others)
    assert not cluster.is_("frail", "Ready")
    assert ("Warning", "Degraded") in [(t, r) for t, r, _ in cluster.events("frail")]

    # The pods on the vanished node are garbage-collected, LWS recreates the whole group, and kube-scheduler
    # puts it back in the same rack (15 trays are still free there).
    wait_for(lambda: cluster.ready("frail") and not cluster.is_("frail", "Degraded"), 240, "recovery")
    cliques = node_cliques(api_client, fleet)
    regrouped = groups_of(cluster.pods("frail"))[(lws_name, index)]
    assert {cliques[p.spec.node_name] for p in regrouped} == {fleet.clique(0)}
    assert ("Normal", "Recovered") in [(t, r) for t, r, _ in cluster.events("frail")]


def test_an_operator_restart_mid_rollout_leaves_no_duplicate_or_orphaned_children(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=2)
    first = start_operator()
    cluster.create(serving("steady", fleet, groups=4, nodes=2))
    wait_for(lambda: cluster.children("steady")["LeaderWorkerSet"], 60, "the first LeaderWorkerSet")
    assert first.stop(kill=True) == -9  # killed mid-rollout, before the serving is Ready

    cluster.patch_spec("steady", {"roles": {"decode": {"groups": 12}}})  # while no operator runs: spills over
    start_operator()

    wait_for(lambda: cluster.ready("steady"), 240, "the serving to report Ready after the restart")
    children = cluster.children("steady")
    placement = cluster.get("steady")["status"]["placement"]["decode"]
    assert sum(placement.values()) == 12
    domains = sorted(lws["metadata"]["annotations"]["nvlfleet.io/domain-value"] for lws in children["LeaderWorkerSet"])
    assert domains == sorted(placement)  # one LeaderWorkerSet per domain, none left over, none twice
    assert len(children["ComputeDomain"]) == len(children["LeaderWorkerSet"])
    assert len(children["Service"]) == 2  # the decode role's and the router's
    assert len(groups_of(cluster.pods("steady"))) == 12


# ---------------------------------------------------------------------------------------------------------------
# Changes over a serving's life


def test_scale_spec_change_through_a_rolling_update_and_deletion_by_garbage_collection(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=2)
    start_operator()
    cluster.create(serving("lifecycle", fleet, groups=2))
    wait_for(lambda: cluster.ready("lifecycle"), 120, "Ready at 2 groups")

    cluster.patch_spec("lifecycle", {"roles": {"decode": {"groups": 5}}})
    wait_for(lambda: cluster.ready("lifecycle") and cluster.get("lifecycle")["status"]["ready"] == "5/5", 120, "5/5")
    (lws,) = cluster.children("lifecycle")["LeaderWorkerSet"]
    assert lws["spec"]["replicas"] == 5

    old_revision_pods = {p.metadata.name: p.metadata.uid for p in cluster.pods("lifecycle")}
    cluster.patch_spec("lifecycle", {"runtime": {"image": "vllm/vllm-openai:v0.33.0-rc2"}})

    def rolled() -> bool:
        pods = [p for p in cluster.pods("lifecycle") if p.metadata.deletion_timestamp is None]
        images = {c.image for p in pods for c in p.spec.containers}
        return cluster.ready("lifecycle") and images == {"vllm/vllm-openai:v0.33.0-rc2"} and len(pods) == 10

    wait_for(rolled, 240, "LWS to roll every group to the new image")
    (lws,) = cluster.children("lifecycle")["LeaderWorkerSet"]
    assert lws["status"]["updatedReplicas"] == 5
    assert not set(old_revision_pods.values()) & {p.metadata.uid for p in cluster.pods("lifecycle")}

    cluster.patch_spec("lifecycle", {"roles": {"decode": {"groups": 1}}})
    wait_for(lambda: cluster.ready("lifecycle") and cluster.get("lifecycle")["status"]["ready"] == "1/1", 120, "1/1")

    cluster.delete("lifecycle")
    wait_for(lambda: not any(cluster.children("lifecycle").values()), 120, "garbage collection of every child")


def test_a_missing_prerequisite_api_is_a_condition_and_the_operator_keeps_running(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    # The local cluster has no Prometheus Operator: PodMonitor is a real missing API here.
    fleet = gb200_fleet(racks=1)
    operator = start_operator()
    cluster.create(serving("monitored", fleet, groups=1, monitoring={"podMonitor": True}))

    wait_for(lambda: cluster.condition("monitored", "Ready"), 60, "a Ready condition")
    ready = cluster.condition("monitored", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "MissingPrerequisite")
    assert "podmonitors.monitoring.coreos.com" in ready["message"]
    assert cluster.children("monitored")["LeaderWorkerSet"] == []
    time.sleep(5)
    assert operator.running()

    cluster.patch_spec("monitored", {"monitoring": {"podMonitor": False}})
    wait_for(lambda: cluster.ready("monitored"), 120, "Ready once the serving no longer asks for a PodMonitor")


def test_the_admission_webhook_refuses_an_invalid_serving_with_the_field_path(
    cluster: Cluster, gb200_fleet: Callable[..., Any], start_operator: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=1)
    bad = serving("typo", fleet, groups=1, extraArgs=["--no-such-flag"])
    operator = start_operator(webhook=True)

    with pytest.raises(ApiException) as refused:
        cluster.create(copy.deepcopy(bad))
    assert refused.value.status == 422
    assert "spec.extraArgs[0]: vLLM 0.33.0 has no flag --no-such-flag" in refused.value.body

    # failurePolicy Ignore: with the operator (and its webhook) gone, CEL still guards the shape and the
    # object is admitted; the operator then reports the rest as a condition and touches nothing.
    operator.stop()
    cluster.create(copy.deepcopy(bad))
    start_operator(webhook=True)
    wait_for(lambda: cluster.condition("typo", "Ready"), 60, "a Ready condition")
    ready = cluster.condition("typo", "Ready")
    assert (ready["reason"], "spec.extraArgs[0]" in ready["message"]) == ("InvalidSpec", True)
    assert cluster.children("typo")["LeaderWorkerSet"] == []
    cluster.patch_spec("typo", {"extraArgs": []})  # an update that fixes it is admitted
    wait_for(lambda: cluster.ready("typo"), 120, "Ready once fixed")


# ---------------------------------------------------------------------------------------------------------------
# Telemetry in the status


def test_the_status_carries_measured_tokens_per_second_and_revenue_per_gpu_hour(
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    tmp_path: pathlib.Path,
) -> None:
    fleet = gb200_fleet(racks=1)
    # A scrape every 5 s: long enough that timing jitter on a busy machine is small.
    start_operator(extra=["--scrape-seconds", "5", "--status-metrics-seconds", "2"])
    pricing = {"inputCacheHitPerMillion": 0.003, "inputCacheMissPerMillion": 0.15, "outputPerMillion": 0.60}
    cluster.create(serving("earning", fleet, groups=1, nodes=2, pricing=pricing))
    wait_for(lambda: cluster.ready("earning"), 120, "the serving to report Ready")

    # vLLM's own /metrics at the leader's pod IP (the fleet's pod IPs are loopback addresses).
    leader = next(p for p in cluster.pods("earning") if p.metadata.labels[LEADER_LABEL] == "0")
    port = next(p.container_port for c in leader.spec.containers for p in c.ports or [] if p.name == "http")
    prompt, cached, generation = 40_000.0, 30_000.0, 5_000.0
    simulator = subprocess.Popen(
        [sys.executable, "-m", "nvlfleet.cli", "simulate", "--listen", f"{leader.status.pod_ip}:{port}",
         "--engines", "4", "--prompt", str(prompt), "--cached", str(cached), "--generation", str(generation),
         "--speculative-tokens", "0"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "simulate.log").open("wb"),
    )  # fmt: skip
    try:
        first = wait_for(
            lambda: (s := cluster.get("earning")["status"]).get("revenuePerGpuHour") is not None and s,
            90,
            "tokens/s and revenue in the status",
        )
        # Rate-limited, and rewritten as new scrapes arrive: a later figure has another measurement time.
        status = wait_for(
            lambda: (s := cluster.get("earning")["status"])["metricsTime"] != first["metricsTime"] and s,
            60,
            "a newer measurement in the status",
        )
    finally:
        os.kill(simulator.pid, signal.SIGTERM)
        simulator.wait(timeout=10)

    gpus = status["gpus"]
    revenue_per_hour = (cached * 0.003 + (prompt - cached) * 0.15 + generation * 0.60) / 1e6 * 3600
    # Rates come from two scrapes 5 s apart on a shared 2-core machine; telemetry's own tests hold them to 1%.
    assert status["tokensPerSecond"] == pytest.approx(prompt + generation, rel=0.05)
    assert status["tokensPerSecondPerGpu"] == pytest.approx(status["tokensPerSecond"] / gpus, rel=0.001)
    assert status["revenuePerHour"] == pytest.approx(revenue_per_hour, rel=0.05)
    assert status["revenuePerGpuHour"] == pytest.approx(status["revenuePerHour"] / gpus, rel=0.001)
    assert status["currency"] == "USD" and status["metricsTime"]
