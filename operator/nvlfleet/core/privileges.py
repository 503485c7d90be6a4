"""What a serving asks for beyond the cluster admin's policy (``api.policy``), and credentials written into it.

Pure core, part of validate (inventory + spec → **validate** → plan → render → …): ``validation.review`` calls
``problems_of`` with the policy the operator (or ``nvlfleet validate``) was given, so the webhook, the reconciler
and the offline check refuse the same things with the same field paths. Each refusal names the policy setting
that would allow it, because the person refused is usually not the person who can change it.

Checked here:

* host paths: the weight cache's ``hostPath`` and any ``hostPath`` volume must lie under a prefix the admin
  allows (none by default: weights come from PersistentVolumeClaims);
* ``serviceAccountName`` and ``priorityClassName`` must be ones the admin lists (none by default: engine pods
  need no API access, and a priority above the namespace default preempts other tenants' work);
* a credential-shaped string (a Hugging Face, OpenAI-style, AWS or GitHub token, a JWT) anywhere in the spec:
  every spec string can reach an argument, an environment literal, a label or an annotation, where anyone who
  can read the pod reads it. Secrets are referenced (``hfTokenSecretRef``, ``valueFrom.secretKeyRef``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from nvlfleet.api import models, policy, problems

# Strings validation already refuses when they look like a credential, with advice on where the secret goes.
_CHECKED_WITH_ADVICE = ("spec.extraArgs[", "spec.extraEnv[")


def problems_of(spec: models.DeepSeekServingSpec, allowed: policy.Policy) -> list[problems.Problem]:
    """Every request of ``spec`` the policy does not allow, and every credential-shaped string in it."""
    found: list[problems.Problem] = []
    weights = spec.model.weights
    if weights.cache == "hostPath" and weights.host_path is not None:
        path = weights.host_path.path
        if not policy.allows_path(allowed.weights_host_path_prefixes, path):
            found.append(
                _refused("spec.model.weights.hostPath.path", f"host path {path}", allowed, "weights_host_path_prefixes")
            )
    for i, volume in enumerate(spec.pod.volumes):
        if volume.host_path is not None and not policy.allows_path(allowed.volume_host_paths, volume.host_path.path):
            where = problems.path("spec.pod.volumes", i, "hostPath", "path")
            found.append(_refused(where, f"host path {volume.host_path.path}", allowed, "volume_host_paths"))
    account = spec.pod.service_account_name
    if account is not None and account not in allowed.service_accounts:
        found.append(_refused("spec.pod.serviceAccountName", f"ServiceAccount {account}", allowed, "service_accounts"))
    priority = spec.pod.priority_class_name
    if priority is not None and priority not in allowed.priority_classes:
        found.append(_refused("spec.pod.priorityClassName", f"PriorityClass {priority}", allowed, "priority_classes"))
    found += [
        problems.Problem(where, "looks like a credential; secrets are referenced from a Secret, never written here")
        for where, text in _strings(spec.to_wire(), "spec")
        if problems.CREDENTIAL.search(text) and not where.startswith(_CHECKED_WITH_ADVICE)
    ]
    return found


def _refused(where: str, what: str, allowed: policy.Policy, setting: str) -> problems.Problem:
    listed = getattr(allowed, setting)
    now = f"it allows {', '.join(listed)}" if listed else "it allows none"
    return problems.Problem(
        where, f"{what} is not allowed by the cluster's nvlfleet policy ({now}; set by {allowed.where(setting)})"
    )


def _strings(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string in a wire-form spec with its field path (map keys too: a label key can carry a token)."""
    if isinstance(node, str):
        yield where, node
    elif isinstance(node, Mapping):
        for key, value in node.items():
            shown = "<redacted>" if problems.CREDENTIAL.search(str(key)) else key  # a path is printed too
            inner = f"{where}.{key}" if str(key).isidentifier() else f'{where}["{shown}"]'
            yield inner, str(key)
            yield from _strings(value, inner)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{where}[{i}]")
