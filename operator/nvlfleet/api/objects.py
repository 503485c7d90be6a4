"""Reading plain Kubernetes objects without trusting their shape.

Pure, for every step that reads what the API server returned (inventory, the reconciler's view of its children
and LeaderWorkerSets, the ownership rule): an object is a plain dict whose fields may be missing, null, or of a
type a buggy client wrote. Reading a sub-map through ``as_mapping`` turns all of those into an empty map, so a
malformed object is skipped or reported, never a crash.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a map, else an empty one."""
    # A decoded object's maps are dicts: checking that first skips the abstract-class check of ``Mapping``, the
    # larger part of this call's cost, in a function a fleet view calls some ten thousand times.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def event_time(event: Mapping[str, Any]) -> datetime.datetime | None:
    """When an Event last happened: its series' last observation, last timestamp, event time or creation."""
    series = as_mapping(event.get("series"))
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        as_mapping(event.get("metadata")).get("creationTimestamp"),
    ):
        if isinstance(value, str) and value:
            try:
                parsed = datetime.datetime.fromisoformat(value)
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
    return None
