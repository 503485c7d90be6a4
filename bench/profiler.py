"""Sampling profiles of a running process with py-spy, and the hottest frames of a profile as plain text.

Adapter used by ``bench/run.py --profile``: py-spy attaches to the operator by PID (no code change in the
operator, no overhead when not profiling) and writes collapsed stacks (``--format raw``), which ``hottest``
reads to name the functions where the samples fall, so the finding can be pasted into a report.
"""

from __future__ import annotations

import collections
import pathlib
import shutil
import signal
import subprocess
import sys


def available() -> str | None:
    """The py-spy executable next to this interpreter or on PATH; None if it is not installed."""
    beside = pathlib.Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


class PySpy:
    """``py-spy record`` of one PID into ``output`` (collapsed stacks), stopped with SIGINT so it writes out."""

    def __init__(
        self,
        pid: int,
        output: pathlib.Path,
        *,
        idle: bool = False,
        gil: bool = False,
        rate: int = 50,
        nonblocking: bool = False,
    ) -> None:
        """``gil``: sample only the thread holding the GIL, so the samples split the process's CPU (without it, a
        worker thread waiting for the GIL or for a socket counts as much as the one running). ``nonblocking``: read
        the stacks without pausing the process; by default py-spy stops it for each sample, which stretches what a
        run times (a stack read while it changes may be torn now and then: a few odd frames, not a bias)."""
        exe = available()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.output = output
        command = [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "-o", str(output)]
        if idle:
            command.append("--idle")
        if gil:
            command.append("--gil")
        if nonblocking:
            command.append("--nonblocking")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> pathlib.Path:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.output


def hottest(collapsed: str, top: int = 15, *, exclude: tuple[str, ...] = ()) -> list[tuple[str, float, float]]:
    """(frame, inclusive share, self share) of the ``top`` frames by inclusive share of all samples.

    ``collapsed`` is py-spy's raw output: one ``frame;frame;...;frame count`` line per distinct stack.
    A frame counts once per stack however often it recurses.
    """
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";")]
        frames = [f for f in frames if not any(e in f for e in exclude)]
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        if frames:
            own[frames[-1]] += count
    if total == 0:
        return []
    ranked = sorted(inclusive.items(), key=lambda item: (-item[1], item[0]))[:top]  # ties by name: stable output
    return [(frame, n / total, own[frame] / total) for frame, n in ranked]


def _short(frame: str) -> str:
    """``function (path/to/module.py:123)`` → ``function (module.py)``: lines differ per call site."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({pathlib.Path(path).name})" if path else name
