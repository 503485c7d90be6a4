"""What a LeaderWorkerSet nvlfleet made says: the NVLink domain it is pinned to, its groups, the placements it holds.

Pure core, the inverse of ``render`` for LeaderWorkerSets, read at the start of every pass (snapshot → **what
runs** → plan → render → diff). What is running is the truth: a serving's current placement is read from its
LeaderWorkerSets, not from its status, so a restart mid-rollout or a lost status write re-plans from the cluster
as it is, and every other serving's LeaderWorkerSets hold their capacity, including groups whose pods are not
scheduled yet. Objects are read as the API server returned them, without trusting their shape.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nvlfleet.api import models, names, objects, ownership
from nvlfleet.core import identities, inventory, placements


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
    its sets hold changed; making a thousand of them anew was the largest own-time frame of a view.

    Even remembered, going over a thousand sets and a thousand roles was most of a view once its inventory was made
    from the one before (``inventory.Builds``). So ``held`` keeps a book of the last read of each label: which set
    objects it read (by identity: the watch cache hands out the same object until its set changes) and each role's
    placement; the next read finds the sets that are new objects with set differences and makes again only their
    roles' placements."""

    def __init__(self) -> None:
        self._by_label: dict[str, dict[tuple[str, str], Hold | None]] = {}
        self._placed: dict[str, dict[_Placed, placements.Placement]] = {}
        self._last: dict[str, _Book] = {}
        self.whole = 0  # reads of the whole fleet (the first of each label included), for tests and benches
        self.partial = 0

    def held(
        self, fleet: Sequence[Mapping[str, Any]], label: str, live: frozenset[str] | None
    ) -> list[placements.Placement]:
        """``held`` through this memo: from the book of the last call for ``label``, only the sets that are not
        the same objects as then are read (the watch cache hands out the same object until its set changes), and
        only their roles' placements made again; the whole fleet is read when the live servings changed or much
        changed at once."""
        last = self._last.get(label)
        book = _booked(last, fleet, live, self._by_label.get(label, {})) if last is not None else None
        if book is None:
            self.whole += 1
            book = _whole_book(fleet, label, live, self)
        else:
            self.partial += 1
        self._last[label] = book
        return list(book.out)

    def __len__(self) -> int:
        """LeaderWorkerSets remembered, over every label: those of the latest fleet read."""
        return sum(len(book.sets) for book in self._last.values())

    def read(
        self,
        fleet: Iterable[Mapping[str, Any]],
        label: str,
        sets: dict[int, tuple[Mapping[str, Any], Hold | None]] | None = None,
    ) -> list[Hold]:
        """``hold`` of each of ``fleet`` that holds something, in ``fleet``'s order (``sets``: filled with each
        set and what it holds, by identity)."""
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
            if sets is not None:
                sets[id(lws)] = (lws, one)
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


@dataclasses.dataclass(frozen=True, eq=False)
class _Book:
    """What one ``Holds.held`` call read: each set by identity (which keeps it alive, so an id names one object)
    with what it holds, the live servings it was read with, each role's holds (by set identity) and placement."""

    label: str
    sets: Mapping[int, tuple[Mapping[str, Any], Hold | None]]
    live: frozenset[str] | None
    owners: Mapping[inventory.RoleKey, Mapping[int, Hold]]
    uids: Mapping[str, frozenset[int]]  # per owning serving's uid, the sets that hold something for it, live or not
    order: tuple[inventory.RoleKey, ...]  # the roles with a placement, sorted
    out: tuple[placements.Placement, ...]  # their placements, in that order
    # Roles whose sets differ in nodes per group (a resize rolling out): the first in the fleet's order counts, so
    # these are made again on every read, whatever moved.
    mixed: frozenset[inventory.RoleKey]


def _whole_book(fleet: Sequence[Mapping[str, Any]], label: str, live: frozenset[str] | None, holds: Holds) -> _Book:
    sets: dict[int, tuple[Mapping[str, Any], Hold | None]] = {}
    owners: dict[inventory.RoleKey, dict[int, Hold]] = {}
    read = holds.read(fleet, label, sets)
    for i, (_, one) in sets.items():
        if one is not None and (live is None or one[4] in live):
            owners.setdefault(one[0], {})[i] = one
    uids: dict[str, frozenset[int]] = {}
    for i, (_, one) in sets.items():
        if one is not None:
            uids[one[4]] = uids.get(one[4], frozenset()) | {i}
    out = holds.placed(label, _made(read, live))
    return _Book(label, sets, live, owners, uids, tuple(p.owner for p in out), tuple(out), _mixed(owners, owners))


def _mixed(
    owners: Mapping[inventory.RoleKey, Mapping[int, Hold]], among: Iterable[inventory.RoleKey]
) -> frozenset[inventory.RoleKey]:
    return frozenset(o for o in among if o in owners and len({one[1] for one in owners[o].values()}) > 1)


