"""The Helm chart installed into the local real cluster, and its RBAC proven sufficient and minimal.

- `helm install` into a namespace that enforces the *restricted* Pod Security Standard: the API server admits
  the operator's pod (and, to show the check is live, refuses a privileged one next to it).
- `helm upgrade` keeps the webhook's CA (Helm's `lookup`), so the API server's trust survives upgrades.
- The webhook's default `failurePolicy: Fail` holds: while no operator answers, the API server refuses a
  DeepSeekServing created (or its spec changed) in a namespace the webhook selects instead of admitting it
  unchecked, and still admits a metadata-only update (the chart's matchConditions), so a finalizer or label can be
  fixed by hand while the operator is down.
- Sufficient: the operator runs as a process on this machine with *only* the chart's ServiceAccount credentials (a
  token from the TokenRequest API in a kubeconfig of its own) and carries a DeepSeekServing through a full
  reconcile — children applied, a child pruned, status and events written, the leader Lease taken — with no
  request refused.
- Minimal: with the same token, `kubectl auth can-i` is refused everything the operator never does (Secrets,
  writes to nodes, pods or RBAC, wildcards, writes outside the watched namespace, other Leases).

The chart is installed in its least-privileged shape: `operator.watchNamespaces` lists the one namespace the
test's servings live in, so everything namespaced (reads included) is granted by a Role there only. That every
grant is also *used* is proven from the API server's audit log by tests/integration/test_rbac_audit.py.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from support import chartrelease
from support.chartrelease import Release

pytestmark = pytest.mark.integration

CHART = chartrelease.CHART
DSS = ("nvlfleet.io", "v1alpha1", "deepseekservings")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
COMPUTE_DOMAIN = ("resource.nvidia.com", "v1beta1", "computedomains")
GUARDED_LABEL = "it.nvlfleet.io/chart-webhook"  # a namespace labelled with the release name is checked


@dataclasses.dataclass(frozen=True)
class ChartRelease(Release):
    watched: str  # the one namespace whose servings the operator reconciles
    unwatched: str  # a namespace with a serving that is none of this operator's business
    guarded: str  # the one namespace the chart's webhook checks (once it carries GUARDED_LABEL)


@pytest.fixture(scope="module")
def release(local_cluster: Any, api_client: client.ApiClient) -> Iterator[ChartRelease]:
    core = client.CoreV1Api(api_client)
    suffix = chartrelease.suffix()
    rel = ChartRelease(
        **dataclasses.asdict(chartrelease.release_for(local_cluster, f"nvl{suffix}", f"it-chart-{suffix}")),
        watched=f"it-chart-servings-{suffix}",
        unwatched=f"it-chart-others-{suffix}",
        guarded=f"it-chart-guarded-{suffix}",
    )
    restricted = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    chartrelease.create_namespace(core, rel.namespace, restricted)
    for namespace in (rel.watched, rel.unwatched, rel.guarded):
        chartrelease.create_namespace(core, namespace)
    values = {
        "operator": {"watchNamespaces": [rel.watched]},
        # The cluster is shared with other tests: only a namespace of this test goes through this webhook. Nothing
        # answers for it (the cluster's nodes are kwok's, which run no container, so the chart's operator pod never
        # starts), so with the default failurePolicy Fail every write there is refused; the servings the operator
        # reconciles below live in `watched`, which the webhook does not select.
        "webhook": {"namespaceSelector": {"matchLabels": {GUARDED_LABEL: rel.name}}},
    }
    try:
        with chartrelease.installed(rel, values):
            yield rel
    finally:
        for namespace in (rel.watched, rel.unwatched, rel.guarded, rel.namespace):
            chartrelease.delete_namespace(core, namespace)


@pytest.fixture(scope="module")
def service_account_kubeconfig(release: ChartRelease, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return chartrelease.service_account_kubeconfig(release, tmp_path_factory.mktemp("sa"))


# ---------------------------------------------------------------------------------------------------------------
# Install and upgrade


def test_the_restricted_namespace_admits_the_operators_pod_and_refuses_a_privileged_one(
    release: ChartRelease, api_client: client.ApiClient, wait_for: Callable[..., Any]
) -> None:
    core = client.CoreV1Api(api_client)
    selector = f"app.kubernetes.io/instance={release.name}"
    pods = wait_for(
        lambda: core.list_namespaced_pod(release.namespace, label_selector=selector).items, 60, "the operator's pod"
    )
    assert pods[0].spec.security_context.run_as_user == 65532
    privileged = client.V1Pod(
        metadata=client.V1ObjectMeta(name="privileged"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c", image="busybox", security_context=client.V1SecurityContext(privileged=True)
                )
            ]
        ),
    )
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(release.namespace, privileged)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in json.loads(refused.value.body)["message"]


def test_an_upgrade_keeps_the_webhook_ca_the_api_server_trusts(
    release: ChartRelease, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    secret_name = f"{release.fullname}-webhook-tls"
    before = core.read_namespaced_secret(secret_name, release.namespace).data
    upgraded = release.helm_run(
        "upgrade", release.name, str(CHART), "--namespace", release.namespace, "--reuse-values",
        "--set", "podAnnotations.upgraded=yes",
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    after = core.read_namespaced_secret(secret_name, release.namespace).data
    assert after == before
    (webhook,) = admission.read_validating_webhook_configuration(release.fullname).webhooks
    assert webhook.client_config.ca_bundle == before["ca.crt"]  # both base64, as on the wire


def _refused_by_the_unanswered_webhook(error: ApiException) -> bool:
    return 'failed calling webhook "validate.deepseekservings.nvlfleet.io"' in json.loads(error.body)["message"]


def test_while_no_operator_answers_spec_writes_are_refused_and_metadata_writes_admitted(
    release: ChartRelease, api_client: client.ApiClient, wait_for: Callable[..., Any]
) -> None:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    # Created before its namespace is selected (the webhook would refuse it), then the namespace joins the webhook.
    custom.create_namespaced_custom_object(
        *DSS[:2], release.guarded, DSS[2], chartrelease.serving(release.guarded, "existing", fleet_name="no-racks")
    )
    core.patch_namespace(release.guarded, {"metadata": {"labels": {GUARDED_LABEL: release.name}}})

    def create_is_refused(dry_run: str | None) -> ApiException | None:
        unchecked = chartrelease.serving(release.guarded, "unchecked", fleet_name="no-racks")
        try:
            custom.create_namespaced_custom_object(*DSS[:2], release.guarded, DSS[2], unchecked, dry_run=dry_run)
        except ApiException as error:
            return error
        return None

    # The API server matches namespaces from its informer cache: wait (with dry runs, which still call the
    # webhook and store nothing) until it sees the new label.
    wait_for(lambda: create_is_refused("All"), 30, "the API server to select the labelled namespace")
    created = create_is_refused(None)
    assert created is not None and _refused_by_the_unanswered_webhook(created)
    with pytest.raises(ApiException) as scaled:
        custom.patch_namespaced_custom_object(
            *DSS[:2], release.guarded, DSS[2], "existing", {"spec": {"roles": {"decode": {"groups": 2}}}}
        )
    assert _refused_by_the_unanswered_webhook(scaled.value)
    names = [
        o["metadata"]["name"] for o in custom.list_namespaced_custom_object(*DSS[:2], release.guarded, DSS[2])["items"]
    ]
    assert names == ["existing"]

    labelled = custom.patch_namespaced_custom_object(
        *DSS[:2], release.guarded, DSS[2], "existing", {"metadata": {"labels": {"fixed-by": "hand"}}}
    )
    assert labelled["metadata"]["labels"]["fixed-by"] == "hand"
    assert labelled["spec"]["roles"]["decode"]["groups"] == 1


# ---------------------------------------------------------------------------------------------------------------
# Minimal: what the ServiceAccount may not do


FORBIDDEN = [
    ("list", "secrets", "--all-namespaces"),
    ("get", "secrets", "--namespace={release}"),
    ("get", "configmaps", "--namespace={release}"),
    ("delete", "nodes", ""),
    ("patch", "nodes", ""),
    ("create", "pods", "--namespace={watched}"),
    ("create", "leaderworkersets.leaderworkerset.x-k8s.io", "--namespace=default"),
    ("delete", "pods", "--namespace={watched}"),
    ("create", "clusterrolebindings", ""),
    ("create", "rolebindings", "--namespace=default"),  # only where it reconciles (the routers' RoleBindings)
    ("patch", "validatingwebhookconfigurations", ""),
    ("create", "deepseekservings.nvlfleet.io", "--namespace={watched}"),
    ("delete", "deepseekservings.nvlfleet.io", "--namespace={watched}"),
    ("patch", "leaderworkersets.leaderworkerset.x-k8s.io", "--namespace=default"),
    ("delete", "services", "--namespace=default"),
    ("create", "events", "--namespace=default"),
    ("update", "leases.coordination.k8s.io/someone-else", "--namespace={release}"),
    ("get", "leases.coordination.k8s.io/someone-else", "--namespace={release}"),
    ("create", "customresourcedefinitions", ""),
    ("*", "*", "--all-namespaces"),
    # Nothing namespaced is read outside the watched namespace: not pods (their inline env), not servings.
    ("list", "pods", "--all-namespaces"),
    ("watch", "pods", "--namespace=default"),
    ("get", "pods", "--namespace=default"),
    ("list", "deepseekservings.nvlfleet.io", "--all-namespaces"),
    ("list", "leaderworkersets.leaderworkerset.x-k8s.io", "--namespace=default"),
    ("list", "services", "--all-namespaces"),
]
ALLOWED = [
    ("list", "deepseekservings.nvlfleet.io", "--namespace={watched}"),
    ("watch", "pods", "--namespace={watched}"),
    ("list", "namespaces", ""),
    ("patch", "deepseekservings.nvlfleet.io", "--namespace={watched}"),
    ("patch", "deepseekservings.nvlfleet.io/status", "--namespace={watched}"),
    ("patch", "leaderworkersets.leaderworkerset.x-k8s.io", "--namespace={watched}"),
    ("delete", "computedomains.resource.nvidia.com", "--namespace={watched}"),
    ("create", "events", "--namespace={watched}"),
    ("list", "events", "--namespace={watched}"),
    # Each serving's router gets a ServiceAccount with a Role to discover its engines (core/router.py).
    ("create", "roles", "--namespace={watched}"),
    ("create", "rolebindings", "--namespace={watched}"),
    ("create", "deployments.apps", "--namespace={watched}"),
    ("watch", "nodes", ""),
    ("update", "leases.coordination.k8s.io/{lease}", "--namespace={release}"),
]


def _can_i(release: ChartRelease, kubeconfig: pathlib.Path, verb: str, resource: str, scope: str) -> bool:
    scope = scope.format(release=release.namespace, watched=release.watched)
    resource = resource.format(lease=f"{release.fullname}-leader")
    args = ["auth", "can-i", verb, resource, *([scope] if scope else [])]
    answer = release.kubectl_run(*args, kubeconfig=kubeconfig)
    assert answer.stdout.strip() in ("yes", "no"), answer.stderr
    return answer.stdout.strip() == "yes"


@pytest.mark.parametrize(("verb", "resource", "scope"), FORBIDDEN, ids=[" ".join(f) for f in FORBIDDEN])
def test_the_service_account_is_refused(
    release: ChartRelease, service_account_kubeconfig: pathlib.Path, verb: str, resource: str, scope: str
) -> None:
    assert not _can_i(release, service_account_kubeconfig, verb, resource, scope)


@pytest.mark.parametrize(("verb", "resource", "scope"), ALLOWED, ids=[" ".join(a) for a in ALLOWED])
def test_the_service_account_is_allowed(
    release: ChartRelease, service_account_kubeconfig: pathlib.Path, verb: str, resource: str, scope: str
) -> None:
    # The other half of the check: the token is the chart's account, and its grants are in force.
    assert _can_i(release, service_account_kubeconfig, verb, resource, scope)


# ---------------------------------------------------------------------------------------------------------------
# Sufficient: a full reconcile with nothing but the chart's permissions


def _condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def test_the_operator_reconciles_with_only_the_charts_permissions(
    release: ChartRelease,
    service_account_kubeconfig: pathlib.Path,
    api_client: client.ApiClient,
    fleet_factory: Callable[..., Any],
    wait_for: Callable[..., Any],
    tmp_path: pathlib.Path,
) -> None:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    racks = fleet_factory(racks=1, gpu="GB200")
    others = chartrelease.serving(release.unwatched, "someone-elses", racks.name)
    custom.create_namespaced_custom_object(*DSS[:2], release.unwatched, DSS[2], others)
    operator = chartrelease.OperatorProcess(release, service_account_kubeconfig, tmp_path)

    def until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        try:
            return wait_for(predicate, timeout, what)
        except pytest.fail.Exception:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; operator log:\n{operator.log()}")

    try:
        flash = chartrelease.serving(release.watched, "flash", racks.name)
        custom.create_namespaced_custom_object(*DSS[:2], release.watched, DSS[2], flash)

        def read() -> dict[str, Any]:
            return custom.get_namespaced_custom_object(*DSS[:2], release.watched, DSS[2], "flash")

        def children(kind: tuple[str, str, str]) -> list[dict[str, Any]]:
            listed = custom.list_namespaced_custom_object(
                *kind[:2], release.watched, kind[2], label_selector="nvlfleet.io/serving=flash"
            )
            return list(listed["items"])

        until(lambda: _condition(read(), "Placed") == "True", 90, "Placed=True")
        (lws,) = until(lambda: children(LWS), 30, "the LeaderWorkerSet")
        assert until(lambda: children(COMPUTE_DOMAIN), 30, "the ComputeDomain")
        services = core.list_namespaced_service(release.watched, label_selector="nvlfleet.io/serving=flash").items
        assert [s.metadata.name for s in services]
        assert read()["status"].get("observedGeneration") == read()["metadata"]["generation"]

        # A changed spec: the LeaderWorkerSet is patched in place, the ComputeDomain no longer wanted is pruned.
        custom.patch_namespaced_custom_object(
            *DSS[:2], release.watched, DSS[2], "flash",
            {"spec": {"roles": {"decode": {"groups": 2}}, "placement": {"computeDomain": False}}},
        )  # fmt: skip
        until(lambda: not children(COMPUTE_DOMAIN), 60, "the ComputeDomain pruned")
        until(
            lambda: any(o["spec"]["replicas"] == 2 for o in children(LWS)) or len(children(LWS)) == 2,
            60,
            "two groups",
        )
        # The update is a decision the operator records as an Event (a first rollout is said by the status only).
        until(
            lambda: [
                e
                for e in core.list_namespaced_event(release.watched).items
                if e.involved_object.name == "flash" and e.source.component == "nvlfleet"
            ],
            60,
            "an Event of nvlfleet's on the serving",
        )

        # Leader election went through the chart's Role: the Lease exists and names this process.
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
            f"{release.fullname}-leader", release.namespace
        )
        assert lease.spec.holder_identity
        assert lws["metadata"]["ownerReferences"][0]["kind"] == "DeepSeekServing"
    finally:
        try:
            custom.delete_namespaced_custom_object(*DSS[:2], release.watched, DSS[2], "flash")
        except ApiException as error:
            if error.status != 404:
                raise
        time.sleep(2)  # let the operator handle the deletion with its own credentials
        operator.stop()
    # Every refusal says "forbidden" (nvlfleet's "403 Forbidden", kopf's APIForbiddenError, the API server's
    # message) or, for a watch, kopf's "not enough permissions". A bare "403" also matches timestamps (,403]).
    refused = [
        line
        for line in operator.log().splitlines()
        if "forbidden" in line.lower() or "not enough permissions" in line.lower()
    ]
    # Sufficient: nothing the operator does for the namespace it watches (or for itself) was refused.
    own = (release.watched, release.namespace)
    assert [line for line in refused if _namespace_of(line) in (*own, None)] == []
    # And it stays out of namespaces it was not given: their servings belong to someone else (another nvlfleet
    # instance, or nobody), and the chart rightly grants nothing there. The serving in `unwatched` guarantees
    # there is one to be tempted by. (Its annotations prove nothing: other operators share this cluster.)
    foreign = sorted({str(_namespace_of(line)) for line in refused if _namespace_of(line) not in (*own, None)})
    assert foreign == [], f"the operator tried to write to DeepSeekServings in namespaces it does not watch: {foreign}"


def _namespace_of(log_line: str) -> str | None:
    """The namespace a refused request was for, from the URL or the API server's message; None if cluster-wide."""
    match = re.search(r"/namespaces/([a-z0-9-]+)/", log_line) or re.search(r'in the namespace "([^"]+)"', log_line)
    return match[1] if match else None
