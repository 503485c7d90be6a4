"""When a standby asks for the Lease again (nvlfleet.adapters.election): every retry period, or right after the
holder's Lease expires if that is sooner, so a killed leader's successor takes over at expiry, not up to a retry
period later; and a take-over's passes start without the nudge debounce. The Lease itself, the takeover and the
fencing run against the real cluster in tests/integration/test_high_availability.py."""

from __future__ import annotations

import asyncio

import pytest

from nvlfleet.adapters import election, kube, nudges
from nvlfleet.core import inventory


def test_a_standby_that_knows_nothing_of_the_holders_expiry_asks_again_after_the_retry_period() -> None:
    assert election.retry_in(kube.LeaseAnswer(False)) == election.RETRY_SECONDS


def test_a_standby_asks_again_just_after_a_lease_expiring_sooner_than_the_retry_period() -> None:
    assert election.retry_in(kube.LeaseAnswer(False, 0.7)) == pytest.approx(0.7 + election.EXPIRY_MARGIN_SECONDS)


def test_a_standby_never_waits_longer_than_the_retry_period_for_a_lease_expiring_later() -> None:
    assert election.retry_in(kube.LeaseAnswer(False, 14.0)) == election.RETRY_SECONDS


def test_a_lease_already_expired_by_the_standbys_clock_is_asked_for_again_at_once() -> None:
    assert election.retry_in(kube.LeaseAnswer(False, -3.0)) == pytest.approx(election.EXPIRY_MARGIN_SECONDS)


def test_a_nudge_waits_the_debounce_unless_it_is_a_take_overs_whose_standby_has_seen_every_change() -> None:
    async def due_after(debounced: bool) -> float:
        queue = nudges.Nudges(debounce=0.5)
        started = asyncio.get_running_loop().time()
        queue.add(inventory.ServingKey("ns", "a"), debounced=debounced)
        await asyncio.wait_for(queue.next_batch(), timeout=5)
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(due_after(debounced=True)) >= 0.5
    assert asyncio.run(due_after(debounced=False)) < 0.25
