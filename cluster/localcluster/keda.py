"""KEDA on the local cluster, on request: its CRDs, its operator and its metrics API server as local processes.

An opt-in step after the processes step (versions → binaries → PKI → processes → **KEDA** → fleet): a plain `up`
never starts it; `python -m localcluster keda up` (or a test's fixture) does, and `keda down` (or the cluster's
`down`) stops it by its recorded PIDs. What it sets up:
- KEDA's CRDs from the pinned module's own config/crd/bases (scaledobjects.keda.sh, ...), server-side applied;
- `keda-operator` (ScaledObject → HPA, and the gRPC metrics service) and `keda-metrics-apiserver` (the
  `external.metrics.k8s.io` API the HPA controller asks), both on 127.0.0.1 with the admin kubeconfig;
- the metrics server registered through the API server's aggregation layer: APIService
  `v1beta1.external.metrics.k8s.io` → Service `keda/keda-metrics-apiserver`. There is no kube-proxy, so the
  Service is of type ExternalName `localhost`: the aggregator dials ExternalName services by name. The aggregator
  authenticates with the front-proxy client certificate (kube-apiserver's --proxy-client-* and
  --requestheader-* flags, already passed by components.py) and verifies the server's certificate
  (`pki.keda_certificate`, issued by the webhook CA for `keda-metrics-apiserver.keda.svc`) against the caBundle.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import socket
import time
from typing import Any

from localcluster import binaries, components, errors, manifests, pki, processes, versions

NAMESPACE = "keda"
SERVICE = "keda-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"
PORT_NAMES = ("keda-operator-metrics", "keda-operator-health", "keda-grpc", "keda-apiserver", "keda-adapter-metrics")
NAMES = tuple(c.name for c in versions.KEDA_COMPONENTS)
_STATE = "keda.json"


def up(layout: components.Layout, progress: binaries.Progress = binaries.say) -> dict[str, int]:
    """Build (if needed), install and start KEDA on the cluster of ``layout``; returns its ports."""
    found = binaries.ensure_on_demand(NAMES, progress)
    ports = _ports(layout.root)
    certs = _certificates(layout)
    _install(layout, ports)
    env = {**os.environ, "KUBECONFIG": str(layout.admin_kubeconfig), "WATCH_NAMESPACE": ""}
    env.update(POD_NAMESPACE=NAMESPACE, KEDA_CLUSTER_OBJECT_NAMESPACE=NAMESPACE)
    argv = {"keda-operator": _operator(found, layout, ports, certs), SERVICE: _adapter(found, layout, ports, certs)}
    for name in NAMES:
        pid = processes.read_pid(layout.pid_file(name))
        if processes.alive(pid, found[name]) and processes.command_line(pid) == argv[name]:
            continue
        processes.stop(pid, found[name])
        processes.start(argv[name], layout.log(name), layout.pid_file(name), cwd=layout.root, env=env)
        progress(f"started {name} (log: {layout.log(name)})")
    _wait_available(layout, found)
    return ports


def down(layout: components.Layout) -> list[str]:
    """Stop KEDA's processes by their recorded PIDs and remove the APIService (an unanswered one makes API
    discovery incomplete for every client); the CRDs stay, as a cluster's CRDs outlive their controller."""
    stopped = stop(layout)
    if (layout.root / _STATE).exists():
        manifests.kubectl(layout, ["delete", "apiservice", APISERVICE, "--ignore-not-found"])
        (layout.root / _STATE).unlink()
    return stopped


def stop(layout: components.Layout) -> list[str]:
    """Stop KEDA's processes by their recorded PIDs (the cluster's `down` calls this before its own)."""
    stopped = []
    for name in reversed(NAMES):
        binary = binaries.go_binary(name)
        pid = processes.read_pid(layout.pid_file(name))
        if processes.alive(pid, binary):
            processes.stop(pid, binary)
            stopped.append(name)
    return stopped


def _ports(root: pathlib.Path) -> dict[str, int]:
    path = root / _STATE
    if path.exists():
        return {k: int(v) for k, v in json.loads(path.read_text())["ports"].items()}
    held, ports = [], {}
    try:
        for name in PORT_NAMES:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
            ports[name] = sock.getsockname()[1]
    finally:
        for sock in held:
            sock.close()
    path.write_text(json.dumps({"ports": ports}, indent=2) + "\n")
    return ports


