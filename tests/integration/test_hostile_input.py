"""Hostile DeepSeekServings on the real API server: one object must never stop the operator for everyone.

A serving nested 3,000 levels deep used to end kopf's watch stream (Python's ``json`` raises ``RecursionError``
near 1,000 levels) and so the process, on every restart while the object existed — in any namespace the
operator watches (every namespace, unless it runs with `--namespace`). The CRD now keeps no unknown fields
anywhere, so such an object cannot be stored through it; these tests loosen the CRD's schema for a moment to store
one anyway (as an older CRD, a hand-edited one or another operator could), and show the operator keeps reconciling
the others.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.operatorprocess import REPO

from support import servings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Wait = Callable[..., Any]
LEVELS = 3000


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=check)


def generated_crd() -> dict[str, Any]:
    text = subprocess.run(
        [sys.executable, "-m", "nvlfleet.cli", "crd"], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout
    crd: dict[str, Any] = yaml.safe_load(text)
    return crd


def apply_crd(crd: dict[str, Any]) -> None:
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=nvlfleet-tests",
        "-f",
        "-",
        stdin=json.dumps(crd),
    )
    kubectl("wait", "--for=condition=Established", "crd/deepseekservings.nvlfleet.io", "--timeout=60s")


@pytest.fixture
def loosened_crd(crd: None) -> Iterator[None]:
    """The CRD with ``spec.pod.volumes[]`` keeping unknown fields, as it did before; restored afterwards."""
    original = generated_crd()
    loose = copy.deepcopy(original)
    spec_schema = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["pod"]["properties"]["volumes"]["items"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    apply_crd(loose)
    try:
        yield
    finally:
        apply_crd(original)


def poisoned(name: str, fleet: Any) -> str:
    """A serving whose first volume nests ``LEVELS`` maps deep, as JSON text (Python's json cannot write it)."""
    body = servings.serving(name, fleet, groups=1, nodes=1)
    text = json.dumps(body)
    deep = '{"name":"deep","a":' + '{"a":' * LEVELS + "1" + "}" * LEVELS + "}"
    return text.replace('"pod": {', '"pod": {"volumes": [' + deep + "], ", 1)


def create_raw(text: str, namespace: str, tmp: pathlib.Path) -> subprocess.CompletedProcess[str]:
    path = tmp / "poisoned.json"
    path.write_text(text)
    return kubectl("create", "-n", namespace, "-f", str(path), check=False)


def ready_condition(name: str, namespace: str) -> dict[str, Any] | None:
    """Read with kubectl (Go decodes 10,000 levels; the test's own Python client would stop near 1,000)."""
    found = kubectl("get", "dss", name, "-n", namespace, "-o", "jsonpath={.status.conditions}", check=False).stdout
    conditions = json.loads(found) if found.strip() else []
    return next((c for c in conditions if c["type"] == "Ready"), None)


@pytest.fixture
def other_namespace(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"{namespace[:55]}-other"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def test_a_serving_nested_too_deep_neither_stops_the_operator_nor_stalls_the_others(
    gb200_fleet: Callable[..., Any],
    loosened_crd: None,
    start_operator: Callable[..., Any],
    cluster: servings.Cluster,
    namespace: str,
    other_namespace: str,
    tmp_path: pathlib.Path,
    wait_for: Wait,
) -> None:
    fleet = gb200_fleet(1)
    # Stored while no operator runs: one in a namespace it serves, one in a namespace it does not.
    for ns in (namespace, other_namespace):
        # The API server takes a moment to serve the loosened schema after the CRD update.
        wait_for(lambda ns=ns: create_raw(poisoned("deep", fleet), ns, tmp_path).returncode == 0, 60, f"stored in {ns}")

    operator = start_operator()
    cluster.create(servings.serving("healthy", fleet, groups=1, nodes=1))
    wait_for(lambda: cluster.ready("healthy"), 180, "the healthy serving Ready beside the poisoned ones")

    ready = wait_for(lambda: ready_condition("deep", namespace), 60, "a Ready condition on the deep serving")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.pod.volumes[0].a.a.a" in ready["message"]
    assert ready_condition("deep", other_namespace) is None  # not served here: neither handled nor annotated
    assert operator.running()
    assert operator.healthz() == 200
    assert "Traceback" not in operator.log.read_text(errors="replace")


def test_the_webhook_refuses_a_serving_nested_too_deep_with_the_field_path(
    gb200_fleet: Callable[..., Any],
    loosened_crd: None,
    start_operator: Callable[..., Any],
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    fleet = gb200_fleet(1)
    operator = start_operator(webhook=True)

    refused = create_raw(poisoned("deep", fleet), namespace, tmp_path)

    assert refused.returncode != 0
    assert 'admission webhook "validate-deepseekserving.nvlfleet.io" denied the request' in refused.stderr
    assert "spec.pod.volumes[0].a.a.a" in refused.stderr
    assert operator.running()


@pytest.mark.parametrize("name", ["x" * 64, "a.b"])
def test_a_name_that_cannot_name_the_children_is_refused_at_admission_with_the_reason(
    gb200_fleet: Callable[..., Any], cluster: servings.Cluster, name: str
) -> None:
    fleet = gb200_fleet(1)
    with pytest.raises(client.ApiException) as refused:
        cluster.create(servings.serving(name, fleet, groups=1, nodes=1))
    assert refused.value.status == 422
    assert "metadata.name must be a DNS-1035 label" in refused.value.body
