"""What a LeaderWorkerSet nvlfleet made says: the NVLink domain it is pinned to, its groups, the placements it holds.

Pure core, the inverse of ``render`` for LeaderWorkerSets, read at the start of every pass (snapshot → **what
runs** → plan → render → diff). What is running is the truth: a serving's current placement is read from its
LeaderWorkerSets, not from its status, so a restart mid-rollout or a lost status write re-plans from the cluster
as it is, and every other serving's LeaderWorkerSets hold their capacity, including groups whose pods are not
scheduled yet. Objects are read as the API server returned them, without trusting their shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nvlfleet.api import models, names, objects, ownership
from nvlfleet.core import inventory, placements


def domain(lws: Mapping[str, Any], domain_label: str) -> str | None:
    """The NVLink domain a LeaderWorkerSet is pinned to: render's ``nvlfleet.io/domain-value`` annotation, else
    the one value its required node affinity demands for ``domain_label`` (or the hostname, where NVLink stops at
    the node). None for an unpinned LeaderWorkerSet."""
    value = objects.as_mapping(objects.as_mapping(lws.get("metadata")).get("annotations")).get(
        names.DOMAIN_VALUE_ANNOTATION
    )
    if isinstance(value, str) and value:
        return value
    spec = objects.as_mapping(objects.as_mapping(lws.get("spec")).get("leaderWorkerTemplate"))
    for template_key in ("leaderTemplate", "workerTemplate"):
        pod_spec = objects.as_mapping(objects.as_mapping(spec.get(template_key)).get("spec"))
        affinity = objects.as_mapping(objects.as_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
        required = objects.as_mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
        for term in required.get("nodeSelectorTerms") or []:
            for expr in objects.as_mapping(term).get("matchExpressions") or []:
                expr = objects.as_mapping(expr)
                values = expr.get("values") or []
                if (
                    expr.get("key") in (domain_label, names.HOSTNAME_LABEL)
                    and expr.get("operator") == "In"
                    and len(values) == 1
                ):
                    return str(values[0])
        selector = objects.as_mapping(pod_spec.get("nodeSelector"))
        for label in (domain_label, names.HOSTNAME_LABEL):
            if isinstance(selector.get(label), str):
                return str(selector[label])
    return None


def groups(lws: Mapping[str, Any]) -> tuple[int, int]:
    """(replicas, nodes per group) of a LeaderWorkerSet."""
    spec = objects.as_mapping(lws.get("spec"))
    replicas = spec.get("replicas", 1)
    size = objects.as_mapping(spec.get("leaderWorkerTemplate")).get("size", 1)
    return (replicas if isinstance(replicas, int) else 1), (size if isinstance(size, int) else 1)


def placements_of(
    key: inventory.ServingKey, serving: models.DeepSeekServing, own_sets: Iterable[Mapping[str, Any]], label: str
) -> list[placements.Placement]:
    """This serving's groups per role and domain, from its LeaderWorkerSets (roles its spec still has)."""
    roles = {role.value: spec for role, spec in serving.spec.roles_present()}
    per_role: dict[str, dict[str, int]] = {}
    for lws in own_sets:
        role = objects.as_mapping(objects.as_mapping(lws.get("metadata")).get("labels")).get(names.ROLE_LABEL)
        where = domain(lws, label)
        if role not in roles or where is None:
            continue
        replicas, _ = groups(lws)
        per = per_role.setdefault(role, {})
        per[where] = per.get(where, 0) + replicas
    return [
        placements.Placement(
            serving=key,
            role=role,
            nodes_per_group=models.role_topology(serving.spec.gpu, roles[role]).nodes_per_group,
            groups={d: g for d, g in sorted(per.items()) if g > 0},
        )
        for role, per in sorted(per_role.items())
    ]


def held(
    fleet: Iterable[Mapping[str, Any]], label: str, live: frozenset[str] | None = None
) -> list[placements.Placement]:
    """Every serving's groups per role and domain, from the LeaderWorkerSets nvlfleet made for them.

    Only a LeaderWorkerSet a serving owns holds capacity: nvlfleet's labels and domain annotation can be written
    on any object, so a hand-made one (no controller owner reference to a DeepSeekServing, or one to a serving
    that no longer exists: ``live``, the uids of the servings that do, when the adapter knows them) holds nothing.
    Its pods, if any ever bind, hold their GPUs through the inventory like any other pod."""
    found: dict[inventory.RoleKey, tuple[int, dict[str, int]]] = {}
    for lws in fleet:
        meta = objects.as_mapping(lws.get("metadata"))
        labels = objects.as_mapping(meta.get("labels"))
        name, role = labels.get(names.SERVING_LABEL), labels.get(names.ROLE_LABEL)
        uid = ownership.owning_serving_uid(lws)
        if uid is None or (live is not None and uid not in live) or not isinstance(name, str):
            continue
        if not isinstance(role, str):
            continue
        owner = inventory.RoleKey(inventory.ServingKey(str(meta.get("namespace", "default")), name), role)
        where = domain(lws, label)
        if where is None:
            continue
        replicas, size = groups(lws)
        _, per = found.setdefault(owner, (size, {}))
        per[where] = per.get(where, 0) + replicas
    return [
        placements.Placement(owner.serving, owner.role, npg, {d: g for d, g in sorted(per.items()) if g > 0})
        for owner, (npg, per) in sorted(found.items())
    ]
