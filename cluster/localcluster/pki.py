"""The local cluster's certificates and keys, made with the openssl CLI and kept under <cluster dir>/pki.

Third step of the local-cluster data flow (versions → binaries → **PKI** → processes → fleet).
- `ca`: the cluster CA. It signs the API server's serving certificate and every client certificate, and the
  controller-manager uses it to sign CSRs, so new client credentials can be minted later.
- client certificates, one identity per component: the controller-manager and scheduler use the identities
  Kubernetes' default RBAC already grants (system:kube-controller-manager, system:kube-scheduler), so RBAC is
  exercised for real; the admin, kwok, the LWS controller and Kueue are in system:masters.
- serving certificates for the API server, the controller-manager and the scheduler (127.0.0.1), so their
  health endpoints are checked with real TLS verification.
- `front-proxy-ca`: the aggregation layer's request-header CA, so delegated authentication in the
  controller-manager, scheduler and any aggregated API server is configured as in a real cluster.
- `webhook-ca`: a separate CA for the admission webhooks served on 127.0.0.1 (LWS), as a real cluster's
  webhooks have their own issuer; its bundle goes into the webhook configurations' caBundle. Kueue gets a CA
  of its own (`kueue`), in the form its certificate rotator keeps.
- `keda` (only when `localcluster keda up` asks, `keda_certificate`): KEDA's metrics API server's serving
  certificate, issued by the webhook CA (the APIService's caBundle) for the Service name the aggregator verifies,
  and also the client certificate of the operator ↔ metrics server gRPC link (KEDA uses one pair for both).
- `sa`: the key pair that signs and verifies ServiceAccount tokens (TokenRequest works).
ECDSA P-256 keys: generating them is instant, and every component accepts them.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import tempfile

from localcluster import errors

_DAYS = "3650"


@dataclasses.dataclass(frozen=True)
class ClientIdentity:
    name: str  # file stem
    common_name: str  # the user name Kubernetes sees
    organization: str = ""  # the group


CLIENTS = (
    ClientIdentity("admin", "nvlfleet-admin", "system:masters"),
    ClientIdentity("kube-controller-manager", "system:kube-controller-manager"),
    ClientIdentity("kube-scheduler", "system:kube-scheduler"),
    ClientIdentity("kwok", "kwok-controller", "system:masters"),
    ClientIdentity("lws-controller", "lws-controller-manager", "system:masters"),
    ClientIdentity("kueue-manager", "kueue-controller-manager", "system:masters"),
)

APISERVER_SANS = (
    "IP:127.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


def ensure(pki_dir: pathlib.Path, service_ip: str) -> None:
    """Create whatever is missing (idempotent: a restarted cluster keeps its identities)."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    _ca(pki_dir, "ca", "nvlfleet-local-ca")
    _ca(pki_dir, "webhook-ca", "nvlfleet-local-webhook-ca")
    _ca(pki_dir, "front-proxy-ca", "nvlfleet-local-front-proxy-ca")
    _leaf(pki_dir, "front-proxy-client", "front-proxy-ca", "front-proxy-client", "", (), server=False)
    _leaf(pki_dir, "apiserver", "ca", "kube-apiserver", "", (*APISERVER_SANS, f"IP:{service_ip}"), server=True)
    for client in CLIENTS:
        _leaf(pki_dir, client.name, "ca", client.common_name, client.organization, (), server=False)
    for component in ("kube-controller-manager", "kube-scheduler"):
        _leaf(pki_dir, f"{component}-serving", "ca", component, "", ("IP:127.0.0.1",), server=True)
    _leaf(pki_dir, "lws-webhook", "webhook-ca", "lws-webhook", "", ("IP:127.0.0.1",), server=True)
    if not (pki_dir / "sa.key").exists():
        _openssl(pki_dir, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key")
        _openssl(pki_dir, "pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def keda_certificate(pki_dir: pathlib.Path, sans: tuple[str, ...]) -> None:
    """``keda.crt``/``keda.key`` for ``sans`` (serverAuth and clientAuth), issued by the webhook CA."""
    _leaf(pki_dir, "keda", "webhook-ca", "keda", "", sans, server=True, client=True)


def kueue(pki_dir: pathlib.Path, ca_name: str, service_dns: str) -> None:
    """Kueue's own CA and webhook serving certificate, in the shape its cert rotator (open-policy-agent's
    cert-controller) accepts as valid, so it keeps them instead of minting certificates for an in-cluster
    Service: an RSA (PKCS#1) CA whose subjectAltName is its own name, and a serving certificate for the
    Service's DNS name that is also valid for 127.0.0.1, where the API server calls it here."""
    if not (pki_dir / "kueue-ca.crt").exists():
        _openssl(pki_dir, "genrsa", "-traditional", "-out", "kueue-ca.key", "2048")
        (pki_dir / "kueue-ca.key").chmod(0o600)
        _openssl(
            pki_dir,
            *("req", "-x509", "-new", "-key", "kueue-ca.key", "-subj", f"/CN={ca_name}/O=kueue", "-days", _DAYS),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature,keyEncipherment"),
            *("-addext", f"subjectAltName=DNS:{ca_name}", "-out", "kueue-ca.crt"),
        )
    _leaf(pki_dir, "kueue-serving", "kueue-ca", service_dns, "", (f"DNS:{service_dns}", "IP:127.0.0.1"), server=True)


def _ca(pki_dir: pathlib.Path, name: str, common_name: str) -> None:
    if (pki_dir / f"{name}.crt").exists():
        return
    _key(pki_dir, name)
    _openssl(
        pki_dir,
        "req",
        "-x509",
        "-new",
        "-key",
        f"{name}.key",
        "-subj",
        f"/CN={common_name}",
        "-days",
        _DAYS,
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-out",
        f"{name}.crt",
    )


def _leaf(
    pki_dir: pathlib.Path,
    name: str,
    ca: str,
    common_name: str,
    organization: str,
    sans: tuple[str, ...],
    *,
    server: bool,
    client: bool = False,
) -> None:
    if (pki_dir / f"{name}.crt").exists():
        return
    _key(pki_dir, name)
    subject = f"/CN={common_name}" + (f"/O={organization}" if organization else "")
    extensions = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage="
        + ("serverAuth,clientAuth" if server and client else "serverAuth" if server else "clientAuth"),
    ]
    if sans:
        extensions.append("subjectAltName=" + ",".join(sans))
    with tempfile.NamedTemporaryFile("w", suffix=".ext", dir=pki_dir, delete=False) as ext:
        ext.write("\n".join(extensions) + "\n")
    try:
        _openssl(pki_dir, "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
        _openssl(
            pki_dir,
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            f"{ca}.crt",
            "-CAkey",
            f"{ca}.key",
            "-CAcreateserial",
            "-days",
            _DAYS,
            "-extfile",
            ext.name,
            "-out",
            f"{name}.crt",
        )
    finally:
        pathlib.Path(ext.name).unlink(missing_ok=True)
        (pki_dir / f"{name}.csr").unlink(missing_ok=True)


def _key(pki_dir: pathlib.Path, name: str) -> None:
    _openssl(pki_dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")
    (pki_dir / f"{name}.key").chmod(0o600)


def _openssl(pki_dir: pathlib.Path, *args: str) -> None:
    try:
        result = subprocess.run(["openssl", *args], cwd=pki_dir, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise errors.ComponentError("pki", "the openssl command is needed to create the cluster's CA") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise errors.ComponentError("pki", f"openssl {args[0]} failed: {last}")
