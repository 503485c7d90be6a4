"""Whether a serving's front door works: the RouterReady condition, from the router's Deployment and the engines
its selectors can find.

Pure core, part of a pass's status step (… → health → **status**): ``nvlfleet.core.reconciler`` hands over the
serving's children (the router Deployment among them, as the watch last saw it) and the GPU pods, and adds the
condition this module judges to the ones ``core.report`` writes. The router discovers engines itself, through the
API server, by the leader labels ``render.router_engines`` gives it; a ready group leader that carries those labels
is exactly what it can send to, so that is what the condition counts. It is its own condition, not part of Ready:
Ready says the engines serve, RouterReady says a client can reach them through the serving's endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nvlfleet.api import models, names, objects, reasons
from nvlfleet.core import health, render, report

Judged = tuple[report.Status, str, str]  # (status, reason, message), as core.report.Conditions holds them


def condition(
    serving: models.DeepSeekServing, children: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> Judged | None:
    """RouterReady for a serving with a router, None without one (spec.router.enabled: false)."""
    if not serving.spec.router.enabled:
        return None
    name = render.router_name(serving.metadata.name)
    # A Deployment not created yet (the pass that creates it judges before the watch shows it) has no ready pod,
    # as one just created has not: the same words for both, so the pass after the first writes no new status.
    deployment = _deployment(children, name, serving.metadata.namespace) or {}
    wanted = serving.spec.router.replicas
    ready = objects.as_mapping(deployment.get("status")).get("readyReplicas")
    ready = ready if isinstance(ready, int) else 0
    found = {role: _ready_leaders(pods, labels) for role, labels in render.router_engines(serving).items()}
    engines = ", ".join(
        f"{count} {role.value} group leader{'s' if count != 1 else ''}" for role, count in found.items()
    )
    if ready < 1:
        return ("False", reasons.ROUTER_NOT_READY, f"{ready}/{wanted} router pods ready; it would route to {engines}")
    empty = [role.value for role, count in found.items() if count == 0]
    if empty:
        return (
            "False",
            reasons.NO_ENGINES,
            f"{ready}/{wanted} router pods ready, but no ready {' or '.join(empty)} group leader matches its selector "
            f"yet ({engines}): requests get an error until one is",
        )
    return ("True", reasons.ROUTING, f"{ready}/{wanted} router pods ready, routing to {engines}")


def _deployment(children: Sequence[Mapping[str, Any]], name: str, namespace: str) -> Mapping[str, Any] | None:
    for child in children:
        meta = objects.as_mapping(child.get("metadata"))
        if (
            child.get("kind") == names.DEPLOYMENT.kind
            and meta.get("name") == name
            and meta.get("namespace") in (None, namespace)
        ):
            return child
    return None


def _ready_leaders(pods: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> int:
    """Ready pods carrying every one of ``labels`` and an IP: what the router's discovery admits."""
    count = 0
    for pod in pods:
        carried = objects.as_mapping(objects.as_mapping(pod.get("metadata")).get("labels"))
        if all(carried.get(k) == v for k, v in labels.items()) and health.pod_ready(pod):
            count += bool(objects.as_mapping(pod.get("status")).get("podIP"))
    return count
