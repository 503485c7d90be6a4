"""The generated CRD on a real kube-apiserver: accepted, enforcing its schema and CEL rules with nvlfleet's words.

- crds/nvlfleet.io_deepseekservings.yaml applies with server-side apply and becomes Established (the API server
  estimates the CEL cost of every rule; an unbounded rule refuses the whole CRD).
- Every example is accepted, and what the API server stores (after its defaults) gives the tuning profile the
  same choices as the file (fields the profile decides are not defaulted server-side).
- Invalid objects are refused at the field, with the CEL message, and ``nvlfleet.core.validation`` refuses the same
  objects at the same field: offline validation and admission agree.
- ``kubectl explain`` reads the descriptions; the scale subresource scales decode groups.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import time
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from nvlfleet.api import models, names
from nvlfleet.core import profiles, validation
from support.examples import needed_policy

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "nvlfleet.io_deepseekservings.yaml"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
GROUP, VERSION, PLURAL = names.GROUP, names.VERSION, names.PLURAL


def kubectl(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def crd_applied(local_cluster: Any) -> None:
    applied = kubectl(
        local_cluster, "apply", "--server-side", "--force-conflicts", "--field-manager=nvlfleet", "-f", str(CRD_FILE)
    )
    assert applied.returncode == 0, applied.stderr
    ext = client.ApiextensionsV1Api(local_cluster.api_client)

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}").status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    deadline = time.monotonic() + 60
    while not established():
        assert time.monotonic() < deadline, "the DeepSeekServing CRD did not become Established within 60 s"
        time.sleep(0.2)


def create(api_client: client.ApiClient, namespace: str, obj: dict[str, Any], *, dry_run: bool = True) -> Any:
    body = copy.deepcopy(obj)
    body["metadata"]["namespace"] = namespace
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body, dry_run="All" if dry_run else None, field_validation="Strict"
    )


def refusal(api_client: client.ApiClient, namespace: str, obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) of every cause the API server gives for refusing ``obj``; [] when it accepts it."""
    try:
        create(api_client, namespace, obj)
    except ApiException as error:
        assert error.status in (400, 422), error.body
        details = json.loads(error.body)
        causes = details.get("details", {}).get("causes") or [{"field": "", "message": details["message"]}]
        return [(c.get("field", ""), c["message"]) for c in causes]
    return []


def serving(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": "probe"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": {"decode": {"parallelism": {"tensor": 1, "data": 8}}},
        },
    }
    base["spec"].update(spec)
    return base


def decode(**parallelism: Any) -> dict[str, Any]:
    return {"decode": {"parallelism": parallelism}}


SCALING = {"minGroups": 1, "maxGroups": 4, "signal": "waitingRequests", "target": 8}
PRICES = {"inputCacheHitPerMillion": 0.003, "inputCacheMissPerMillion": 0.15, "outputPerMillion": 0.6}

