"""The pod overrides (spec.pod): what Kubernetes would refuse only once LeaderWorkerSet makes the pods.

Pure core, inside the validate step: resources nvlfleet owns (the GPUs), label and annotation keys and values,
and mounts that clash with the weight cache or shm.
"""

from __future__ import annotations

import re

from nvlfleet.api import models, problems, schema
from nvlfleet.core.validation import findings

_SHM = "/dev/shm"  # noqa: S108 - the pod's shared-memory mount, sized by spec.pod.shmSize; not a temp file

_QUANTITY = re.compile(schema.QUANTITY)
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _qualified_name(key: str) -> bool:
    """A Kubernetes label or annotation key: ``[prefix/]name``."""
    prefix, _, name = key.rpartition("/")
    if prefix and not (len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def check_pod(spec: models.DeepSeekServingSpec, out: findings.Findings) -> None:
    pod = spec.pod
    for section, amounts in (pod.resources or {}).items():
        if section not in ("limits", "requests"):
            out.error(f"spec.pod.resources.{section}", "only limits and requests may be set")
            continue
        for resource, amount in amounts.items():
            if resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/"):
                out.error(
                    f"spec.pod.resources.{section}",
                    f"{resource} is nvlfleet's to request: every pod takes all GPUs of its node",
                )
            elif isinstance(amount, str) and not _QUANTITY.fullmatch(amount):
                out.error(
                    f'spec.pod.resources.{section}["{resource}"]',
                    f"{amount!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)",
                )
            elif str(amount).startswith("-"):
                out.error(f'spec.pod.resources.{section}["{resource}"]', f"{amount} is negative")
    # Kubernetes refuses these only when LeaderWorkerSet makes the pods, which then never appear: say so now.
    for field, mapping, values_are_labels in (
        ("labels", pod.labels, True),
        ("nodeSelector", pod.node_selector, True),
        ("annotations", pod.annotations, False),
    ):
        for key, value in mapping.items():
            where = f'spec.pod.{field}["{key}"]'
            if not _qualified_name(key):
                out.error(
                    where,
                    f"{key!r} is not a label key (an optional DNS prefix and '/', then at most 63 "
                    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
                )
            elif values_are_labels and not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
                out.error(
                    where,
                    f"{value!r} is not a label value (at most 63 letters, digits, '-', '_' or '.', "
                    "starting and ending with a letter or digit)",
                )
    reserved = {spec.model.weights.mount_path: "the weight cache (spec.model.weights.mountPath)", _SHM: "shm"}
    for i, mount in enumerate(pod.volume_mounts):
        target = mount.mount_path
        if target in reserved:
            what = reserved[target]
            out.error(
                problems.path("spec.pod.volumeMounts", i, "mountPath"),
                f"{target} is already mounted for {what}"
                + ("; size it with spec.pod.shmSize" if what == "shm" else ""),
            )
