"""localcluster's KEDA step as data: opt-in, cached by version, registered through the aggregation layer.

The processes themselves run in tests/integration/test_autoscaling_keda.py on a private cluster; these tests pin
what that step hands the API server and the binaries without starting anything.
"""

from __future__ import annotations

import pathlib

import pytest
from localcluster import __main__ as localcluster_main
from localcluster import components, keda, kueue, versions

from nvlfleet.facts import keda as keda_facts


def layout(tmp_path: pathlib.Path) -> components.Layout:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "webhook-ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    binaries = {name: tmp_path / "bin" / name for name in keda.NAMES}
    return components.Layout(tmp_path, {}, binaries)


def test_keda_is_opt_in_and_not_part_of_the_versions_a_cluster_is_built_from() -> None:
    assert {c.name for c in versions.KEDA_COMPONENTS} == {"keda-operator", "keda-metrics-apiserver"}
    assert all(c.on_demand for c in versions.KEDA_COMPONENTS)
    assert not set(versions.summary()) & set(keda.NAMES)
    assert {c.version for c in versions.KEDA_COMPONENTS} == {"v2.21.0"}


def test_the_metrics_server_is_registered_as_external_metrics_through_an_external_name_service(
    tmp_path: pathlib.Path,
) -> None:
    items = {o["kind"]: o for o in keda._objects(layout(tmp_path), {"keda-apiserver": 42443})["items"]}
    service = items["Service"]
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost"}  # no kube-proxy here
    api = items["APIService"]
    assert api["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert api["spec"]["service"] == {"name": keda.SERVICE, "namespace": keda.NAMESPACE, "port": 42443}
    assert api["spec"]["caBundle"] and "insecureSkipTLSVerify" not in api["spec"]


def test_both_processes_bind_loopback_only_and_the_metrics_server_trusts_the_front_proxy(
    tmp_path: pathlib.Path,
) -> None:
    ports = dict.fromkeys(keda.PORT_NAMES, 1)
    lay = layout(tmp_path)
    operator = keda._operator(lay.binaries, lay, ports, tmp_path / "certs")
    adapter = keda._adapter(lay.binaries, lay, ports, tmp_path / "certs")
    addresses = [a.split("=", 1)[1] for a in operator if a.startswith("--") and "bind-address" in a]
    assert addresses and all(a.startswith("127.0.0.1:") for a in addresses)
    assert "--bind-address=127.0.0.1" in adapter
    assert f"--requestheader-client-ca-file={lay.pki / 'front-proxy-ca.crt'}" in adapter
    assert "--enable-cert-rotation=false" in operator


def test_the_keda_facts_the_operator_reads_are_of_the_keda_the_local_cluster_builds() -> None:
    assert keda_facts.VERSION == versions.KEDA


def test_the_build_command_names_the_on_demand_components_when_asked_for_another(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert localcluster_main.main(["build", "kube-apiserver"]) == 1
    error = capsys.readouterr().err
    assert "no on-demand component kube-apiserver" in error
    assert all(name in error for name in (*keda.NAMES, kueue.NAME))
