"""A memory dump of the operator on SIGUSR1, for ``bench/memprobe.py`` only (never loaded by the operator itself).

Debug tool outside the operator's layers: ``memprobe`` starts ``nvlfleet run`` with this directory first on
``PYTHONPATH`` and ``NVLFLEET_MEMHOOK_DIR`` set, so Python imports this module at start-up; without that variable
it does nothing. On SIGUSR1 it writes ``<dir>/dump-<pid>-<n>.json`` (RSS, object counts by type, tracemalloc's
traced memory when ``PYTHONTRACEMALLOC`` is set), ``.snap`` (a tracemalloc snapshot, then), ``.alloc`` (CPython's
``sys._debugmallocstats`` and glibc's ``malloc_stats``: what each allocator holds, and how much of it is free),
then ``.done``. The allocator reports go to file descriptor 2, so it is pointed at the ``.alloc`` file meanwhile.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import signal
import sys
import threading
import tracemalloc
from typing import Any

_DIR = os.environ.get("NVLFLEET_MEMHOOK_DIR")


def _status() -> dict[str, str]:
    with open("/proc/self/status") as status:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in status) if k in ("VmRSS", "VmHWM")}


def _dump(signum: int, frame: Any) -> None:
    assert _DIR is not None
    gc.collect()
    n = len([f for f in os.listdir(_DIR) if f.startswith(f"dump-{os.getpid()}-") and f.endswith(".done")])
    base = f"{_DIR}/dump-{os.getpid()}-{n}"
    counts = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
    info = {
        "status": _status(),
        "traced": tracemalloc.get_traced_memory() if tracemalloc.is_tracing() else None,
        "threads": threading.active_count(),
        "types": counts.most_common(60),
    }
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(base + ".snap")
    sys.stderr.flush()
    saved = os.dup(2)
    with open(base + ".alloc", "w") as alloc:
        os.dup2(alloc.fileno(), 2)
        try:
            sys._debugmallocstats()
            ctypes.CDLL("libc.so.6").malloc_stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    with open(base + ".json", "w") as out:
        json.dump(info, out, indent=1)
    open(base + ".done", "w").close()


if _DIR:
    signal.signal(signal.SIGUSR1, _dump)
