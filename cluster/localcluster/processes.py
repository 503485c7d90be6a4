"""Detached component processes, tracked by PID files and stopped only by those recorded PIDs.

Part of the processes step (versions → binaries → PKI → **processes** → fleet). Each component runs in its
own session (setsid) with stdin from /dev/null and stdout+stderr appended to its log file, so nothing holds
the caller's terminal or pipe and `make cluster-up` returns while the cluster keeps running. A PID is only
trusted while /proc/<pid>/exe is still the binary we started: a recycled PID is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import time


def start(argv: list[str], log: pathlib.Path, pid_file: pathlib.Path, cwd: pathlib.Path, env: dict[str, str]) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n==> {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def read_pid(pid_file: pathlib.Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int | None, binary: pathlib.Path) -> bool:
    """True while `pid` runs `binary` (not a zombie, not a recycled PID running something else)."""
    if pid is None or pid <= 0:
        return False
    _reap(pid)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        return False
    return exe.removesuffix(" (deleted)") == str(binary)


def command_line(pid: int) -> list[str] | None:
    """The argv a running process was started with, from /proc (None if it is gone)."""
    try:
        raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]


def stop(pid: int | None, binary: pathlib.Path, timeout: float = 15.0, *, kill: bool = False) -> None:
    """SIGTERM the recorded PID, then SIGKILL after `timeout` (at once with `kill`, as a crash would); no-op if
    it is not ours any more."""
    if not alive(pid, binary):
        return
    assert pid is not None
    if not kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(pid, binary):
                return
            time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(pid, binary) and time.monotonic() < deadline:
        time.sleep(0.05)


def _reap(pid: int) -> None:
    # When `up` ran in this very process (the pytest fixture) the component is our child; collect its exit
    # status so it does not linger as a zombie.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def last_lines(log: pathlib.Path, count: int = 1) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-count:])
