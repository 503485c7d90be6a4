"""Security on the real cluster: vLLM pods without privilege, and the HF token only ever a Secret reference.

One serving in a namespace that *enforces* the baseline Pod Security Standard references a Secret whose token is
a unique marker. The operator runs with its admission webhook and at debug log level (kopf then logs whole
objects), so every path a value could leak through is exercised. Then:

- The pods LeaderWorkerSet created were admitted under baseline enforcement (a privileged pod is refused next to
  them, so the policy is live), and their security context is what render.py promises: not privileged, no
  privilege escalation, every capability dropped and none added, RuntimeDefault seccomp, no host namespaces or
  host paths. What the
  *restricted* standard would still refuse is asked of the API server itself (a server-side dry-run of
  ``enforce=restricted``) and must be exactly the documented deviations (docs/reliability.md).
- Every pod template of every example (``examples/*.yaml``, leaders and workers) is created as a pod by a
  server-side dry-run under enforced ``baseline`` and then ``restricted``: Pod Security refuses exactly what
  docs/security.md says (under baseline only a host-path weight cache; under restricted ``runAsNonRoot``, and the
  host path).
- A serving in a namespace that enforces ``restricted`` gets no pod (vLLM images run as root), and says so: its
  Degraded condition names the API server's refusal, read from the StatefulSet's FailedCreate Event.
- The marker is in none of: the operator's log, any Event in the namespace, the operator's /metrics, the
  serving (spec, status, annotations) or anything nvlfleet rendered (LeaderWorkerSets, ComputeDomains, Services)
  or the pods; the pods get it as ``valueFrom.secretKeyRef``.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from nvlfleet.core import render
from support import figures, golden_cases, servings

pytestmark = pytest.mark.integration

Wait = Callable[..., Any]
SECRET = "hf-credentials"
# What the restricted standard asks that vLLM images cannot give (they run as root; see render.py's "Least
# privilege"): the API server's wording, one entry per unmet requirement.
RESTRICTED_DEVIATIONS = {"runAsNonRoot != true"}
# What Pod Security refuses in a pod that mounts a host path (a weight cache the admin's policy allows there).
HOST_PATH_DEVIATIONS = {"baseline": {"hostPath volumes"}, "restricted": {"restricted volume types"}}


def _violations(line: str) -> list[str]:
    """The unmet requirements in one of kubectl's PodSecurity warning lines, without their details:
    ``Warning: <pod> (and 1 other pod): allowPrivilegeEscalation != false (container "c" must ...), ...``."""
    found = re.match(r"^Warning: [^ :]+(?: \(and \d+ other pods?\))?: (.*)$", line)
    if not found or "violate the new PodSecurity" in line:
        return []
    items, depth, current = [], 0, ""
    for char in found.group(1):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.split(" (", 1)[0].strip() for item in items]


def _refusal(message: str) -> set[str]:
    """The unmet requirements in the API server's refusal of one pod, without their details:
    ``pods "p" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "v"), ...``."""
    found = re.search(r'violates PodSecurity "[^"]+": (.*)$', message)
    assert found, message
    return set(_violations(f"Warning: pod: {found.group(1)}"))


def _probe(level: str) -> client.V1Pod:
    """A pod the given Pod Security level refuses: privileged for baseline; for restricted a plain pod (it would
    run as root with its capabilities and no seccomp profile), which baseline admits."""
    context = client.V1SecurityContext(privileged=True) if level == "baseline" else None
    container = client.V1Container(name="c", image="busybox", security_context=context)
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"probe-{level}"), spec=client.V1PodSpec(containers=[container])
    )


def _enforce(core: client.CoreV1Api, namespace: str, level: str, wait_for: Wait) -> None:
    """Label the namespace to enforce `level` and wait until admission does: Pod Security reads namespace labels
    from an informer, so a pod created right after the patch can still be judged by the old level (a CI run saw
    the first pod after switching to restricted admitted)."""
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}})

    def refused() -> bool:
        try:
            core.create_namespaced_pod(namespace, _probe(level), dry_run="All")
        except ApiException as err:
            return err.status == 403 and f'violates PodSecurity "{level}:' in json.loads(err.body)["message"]
        return False

    wait_for(refused, 30, f"Pod Security to enforce {level} in {namespace}")


def _example_pods() -> dict[str, dict[str, Any]]:
    """Every pod template of every example's LeaderWorkerSets (leaders and workers) as a pod, by a unique name."""
    pods = {}
    for _, (serving, placement) in golden_cases.example_cases():
        for lws in render.render(serving, placement):
            if lws["kind"] != "LeaderWorkerSet":
                continue
            for key, template in lws["spec"]["leaderWorkerTemplate"].items():
                if key.endswith("Template"):
                    name = f"{lws['metadata']['name']}-{key.removesuffix('Template')}"
                    metadata = {**template["metadata"], "name": name}
                    pods[name] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    return pods


