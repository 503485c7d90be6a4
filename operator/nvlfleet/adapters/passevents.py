"""The Events a pass reads: what the API server says only in an Event, which no watch of the operator delivers.

Adapter, at the read step of the data flow (read → reconcile → …), beside the watch caches (``caches``). Two things
are said nowhere else: a pod the API server refused to create (Pod Security, quota) — only in the StatefulSet
controller's ``FailedCreate`` Event (``core.health``) —, and why KEDA's scaler cannot read the signal — only in
KEDA's ``KEDAScalerFailed`` Event about the ScaledObject (``core.autoscaling``). Listing Events on every pass would
cost a read per pass, so a pass lists them only when its children say they can matter (``needed``); and because
they are not watched, such a pass is never settled: the re-check reads them again (``Operator.reconcile``).

While a fleet rolls out, every pass of every serving is short of ready groups, and the namespace holds a
``SuccessfulCreate`` Event per pod created: listing all StatefulSet Events there cost 54 ms and 56 KB per pass at
1,000 servings. So a pass asks the API server for the refusals only (``reason`` is a field the API server selects
Events on), which is an empty list unless something is refused, and for the successes only of the serving's own
StatefulSets that were refused, to see whether a later success ended the refusal. And it asks only while a pod of
a group short of readiness does not exist (``short_of_pods``): a refused pod is one that is not there, so once
every pod of a LeaderWorkerSet exists (scheduled, starting, loading the model) no refusal can be what keeps it
from ready. The API server answers such a list by scanning the namespace's Events, which grow with the fleet, as
the passes of a roll-out do, so a roll-out that asked on every pass cost the API server quadratic work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nvlfleet.adapters import kube
from nvlfleet.api import names, objects
from nvlfleet.core import autoscaling, health, leaderworkersets

log = logging.getLogger(__name__)


def read(
    api: kube.Api,
    namespace: str,
    serving: str,
    children: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The Events a pass over ``serving``'s ``children`` needs: the refused pods of the namespace's StatefulSets
    (and the successes after them on the serving's own) while a LeaderWorkerSet short of ready groups misses one of
    its ``pods`` (the GPU pods as watched); about its ScaledObject while KEDA reports the trigger failing."""
    children = list(children)
    found = _refusals(api, namespace, children) if short_of_pods(children, pods) else []
    if scaler_failing(children):
        found += _listed(api, namespace, names.SCALED_OBJECT.kind, serving)
    return found


def needed(children: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a pass over ``children`` and ``pods`` reads Events — whether or not it finds any: the one it needs
    can be recorded a moment after the change that made the pass look, so such a pass is never settled."""
    children = list(children)
    return short_of_pods(children, pods) or scaler_failing(children)


def short_of_pods(children: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a LeaderWorkerSet among ``children`` has fewer ready groups than it asks for and fewer of its
    ``pods`` (not being deleted) than those groups hold: only then can a pod the API server refused matter."""
    short: dict[tuple[str, str], int] = {}  # (namespace, LeaderWorkerSet) → pods its groups hold
    for child in children:
        if child.get("kind") != names.LEADER_WORKER_SET.kind:
            continue
        replicas, size = leaderworkersets.groups(child)
        if objects.as_mapping(child.get("status")).get("readyReplicas", 0) < replicas:
            meta = objects.as_mapping(child.get("metadata"))
            short[(str(meta.get("namespace")), str(meta.get("name")))] = replicas * size
    if not short:
        return False
    for pod in pods:
        meta = objects.as_mapping(pod.get("metadata"))
        owner = (str(meta.get("namespace")), str(objects.as_mapping(meta.get("labels")).get(names.LWS_NAME_LABEL)))
        if owner in short and not meta.get("deletionTimestamp"):
            short[owner] -= 1
    return any(missing > 0 for missing in short.values())


def scaler_failing(children: Iterable[Mapping[str, Any]]) -> bool:
    """Whether KEDA reports the trigger of the ScaledObject among ``children`` failing."""
    scaled = next((c for c in children if c.get("kind") == names.SCALED_OBJECT.kind), None)
    return autoscaling.trigger_failing(scaled)


def _refusals(api: kube.Api, namespace: str, children: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pod-creation refusals on StatefulSets in ``namespace``, and the successes that may have ended those on
    the StatefulSets of the LeaderWorkerSets among ``children`` (leaders in ``<lws>``, workers in ``<lws>-<i>``)."""
    refused = _listed(api, namespace, "StatefulSet", reason=health.REFUSED)
    owners = [
        str(objects.as_mapping(c.get("metadata")).get("name"))
        for c in children
        if c.get("kind") == names.LEADER_WORKER_SET.kind
    ]
    ours = sorted(
        {
            name
            for name in (objects.as_mapping(e.get("involvedObject")).get("name") for e in refused)
            if isinstance(name, str) and any(name == lws or name.startswith(f"{lws}-") for lws in owners)
        }
    )
    return refused + [e for name in ours for e in _listed(api, namespace, "StatefulSet", name, health.CREATED)]


def _listed(
    api: kube.Api, namespace: str, kind: str, name: str | None = None, reason: str | None = None
) -> list[dict[str, Any]]:
    """The Events about objects of ``kind`` (named ``name``, with ``reason``) in ``namespace``. Without the grant
    to list them (an older chart's RBAC) the pass goes on without."""
    fields = {
        "involvedObject.kind": kind,
        **({"involvedObject.name": name} if name else {}),
        **({"reason": reason} if reason else {}),
    }
    try:
        return api.list_objects(names.EVENT, namespace, fields=fields)
    except kube.ApiError as err:
        if err.status != 403:
            raise
        log.debug("cannot list Events in %s, so what they say is not reported: %s", namespace, err)
        return []
