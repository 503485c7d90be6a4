"""The cluster admin's policy bounds what a serving may ask for; credentials never sit in a spec."""

from __future__ import annotations

from typing import Any

import pytest

from nvlfleet.api import policy
from nvlfleet.core import privileges
from support.servingbuilder import serving

TOKEN = "hf_" + "a1B2c3D4e5" * 4


DEFAULT = policy.Policy()


def refusals(allowed: policy.Policy = DEFAULT, **spec: Any) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in privileges.problems_of(serving(**spec).spec, allowed)]


def host_weights(path: str) -> dict[str, Any]:
    return {"model": {"weights": {"cache": "hostPath", "hostPath": {"path": path}}}}


def test_the_default_policy_allows_a_serving_that_asks_for_nothing_special() -> None:
    assert refusals() == []


def test_a_weights_host_path_is_refused_by_default_naming_the_setting_that_allows_it() -> None:
    ((where, message),) = refusals(**host_weights("/mnt/nvme/models"))
    assert where == "spec.model.weights.hostPath.path"
    assert "host path /mnt/nvme/models is not allowed" in message
    assert "--allow-weights-host-path (chart value policy.weightsHostPathPrefixes)" in message


def test_a_weights_host_path_under_an_allowed_prefix_is_allowed() -> None:
    allowed = policy.Policy(weights_host_path_prefixes=("/mnt/nvme",))
    assert refusals(allowed, **host_weights("/mnt/nvme/models")) == []


@pytest.mark.parametrize("path", ["/", "/mnt/nvme/../../etc", "/mnt/nvmeX", "/var/run/containerd/containerd.sock"])
def test_a_host_path_outside_the_allowed_prefixes_is_refused(path: str) -> None:
    allowed = policy.Policy(weights_host_path_prefixes=("/mnt/nvme",))
    assert [w for w, _ in refusals(allowed, **host_weights(path))] == ["spec.model.weights.hostPath.path"]


def test_a_host_path_volume_is_refused_by_default() -> None:
    pod = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    assert [w for w, _ in refusals(pod=pod)] == ["spec.pod.volumes[0].hostPath.path"]


def test_a_service_account_must_be_one_the_admin_lists() -> None:
    pod = {"serviceAccountName": "admin-sa"}
    assert [w for w, _ in refusals(pod=pod)] == ["spec.pod.serviceAccountName"]
    assert refusals(policy.Policy(service_accounts=("admin-sa",)), pod=pod) == []


def test_a_priority_class_must_be_one_the_admin_lists() -> None:
    pod = {"priorityClassName": "system-node-critical"}
    ((where, message),) = refusals(pod=pod)
    assert where == "spec.pod.priorityClassName" and "PriorityClass system-node-critical" in message
    assert (
        refusals(policy.Policy(priority_classes=("inference-high",)), pod={"priorityClassName": "inference-high"}) == []
    )


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"model": {"revision": TOKEN}}, "spec.model.revision"),
        ({"model": {"servedName": TOKEN}}, "spec.model.servedName"),
        ({"pod": {"annotations": {"example.com/t": TOKEN}}}, 'spec.pod.annotations["example.com/t"]'),
        ({"pod": {"labels": {"t": TOKEN}}}, "spec.pod.labels.t"),
    ],
)
def test_a_credential_shaped_string_is_refused_in_any_field(spec: dict[str, Any], where: str) -> None:
    ((path, message),) = refusals(**spec)
    assert path == where
    assert "looks like a credential" in message and TOKEN not in message


def test_a_credential_in_a_map_key_is_not_printed_in_the_path() -> None:
    ((path, _),) = refusals(pod={"annotations": {f"example.com/{TOKEN}": "x"}})
    assert TOKEN not in path


def test_a_policy_reads_from_the_charts_values() -> None:
    read = policy.from_mapping({"weightsHostPathPrefixes": ["/mnt/nvme"], "priorityClasses": ["high"]})
    assert read == policy.Policy(weights_host_path_prefixes=("/mnt/nvme",), priority_classes=("high",))
    with pytest.raises(ValueError, match="unknown policy key"):
        policy.from_mapping({"hostPaths": ["/"]})
