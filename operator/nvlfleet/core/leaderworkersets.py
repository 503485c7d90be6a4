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


# What one LeaderWorkerSet holds: (its serving's role, nodes per group, domain, groups, the owning serving's uid).
Hold = tuple[inventory.RoleKey, int, str, int, str]

# A placement as ``held`` finds it: (serving role, nodes per group, (domain, groups) sorted by domain).
_Placed = tuple[inventory.RoleKey, int, tuple[tuple[str, int], ...]]


class Holds:
    """What each LeaderWorkerSet holds, read once per version of it (its uid and resourceVersion) and domain label.

    A fleet view reads every serving's LeaderWorkerSets (``held``), and while a fleet rolls out the operator builds
    one many times a minute, each time from the thousand sets of a thousand servings of which one or two changed
    since the last; reading each one's labels, owner reference and affinity again was the larger part of a view
    (``bench/reconcile_bench.py``). A resourceVersion names one content of one object, so what was read of it
    stays true. Only the sets of the latest read of each label are kept: the memo never outgrows the fleet.

    The placements made of them are kept the same way (``placed``): one per serving role, made again only when what
    its sets hold changed; making a thousand of them anew was the largest own-time frame of a view."""

    def __init__(self) -> None:
        self._by_label: dict[str, dict[tuple[str, str], Hold | None]] = {}
        self._placed: dict[str, dict[_Placed, placements.Placement]] = {}

    def __len__(self) -> int:
        """Versions of LeaderWorkerSets remembered, over every label."""
        return sum(map(len, self._by_label.values()))

    def read(self, fleet: Iterable[Mapping[str, Any]], label: str) -> list[Hold]:
        """``hold`` of each of ``fleet`` that holds something, in ``fleet``'s order."""
        before = self._by_label.get(label, {})
        now: dict[tuple[str, str], Hold | None] = {}
        found = []
        for lws in fleet:
            meta = objects.as_mapping(lws.get("metadata"))
            uid, version = meta.get("uid"), meta.get("resourceVersion")
            if isinstance(uid, str) and uid and isinstance(version, str) and version:
                key = (uid, version)
                one = before[key] if key in before else hold(lws, label)
                now[key] = one
            else:  # no version to name what was read: read it again each time
                one = hold(lws, label)
            if one is not None:
                found.append(one)
        self._by_label[label] = now
        return found

    def placed(self, label: str, made: Iterable[_Placed]) -> list[placements.Placement]:
        """A placement of each of ``made`` — (role, nodes per group, groups per domain sorted) — in that order, the
        one of the last call for ``label`` when it is the same."""
        before = self._placed.get(label, {})
        now = {m: before.get(m) or _placement(m) for m in made}
        self._placed[label] = now
        return list(now.values())


def hold(lws: Mapping[str, Any], label: str) -> Hold | None:
    """What one LeaderWorkerSet holds (see ``held``): None unless a serving owns it, labels its role and pins it
    to a domain of ``label``."""
    meta = objects.as_mapping(lws.get("metadata"))
    labels = objects.as_mapping(meta.get("labels"))
    name, role = labels.get(names.SERVING_LABEL), labels.get(names.ROLE_LABEL)
    uid = ownership.owning_serving_uid(lws)
    if uid is None or not isinstance(name, str) or not isinstance(role, str):
        return None
    where = domain(lws, label)
    if where is None:
        return None
    replicas, size = groups(lws)
    owner = inventory.RoleKey(inventory.ServingKey(str(meta.get("namespace", "default")), name), role)
    return owner, size, where, replicas, uid


def held(
    fleet: Iterable[Mapping[str, Any]],
    label: str,
    live: frozenset[str] | None = None,
    holds: Holds | None = None,
) -> list[placements.Placement]:
    """Every serving's groups per role and domain, from the LeaderWorkerSets nvlfleet made for them (read through
    ``holds`` when given, which remembers what each version of a set holds).

    Only a LeaderWorkerSet a serving owns holds capacity: nvlfleet's labels and domain annotation can be written
    on any object, so a hand-made one (no controller owner reference to a DeepSeekServing, or one to a serving
    that no longer exists: ``live``, the uids of the servings that do, when the adapter knows them) holds nothing.
    Its pods, if any ever bind, hold their GPUs through the inventory like any other pod."""
    found: dict[inventory.RoleKey, tuple[int, dict[str, int]]] = {}
    read = holds.read(fleet, label) if holds is not None else [h for lws in fleet if (h := hold(lws, label))]
    for owner, size, where, replicas, uid in read:
        if live is not None and uid not in live:
            continue
        _, per = found.setdefault(owner, (size, {}))
        per[where] = per.get(where, 0) + replicas
    made = [
        (owner, npg, tuple((d, g) for d, g in sorted(per.items()) if g > 0))
        for owner, (npg, per) in sorted(found.items())
    ]
    return holds.placed(label, made) if holds is not None else [_placement(m) for m in made]


def _placement(made: _Placed) -> placements.Placement:
    owner, npg, groups = made
    return placements.Placement(owner.serving, owner.role, npg, dict(groups))
