"""Kueue beside the local cluster, on demand: its CRDs, its webhooks on 127.0.0.1 and its manager process.

Not part of `cluster-up` (versions → binaries → PKI → processes → fleet): the benchmark's placement comparison
(and a test) ask for it with `ensure_running(layout)` once the cluster is up, and `stop(root)` ends it by its
recorded PID (`cluster.down` calls it too). What it installs, all from the pinned Kueue module's own config:
- the CRDs of config/components/crd/bases, as they are (no conversion webhook: the API server serves every
  version of a CRD from the one stored version, which is all a benchmark needs);
- the webhook configurations of config/components/webhook/manifests.yaml, kept only for what this cluster runs
  (Kueue's own kinds, LeaderWorkerSets and pods), calling https://127.0.0.1:<port>/<path> with the local webhook
  CA, as LWS's are wired (manifests.py). The LeaderWorkerSet and pod webhooks only see namespaces labelled
  `MANAGED_LABEL`, so a Kueue that is stopped (or slow) never blocks anyone else's pods.
- the CRDs' conversion webhooks (config/components/crd/patches/webhook_in_*.yaml), on the same 127.0.0.1 port.
Certificates: Kueue v0.17 without its internal cert management reads metrics certificates from a fixed
/etc/kueue path, so it runs with it on and is handed a Secret its rotator accepts as valid (pki.kueue: a CA
of its own and a serving certificate for its Service name that is also valid for 127.0.0.1); the rotator then
keeps them and injects that CA into the webhook configurations and CRDs, and the files it would find mounted
in a pod are copied into its cert dir.
The manager runs without leader election, metrics listener or visibility API server, health on 127.0.0.1, the
LeaderWorkerSet integration (which brings the pod integration with it) and topology-aware scheduling (on by
default in v0.17).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import pathlib
import shutil
import socket
import ssl
import time
from typing import Any

from localcluster import binaries, components, credentials, errors, manifests, pki, processes, versions

NAME = "kueue-manager"
MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"
# Namespaces whose LeaderWorkerSets and pods Kueue manages (its webhooks and managedJobsNamespaceSelector).
MANAGED_LABEL = ("kueue.localcluster.nvlfleet.io/managed", "true")
LWS_FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
# API groups (and core resources) whose webhooks are kept: Kueue's own kinds and the integration in use.
_KEPT_GROUPS = {"kueue.x-k8s.io", "leaderworkerset.x-k8s.io"}
_SCOPED_RESOURCES = {"pods", "leaderworkersets"}
_STARTUP_SECONDS = 120.0
# Kueue's defaults (apis/config/v1beta2/defaults.go, pkg/util/cert): the rotator's CA name, the Service its
# serving certificate is for, and the Secret it keeps them in.
_CA_NAME = "kueue-ca"
_SERVICE_DNS = f"kueue-webhook-service.{NAMESPACE}.svc"
_SECRET = "kueue-webhook-server-cert"


def ensure_running(layout: components.Layout, progress: binaries.Progress = binaries.say) -> int:
    """Kueue installed and its manager healthy on this cluster (started unless a healthy one runs); its PID."""
    binary = binaries.ensure(NAME, progress)
    pid = processes.read_pid(_pid_file(layout.root))
    if processes.alive(pid, binary) and healthy(layout.root):
        assert pid is not None
        return pid
    processes.stop(pid, binary)
    source = binaries.module_source(MODULE, versions.KUEUE)
    ports = {"webhook": _free_port(), "health": _free_port()}
    _prepare_files(layout, ports)
    install(layout, source, ports["webhook"])
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    argv = [
        str(binary),
        f"--config={_config_file(layout.root)}",
        f"--kubeconfig={layout.kubeconfig(NAME)}",
        "--zap-devel=false",
        "--zap-log-level=info",
    ]
    log = layout.log(NAME)
    processes.start(argv, log, _pid_file(layout.root), cwd=layout.root, env=env)
    progress(f"started {NAME} {versions.KUEUE} (log: {log})")
    deadline = time.monotonic() + _STARTUP_SECONDS
    while not healthy(layout.root):
        pid = processes.read_pid(_pid_file(layout.root))
        if not processes.alive(pid, binary):
            last = processes.last_lines(log)
            raise errors.ComponentError(NAME, f"exited during startup: {last[-300:]}", log)
        if time.monotonic() > deadline:
            processes.stop(pid, binary)  # not left running half-started
            raise errors.ComponentError(NAME, f"not healthy after {_STARTUP_SECONDS:.0f}s", log)
        time.sleep(0.5)
    pid = processes.read_pid(_pid_file(layout.root))
    assert pid is not None
    return pid


def stop(root: pathlib.Path, layout: components.Layout | None = None) -> bool:
    """Stop the manager recorded under ``root`` by its PID, and remove its webhook configurations (when the API
    server still answers, i.e. ``layout`` is given); True if it was running."""
    binary = binaries.go_binary(NAME)
    pid = processes.read_pid(_pid_file(root))
    running = processes.alive(pid, binary)
    if running:
        processes.stop(pid, binary)
    if layout is not None and _ports_file(root).exists():  # it was installed here
        for kind, name in _webhook_names():
            with contextlib.suppress(errors.ComponentError):
                manifests.kubectl(layout, ["delete", kind, name, "--ignore-not-found", "--wait=false"])
    _ports_file(root).unlink(missing_ok=True)
    return running


def healthy(root: pathlib.Path) -> bool:
    """The manager answers readyz and its webhook completes a TLS handshake verified against the webhook CA."""
    ports = _ports(root)
    if not ports or not components.http_ok(f"http://127.0.0.1:{ports['health']}/readyz"):
        return False
    context = ssl.create_default_context(cafile=str(root / "pki" / "kueue-ca.crt"))
    try:
        with (
            socket.create_connection(("127.0.0.1", ports["webhook"]), timeout=3) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def install(layout: components.Layout, source: pathlib.Path, webhook_port: int) -> None:
    """Kueue's CRDs, namespace, certificate Secret and webhook configurations (server-side applied: idempotent)."""
    import yaml

    apply = ["apply", "--server-side", "--force-conflicts", f"--field-manager={manifests.FIELD_MANAGER}"]
    ca_bundle = base64.b64encode((layout.pki / "kueue-ca.crt").read_bytes()).decode()
    crd_dir = source / "config" / "components" / "crd"
    converted = {}
    for patch in (crd_dir / "patches").glob("webhook_in_*.yaml"):
        doc = yaml.safe_load(patch.read_text())
        converted[doc["metadata"]["name"]] = doc["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"]
    crds = []
    for path in sorted((crd_dir / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in converted:
            url = f"https://127.0.0.1:{webhook_port}{converted[crd['metadata']['name']]}"
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": url, "caBundle": ca_bundle}, "conversionReviewVersions": ["v1"]},
            }
        crds.append(crd)
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": crds})
    names = manifests.kubectl(layout, [*apply, "-o", "name", "-f", "-"], stdin=listed).split()
    manifests.wait_established(layout, names)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    items = [namespace, _secret(layout), *webhook_configurations(source, layout, webhook_port)]
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    manifests.kubectl(layout, [*apply, "-f", "-"], stdin=listed)


def _secret(layout: components.Layout) -> dict[str, Any]:
    """The rotator's Secret, filled with pki.kueue's CA and serving certificate (a local throwaway CA)."""
    files = {"ca.crt": "kueue-ca", "ca.key": "kueue-ca", "tls.crt": "kueue-serving", "tls.key": "kueue-serving"}
    data = {
        key: base64.b64encode((layout.pki / f"{stem}.{key.split('.')[1]}").read_bytes()).decode()
        for key, stem in files.items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": _SECRET, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": data,
    }


def webhook_configurations(source: pathlib.Path, layout: components.Layout, port: int) -> list[dict[str, Any]]:
    import yaml

    ca_bundle = base64.b64encode((layout.pki / "kueue-ca.crt").read_bytes()).decode()
    key, value = MANAGED_LABEL
    out = []
    for document in yaml.safe_load_all((source / "config" / "components" / "webhook" / "manifests.yaml").read_text()):
        if not document:
            continue
        configuration = copy.deepcopy(document)
        configuration["metadata"] = {"name": f"kueue-{document['metadata']['name']}"}
        kept = []
        for webhook in configuration["webhooks"]:
            rules = webhook["rules"]
            resources = {r for rule in rules for r in rule["resources"]}
            groups = {g for rule in rules for g in rule["apiGroups"]}
            if not (groups & _KEPT_GROUPS or "pods" in resources):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            if resources & _SCOPED_RESOURCES:
                webhook["namespaceSelector"] = {"matchLabels": {key: value}}
            kept.append(webhook)
        configuration["webhooks"] = kept
        out.append(configuration)
    return out


def config(root: pathlib.Path, ports: dict[str, int]) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2); JSON is YAML."""
    key, value = MANAGED_LABEL
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True},  # see the module docstring
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(root / "kueue-certs")},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "managedJobsNamespaceSelector": {"matchLabels": {key: value}},
        "integrations": {"frameworks": [LWS_FRAMEWORK]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def _prepare_files(layout: components.Layout, ports: dict[str, int]) -> None:
    pki.ensure(layout.pki, components.SERVICE_IP)  # adds the kueue-manager identity to an older cluster's PKI
    pki.kueue(layout.pki, _CA_NAME, _SERVICE_DNS)
    credentials.client_cert_kubeconfig(layout.kubeconfig(NAME), layout.server, layout.pki, NAME)
    # What a pod would see of the Secret mounted at the cert dir (the rotator keeps the Secret, writes no files).
    certs = layout.root / "kueue-certs"
    certs.mkdir(exist_ok=True)
    shutil.copyfile(layout.pki / "kueue-serving.crt", certs / "tls.crt")
    shutil.copyfile(layout.pki / "kueue-serving.key", certs / "tls.key")
    layout.config.mkdir(parents=True, exist_ok=True)
    _config_file(layout.root).write_text(json.dumps(config(layout.root, ports), indent=2) + "\n")
    _ports_file(layout.root).write_text(json.dumps(ports) + "\n")


def _webhook_names() -> list[tuple[str, str]]:
    return [
        ("mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration"),
        ("validatingwebhookconfiguration", "kueue-validating-webhook-configuration"),
    ]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ports(root: pathlib.Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in json.loads(_ports_file(root).read_text()).items()}
    except (OSError, ValueError):
        return {}


def _pid_file(root: pathlib.Path) -> pathlib.Path:
    return root / "pids" / f"{NAME}.pid"


def _config_file(root: pathlib.Path) -> pathlib.Path:
    return root / "config" / "kueue.yaml"


def _ports_file(root: pathlib.Path) -> pathlib.Path:
    return root / "config" / "kueue-ports.json"
