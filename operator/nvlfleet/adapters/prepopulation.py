"""kopf's index pre-population at start-up: what it costs with thousands of objects, and when it is over.

Adapter, before the first pass of the data flow. kopf runs no handler until every object of every indexed resource
(nodes, pods, the children, the servings) has been indexed once: each object's first event adds an "off" toggle to
one ``ToggleSet`` and drops it once indexed, and each object's worker then waits until the set is "on". kopf 1.45
wakes every waiting worker whenever a toggle is added or dropped, and each one re-evaluates the set: with N objects
listed, start-up costs about N² wake-ups. A thousand servings bring five thousand objects (servings,
LeaderWorkerSets, Services, pods, nodes); a py-spy profile of ``nvlfleet run`` starting on such a fleet showed 46%
of its CPU in ``Condition.notify`` under ``ToggleSet.make_toggle`` (30 s sampled six minutes into
start-up, with a build running beside it).

``install`` makes the workers that wait on one set for one state share a single waiter: a change wakes that one
task, which evaluates the set once, and the workers run only when the set is in the state they wait for. What a
worker waits for and when it resumes are kopf's; only the number of wake-ups changes. The patch point is a kopf
1.x internal; ``install`` fails loudly at start-up if it moves, and a unit test pins it.

kopf's gate holds only its own handlers. nvlfleet's passes also start from nudges (the re-check, a take-over,
retries), and a pass reading a half-listed pod index would place groups on GPUs already taken. So the adapter
holds the nudge queue from start-up (``nudges.Nudges.hold``) until kopf runs the first handler (``main``): kopf
runs none before pre-population is over.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from kopf._cogs.aiokits import aiotoggles

_PATCHED = "_nvlfleet_shared_waiters"
_SHARED = "_nvlfleet_waiters"

WaitFor = Callable[[aiotoggles.ToggleSet, bool], Coroutine[Any, Any, None]]


def shared_wait_for(original: WaitFor) -> WaitFor:
    """``ToggleSet.wait_for`` with one waiter per set and state, however many callers await it."""

    async def wait_for(self: aiotoggles.ToggleSet, state: bool) -> None:
        wanted = bool(state)
        if self.is_on() == wanted:
            return
        waiters: dict[bool, asyncio.Future[None]] = vars(self).setdefault(_SHARED, {})
        shared = waiters.get(wanted)
        if shared is None or shared.done():
            shared = waiters[wanted] = asyncio.ensure_future(original(self, wanted))
        # A caller cancelled (its object deleted, the operator stopping) must not cancel the others' wait.
        await asyncio.shield(shared)

    setattr(wait_for, _PATCHED, original)
    return wait_for


def unpatched(wait_for: WaitFor) -> WaitFor:
    """kopf's own ``wait_for`` behind ``wait_for`` (itself, if it is not the patched one)."""
    original: WaitFor = getattr(wait_for, _PATCHED, wait_for)
    return original


def install() -> None:
    """Share the waiters of kopf's toggle sets (idempotent). Raises RuntimeError if kopf's internals moved."""
    current = getattr(aiotoggles.ToggleSet, "wait_for", None)
    if current is None or not inspect.iscoroutinefunction(current):
        raise RuntimeError("kopf's ToggleSet.wait_for is gone or no longer a coroutine: nvlfleet cannot patch it")
    if hasattr(current, _PATCHED):
        return
    if list(inspect.signature(current).parameters)[:1] != ["self"] or len(inspect.signature(current).parameters) != 2:
        raise RuntimeError(f"kopf's ToggleSet.wait_for{inspect.signature(current)} is not (self, state) any more")
    aiotoggles.ToggleSet.wait_for = shared_wait_for(current)  # type: ignore[method-assign,assignment]
