"""The nudge queue: which servings get a pass next, and the worker that starts those passes.

Adapter, at the entry of the data flow (… → **a pass for a serving** → read → reconcile → apply → prune →
status). Every path into the loop but kopf's own create/update/resume handlers is a nudge: a watch event on a
Node, GPU pod or LeaderWorkerSet nudges the servings it affects (a rack that frees capacity re-plans servings
waiting for it, a lost node re-plans the servings placed in its rack), a pass that asks to be requeued nudges
itself for later, a failed pass is retried by a nudge, and the periodic re-check nudges every serving the
process knows. The queue is debounced, so a burst of pod updates costs one pass per serving.

The re-check is a task (``every``), not a kopf timer: kopf puts a finalizer on every object a timer runs for,
and a serving could then not be deleted, nor its namespace, while no operator runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from nvlfleet.adapters import kube
from nvlfleet.core import inventory

log = logging.getLogger("nvlfleet")

Reconcile = Callable[[inventory.ServingKey], Awaitable[object]]


class Nudges:
    """Servings to reconcile soon: coalesces bursts (one pass per serving) and holds delayed retries."""

    def __init__(self, debounce: float) -> None:
        self._debounce = debounce
        self._due: dict[inventory.ServingKey, float] = {}
        self._wake = asyncio.Event()
        self._released = asyncio.Event()
        self._released.set()

    def hold(self) -> None:
        """Keep every nudge queued until ``release``: under kopf, passes must wait for its index pre-population
        (``prepopulation``), or a pass would plan against half-listed nodes and pods."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    @property
    def held(self) -> bool:
        return not self._released.is_set()

    def add(self, key: inventory.ServingKey, delay: float = 0.0, *, debounced: bool = True) -> None:
        """A pass of ``key`` due after ``delay``, and not before the debounce unless ``debounced`` is False: a
        take-over has nothing left to coalesce (the standby's watch saw every change already), and its first pass
        is the figure a failover is judged by."""
        when = time.monotonic() + (max(delay, self._debounce) if debounced else delay)
        self._due[key] = min(self._due.get(key, when), when)
        self._wake.set()

    async def next_batch(self) -> list[inventory.ServingKey]:
        """Wait until at least one serving is due (and the queue is not held), and return every serving due by then."""
        await self._released.wait()
        while True:
            now = time.monotonic()
            due = sorted(k for k, t in self._due.items() if t <= now)
            if due:
                for key in due:
                    del self._due[key]
                return due
            self._wake.clear()
            timeout = min(self._due.values()) - now if self._due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)


class InFlight:
    """The passes of each serving this process has begun: waiting to start (for the serving's lock or a free
    slot), or running.

    A pass asked for while another pass of the same serving waits to start *is* that pass: it reads everything
    once it starts. And the re-check leaves a serving with a pass in flight alone (``in``): at start-up a thousand
    handlers wait for ``passes_at_once`` slots a minute or more, and a re-check in that minute ran each twice."""

    def __init__(self) -> None:
        self._waiting: dict[inventory.ServingKey, object] = {}  # the waiting pass's own token
        self._begun: dict[inventory.ServingKey, int] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._begun

    def waiting(self, key: inventory.ServingKey) -> bool:
        """Whether a pass of ``key`` waits to start: it will read whatever changed before it does."""
        return key in self._waiting

    @contextlib.contextmanager
    def begin(self, key: inventory.ServingKey) -> Iterator[Callable[[], None] | None]:
        """A pass of ``key`` for the ``with`` block: None when one already waits to start (run none), else the
        function the pass calls once it starts (from then on, what changes asks for another pass)."""
        if key in self._waiting:
            yield None
            return
        token = self._waiting[key] = object()
        self._begun[key] = self._begun.get(key, 0) + 1
        started = functools.partial(self._started, key, token)
        try:
            yield started
        finally:
            started()  # a pass that failed before it could start no longer waits either
            left = self._begun[key] - 1
            if left:
                self._begun[key] = left
            else:
                del self._begun[key]

    def _started(self, key: inventory.ServingKey, token: object) -> None:
        if self._waiting.get(key) is token:
            del self._waiting[key]


async def work(
    nudges: Nudges,
    reconcile: Reconcile,
    *,
    watched: Callable[[str], bool],
    waiting: Callable[[inventory.ServingKey], bool],
    retry_seconds: float,
) -> None:
    """Start a pass for every serving that falls due; ``reconcile`` bounds how many run at once. A serving
    nudged while its pass runs is due again after it, once, however many nudges; nudged while its pass still
    waits to start (``waiting``: for the serving's lock or a free slot), it needs no other pass: that one reads
    what the nudge was about once it starts. While a fleet rolls out, passes wait tens of seconds for a slot and
    most nudges arrive then: re-queueing each ran a second pass after nearly every pass, one that found nothing
    to do (of 6,650 passes of 1,000 new servings, 3,002 followed no nudge since the pass before and 2,976 of
    those wrote nothing: docs/reliability.md)."""
    in_flight: dict[inventory.ServingKey, asyncio.Task[None]] = {}  # also keeps the tasks referenced
    again: set[inventory.ServingKey] = set()  # nudged while their pass ran: due once it has landed
    while True:
        for key in await nudges.next_batch():
            if not watched(key.namespace):
                continue
            if key in in_flight:
                if not waiting(key):
                    again.add(key)
                continue
            task = in_flight[key] = asyncio.create_task(
                _nudged(nudges, reconcile, key, retry_seconds), name=f"pass {key}"
            )
            task.add_done_callback(functools.partial(_landed, nudges, in_flight, again, key))


def _landed(
    nudges: Nudges,
    in_flight: dict[inventory.ServingKey, asyncio.Task[None]],
    again: set[inventory.ServingKey],
    key: inventory.ServingKey,
    _: Any,
) -> None:
    in_flight.pop(key, None)
    if key in again:
        again.discard(key)
        nudges.add(key)


async def _nudged(nudges: Nudges, reconcile: Reconcile, key: inventory.ServingKey, retry_seconds: float) -> None:
    try:
        await reconcile(key)
    except kube.ApiError as err:
        log.warning("reconcile of %s failed, retrying in %.0fs: %s", key, retry_seconds, err)
        nudges.add(key, retry_seconds)
    except Exception:
        log.exception("reconcile of %s failed, retrying in %.0fs", key, retry_seconds)
        nudges.add(key, retry_seconds)


async def every(seconds: float, job: Callable[[], Awaitable[None]]) -> None:
    """Run ``job`` every ``seconds`` for the operator's lifetime; a failed run is logged, the next one comes."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except Exception:
            log.exception("periodic job failed")
