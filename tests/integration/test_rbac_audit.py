"""The chart's RBAC is minimal, proven from the API server's audit log: every permission the chart grants is used
by the operator, and none of its requests is refused.

The chart is installed with `operator.watchNamespaces` set to one namespace (its least-privileged shape), and the
operator runs as a process on this machine with only a token of the chart's ServiceAccount
(tests/support/chartrelease.py), exactly the Deployment's arguments. It carries one DeepSeekServing through its
life: created and Ready (children applied, the router with its ServiceAccount, Role and RoleBinding, events and
status written, the leader Lease taken), fields another manager patched into its children removed (the updates),
scaled out to a second rack and back (a LeaderWorkerSet and a ComputeDomain pruned), its router switched off (the
router's objects pruned), deleted. Then the local API server's audit log (cluster/localcluster, Metadata level)
is read for that ServiceAccount's user.

The few permissions no request on this cluster can use are listed in UNUSED_ON_THIS_CLUSTER with the reason (the
same reasons are in charts/nvlfleet/templates/rbac.yaml), and the one used only when a handler is retried in
USED_ONLY_ON_RETRY; the test fails if any other grant goes unused, so a grant the operator stops needing is
noticed and removed, and if a grant listed as unusable is used.

    cd <worktree> && export NVLFLEET_CLUSTER_DIR=... KUBECONFIG=... PATH=... PYTHONPATH=$PWD/cluster:$PWD/tests
    .venv/bin/python -m pytest -q -m integration tests/integration/test_rbac_audit.py
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from localcluster import cluster

from support import auditlog, chartrelease, servings
from support.chartrelease import Release

pytestmark = pytest.mark.integration

UNUSED_ON_THIS_CLUSTER = {
    # RBAC's escalation check when the operator creates the router's Role is no request of its own: `get` on
    # pods is held only so that the Role (get, list, watch on pods) can be created without `escalate`.
    ("get", "/pods"): "held for the router's Role",
    # No Prometheus Operator runs on the local cluster, so no serving here can have a PodMonitor
    # (test_operator.py proves the missing API is reported instead).
    **{
        (verb, "monitoring.coreos.com/podmonitors"): "no PodMonitor API here"
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    },
    # KEDA's CRD is installed only by `python -m localcluster keda up`, which this test does not run.
    **{
        (verb, "keda.sh/scaledobjects"): "no ScaledObject API here"
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    },
}
# Used or not depending on timing, so neither required nor refused: kopf patches a serving only for a handler's
# progress annotations, written when a handler fails and is retried (adapters/main.py keeps its diff base in
# memory). On a loaded machine a status write can meet a 409 and be retried; on a quiet one no handler fails.
USED_ONLY_ON_RETRY = {
    ("patch", "nvlfleet.io/deepseekservings"): "kopf's progress annotations, on a retried handler only",
}
CLUSTER_SCOPED = {"/nodes", "/namespaces", "apiextensions.k8s.io/customresourcedefinitions"}
SELECTS_NOTHING = "it.nvlfleet.io/rbac-audit"  # a namespace label no namespace carries


@pytest.fixture
def audit_log() -> pathlib.Path:
    running, _health = cluster.status()
    assert running is not None, "no local cluster is recorded"
    path = running.layout.audit_log
    if not path.exists():
        pytest.skip(
            f"the local cluster's kube-apiserver writes no audit log ({path} is missing): it was started before "
            "cluster/localcluster configured one; `python -m localcluster up` restarts it with the audit log on"
        )
    return path


@pytest.fixture
def release(local_cluster: Any, api_client: client.ApiClient, namespace: str) -> Iterator[Release]:
    """The chart installed in a namespace of its own, watching the test's `namespace` only."""
    core = client.CoreV1Api(api_client)
    suffix = chartrelease.suffix()
    rel = chartrelease.release_for(local_cluster, f"aud{suffix}", f"it-audit-{suffix}")
    chartrelease.create_namespace(core, rel.namespace)
    values = {
        "operator": {"watchNamespaces": [namespace]},
        # Nothing answers the chart's webhook (its pod never runs on kwok's nodes): it checks no namespace here.
        "webhook": {"namespaceSelector": {"matchLabels": {SELECTS_NOTHING: rel.name}}},
    }
    try:
        with chartrelease.installed(rel, values):
            yield rel
    finally:
        chartrelease.delete_namespace(core, rel.namespace)


