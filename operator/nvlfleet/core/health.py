"""The health of a serving's groups: which are ready, which are rolling, which are hurt and why.

Pure core, between render and status in a pass (snapshot → plan → render → diff → **health** → status): for every
group the plan placed (its rendered LeaderWorkerSets), the group's pods say whether it is ready, lost a node,
crash-loops or waits for one; the observed LeaderWorkerSets say whether their controller is still rolling groups
to a new template. Each finding is a sentence for the serving's conditions.

A group whose pods the API server refuses (Pod Security, a quota, an admission webhook) has no pod to look at:
LeaderWorkerSet creates StatefulSets, and the StatefulSet controller creates the pods, so the refusal is said
only in that controller's ``FailedCreate`` Event on the StatefulSet (``create Pod <pod> in StatefulSet <sts>
failed error: pods "<pod>" is forbidden: violates PodSecurity ...``); neither the StatefulSet's nor the
LeaderWorkerSet's status carries it. A LeaderWorkerSet ``<lws>`` runs its leaders in StatefulSet ``<lws>`` and
the workers of group ``i`` in ``<lws>-<i>``. Such a refusal counts while it is that StatefulSet's latest word on
creating pods: a ``SuccessfulCreate`` after it (the namespace's policy was fixed) ends it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nvlfleet.api import models, names, objects, problems
from nvlfleet.core import inventory, leaderworkersets, planner

# The StatefulSet controller's Event reasons on creating a pod: a refusal, and a success that ends one.
REFUSED: Final = "FailedCreate"
CREATED: Final = "SuccessfulCreate"


@dataclasses.dataclass(frozen=True)
class Health:
    ready_groups: int
    placed_groups: int
    ready_by_role: Mapping[str, int]  # ready groups per role
    rolling: tuple[str, ...]  # LeaderWorkerSets still updating their groups
    not_ready: tuple[str, ...]  # one sentence per role and domain with groups not ready
    hurt: tuple[str, ...]  # one sentence per group that lost a node, crash-loops, or waits for a node


def assess(
    serving: models.DeepSeekServing,
    desired: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    observed: Iterable[Mapping[str, Any]],
    inv: inventory.Inventory,
    plan: planner.Plan,
    events: Iterable[Mapping[str, Any]] = (),
) -> Health:
    """The health of ``serving``'s groups as ``desired`` (its rendered children) places them, from its ``pods``,
    its ``observed`` children (for the LeaderWorkerSet controller's rollout state) and the ``events`` of the
    StatefulSets in its namespace (for pods the API server refuses to create)."""
    namespace, name = serving.metadata.namespace, serving.metadata.name
    label = serving.spec.placement.domain_label
    nodes = inv.by_name()
    members_of: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        meta = objects.as_mapping(pod.get("metadata"))
        labels = objects.as_mapping(meta.get("labels"))
        if meta.get("namespace", "default") != namespace or labels.get(names.SERVING_LABEL) != name:
            continue
        if meta.get("deletionTimestamp"):
            continue
        group = (str(labels.get(names.LWS_NAME_LABEL)), str(labels.get(names.LWS_GROUP_INDEX_LABEL)))
        members_of.setdefault(group, []).append(pod)
    observed_sets = {
        str(objects.as_mapping(c.get("metadata")).get("name")): c
        for c in observed
        if c.get("kind") == names.LEADER_WORKER_SET.kind
    }
    short = {d.key: d.short for d in plan.domains if d.short > 0}
    refused = refusals(events, namespace)

    ready = placed = 0
    ready_by_role: dict[str, int] = {}
    rolling: list[str] = []
    not_ready: list[str] = []
    hurt: list[str] = []
    for lws in desired:
        if lws.get("kind") != names.LEADER_WORKER_SET.kind:
            continue
        lws_name = str(objects.as_mapping(lws.get("metadata")).get("name"))
        role = str(
            objects.as_mapping(objects.as_mapping(lws.get("metadata")).get("labels")).get(names.ROLE_LABEL, "engine")
        )
        domain = leaderworkersets.domain(lws, label) or "unpinned"
        where = f"{role} in domain {inventory.short_domain(domain)}"
        replicas, size = leaderworkersets.groups(lws)
        placed += replicas
        here_ready = 0
        for index in range(replicas):
            members = members_of.get((lws_name, str(index)), [])
            problems_ = [p for m in members if (p := _pod_trouble(m, nodes, label, domain)) is not None]
            if problems_:
                hurt.append(f"{role} group {index} in domain {inventory.short_domain(domain)}: {problems_[0]}")
            elif len(members) == size and all(pod_ready(m) for m in members):
                here_ready += 1
        refusal = next(
            (refused[s] for s in (lws_name, *(f"{lws_name}-{i}" for i in range(replicas))) if s in refused), None
        )
        if refusal is not None and here_ready < replicas:
            hurt.append(f"{where}: the API server refuses its pods: {refusal}")
        ready += here_ready
        ready_by_role[role] = ready_by_role.get(role, 0) + here_ready
        if here_ready < replicas:
            not_ready.append(f"{where}: {here_ready}/{replicas} groups ready")
        if domain in short and here_ready < replicas:
            hurt.append(
                f"{where}: {replicas - here_ready} of its groups wait for nodes; the domain is short of "
                f"{problems.counted(short[domain], 'node')} for the groups placed there"
            )
        running = observed_sets.get(lws_name)
        if running is not None and _rolling(running):
            updated = objects.as_mapping(running.get("status")).get("updatedReplicas", 0)
            rolling.append(f"{where}: {updated}/{replicas} groups updated")
    return Health(ready, placed, ready_by_role, tuple(rolling), tuple(not_ready), tuple(hurt))


def refusals(events: Iterable[Mapping[str, Any]], namespace: str) -> dict[str, str]:
    """StatefulSet name → the message of its pod-creation refusal, for those in ``namespace`` whose latest
    ``FailedCreate``/``SuccessfulCreate`` Event is a refusal (see the module docstring)."""
    latest: dict[str, tuple[datetime.datetime, str, str]] = {}
    for event in events:
        involved = objects.as_mapping(event.get("involvedObject"))
        reason, name, message = event.get("reason"), involved.get("name"), event.get("message")
        if involved.get("kind") != "StatefulSet" or involved.get("namespace", namespace) != namespace:
            continue
        if reason not in (REFUSED, CREATED) or not isinstance(name, str):
            continue
        when = objects.event_time(event)
        if when is not None and (name not in latest or when >= latest[name][0]):
            latest[name] = (when, str(reason), message if isinstance(message, str) else "no message given")
    return {name: message for name, (_, reason, message) in latest.items() if reason == REFUSED}


def _rolling(lws: Mapping[str, Any]) -> bool:
    """Whether the LeaderWorkerSet controller is still rolling groups to its latest template (or has not yet
    looked at the latest generation)."""
    meta, status = objects.as_mapping(lws.get("metadata")), objects.as_mapping(lws.get("status"))
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return True
    return any(
        objects.as_mapping(c).get("type") == "UpdateInProgress" and objects.as_mapping(c).get("status") == "True"
        for c in status.get("conditions") or []
    )


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (what a Service, and the router's discovery, admit)."""
    for cond in objects.as_mapping(pod.get("status")).get("conditions") or []:
        cond = objects.as_mapping(cond)
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _pod_trouble(pod: Mapping[str, Any], nodes: Mapping[str, inventory.Node], label: str, domain: str) -> str | None:
    """Why a pod of a placed group cannot serve, for the Degraded condition; None when nothing is wrong yet.

    A node of the group that was cordoned, or that no longer carries the group's NVLink domain (``label`` now
    says another domain, or nothing: GPU Feature Discovery lost the fabric, someone relabelled it), degrades the
    group even while its pods still run: the group's all-to-all no longer has the domain it was placed in, and a
    cordoned node is on its way out."""
    meta = objects.as_mapping(pod.get("metadata"))
    node_name = objects.as_mapping(pod.get("spec")).get("nodeName")
    status = objects.as_mapping(pod.get("status"))
    pod_name = meta.get("name")
    if isinstance(node_name, str) and node_name:
        node = nodes.get(node_name)
        if node is None:
            return f"pod {pod_name} is on node {node_name}, which is gone"
        if not node.ready:
            return f"pod {pod_name} is on node {node_name}, which is NotReady"
        if node.unschedulable:
            return f"pod {pod_name} is on node {node_name}, which is cordoned"
        now = node.labels.get(label)
        # A group pinned by hostname (NVLink stops at the node) names its node, not a domain label's value.
        if domain != "unpinned" and domain not in (now, node.labels.get(names.HOSTNAME_LABEL, node.name)):
            where = f"{label} is now {now}" if now else f"its {label} label is gone"
            return f"pod {pod_name} is on node {node_name}, which left the group's NVLink domain ({where})"
    if status.get("phase") == "Failed":
        return f"pod {pod_name} failed ({status.get('reason') or 'no reason given'})"
    for container in status.get("containerStatuses") or []:
        waiting = objects.as_mapping(objects.as_mapping(objects.as_mapping(container).get("state")).get("waiting"))
        if waiting.get("reason") in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerError"):
            return f"pod {pod_name}: container {objects.as_mapping(container).get('name')} is in {waiting['reason']}"
    return None
