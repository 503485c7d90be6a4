"""The process's C heap: what glibc's allocator keeps of memory Python has freed, handed back to the system.

Adapter beside the operator's periodic jobs (``main.startup`` runs ``trim`` every re-check interval). A start-up
on a large fleet decodes tens of thousands of watch events, several kilobytes of JSON each, much of it in kopf's
and ``asyncio.to_thread``'s worker threads; glibc serves a thread from an arena of its own, and an arena gives
back to the system only the free space at its top, so the peak of that burst stays in the process's RSS long
after the objects are gone. ``malloc_trim(0)`` releases every arena's free pages. Not glibc (musl, macOS): no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    found: Callable[[int], int] = trim
    return found


def trim_now() -> bool:
    """Hand free heap pages back to the system; whether this allocator could (glibc's ``malloc_trim``)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


async def trim() -> None:
    """``trim_now`` in a worker thread (ctypes lets go of the GIL meanwhile): it walks every arena's free lists."""
    await asyncio.to_thread(trim_now)
