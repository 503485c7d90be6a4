"""What each process of the local cluster is: its command line, the ports it binds and how to tell it is up.

Data for the processes step (versions → binaries → PKI → **processes** → fleet): `cluster.py` starts these
in order, waits for each health check and records PIDs. Everything binds 127.0.0.1 only.

Deliberate choices:
- kube-apiserver runs the default admission chain plus NodeRestriction (so webhooks, ValidatingAdmissionPolicy,
  MutatingAdmissionPolicy, PodSecurity, ResourceQuota are real), RBAC + Node authorizers, ServiceAccount token
  issuance, and DRA (resource.k8s.io/v1, GA in this minor) with the DRA beta gates a ComputeDomain driver uses.
  An audit log at Metadata level (`Layout.audit_log`, policy in data/audit-policy.yaml): what tests read to
  prove an identity's RBAC grants are all used and none refused.
  `--endpoint-reconciler-type=none`: the `kubernetes` Service would otherwise get 127.0.0.1 as its endpoint,
  which Endpoints validation rejects (loopback); nothing in-cluster dials it here.
- The controller-manager and scheduler authenticate with the identities default RBAC grants them, and the
  controller-manager uses per-controller ServiceAccount credentials, as in a kubeadm cluster.
- kwok manages only nodes annotated `kwok.x-k8s.io/node=fake`; pods on nodes without a podCIDR get loopback
  IPs from 127.254.0.0/16 (fleet nodes carry their own 127.x podCIDR).
- LWS runs with its internal cert management off: its webhook serves a certificate from our webhook CA on
  127.0.0.1, and its webhook configurations (manifests.py) call https://127.0.0.1:<port>/<path>.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_FALLBACK_POD_CIDR = "127.254.0.0/16"
AUDIT_POLICY = "audit-policy.yaml"  # in data/, copied into the cluster's config directory
KWOK_STAGES = "kwok-stages.yaml"  # in data/, copied into the cluster's config directory as kwok's config
FEATURE_GATES = "DRAConsumableCapacity=true,DRADeviceBindingConditions=true,DRAPartitionableDevices=true"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one cluster's files are and which ports and binaries it uses."""

    root: pathlib.Path
    ports: dict[str, int]
    binaries: dict[str, pathlib.Path]
    # How long kube-controller-manager waits for a node's heartbeat before it marks the node NotReady and every pod
    # on it Ready=False; None: Kubernetes' default (50 s). See ``cluster.up``.
    node_grace_seconds: int | None = None

    @property
    def pki(self) -> pathlib.Path:
        return self.root / "pki"

    @property
    def logs(self) -> pathlib.Path:
        return self.root / "logs"

    @property
    def pids(self) -> pathlib.Path:
        return self.root / "pids"

    @property
    def config(self) -> pathlib.Path:
        return self.root / "config"

    @property
    def audit_log(self) -> pathlib.Path:
        """kube-apiserver's audit log (data/audit-policy.yaml says what it keeps)."""
        return self.logs / "audit.log"

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        return self.root / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    def kubeconfig(self, identity: str) -> pathlib.Path:
        return self.root / "kubeconfigs" / f"{identity}.kubeconfig"

    def log(self, name: str) -> pathlib.Path:
        return self.logs / f"{name}.log"

    def pid_file(self, name: str) -> pathlib.Path:
        return self.pids / f"{name}.pid"


@dataclasses.dataclass(frozen=True)
class Component:
    name: str
    ports: tuple[str, ...]  # names of the ports (keys of Layout.ports) it binds
    argv: Callable[[Layout], list[str]]
    healthy: Callable[[Layout], bool]
    startup_timeout: float


def _etcd(layout: Layout) -> list[str]:
    client, peer = layout.ports["etcd"], layout.ports["etcd-peer"]
    return [
        str(layout.binaries["etcd"]),
        "--name=nvlfleet",
        f"--data-dir={layout.root / 'etcd-data'}",
        f"--listen-client-urls=http://127.0.0.1:{client}",
        f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=nvlfleet=http://127.0.0.1:{peer}",
        "--initial-cluster-state=new",
        # A throwaway test cluster: durability is not worth an fsync per write on a shared disk.
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def _kube_apiserver(layout: Layout) -> list[str]:
    pki = layout.pki
    return [
        str(layout.binaries["kube-apiserver"]),
        f"--etcd-servers=http://127.0.0.1:{layout.ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={layout.ports['kube-apiserver']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        f"--feature-gates={FEATURE_GATES}",
        f"--cert-dir={layout.root / 'apiserver-certs'}",
        f"--audit-policy-file={layout.config / AUDIT_POLICY}",
        f"--audit-log-path={layout.audit_log}",
        # Written as requests complete (not batched), so a test reads a request it just made; rotated at 100 MB.
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=100",
        "--audit-log-maxbackup=1",
    ]


def _delegated_auth(layout: Layout, name: str) -> list[str]:
    kubeconfig = layout.kubeconfig(name)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports[name]}",
        f"--tls-cert-file={layout.pki / f'{name}-serving.crt'}",
        f"--tls-private-key-file={layout.pki / f'{name}-serving.key'}",
        "--leader-elect=false",
        f"--feature-gates={FEATURE_GATES}",
    ]


def _kube_controller_manager(layout: Layout) -> list[str]:
    pki = layout.pki
    return [
        str(layout.binaries["kube-controller-manager"]),
        *_delegated_auth(layout, "kube-controller-manager"),
        "--cluster-name=nvlfleet-local",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        *([f"--node-monitor-grace-period={layout.node_grace_seconds}s"] if layout.node_grace_seconds else []),
    ]


