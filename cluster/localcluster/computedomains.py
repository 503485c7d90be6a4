"""A stand-in for the NVIDIA DRA driver's ComputeDomain side, so pods that claim an IMEX channel can schedule.

The local cluster serves the ComputeDomain CRD but runs no NVIDIA driver (see localcluster.manifests). In a
real GB200/GB300 cluster the driver (1) publishes, per node, a ResourceSlice with an IMEX channel device and
(2) for each ComputeDomain creates the ResourceClaimTemplate named in ``spec.channel.resourceClaimTemplate.name``.
Pods rendered by nvlfleet claim that template, so without (1) and (2) kube-scheduler leaves them Pending.

This module does exactly those two things and nothing else: kube-scheduler's DRA plugin still allocates the
claims and kube-controller-manager still creates them from the templates, as in a real cluster. Templates
carry an owner reference to their ComputeDomain, so deleting a ComputeDomain removes its template.

``sync_templates`` is one pass (the demo's agent calls it in its loop); ``driver`` runs passes in a thread
while a ``with`` block is open (tests).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

DRIVER = "compute-domain.nvidia.com"
DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
_CD = ("resource.nvidia.com", "v1beta1", "computedomains")
_DRA = ("resource.k8s.io", "v1")


def install_device_class(api_client: client.ApiClient) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    _create(lambda: client.CustomObjectsApi(api_client).create_cluster_custom_object(*_DRA, "deviceclasses", body))


def publish_channels(api_client: client.ApiClient, node_names: Iterable[str]) -> None:
    """One ResourceSlice per node with one IMEX channel device (a vLLM pod takes a whole node)."""
    custom = client.CustomObjectsApi(api_client)
    for node in node_names:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-imex"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}}}],
            },
        }
        _create(lambda body=body: custom.create_cluster_custom_object(*_DRA, "resourceslices", body))


def withdraw_channels(api_client: client.ApiClient, node_names: Iterable[str]) -> None:
    custom = client.CustomObjectsApi(api_client)
    for node in node_names:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*_DRA, "resourceslices", f"{node}-imex")


def sync_templates(api_client: client.ApiClient, namespace: str | None = None) -> int:
    """Create the missing claim template of every ComputeDomain (in ``namespace``, or all); returns how many."""
    custom = client.CustomObjectsApi(api_client)
    if namespace is None:
        domains = custom.list_cluster_custom_object(*_CD)["items"]
        templates = custom.list_cluster_custom_object(*_DRA, "resourceclaimtemplates")["items"]
    else:
        domains = custom.list_namespaced_custom_object(_CD[0], _CD[1], namespace, _CD[2])["items"]
        templates = custom.list_namespaced_custom_object(*_DRA, namespace, "resourceclaimtemplates")["items"]
    present = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in templates}
    created = 0
    for cd in domains:
        body = _template_for(cd)
        if body is None or (body["metadata"]["namespace"], body["metadata"]["name"]) in present:
            continue  # a template of a deleted predecessor goes with garbage collection first
        with contextlib.suppress(ApiException):
            custom.create_namespaced_custom_object(*_DRA, body["metadata"]["namespace"], "resourceclaimtemplates", body)
            created += 1
    return created


@contextlib.contextmanager
def driver(api_client: client.ApiClient, interval: float = 0.5) -> Iterator[None]:
    """Create the claim template of every ComputeDomain while the context is open (a polling controller)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            with contextlib.suppress(ApiException):
                sync_templates(api_client)

    thread = threading.Thread(target=loop, name="computedomain-driver", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _template_for(cd: dict[str, Any]) -> dict[str, Any] | None:
    name = ((cd.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate", {}).get("name")
    if not name or cd["metadata"].get("deletionTimestamp"):
        return None
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": cd["metadata"]["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": cd["apiVersion"],
                    "kind": "ComputeDomain",
                    "name": cd["metadata"]["name"],
                    "uid": cd["metadata"]["uid"],
                }
            ],
        },
        "spec": {
            "spec": {"devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": DEVICE_CLASS}}]}}
        },
    }


def _create(create: Any) -> None:
    try:
        create()
    except ApiException as error:
        if error.status != 409:
            raise
