"""The C heap's free pages go back to the system (``heap.trim_now``): a burst of allocations in a worker thread,
freed but for a few survivors above them, stays in the process's RSS until the heap is trimmed."""

from __future__ import annotations

import os
import threading

from nvlfleet.adapters import heap


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _burst_in_a_thread() -> list[bytes]:
    """Like a start-up's watch events decoded in a worker thread: 80 MB of 4 KB blocks, one in 500 kept."""
    kept: list[bytes] = []

    def burst() -> None:
        blocks = [bytes(4000) + bytes([i % 256]) for i in range(20000)]
        kept.extend(blocks[::500])

    thread = threading.Thread(target=burst)
    thread.start()
    thread.join()
    return kept


def test_memory_a_worker_thread_freed_is_handed_back_when_the_heap_is_trimmed() -> None:
    kept = _burst_in_a_thread()
    before = _rss_mib()

    assert heap.trim_now()

    assert before - _rss_mib() > 40, "the freed blocks stayed in the process"
    assert len(kept) == 40