def _kube_scheduler(layout: Layout) -> list[str]:
    return [str(layout.binaries["kube-scheduler"]), *_delegated_auth(layout, "kube-scheduler")]


def node_heartbeat_seconds() -> float:
    """The longest a kwok node goes between two heartbeats (its status rewritten with a new heartbeat time, one
    watch event per node): the ``node-heartbeat-with-lease`` stage's delay, whose jitter duration is the upper
    bound of the random delay. A window that should see every node's heartbeat once lasts at least this long."""
    import yaml

    text = (pathlib.Path(__file__).with_name("data") / KWOK_STAGES).read_text()
    for stage in yaml.safe_load_all(text):
        if (stage or {}).get("metadata", {}).get("name") == "node-heartbeat-with-lease":
            delay = stage["spec"]["delay"]
            longest = max(delay["durationMilliseconds"], delay.get("jitterDurationMilliseconds", 0))
            return float(longest) / 1000
    raise ValueError(f"{KWOK_STAGES} has no node-heartbeat-with-lease stage")


def _kwok(layout: Layout) -> list[str]:
    key, value = KWOK_NODE_ANNOTATION
    return [
        str(layout.binaries["kwok"]),
        f"--kubeconfig={layout.kubeconfig('kwok')}",
        f"--config={layout.config / 'kwok.yaml'}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--server-address=127.0.0.1:{layout.ports['kwok']}",
        "--node-ip=127.0.0.1",
        f"--cidr={KWOK_FALLBACK_POD_CIDR}",
        # Renew a Lease per node (kwokctl's value). The heartbeat stage patches node status only every 10-20
        # minutes; without Leases the node lifecycle controller sees every node go silent after its 50 s grace
        # period and marks all its pods NotReady, which kwok never undoes (kubernetes-sigs/kwok#1464).
        "--node-lease-duration-seconds=40",
    ]


def _lws(layout: Layout) -> list[str]:
    return [
        str(layout.binaries["lws-controller"]),
        f"--config={layout.config / 'lws.yaml'}",
        f"--kubeconfig={layout.kubeconfig('lws-controller')}",
        "--leader-elect=false",
        "--zap-devel=false",
    ]


def lws_config(layout: Layout) -> str:
    """LWS's Configuration (config.lws.x-k8s.io/v1alpha1); JSON is YAML."""
    return json.dumps(
        {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {
                "host": "127.0.0.1",
                "port": layout.ports["lws-webhook"],
                "certDir": str(layout.root / "lws-certs"),
            },
            "metrics": {"bindAddress": f"127.0.0.1:{layout.ports['lws-metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{layout.ports['lws-health']}"},
        },
        indent=2,
    )


# --- health ----------------------------------------------------------------------------------------------


def _get(url: str, context: ssl.SSLContext | None = None) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as response:
            return response.read() if response.status == 200 else None
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return None


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """The URL answers 200 (a health check; on-demand components such as Kueue use it too)."""
    return _get(url, context) is not None


def _tls(layout: Layout, client: str | None = "admin", ca: str = "ca") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(layout.pki / f"{ca}.crt"))
    if client:
        context.load_cert_chain(str(layout.pki / f"{client}.crt"), str(layout.pki / f"{client}.key"))
    return context


def _etcd_healthy(layout: Layout) -> bool:
    body = _get(f"http://127.0.0.1:{layout.ports['etcd']}/health")
    return body is not None and json.loads(body).get("health") == "true"


def _apiserver_healthy(layout: Layout) -> bool:
    return _get(f"{layout.server}/readyz", _tls(layout)) == b"ok"


def _secure_healthz(name: str) -> Callable[[Layout], bool]:
    def check(layout: Layout) -> bool:
        return _get(f"https://127.0.0.1:{layout.ports[name]}/healthz", _tls(layout, client=None)) == b"ok"

    return check


def _kwok_healthy(layout: Layout) -> bool:
    return _get(f"http://127.0.0.1:{layout.ports['kwok']}/healthz") is not None


def _lws_healthy(layout: Layout) -> bool:
    # The manager's readyz is a bare ping; the webhook is what admission depends on, so also complete a TLS
    # handshake with it, verified against the webhook CA the webhook configurations carry.
    if _get(f"http://127.0.0.1:{layout.ports['lws-health']}/readyz") is None:
        return False
    context = _tls(layout, client=None, ca="webhook-ca")
    try:
        with (
            socket.create_connection(("127.0.0.1", layout.ports["lws-webhook"]), timeout=3) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


ETCD = Component("etcd", ("etcd", "etcd-peer"), _etcd, _etcd_healthy, 60)
KUBE_APISERVER = Component("kube-apiserver", ("kube-apiserver",), _kube_apiserver, _apiserver_healthy, 120)
KUBE_CONTROLLER_MANAGER = Component(
    "kube-controller-manager",
    ("kube-controller-manager",),
    _kube_controller_manager,
    _secure_healthz("kube-controller-manager"),
    90,
)
KUBE_SCHEDULER = Component(
    "kube-scheduler", ("kube-scheduler",), _kube_scheduler, _secure_healthz("kube-scheduler"), 90
)
KWOK = Component("kwok", ("kwok",), _kwok, _kwok_healthy, 60)
LWS = Component("lws-controller", ("lws-webhook", "lws-metrics", "lws-health"), _lws, _lws_healthy, 90)

# Start order: storage, then the API, then (after CRDs are installed) everything that watches the API.
STORAGE_AND_API = (ETCD, KUBE_APISERVER)
CONTROLLERS = (KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK, LWS)
ALL = (*STORAGE_AND_API, *CONTROLLERS)
PORT_NAMES = tuple(port for component in ALL for port in component.ports)
