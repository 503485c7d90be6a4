"""Which objects of a list are the very objects seen last time: how a fleet view is made from the one before.

Pure core, beside the fleet view's makers (``inventory.Builds``, ``leaderworkersets.Holds``, ``reconciler``'s view
sums). The operator's watch caches hand out the same parsed object until its Kubernetes object changes, so between
two views the objects that are not the same ones are the ones that changed: a few among thousands while a fleet
rolls out. Maps by identity are built and compared at C speed (``dict(zip(map(id, …)))`` and key-set
differences), where a loop over the thousands in Python was most of a view. Whoever keeps such a map keeps its
objects alive, so an id names one object for as long as it is compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

_T = TypeVar("_T")


def by_identity(objs: Sequence[_T]) -> dict[int, _T]:
    """``objs`` by their identity (an object listed twice is in it once)."""
    return dict(zip(map(id, objs), objs, strict=True))


def changes(last: Mapping[int, _T], now: Mapping[int, _T]) -> tuple[list[_T], list[_T]]:
    """The objects of ``now`` that are not in ``last`` (came), and those of ``last`` not in ``now`` (gone)."""
    return [now[i] for i in now.keys() - last.keys()], [last[i] for i in last.keys() - now.keys()]


def few(changed: int, total: int) -> bool:
    """Whether ``changed`` of ``total`` objects is few enough to make the next view from the last one: at most 64,
    or an eighth of them. Past that, making it whole costs about as much and is simpler to trust."""
    return changed <= max(64, total // 8)
