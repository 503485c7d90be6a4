"""Kubeconfigs for the local cluster: one per client identity, plus ServiceAccount kubeconfigs on demand.

Sits beside the PKI step (versions → binaries → PKI/**credentials** → processes → fleet): each component and
the admin get a kubeconfig that presents their client certificate; `service_account_kubeconfig` mints a
short-lived token through the TokenRequest API, so RBAC of an operator's ServiceAccount can be tested as
that ServiceAccount.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

CLUSTER_NAME = "nvlfleet-local"


def write(path: pathlib.Path, server: str, ca: pathlib.Path, user: str, auth: dict[str, str]) -> pathlib.Path:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": auth}],
        "contexts": [{"name": f"{user}@{CLUSTER_NAME}", "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": f"{user}@{CLUSTER_NAME}",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def client_cert_kubeconfig(path: pathlib.Path, server: str, pki_dir: pathlib.Path, identity: str) -> pathlib.Path:
    auth = {
        "client-certificate": str(pki_dir / f"{identity}.crt"),
        "client-key": str(pki_dir / f"{identity}.key"),
    }
    return write(path, server, pki_dir / "ca.crt", identity, auth)


def service_account_kubeconfig(
    admin_kubeconfig: pathlib.Path,
    namespace: str,
    name: str,
    path: pathlib.Path,
    expiration_seconds: int = 3600,
) -> pathlib.Path:
    """A kubeconfig that authenticates as ServiceAccount namespace/name with a freshly requested token.

    The ServiceAccount must exist. The token is bound to it and expires; RBAC decides what it may do.
    """
    from kubernetes import client, config  # imported late: `down` and `status` work without it

    api = config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        token = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status.token
    finally:
        api.close()
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    user = f"system:serviceaccount:{namespace}:{name}"
    return write(path, cluster["server"], pathlib.Path(cluster["certificate-authority"]), user, {"token": token})
