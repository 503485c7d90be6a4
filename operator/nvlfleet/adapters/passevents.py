"""The Events a pass reads: what the API server says only in an Event, which no watch of the operator delivers.

Adapter, at the read step of the data flow (read → reconcile → …), beside the watch caches (``caches``). Two things
are said nowhere else: a pod the API server refused to create (Pod Security, quota) — only in the StatefulSet
controller's ``FailedCreate`` Event (``core.health``) —, and why KEDA's scaler cannot read the signal — only in
KEDA's ``KEDAScalerFailed`` Event about the ScaledObject (``core.autoscaling``). Listing Events on every pass would
cost a read per pass, so a pass lists them only when its children say they can matter (``needed``); and because
they are not watched, such a pass is never settled: the re-check reads them again (``Operator.reconcile``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nvlfleet.adapters import kube
from nvlfleet.api import names
from nvlfleet.core import autoscaling

log = logging.getLogger(__name__)


def read(api: kube.Api, namespace: str, serving: str, children: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Events a pass over ``serving``'s ``children`` needs: about the namespace's StatefulSets while a
    LeaderWorkerSet is short of ready groups, about its ScaledObject while KEDA reports the trigger failing."""
    children = list(children)
    found = _listed(api, namespace, "StatefulSet") if short_of_pods(children) else []
    if scaler_failing(children):
        found += _listed(api, namespace, names.SCALED_OBJECT.kind, serving)
    return found


def needed(children: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a pass over ``children`` reads Events — whether or not it finds any: the one it needs can be
    recorded a moment after the change that made the pass look, so such a pass is never settled."""
    children = list(children)
    return short_of_pods(children) or scaler_failing(children)


def short_of_pods(children: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a LeaderWorkerSet among ``children`` has fewer ready groups than it asks for: only then can a pod
    the API server refused matter."""
    for child in children:
        if child.get("kind") != names.LEADER_WORKER_SET.kind:
            continue
        wanted = (child.get("spec") or {}).get("replicas", 1)
        if (child.get("status") or {}).get("readyReplicas", 0) < wanted:
            return True
    return False


def scaler_failing(children: Iterable[Mapping[str, Any]]) -> bool:
    """Whether KEDA reports the trigger of the ScaledObject among ``children`` failing."""
    scaled = next((c for c in children if c.get("kind") == names.SCALED_OBJECT.kind), None)
    return autoscaling.trigger_failing(scaled)


def _listed(api: kube.Api, namespace: str, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """The Events about objects of ``kind`` (named ``name``) in ``namespace``. Without the grant to list them (an
    older chart's RBAC) the pass goes on without."""
    fields = {"involvedObject.kind": kind, **({"involvedObject.name": name} if name else {})}
    try:
        return api.list_objects(names.EVENT, namespace, fields=fields)
    except kube.ApiError as err:
        if err.status != 403:
            raise
        log.debug("cannot list Events in %s, so what they say is not reported: %s", namespace, err)
        return []
