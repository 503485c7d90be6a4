"""Reading plain Kubernetes objects without trusting their shape.

Pure, for every step that reads what the API server returned (inventory, the reconciler's view of its children
and LeaderWorkerSets, the ownership rule): an object is a plain dict whose fields may be missing, null, or of a
type a buggy client wrote. Reading a sub-map through ``as_mapping`` turns all of those into an empty map, so a
malformed object is skipped or reported, never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a map, else an empty one."""
    return value if isinstance(value, Mapping) else {}