# (case, object, field the API server names, fragment of its message)
REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "tensor 8 on GB200",
        serving(roles=decode(tensor=8)),
        "spec.roles.decode.parallelism.tensor",
        "decode: tensor-parallel size must not exceed the 4 GPUs of one GB200 node",
    ),
    (
        "tensor 3 on GB200",
        serving(roles=decode(tensor=3)),
        "spec.roles.decode.parallelism.tensor",
        "decode: tensor-parallel size must divide the 4 GPUs of one GB200 node",
    ),
    (
        "half a node",
        serving(roles=decode(tensor=1, data=6)),
        "spec.roles.decode.parallelism.data",
        "decode: tensor × data must fill whole nodes of 4 GPUs (one vLLM pod per GB200 node)",
    ),
    (
        "data against nodes",
        serving(roles=decode(data=4, nodesPerGroup=2)),
        "spec.roles.decode.parallelism.data",
        "decode: tensor × data must equal nodesPerGroup × 4 GPUs of one GB200 node",
    ),
    (
        "group over a rack",
        serving(roles=decode(nodesPerGroup=19)),
        "spec.roles.decode.parallelism.nodesPerGroup",
        "decode: a group must fit in one GB200 NVLink domain of 18 nodes (72 GPUs)",
    ),
    (
        "two H200 nodes",
        serving(gpu="H200", roles=decode(tensor=8, data=2)),
        "spec.roles.decode.parallelism.data",
        "decode: a group must fit in one H200 NVLink domain of 1 node",
    ),
    (
        "prefill over a rack",
        serving(roles={**decode(data=8), "prefill": {"parallelism": {"data": 80}}}),
        "spec.roles.prefill.parallelism.data",
        "prefill: a group must fit in one GB200 NVLink domain",
    ),
    (
        "empty price window",
        serving(pricing={**PRICES, "schedule": [{"name": "x", "start": "01:00", "end": "01:00", "multiplier": 2}]}),
        "spec.pricing.schedule[0]",
        "a price window must not be empty (start == end)",
    ),
    (
        "inverted graph window",
        serving(kernels={"cudaGraph": {"minBatch": 300}}),
        "spec.kernels.cudaGraph",
        "minBatch must not exceed maxBatch",
    ),
    (
        "value and valueFrom",
        serving(
            extraEnv=[{"name": "HF_TOKEN", "value": "x", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
        ),
        "spec.extraEnv[0]",
        "set exactly one of value and valueFrom",
    ),
    (
        "batched tokens below seqs",
        serving(roles={"decode": {"maxNumSeqs": 64, "maxNumBatchedTokens": 32}}),
        "spec.roles.decode",
        "maxNumBatchedTokens must be at least maxNumSeqs",
    ),
    (
        "pvc without claim",
        serving(model={"name": "deepseek-ai/DeepSeek-V4.1-Flash", "weights": {"cache": "pvc"}}),
        "spec.model.weights",
        "cache 'pvc' needs weights.pvc.claimName",
    ),
    ("unknown GPU", serving(gpu="GB100"), "spec.gpu", 'Unsupported value: "GB100"'),
    (
        "tensor as text",
        serving(roles=decode(tensor="4")),
        "spec.roles.decode.parallelism.tensor",
        "must be of type integer",
    ),
    (
        "unquoted time",
        serving(pricing={**PRICES, "schedule": [{"name": "x", "start": 60, "end": "02:00", "multiplier": 2}]}),
        "spec.pricing.schedule[0].start",
        "must be of type string",
    ),
    ("misspelt field", serving(kernels={"all2AllBackend": "pplx"}), "", 'unknown field "spec.kernels.all2AllBackend"'),
    (
        "autoscaling min above max",
        serving(autoscaling=SCALING | {"minGroups": 5, "maxGroups": 4}),
        "spec.autoscaling",
        "minGroups must not exceed maxGroups",
    ),
    (
        "autoscaling zero ratio",
        serving(autoscaling=SCALING | {"prefillPerDecode": 0}),
        "spec.autoscaling.prefillPerDecode",
        "should be greater than 0",
    ),
    (
        "autoscaling unknown signal",
        serving(autoscaling=SCALING | {"signal": "gpuUtilisation"}),
        "spec.autoscaling.signal",
        'Unsupported value: "gpuUtilisation"',
    ),
    (
        "autoscaling zero target",
        serving(autoscaling=SCALING | {"target": 0}),
        "spec.autoscaling.target",
        "should be greater than 0",
    ),
]


@pytest.mark.parametrize(("obj", "field", "fragment"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_the_api_server_refuses_at_the_field_and_validation_agrees(
    api_client: client.ApiClient, namespace: str, crd_applied: None, obj: dict[str, Any], field: str, fragment: str
) -> None:
    causes = refusal(api_client, namespace, obj)
    assert any(f == field and fragment in m for f, m in causes), causes
    offline = [p.path for p in validation.validate(obj)]
    assert any(p.startswith(field) or field.startswith(p) for p in offline), (field, offline)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_accepted_and_stored_as_the_profile_reads_them(
    api_client: client.ApiClient, namespace: str, crd_applied: None, example: pathlib.Path
) -> None:
    written = yaml.safe_load(example.read_text())
    stored = create(api_client, namespace, written)
    as_written = models.DeepSeekServing.model_validate(written).spec
    as_stored = models.DeepSeekServing.model_validate(stored).spec
    for role, _ in as_written.roles_present():
        assert profiles.effective(as_stored, role) == profiles.effective(as_written, role)
    assert validation.validate(stored, needed_policy(example)) == []


def test_kubectl_explain_reads_the_descriptions(local_cluster: Any, crd_applied: None) -> None:
    explained = kubectl(local_cluster, "explain", "deepseekservings.spec.roles.decode.parallelism.expert")
    assert explained.returncode == 0, explained.stderr
    assert "Unset: the tuning profile decides" in explained.stdout
    short = kubectl(local_cluster, "get", "dss", "-A")
    assert short.returncode == 0, short.stderr


def test_scale_subresource_scales_decode_groups(
    local_cluster: Any, api_client: client.ApiClient, namespace: str, crd_applied: None
) -> None:
    create(api_client, namespace, serving(), dry_run=False)
    scaled = kubectl(local_cluster, "scale", "-n", namespace, "dss/probe", "--replicas=3")
    assert scaled.returncode == 0, scaled.stderr
    stored = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "probe"
    )
    assert stored["spec"]["roles"]["decode"]["groups"] == 3
