"""Cluster-wide objects the local cluster installs once its API server is up.

Part of the processes step (after kube-apiserver is ready, before the controllers start):
- LWS's CRDs, taken from the pinned LWS module's own config/crd/bases, so they always match the controller;
- LWS's admission webhook configurations, derived from the same module's config/webhook/manifests.yaml with
  the kustomize patches LWS ships applied (pod webhooks only see LWS pods), but calling
  https://127.0.0.1:<port>/<path> with the local webhook CA instead of an in-cluster Service;
- the ComputeDomain CRD (data/computedomain-crd.yaml). No NVIDIA DRA controller runs here: ComputeDomain
  objects are accepted and validated, and nothing acts on them.
Objects are applied with kubectl's server-side apply, so re-running `up` is idempotent.
"""

from __future__ import annotations

import base64
import copy
import json
import pathlib
import subprocess
import time
from typing import Any

from localcluster import binaries, components, errors, versions

_DATA = pathlib.Path(__file__).with_name("data")
FIELD_MANAGER = "localcluster"
LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"


def install(layout: components.Layout) -> None:
    lws_source = binaries.module_source("sigs.k8s.io/lws", versions.LWS)
    crds = sorted((lws_source / "config" / "crd" / "bases").glob("*.yaml"))
    crds.append(_DATA / "computedomain-crd.yaml")
    apply = ["apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}"]
    names = [kubectl(layout, [*apply, "-o", "name"], crd).strip() for crd in crds]
    wait_established(layout, names)
    webhooks = lws_webhook_configurations(lws_source, layout)
    kubectl(layout, [*apply, "-f", "-"], stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": webhooks}))


def lws_webhook_configurations(lws_source: pathlib.Path, layout: components.Layout) -> list[dict[str, Any]]:
    import yaml  # the venv has it; `down`/`status` never get here

    ca_bundle = base64.b64encode((layout.pki / "webhook-ca.crt").read_bytes()).decode()
    base = f"https://127.0.0.1:{layout.ports['lws-webhook']}"
    documents = yaml.safe_load_all((lws_source / "config" / "webhook" / "manifests.yaml").read_text())
    configurations = []
    for document in documents:
        if not document:
            continue
        configuration = copy.deepcopy(document)
        configuration["metadata"] = {"name": f"lws-{document['metadata']['name']}"}
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base + path, "caBundle": ca_bundle}
            if any("pods" in rule["resources"] for rule in webhook["rules"]):
                # LWS's config/webhook/*-patch.yaml: only pods created by LWS go to its pod webhooks.
                webhook["objectSelector"] = {"matchExpressions": [{"key": LWS_LABEL, "operator": "Exists"}]}
        configurations.append(configuration)
    return configurations


def wait_established(layout: components.Layout, names: list[str], timeout: float = 60.0) -> None:
    # `kubectl wait` (and a jsonpath filter) fail outright on a CRD whose status has no conditions yet, which
    # is what a freshly started API server shows for a moment: read the conditions as JSON instead.
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(json.loads(kubectl(layout, ["get", name, "-o", "json"]))):
            if time.monotonic() > deadline:
                raise errors.ComponentError("manifests", f"{name} not Established after {timeout:.0f}s")
            time.sleep(0.2)


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def kubectl(
    layout: components.Layout, args: list[str], file: pathlib.Path | None = None, stdin: str | None = None
) -> str:
    cmd = [str(binaries.kubectl()), f"--kubeconfig={layout.admin_kubeconfig}", *args]
    if file is not None:
        cmd += ["-f", str(file)]
    result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        log = layout.log("manifests")
        with log.open("a") as out:
            out.write(f"$ {' '.join(cmd)}\n{result.stdout}{result.stderr}\n")
        raise errors.ComponentError("manifests", f"kubectl {args[0]} failed", log)
    return result.stdout