def granted(api_client: client.ApiClient, release: Release) -> set[tuple[str, str]]:
    """Every (verb, apiGroup/resource) the release's ClusterRoles and Roles grant, as installed."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    selector = f"app.kubernetes.io/instance={release.name}"
    roles = [*rbac.list_cluster_role(label_selector=selector).items]
    roles += rbac.list_role_for_all_namespaces(label_selector=selector).items
    return {
        (verb, f"{group}/{resource}")
        for role in roles
        for rule in role.rules or []
        for group in rule.api_groups or []
        for resource in rule.resources or []
        for verb in rule.verbs
    }


def _patch_as_another_manager(release: Release, kind: str, namespace: str, name: str, patch: list[Any]) -> None:
    done = release.kubectl_run(
        "patch", kind, name, "-n", namespace, "--type=json", "--field-manager=intruder", "-p", json.dumps(patch)
    )
    assert done.returncode == 0, done.stderr


def test_every_permission_the_chart_grants_is_used_and_none_is_refused(
    audit_log: pathlib.Path,  # first: a cluster without one skips before anything is installed
    release: Release,
    api_client: client.ApiClient,
    namespace: str,
    gb200_fleet: Callable[..., Any],
    wait_for: Callable[..., Any],
    tmp_path: pathlib.Path,
) -> None:
    racks = gb200_fleet(racks=2)
    since = auditlog.mark(audit_log)  # the release's name is new, but the log before is long: read only from here
    kubeconfig = chartrelease.service_account_kubeconfig(release, tmp_path)
    operator = chartrelease.OperatorProcess(release, kubeconfig, tmp_path)
    life = servings.Cluster(api_client, namespace)

    def used() -> set[tuple[str, str]]:
        return auditlog.used(auditlog.requests(audit_log, release.username, since))

    def until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        try:
            return wait_for(predicate, timeout, what, interval=1.0)
        except pytest.fail.Exception:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; operator log:\n{operator.log()}")

    try:
        # 10 trays a group: a second group cannot share the first one's rack.
        life.create(servings.serving("life", racks, groups=1, nodes=10))
        until(lambda: life.ready("life"), 240, "Ready")
        children = life.children("life")
        (lws,) = children["LeaderWorkerSet"]
        (router,) = children["Deployment"]
        decode = next(s for s in children["Service"] if s["metadata"]["name"] == "life-decode")

        # Fields another manager set on a child are removed by an update (PUT), on each kind that has a mutable
        # spec (a ComputeDomain's spec is immutable, so nvlfleet never updates one).
        volume = {"name": "host-root", "hostPath": {"path": "/"}}
        tampering = [
            (
                "lws",
                lws,
                [{"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/spec/volumes/-", "value": volume}],
            ),
            ("service", decode, [{"op": "add", "path": "/spec/sessionAffinity", "value": "ClientIP"}]),
            ("deployment", router, [{"op": "add", "path": "/spec/minReadySeconds", "value": 3}]),
        ]
        for kind, obj, patch in tampering:
            _patch_as_another_manager(release, kind, namespace, obj["metadata"]["name"], patch)
        updates = {
            ("update", r) for r in ("leaderworkerset.x-k8s.io/leaderworkersets", "/services", "apps/deployments")
        }
        until(lambda: updates <= used(), 90, "the other manager's fields removed by updates")

        life.patch_spec("life", {"roles": {"decode": {"groups": 2}}})
        until(lambda: len(life.children("life")["LeaderWorkerSet"]) == 2, 120, "a second LeaderWorkerSet")
        life.patch_spec("life", {"roles": {"decode": {"groups": 1}}})
        until(lambda: len(life.children("life")["ComputeDomain"]) == 1, 120, "the second rack's children pruned")
        life.patch_spec("life", {"router": {"enabled": False}})
        until(lambda: not life.children("life")["Deployment"], 60, "the router pruned")
        life.delete("life")
        until(lambda: not life.list(), 60, "the serving gone")
        time.sleep(2)  # the operator handles the deletion with its own credentials
    finally:
        operator.stop()  # releases the Lease: an update

    made = auditlog.requests(audit_log, release.username, since)
    assert made, f"no request of {release.username} in {audit_log}"
    refused = [f"{r.verb} {r.resource} in {r.namespace or 'the cluster'}: {r.uri}" for r in auditlog.refused(made)]
    assert refused == [], "refused:\n" + "\n".join(refused)
    # Nothing namespaced is read or written cluster-wide: the operator stays inside the watched namespace (and its
    # own, for the Lease).
    inside = (namespace, release.namespace)
    outside = {
        (r.verb, r.resource, r.namespace)
        for r in made
        if r.resource and r.resource not in CLUSTER_SCOPED and r.namespace not in inside
    }
    assert outside == set()
    unused = granted(api_client, release) - auditlog.used(made)
    never_used = unused - set(UNUSED_ON_THIS_CLUSTER) - set(USED_ONLY_ON_RETRY)
    assert never_used == set(), "grants never used: " + ", ".join(f"{v} {r}" for v, r in sorted(never_used))
    # A grant listed as unusable here that was used means the list (and the chart's comments) are out of date.
    assert set(UNUSED_ON_THIS_CLUSTER) <= unused, "listed as unusable here, but used: " + ", ".join(
        f"{v} {r}" for v, r in sorted(set(UNUSED_ON_THIS_CLUSTER) - unused)
    )
