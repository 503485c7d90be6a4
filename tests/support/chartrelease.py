"""The Helm chart installed on the local cluster, its ServiceAccount's credentials, and the operator run with them.

Shared by the integration tests that prove the chart's RBAC: test_chart_install.py (sufficient, and refused what
it is not given) and test_rbac_audit.py (every grant used, from the API server's audit log). The operator runs as
a process on this machine, as the chart's Deployment runs it, with only a TokenRequest token of the chart's
ServiceAccount: the cluster's nodes are kwok's, which run no container, so the chart's own pod never starts.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster import fleet

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nvlfleet"


@dataclasses.dataclass(frozen=True)
class Release:
    name: str
    namespace: str  # where the chart is installed
    fullname: str
    service_account: str
    kubectl: pathlib.Path
    helm: pathlib.Path
    admin_kubeconfig: pathlib.Path

    @property
    def username(self) -> str:
        """The API server's name for the chart's ServiceAccount (as in the audit log)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def kubectl_run(self, *args: str, kubeconfig: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
        config = str(kubeconfig or self.admin_kubeconfig)
        return subprocess.run(
            [str(self.kubectl), "--kubeconfig", config, *args], capture_output=True, text=True, check=False
        )

    def helm_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.helm), "--kubeconfig", str(self.admin_kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
        )


def suffix() -> str:
    return hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:5]


def create_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels or {})))


def delete_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as error:
        if error.status != 404:
            raise


def release_for(local_cluster: Any, name: str, namespace: str) -> Release:
    """The release `name` of the chart in `namespace`, with the local cluster's tools and admin credentials."""
    return Release(
        name=name,
        namespace=namespace,
        fullname=f"{name}-nvlfleet",
        service_account=f"{name}-nvlfleet",
        kubectl=local_cluster.kubectl,
        helm=local_cluster.helm,
        admin_kubeconfig=local_cluster.kubeconfig,
    )


@contextlib.contextmanager
def installed(release: Release, values: dict[str, Any]) -> Iterator[None]:
    """`helm install` of `release` with `values` (its namespace must exist), uninstalled at the end."""
    values_file = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"{release.name}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    try:
        done = release.helm_run(
            "install", release.name, str(CHART), "--namespace", release.namespace, "--values", str(values_file)
        )
        assert done.returncode == 0, done.stderr
        yield
    finally:
        release.helm_run("uninstall", release.name, "--namespace", release.namespace, "--wait", "--timeout", "60s")
        values_file.unlink(missing_ok=True)


def service_account_kubeconfig(release: Release, directory: pathlib.Path) -> pathlib.Path:
    """A kubeconfig holding only a TokenRequest token of the chart's ServiceAccount (no client certificate)."""
    token = release.kubectl_run(
        "create", "token", release.service_account, "--namespace", release.namespace, "--duration", "2h"
    )
    assert token.returncode == 0, token.stderr
    admin = yaml.safe_load(release.admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = (
        cluster.get("certificate-authority-data")
        or base64.b64encode(pathlib.Path(cluster["certificate-authority"]).read_bytes()).decode()
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": cluster["server"], "certificate-authority-data": ca}}],
        "users": [{"name": "operator", "user": {"token": token.stdout.strip()}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
        "current-context": "operator",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """`nvlfleet run` on this machine, as the chart's Deployment runs it, with a kubeconfig instead of the pod's
    mounted token; stopped by its PID."""

    def __init__(self, release: Release, kubeconfig: pathlib.Path, workdir: pathlib.Path) -> None:
        self.log_path = workdir / "operator.log"
        self.cert_dir = workdir / "webhook-tls"
        self._copy_webhook_certificate(release)
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "POD_NAME": f"{release.fullname}-test",
            "POD_NAMESPACE": release.namespace,
        }
        command = [str(pathlib.Path(sys.executable).with_name("nvlfleet")), "run", *self.chart_args(release)]
        self.process = subprocess.Popen(
            command, env=env, stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def _copy_webhook_certificate(self, release: Release) -> None:
        """The Secret the chart mounts at --webhook-cert-dir, as files (the kubelet would do this)."""
        secret = json.loads(
            release.kubectl_run(
                "get", "secret", f"{release.fullname}-webhook-tls", "-n", release.namespace, "-o", "json"
            ).stdout
        )
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        for name, data in secret["data"].items():
            (self.cert_dir / name).write_bytes(base64.b64decode(data))

    def chart_args(self, release: Release) -> list[str]:
        """The Deployment's args, taken from the installed release (so the test runs what the chart runs), with
        only the ports moved to free local ones and the certificate directory to the copied Secret."""
        deployment = json.loads(
            release.kubectl_run("get", "deployment", release.fullname, "-n", release.namespace, "-o", "json").stdout
        )
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        local = {
            "--metrics-port": str(_free_port()),
            "--health-port": str(_free_port()),
            "--webhook-port": str(_free_port()),
            "--webhook-cert-dir": str(self.cert_dir),
        }
        args = []
        for arg in container["args"]:
            flag = arg.split("=", 1)[0]
            args.append(f"{flag}={local[flag]}" if flag in local else arg)
        return [*args, "--bind-address=127.0.0.1"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def serving(namespace: str, name: str, fleet_name: str) -> dict[str, Any]:
    """A one-group GB200 serving on `fleet_name`'s racks only (the cluster is shared with tests side by side)."""
    return {
        "apiVersion": "nvlfleet.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": {"decode": {"groups": 1, "parallelism": {"tensor": 1, "data": 4}}},
            "pod": {"nodeSelector": {fleet.LABEL_FLEET: fleet_name}},
            "pricing": {"inputCacheHitPerMillion": 0.003, "inputCacheMissPerMillion": 0.15, "outputPerMillion": 0.6},
        },
    }
