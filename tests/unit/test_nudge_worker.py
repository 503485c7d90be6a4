"""The nudge worker runs one more pass for a nudge that arrives while a serving's pass runs, and none for one
that arrives while its pass still waits to start: that pass reads what the nudge was about (nudges.work)."""

from __future__ import annotations

import asyncio

from nvlfleet.adapters import nudges
from nvlfleet.core import inventory

KEY = inventory.ServingKey("llm", "dsv41")


class Passes:
    """Passes as the operator runs them (``Operator.reconcile``): begun, waiting for a free slot, started once it
    has one, and held running until the test lets them finish."""

    def __init__(self, in_flight: nudges.InFlight) -> None:
        self.in_flight = in_flight
        self.slot = asyncio.Event()  # a free slot: passes wait for it before they start
        self.finish = asyncio.Event()
        self.started = 0

    async def reconcile(self, key: inventory.ServingKey) -> None:
        with self.in_flight.begin(key) as started:
            if started is None:
                return
            await self.slot.wait()
            started()
            self.started += 1
            await self.finish.wait()


async def settle() -> None:
    """Long enough for the worker to take every nudge due (debounce 0) and start its pass."""
    await asyncio.sleep(0.05)


async def run_worker(scenario: str) -> int:
    queue = nudges.Nudges(debounce=0.0)
    in_flight = nudges.InFlight()
    passes = Passes(in_flight)
    worker = asyncio.create_task(
        nudges.work(queue, passes.reconcile, watched=lambda _: True, waiting=in_flight.waiting, retry_seconds=1.0)
    )
    try:
        queue.add(KEY)
        await settle()
        if scenario == "running":
            passes.slot.set()
            await settle()
        queue.add(KEY)  # a watch event while the first pass waits (or runs)
        queue.add(KEY)
        await settle()
        passes.slot.set()
        passes.finish.set()
        for _ in range(10):
            await settle()
        return passes.started
    finally:
        worker.cancel()


def test_a_nudge_while_the_pass_waits_to_start_runs_no_other_pass() -> None:
    assert asyncio.run(run_worker("waiting")) == 1


def test_nudges_while_the_pass_runs_run_one_more_pass_after_it() -> None:
    assert asyncio.run(run_worker("running")) == 2


def test_a_begun_pass_waits_until_it_starts() -> None:
    in_flight = nudges.InFlight()
    with in_flight.begin(KEY) as started:
        assert started is not None
        assert in_flight.waiting(KEY)
        started()
        assert not in_flight.waiting(KEY)
        assert KEY in in_flight
    assert KEY not in in_flight
