"""Leader election over a ``coordination.k8s.io`` Lease: which replica of ``nvlfleet run`` may write.

Adapter beside the data flow: it decides nothing about servings, it only says whether this replica's passes may
write (``Leadership.current``, the ``Operator``'s fence) and tells the operator when it has just become the
leader (``take_over``). ``nvlfleet run --leader-election-lease`` runs ``elect`` next to kopf.

It works the way controller-runtime does. A standby asks for the Lease every ``RETRY_SECONDS``, or sooner when the
holder's Lease expires sooner (its renewTime + duration, read in the answer): it asks again right at expiry, so a
killed leader's successor does not add up to a retry period of polling to the expiry. The leader renews
it every ``RENEW_SECONDS`` and stops (``elect`` returns, ``nvlfleet run`` exits 1, so its Deployment restarts it as
a standby) as soon as it cannot renew within ``RENEW_DEADLINE_SECONDS`` — before the Lease expires for the others
(``LEASE_SECONDS``), so two replicas never write at once. Until it has stopped, a leader whose last successful
renewal (timed from when it was *sent*) is older than that deadline writes nothing: a process frozen past the
Lease's expiry (a long pause, a stalled node) wakes up with its writes fenced off, finds the Lease taken and stops.
A clean shutdown releases the Lease (``Lease.release``) so a standby takes over at its next attempt instead of
after expiry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable

from nvlfleet.adapters import kube

LEASE_SECONDS = 15  # how long a silent leader keeps the Lease
RENEW_SECONDS = 5  # how often the leader renews
RENEW_DEADLINE_SECONDS = 10  # a leader that could not renew for this long stops (< LEASE_SECONDS)
# How often a standby asks for the Lease: it takes over at most this long after the Lease expired or was released
# (controller-runtime's retry period); one GET a standby every 2 s is nothing to the API server.
RETRY_SECONDS = 2
EXPIRY_MARGIN_SECONDS = 0.05  # how long past the holder's expiry a standby asks again

log = logging.getLogger("nvlfleet.election")


class Leadership:
    """When this replica last renewed its Lease, counted from the moment the renewal was *sent*, so a reply that
    arrives late (or a process that was frozen) never stretches the time this replica believes it leads. A
    replica that never held the Lease (a standby) has never renewed."""

    def __init__(self) -> None:
        self.renewed = -math.inf
        self.won = asyncio.Event()  # set once this replica holds the Lease

    def current(self) -> bool:
        return time.monotonic() - self.renewed < RENEW_DEADLINE_SECONDS


@dataclasses.dataclass(frozen=True)
class Lease:
    """The Lease this replica competes for, as ``identity``."""

    api: kube.Api
    namespace: str
    name: str
    identity: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def ask(self) -> kube.LeaseAnswer:
        """Take or renew the Lease: whether this replica holds it, and when another holder's expires."""
        return await asyncio.to_thread(self.api.acquire_lease, self.namespace, self.name, self.identity, LEASE_SECONDS)

    async def release(self) -> None:
        await asyncio.to_thread(self.api.release_lease, self.namespace, self.name, self.identity)


async def elect(lease: Lease, leadership: Leadership, take_over: Callable[[], Awaitable[None]]) -> None:
    """Stand by until this replica holds the Lease, ``take_over``, then keep the Lease; returns once it is lost
    (the caller stops the process then)."""
    leadership.renewed = await _acquire(lease)
    leadership.won.set()
    await take_over()
    await _renew(lease, leadership)


async def _acquire(lease: Lease) -> float:
    announced = False
    while True:
        sent = time.monotonic()
        try:
            answer = await lease.ask()
        except kube.ApiError as err:  # the API server away for a moment: a standby keeps waiting, it does not crash
            log.warning("could not ask for Lease %s, asking again in %ss: %s", lease, RETRY_SECONDS, err)
            answer = kube.LeaseAnswer(False)
        if answer.held:
            log.info("became the leader (Lease %s)", lease)
            return sent
        if not announced:
            log.info("standing by: Lease %s is held by another replica", lease)
            announced = True
        await asyncio.sleep(retry_in(answer))


def retry_in(answer: kube.LeaseAnswer) -> float:
    """How long a standby waits before asking again: ``RETRY_SECONDS``, or until just after the holder's Lease
    expires if that is sooner (a few tens of milliseconds past it, so the next ask finds it expired)."""
    if answer.expires_in is None:
        return RETRY_SECONDS
    return min(RETRY_SECONDS, max(answer.expires_in, 0.0) + EXPIRY_MARGIN_SECONDS)


async def _renew(lease: Lease, leadership: Leadership) -> None:
    """Renew until the Lease is refused, or the renew deadline passed without a successful renewal."""
    while True:
        await asyncio.sleep(RENEW_SECONDS)
        sent = time.monotonic()
        try:
            held: bool | None = (await lease.ask()).held
        except Exception as err:  # the API server may be unreachable for a moment; the deadline decides
            log.warning("could not renew Lease %s: %s", lease, err)
            held = None
        if held:
            leadership.renewed = sent
            continue
        if held is False or not leadership.current():
            log.error("lost Lease %s; stopping so that only one replica reconciles", lease)
            return
