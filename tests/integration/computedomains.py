"""A stand-in for the NVIDIA DRA driver's ComputeDomain side, so pods that claim an IMEX channel can schedule.

The local cluster serves the ComputeDomain CRD but runs no NVIDIA driver (see localcluster.manifests). In a
real GB200 cluster the driver (1) publishes, per node, a ResourceSlice with an IMEX channel device and (2) for
each ComputeDomain creates the ResourceClaimTemplate named in ``spec.channel.resourceClaimTemplate.name``.
Pods rendered by nvlfleet claim that template, so without (1) and (2) kube-scheduler leaves them Pending.

This module does exactly those two things and nothing else: kube-scheduler's DRA plugin still allocates the
claims and kube-controller-manager still creates them from the templates, as in a real cluster. The
templates carry an owner reference to their ComputeDomain, so deleting a ComputeDomain removes its template.
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


def _custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def _create(create: Any, *args: Any) -> None:
    try:
        create(*args)
    except ApiException as error:
        if error.status != 409:
            raise


def install_device_class(api_client: client.ApiClient) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    _create(_custom(api_client).create_cluster_custom_object, "resource.k8s.io", "v1", "deviceclasses", body)


def publish_channels(api_client: client.ApiClient, node_names: Iterable[str]) -> None:
    """One ResourceSlice per node with one IMEX channel device (a vLLM pod takes a whole node)."""
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
        _create(_custom(api_client).create_cluster_custom_object, "resource.k8s.io", "v1", "resourceslices", body)


def withdraw_channels(api_client: client.ApiClient, node_names: Iterable[str]) -> None:
    for node in node_names:
        with contextlib.suppress(ApiException):
            _custom(api_client).delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", f"{node}-imex")


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


@contextlib.contextmanager
def driver(api_client: client.ApiClient, interval: float = 0.5) -> Iterator[None]:
    """Create the claim template of every ComputeDomain while the context is open (a polling controller)."""
    stop = threading.Event()
    custom = _custom(api_client)

    def loop() -> None:
        while not stop.wait(interval):
            try:
                domains = custom.list_cluster_custom_object("resource.nvidia.com", "v1beta1", "computedomains")
                templates = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaimtemplates")
            except ApiException:
                continue
            present = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in templates["items"]}
            for cd in domains["items"]:
                body = _template_for(cd)
                if body is None or (body["metadata"]["namespace"], body["metadata"]["name"]) in present:
                    continue  # a template of a deleted predecessor goes with garbage collection first
                with contextlib.suppress(ApiException):
                    custom.create_namespaced_custom_object(
                        "resource.k8s.io", "v1", body["metadata"]["namespace"], "resourceclaimtemplates", body
                    )

    thread = threading.Thread(target=loop, name="computedomain-driver", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
