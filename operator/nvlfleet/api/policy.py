"""What the cluster admin lets a DeepSeekServing ask for: the trust boundary between a serving's author and the
GPU nodes.

Part of the API, beside the models: the admin sets it (chart values → ``nvlfleet run`` flags; the same flags or
a file for ``nvlfleet validate``), and ``core.privileges`` checks a serving against it at admission (the webhook)
and on every pass (the reconciler, which also sees what got in while the webhook was away). A serving is a
privilege because the operator's own ServiceAccount creates its pods through LeaderWorkerSet: namespace RBAC that
forbids a user to create a hostPath pod does not stop a serving that renders one. So the default allows nothing
beyond what vLLM needs: weights on PersistentVolumeClaims, no host paths, the namespace's default ServiceAccount,
no PriorityClass.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

# The flag (``nvlfleet run`` / ``nvlfleet validate``), chart value and file key of each setting: refusals name
# them so that a person knows which line of which file would allow what they asked for.
FLAGS: Mapping[str, tuple[str, str]] = {
    "weights_host_path_prefixes": ("--allow-weights-host-path", "policy.weightsHostPathPrefixes"),
    "volume_host_paths": ("--allow-volume-host-path", "policy.volumeHostPathPrefixes"),
    "service_accounts": ("--allow-service-account", "policy.serviceAccounts"),
    "priority_classes": ("--allow-priority-class", "policy.priorityClasses"),
}


@dataclasses.dataclass(frozen=True)
class Policy:
    """Each field lists what is allowed; empty allows none."""

    weights_host_path_prefixes: tuple[str, ...] = ()  # directories under which spec.model.weights.hostPath may lie
    volume_host_paths: tuple[str, ...] = ()  # directories under which a spec.pod.volumes hostPath may lie
    service_accounts: tuple[str, ...] = ()  # names spec.pod.serviceAccountName may give
    priority_classes: tuple[str, ...] = ()  # names spec.pod.priorityClassName may give

    def where(self, setting: str) -> str:
        """How to allow more of ``setting``: its flag and chart value."""
        flag, value = FLAGS[setting]
        return f"{flag} (chart value {value})"


DEFAULT = Policy()  # what an installation allows until its admin says otherwise: nothing beyond what vLLM needs


def allows_path(prefixes: Sequence[str], path: str) -> bool:
    """Whether ``path`` is one of ``prefixes`` or lies beneath one, after resolving ``.`` and ``..`` lexically."""
    resolved = pathlib.PurePosixPath(_normal(path))
    return any(
        resolved == (p := pathlib.PurePosixPath(_normal(prefix))) or p in resolved.parents for prefix in prefixes
    )


def _normal(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def from_mapping(data: Mapping[str, Any]) -> Policy:
    """A policy from the chart's ``policy:`` values (camelCase keys, lists of strings); raises ValueError."""
    keys = {value.rpartition(".")[2]: field for field, (_, value) in FLAGS.items()}
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise ValueError(f"unknown policy key(s) {', '.join(unknown)}; known: {', '.join(sorted(keys))}")
    fields: dict[str, tuple[str, ...]] = {}
    for key, value in data.items():
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"policy.{key} must be a list of non-empty strings")
        fields[keys[key]] = tuple(value)
    return Policy(**fields)
