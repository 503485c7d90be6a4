"""CPU time and resident memory of a process, read from /proc (Linux), for the cost figures.

Adapter used by the steady-state and telemetry figures: a process's own counters, so the cost of other
processes sharing the machine (the simulated endpoints, the control plane, other people's jobs) is not counted.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (its threads included, its children not)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), after pid and (comm)
    return (utime + stime) / _TICKS


def rss_mib(pid: int) -> float:
    """Resident set size now, in MiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"process {pid} reports no VmRSS")


@dataclasses.dataclass(frozen=True)
class Usage:
    cpu_seconds: float
    wall_seconds: float

    @property
    def cores(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else float("nan")


class Meter:
    """CPU used by ``pid`` between ``start()`` and ``stop()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu = self._wall = 0.0

    def start(self) -> Meter:
        self._cpu, self._wall = cpu_seconds(self.pid), time.monotonic()
        return self

    def stop(self) -> Usage:
        return Usage(cpu_seconds(self.pid) - self._cpu, time.monotonic() - self._wall)