def _unmet(core: client.CoreV1Api, namespace: str, pods: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """What Pod Security refuses in each pod, asked of the API server by a dry-run create (empty: admitted)."""
    unmet = {}
    for name, pod in pods.items():
        try:
            core.create_namespaced_pod(namespace, pod, dry_run="All")
            unmet[name] = set()
        except ApiException as err:
            assert err.status == 403, err.body
            unmet[name] = _refusal(json.loads(err.body)["message"])
    return unmet


def test_every_examples_pods_pass_baseline_and_restricted_refuses_only_running_as_root(
    namespace: str, api_client: client.ApiClient, wait_for: Wait
) -> None:
    core = client.CoreV1Api(api_client)
    pods = _example_pods()
    host_path = {n for n, p in pods.items() if any("hostPath" in v for v in p["spec"]["volumes"])}
    assert len(pods) > len(host_path) > 0  # examples/gb300-throughput.yaml caches its weights on a host path

    found = {}
    for level in ("baseline", "restricted"):
        _enforce(core, namespace, level, wait_for)
        found[level] = _unmet(core, namespace, pods)

    assert found["baseline"] == {n: HOST_PATH_DEVIATIONS["baseline"] if n in host_path else set() for n in pods}
    assert found["restricted"] == {
        n: RESTRICTED_DEVIATIONS | (HOST_PATH_DEVIATIONS["restricted"] if n in host_path else set()) for n in pods
    }
    figures.record(
        "security_examples",
        {
            "example_pod_templates": len(pods),
            "admitted_under_baseline": sum(not u for u in found["baseline"].values()),
            "refused_under_baseline_for_a_host_path": len(host_path),
            "restricted_requirements_unmet": sorted(set().union(*found["restricted"].values())),
        },
    )


def test_pods_refused_under_restricted_degrade_the_serving_with_the_api_servers_reason(
    cluster: servings.Cluster,
    namespace: str,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    _enforce(core, namespace, "restricted", wait_for)
    fleet = gb200_fleet(racks=1)
    start_operator()
    cluster.create(servings.serving("refused", fleet, groups=1, nodes=2))

    degraded = wait_for(
        lambda: cluster.is_("refused", "Degraded") and cluster.condition("refused", "Degraded"),
        120,
        "the serving to say its pods are refused",
    )

    assert "the API server refuses its pods" in degraded["message"], degraded
    assert 'violates PodSecurity "restricted:latest": runAsNonRoot != true' in degraded["message"], degraded
    assert cluster.pods("refused") == []
    assert cluster.condition("refused", "Ready")["reason"] == "Degraded"


def _plain(obj: Any) -> Any:
    return client.ApiClient().sanitize_for_serialization(obj)


def test_vllm_pods_run_unprivileged_and_the_hf_token_is_never_seen_by_nvlfleet(
    cluster: servings.Cluster,
    namespace: str,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api_client)
    _enforce(core, namespace, "baseline", wait_for)
    marker = f"nvlfleet-marker-{uuid.uuid4().hex}"
    core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=SECRET), string_data={"token": marker})
    )
    fleet = gb200_fleet(racks=1)
    operator = start_operator(webhook=True, extra=["--log-level", "debug"])
    cluster.create(
        servings.serving(
            "guarded",
            fleet,
            groups=1,
            nodes=2,
            model={
                "name": "deepseek-ai/DeepSeek-V4.1-Flash",
                "servedName": "deepseek-v4.1-flash",
                "hfTokenSecretRef": {"name": SECRET, "key": "token"},
            },
        )
    )
    wait_for(lambda: cluster.ready("guarded"), 180, "the serving to be Ready under baseline enforcement")

    # Baseline enforcement is live: a privileged pod is refused in the same namespace.
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
        core.create_namespaced_pod(namespace, privileged, dry_run="All")
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body

    pods = cluster.pods("guarded")
    assert len(pods) == 2  # a leader and a worker, both admitted
    for pod in pods:
        spec = pod.spec
        assert not (spec.host_network or spec.host_pid or spec.host_ipc)
        assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
        assert not [v.name for v in spec.volumes if v.host_path is not None]
        for container in spec.containers + (spec.init_containers or []):
            context = container.security_context
            assert (context.privileged, context.allow_privilege_escalation) == (False, False)
            assert (context.capabilities.drop, context.capabilities.add) == (["ALL"], None)
            env = {e.name: e for e in container.env}
            assert env["HF_TOKEN"].value is None
            assert (env["HF_TOKEN"].value_from.secret_key_ref.name, env["HF_TOKEN"].value_from.secret_key_ref.key) == (
                SECRET,
                "token",
            )

    # What restricted would still refuse, in the API server's own words.
    dry_run = subprocess.run(
        [
            "kubectl",
            "label",
            "--dry-run=server",
            "--overwrite",
            "namespace",
            namespace,
            "pod-security.kubernetes.io/enforce=restricted",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    unmet = {requirement for line in dry_run.stderr.splitlines() for requirement in _violations(line)}
    assert unmet == RESTRICTED_DEVIATIONS, dry_run.stderr

    # The marker is nowhere nvlfleet writes or says anything.
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    events = core.list_namespaced_event(namespace).items
    written = {
        "operator log": operator.log.read_text(errors="replace"),
        "metrics": metrics,
        "events": json.dumps(_plain(events)),
        "serving": json.dumps(cluster.get("guarded")),
        "children": json.dumps(_plain(cluster.children("guarded"))),
        "pods": json.dumps(_plain(pods)),
    }
    assert "guarded" in written["operator log"] and "nvlfleet_" in metrics and events  # each source is real
    assert [where for where, text in written.items() if marker in text] == []

    figures.record(
        "security",
        {
            "pods_admitted_under_enforced_baseline": len(pods),
            "restricted_requirements_unmet": sorted(unmet),
            "operator_log_level": "debug",
            "places_searched_for_the_token": sorted(written),
            "characters_searched": sum(len(text) for text in written.values()),
            "token_found_in": [],
        },
    )
