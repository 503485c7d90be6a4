"""What one pass of a serving reads, as versions (``Inputs``), and why two such readings differ, in words.

Adapter, beside the watch caches (``caches``), at the entry of the data flow (**a pass for a serving** → read →
reconcile → …). After a pass that changed nothing, the operator keeps what it read; the periodic re-check runs
a pass only for a serving whose inputs moved since (``Operator.recheck_all``), so an idle fleet costs no API call.
When it does run one, ``changes`` says which part moved: the debug log of what keeps a fleet busy.
"""

from __future__ import annotations

from typing import NamedTuple


class Inputs(NamedTuple):
    """A pass's inputs, as ``Operator.inputs`` reads them from the watch caches."""

    serving: str  # the serving's resourceVersion, as last watched or written
    fleet: int  # the caches' version (nodes, GPU pods, LeaderWorkerSets) while groups wait for room, else 0
    pending: tuple[tuple[str, str, str], ...]  # its writes the watch has not delivered: (kind, name, version)
    pruned: int  # its children this process deleted that the watch still shows
    children: tuple[tuple[str, str], ...]  # each child's (kind, resourceVersion), sorted


_SAID = {
    "serving": "the serving's version",
    "fleet": "the fleet's version",
    "pending": "its writes not yet watched",
    "pruned": "its children pruned",
    "children": "its children's versions",
}


def changes(settled: Inputs, now: Inputs) -> str:
    """The parts of ``now`` that differ from ``settled``, each with both values."""
    return "; ".join(
        f"{_SAID[field]} {was!r} → {is_!r}"
        for field, was, is_ in zip(Inputs._fields, settled, now, strict=True)
        if was != is_
    )


def why_unsettled(settled: Inputs | None, watched: bool, now: Inputs | None) -> str:
    """Why a re-check runs a pass, in words: what makes an idle fleet busy. ``watched``: whether the serving was
    watched yet; ``now``: its inputs as they are (None without the children's indexes)."""
    if not watched:
        return "the serving was not watched yet"
    if settled is None:
        return "its last pass did not settle (it applied or deleted children, or failed)"
    if now is None:
        return "the children's indexes are missing"
    return changes(settled, now)