def _memoized(lws: Mapping[str, Any], label: str, memo: Mapping[tuple[str, str], Hold | None]) -> Hold | None:
    meta = objects.as_mapping(lws.get("metadata"))
    key = (meta.get("uid"), meta.get("resourceVersion"))
    return memo[key] if key in memo else hold(lws, label)  # type: ignore[index]


def _booked(
    last: _Book,
    fleet: Sequence[Mapping[str, Any]],
    live: frozenset[str] | None,
    memo: Mapping[tuple[str, str], Hold | None],
) -> _Book | None:
    """``last`` with the sets of ``fleet`` that are new objects read, and the sets of the servings that came or
    went (``live``) counted or not; None when the whole fleet is to be read."""
    lived: frozenset[str] = frozenset()
    died: frozenset[str] = frozenset()
    if live is not last.live and live != last.live:
        if live is None or last.live is None:
            return None
        lived, died = live - last.live, last.live - live  # a serving came or went: its sets hold, or no longer
    by_id = identities.by_identity(fleet)
    if len(by_id) != len(fleet):
        return None  # one object listed twice: read as ``held`` reads it
    came = by_id.keys() - last.sets.keys()
    gone = last.sets.keys() - by_id.keys()
    if not came and not gone and not lived and not died and not last.mixed:
        return last
    if not identities.few(len(came) + len(gone) + len(lived) + len(died), len(fleet)):
        return None
    sets = dict(last.sets)
    owners = dict(last.owners)
    uids = dict(last.uids)
    touched: set[inventory.RoleKey] = set(last.mixed)

    def count(i: int, one: Hold) -> None:
        if i not in owners.get(one[0], {}):
            owners[one[0]] = {**owners.get(one[0], {}), i: one}
            touched.add(one[0])

    def uncount(i: int, one: Hold) -> None:
        if i in owners.get(one[0], {}):
            owners[one[0]] = {k: v for k, v in owners[one[0]].items() if k != i}
            touched.add(one[0])

    for i in gone:
        _, one = sets.pop(i)
        if one is not None:
            uncount(i, one)
            uids[one[4]] -= {i}
            if not uids[one[4]]:
                del uids[one[4]]
    for i in came:
        lws = by_id[i]
        one = _memoized(lws, last.label, memo)
        sets[i] = (lws, one)
        if one is not None:
            uids[one[4]] = uids.get(one[4], frozenset()) | {i}
            if live is None or one[4] in live:
                count(i, one)
    for uid in died:
        for i in uids.get(uid, ()):
            uncount(i, sets[i][1])  # type: ignore[arg-type] # a set in ``uids`` holds something
    for uid in lived:
        for i in uids.get(uid, ()):
            count(i, sets[i][1])  # type: ignore[arg-type]
    order, out = list(last.order), list(last.out)
    position: dict[int, int] | None = None
    for owner in touched:
        at = bisect.bisect_left(order, owner)
        present = at < len(order) and order[at] == owner
        mine = owners.get(owner)
        if not mine:
            owners.pop(owner, None)
            if present:
                del order[at], out[at]
            continue
        ordered = list(mine.values())
        if len({one[1] for one in ordered}) > 1:  # the first in the fleet's order gives the nodes per group
            if position is None:
                position = dict(zip(map(id, fleet), range(len(fleet)), strict=True))
            ordered = [mine[i] for i in sorted(mine, key=position.__getitem__)]
        size = ordered[0][1]
        per: dict[str, int] = {}
        for _, _, where, replicas, _ in ordered:
            per[where] = per.get(where, 0) + replicas
        made = (owner, size, tuple((d, g) for d, g in sorted(per.items()) if g > 0))
        if not present:
            order.insert(at, owner)
            out.insert(at, _placement(made))
        elif (out[at].nodes_per_group, tuple(out[at].groups.items())) != made[1:]:
            out[at] = _placement(made)
    mixed = _mixed(owners, touched)  # every role of ``last.mixed`` was touched
    return _Book(last.label, sets, live, owners, uids, tuple(order), tuple(out), mixed)


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
    if holds is not None:
        return holds.held(fleet if isinstance(fleet, Sequence) else list(fleet), label, live)
    read = [one for one in map(hold, fleet, itertools.repeat(label)) if one is not None]
    return [_placement(m) for m in _made(read, live)]


def _made(read: Iterable[Hold], live: frozenset[str] | None) -> list[_Placed]:
    """Each serving role's placement from what its sets hold (in the fleet's order: the first gives the nodes per
    group), in role order."""
    found: dict[inventory.RoleKey, tuple[int, dict[str, int]]] = {}
    for owner, size, where, replicas, uid in read:
        if live is not None and uid not in live:
            continue
        _, per = found.setdefault(owner, (size, {}))
        per[where] = per.get(where, 0) + replicas
    return [
        (owner, npg, tuple((d, g) for d, g in sorted(per.items()) if g > 0))
        for owner, (npg, per) in sorted(found.items())
    ]


def _placement(made: _Placed) -> placements.Placement:
    owner, npg, groups = made
    return placements.Placement(owner.serving, owner.role, npg, dict(groups))