def _certificates(layout: components.Layout) -> pathlib.Path:
    """tls.crt/tls.key/ca.crt in the layout KEDA reads (its gRPC link is mutual TLS under one CA)."""
    sans = ("IP:127.0.0.1", "DNS:localhost", f"DNS:{SERVICE}.{NAMESPACE}.svc", f"DNS:keda-operator.{NAMESPACE}.svc")
    pki.keda_certificate(layout.pki, sans)
    certs = layout.root / "keda-certs"
    certs.mkdir(exist_ok=True)
    shutil.copyfile(layout.pki / "keda.crt", certs / "tls.crt")
    shutil.copyfile(layout.pki / "keda.key", certs / "tls.key")
    shutil.copyfile(layout.pki / "webhook-ca.crt", certs / "ca.crt")
    return certs


_APPLY = ["apply", "--server-side", "--force-conflicts", f"--field-manager={manifests.FIELD_MANAGER}"]


def install_crds(layout: components.Layout) -> list[str]:
    """KEDA's CRDs from the pinned module's config/crd/bases, Established; their names (no binary needed)."""
    source = binaries.module_source(versions.KEDA_GO_MODULE, versions.KEDA)
    crds = sorted((source / "config" / "crd" / "bases").glob("*.yaml"))
    names = [manifests.kubectl(layout, [*_APPLY, "-o", "name"], crd).strip() for crd in crds]
    manifests.wait_established(layout, names)
    return names


def _install(layout: components.Layout, ports: dict[str, int]) -> None:
    install_crds(layout)
    manifests.kubectl(layout, [*_APPLY, "-f", "-"], stdin=json.dumps(_objects(layout, ports)))


def _objects(layout: components.Layout, ports: dict[str, int]) -> dict[str, Any]:
    ca_bundle = base64.b64encode((layout.pki / "webhook-ca.crt").read_bytes()).decode()
    items = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "service": {"name": SERVICE, "namespace": NAMESPACE, "port": ports["keda-apiserver"]},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _operator(
    found: dict[str, pathlib.Path], layout: components.Layout, ports: dict[str, int], certs: pathlib.Path
) -> list[str]:
    return [
        str(found["keda-operator"]),
        f"--kubeconfig={layout.admin_kubeconfig}",
        f"--metrics-bind-address=127.0.0.1:{ports['keda-operator-metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['keda-operator-health']}",
        f"--metrics-service-bind-address=127.0.0.1:{ports['keda-grpc']}",
        f"--cert-dir={certs}",
        f"--ca-dir={certs}",
        "--enable-cert-rotation=false",
        "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false",
        "--leader-elect=false",
        "--zap-log-level=info",
    ]


def _adapter(
    found: dict[str, pathlib.Path], layout: components.Layout, ports: dict[str, int], certs: pathlib.Path
) -> list[str]:
    kubeconfig = layout.admin_kubeconfig
    return [
        str(found[SERVICE]),
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['keda-apiserver']}",
        f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--cert-dir={certs}",
        f"--requestheader-client-ca-file={layout.pki / 'front-proxy-ca.crt'}",
        f"--metrics-service-address=127.0.0.1:{ports['keda-grpc']}",
        f"--port={ports['keda-adapter-metrics']}",
        "--zap-log-level=info",
    ]


def _wait_available(layout: components.Layout, found: dict[str, pathlib.Path], timeout: float = 180.0) -> None:
    """Until the APIService is Available (the aggregator reached the metrics server through the front proxy)."""
    deadline = time.monotonic() + timeout
    while True:
        for name in NAMES:
            if not processes.alive(processes.read_pid(layout.pid_file(name)), found[name]):
                log = layout.log(name)
                raise errors.ComponentError(name, f"exited: {processes.last_lines(log)[-300:]}", log)
        service = json.loads(manifests.kubectl(layout, ["get", "apiservice", APISERVICE, "-o", "json"]))
        conditions = (service.get("status") or {}).get("conditions") or []
        available = next((c for c in conditions if c.get("type") == "Available"), {})
        if available.get("status") == "True":
            return
        if time.monotonic() > deadline:
            message = f"APIService {APISERVICE} not Available after {timeout:.0f}s: {available.get('message')}"
            raise errors.ComponentError(SERVICE, message, layout.log(SERVICE))
        time.sleep(1.0)
