"""Start-up with thousands of objects: kopf's pre-population gate wakes one waiter per change, and nvlfleet's own
passes (nudges) wait for that gate too (nvlfleet.adapters.prepopulation, nudges.Nudges.hold)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from kopf._cogs.aiokits import aiotoggles

from nvlfleet.adapters import nudges, prepopulation
from nvlfleet.core import inventory


def kopfs_wait_for() -> prepopulation.WaitFor:
    """kopf's own ``ToggleSet.wait_for``, whether or not ``install`` has run in this process."""
    return prepopulation.unpatched(aiotoggles.ToggleSet.wait_for)


async def _count_wakeups(patched: bool, objects: int, waiters: int) -> tuple[int, int]:
    """kopf's pattern: ``objects`` off toggles made and dropped one by one, ``waiters`` workers waiting for the set
    to be on. Returns (how often the set was evaluated, how many workers got through)."""
    toggles = aiotoggles.ToggleSet(all)
    evaluations = 0
    original_is_on = toggles.is_on

    def counting_is_on() -> bool:
        nonlocal evaluations
        evaluations += 1
        return original_is_on()

    toggles.is_on = counting_is_on  # type: ignore[method-assign]
    wait_for = prepopulation.shared_wait_for(kopfs_wait_for()) if patched else kopfs_wait_for()
    made = [await toggles.make_toggle(name=str(i)) for i in range(objects)]

    async def worker() -> None:
        await wait_for(toggles, True)

    tasks = [asyncio.create_task(worker()) for _ in range(waiters)]
    await asyncio.sleep(0)
    evaluations = 0
    for toggle in made:
        await toggles.drop_toggle(toggle)
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
    return evaluations, sum(t.done() and t.exception() is None for t in tasks)


def test_every_waiting_worker_gets_through_once_the_set_is_on_and_the_set_is_evaluated_once_per_change() -> None:
    evaluations, through = asyncio.run(_count_wakeups(patched=True, objects=200, waiters=200))

    assert through == 200
    assert evaluations <= 2 * 200 + 2  # one shared waiter per change (kopf's own: one per worker per change)


def test_kopfs_own_wait_evaluates_the_set_once_per_waiting_worker_per_change() -> None:
    evaluations, through = asyncio.run(_count_wakeups(patched=False, objects=200, waiters=200))

    assert through == 200
    assert evaluations >= 200 * 200  # what the patch removes: N² at start-up


def test_a_cancelled_waiter_does_not_cancel_the_others() -> None:
    async def scenario() -> bool:
        toggles = aiotoggles.ToggleSet(all)
        wait_for = prepopulation.shared_wait_for(kopfs_wait_for())
        toggle = await toggles.make_toggle()
        first = asyncio.create_task(wait_for(toggles, True))
        second = asyncio.create_task(wait_for(toggles, True))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        await toggles.drop_toggle(toggle)
        await asyncio.wait_for(second, timeout=5)
        return first.cancelled() and second.done()

    assert asyncio.run(scenario())


def test_a_set_already_in_the_wanted_state_returns_at_once_and_waiting_for_off_works_too() -> None:
    async def scenario() -> None:
        toggles = aiotoggles.ToggleSet(all)
        wait_for = prepopulation.shared_wait_for(kopfs_wait_for())
        await asyncio.wait_for(wait_for(toggles, True), timeout=1)  # an empty set of `all` is on
        off = asyncio.create_task(wait_for(toggles, False))
        await asyncio.sleep(0)
        await toggles.make_toggle(False)
        await asyncio.wait_for(off, timeout=5)

    asyncio.run(scenario())


def test_install_patches_kopfs_toggle_set_once_and_pins_the_patch_point() -> None:
    prepopulation.install()
    patched = aiotoggles.ToggleSet.wait_for
    prepopulation.install()  # idempotent

    assert aiotoggles.ToggleSet.wait_for is patched
    assert inspect.iscoroutinefunction(patched)
    original = prepopulation.unpatched(patched)
    assert original is not patched
    assert len(inspect.signature(original).parameters) == 2  # (self, state), as the patch calls it


def test_install_refuses_a_kopf_whose_wait_for_is_no_coroutine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiotoggles.ToggleSet, "wait_for", lambda self, state: None)

    with pytest.raises(RuntimeError, match="no longer a coroutine"):
        prepopulation.install()


def test_a_held_nudge_queue_releases_nothing_until_released() -> None:
    async def scenario() -> tuple[bool, list[inventory.ServingKey]]:
        queue = nudges.Nudges(debounce=0.0)
        queue.hold()
        queue.add(inventory.ServingKey("ns", "a"))
        batch = asyncio.create_task(queue.next_batch())
        await asyncio.sleep(0.05)
        held = not batch.done()
        queue.release()
        return held, await asyncio.wait_for(batch, timeout=5)

    held, batch = asyncio.run(scenario())
    assert held
    assert batch == [inventory.ServingKey("ns", "a")]


def test_a_new_nudge_queue_is_not_held() -> None:
    assert not nudges.Nudges(debounce=0.0).held
