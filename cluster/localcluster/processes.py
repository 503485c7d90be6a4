"""Processes this repository starts beside the local cluster, each with its PID recorded in a file and stopped
only by that recorded PID (SIGTERM, then SIGKILL after a timeout) — never by name.

The one home of process supervision: the cluster's components (``localcluster.cluster``, the processes step of
versions → binaries → PKI → **processes** → fleet), the demo's operator, agent and Prometheus (``localdemo.demo``,
``localprometheus``) and the ``nvlfleet run`` of the tests and benchmarks (``localcluster.operatorprocess``,
``bench/benchcluster.py``). Each starts with stdin from /dev/null and stdout+stderr appended to its log file.

Two kinds:

- detached (``start`` with ``detach=True``, then ``alive``/``stop`` by PID file): runs in its own session so it
  outlives its caller (``make cluster-up`` and ``make demo`` return while it keeps running); a later command finds
  it by its PID file. A PID is only trusted while the process is still the one we started — its /proc/<pid>/exe is
  the recorded binary, or its command line the recorded argv — so a recycled PID is never signalled.
- ``Child``: a process the caller waits for (a test's or benchmark's operator, a test's Prometheus), stopped by the
  same recorded PID; its handle keeps the exit code, which tests assert (0 after SIGTERM, -9 after a crash).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

# What a recorded PID must still be running to be ours: a binary (compared with /proc/<pid>/exe) or an exact argv.
Identity = pathlib.Path | Sequence[str]


def start(
    argv: Sequence[str],
    log: pathlib.Path,
    pid_file: pathlib.Path,
    *,
    cwd: pathlib.Path,
    env: Mapping[str, str],
    detach: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` logging to ``log`` and record its PID in ``pid_file``; ``detach`` gives it its own session
    (it outlives the caller and no terminal signal reaches it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n==> {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
            close_fds=True,
        )
    pid_file.write_text(f"{process.pid}\n")
    return process


def read_pid(pid_file: pathlib.Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def command_line(pid: int | None) -> list[str] | None:
    """The argv a running process was started with, from /proc (None if it is gone)."""
    try:
        raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]


def alive(pid: int | None, identity: Identity) -> bool:
    """True while ``pid`` runs ``identity`` (not a zombie, not a recycled PID running something else)."""
    if pid is None or pid <= 0:
        return False
    _reap(pid)
    if not isinstance(identity, pathlib.Path):
        return bool(identity) and _settled_command_line(pid) == list(identity)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return _state(pid) not in (None, "Z") and exe.removesuffix(" (deleted)") == str(identity)


def stop(pid: int | None, identity: Identity, timeout: float = 15.0, *, kill: bool = False) -> None:
    """SIGTERM the recorded PID, then SIGKILL after ``timeout`` (at once with ``kill``, as a crash would); no-op if
    it is not ours any more."""
    if pid is None or not alive(pid, identity):
        return

    def gone(wait: float) -> bool:
        deadline = time.monotonic() + wait
        while alive(pid, identity):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    _terminate(pid, gone, timeout, kill=kill)


def last_lines(log: pathlib.Path, count: int = 1) -> str:
    """The last ``count`` non-blank lines of ``log`` on one line (for an error message)."""
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-count:])


def tail(log: pathlib.Path, lines: int = 60) -> str:
    """The last ``lines`` lines of ``log`` as they are (for a test's failure output)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Child:
    """A child process of this one: started by ``start``, polled through its handle, signalled by recorded PID."""

    def __init__(
        self,
        argv: Sequence[str],
        log: pathlib.Path,
        pid_file: pathlib.Path,
        *,
        cwd: pathlib.Path,
        env: Mapping[str, str],
        detach: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.log = log
        self.pid_file = pid_file
        self.cwd = cwd
        self.env = dict(env)
        self.detach = detach
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        self._process = start(self.argv, self.log, self.pid_file, cwd=self.cwd, env=self.env, detach=self.detach)
        return self

    @property
    def pid(self) -> int:
        pid = read_pid(self.pid_file)
        if pid is None:  # never fall back to a guess: os.kill(0, ...) would signal our own process group
            raise RuntimeError(f"no PID recorded in {self.pid_file}")
        return pid

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def stop(self, *, kill: bool = False, timeout: float = 20.0) -> int | None:
        """SIGTERM (SIGKILL with ``kill``) to the recorded PID, SIGKILL after ``timeout``; returns the exit code."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.poll() is None:

            def gone(wait: float) -> bool:
                try:
                    process.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    return False
                return True

            _terminate(self.pid, gone, timeout, kill=kill)
            process.wait(timeout=timeout)
        self.pid_file.unlink(missing_ok=True)
        return process.returncode

    def tail(self, lines: int = 60) -> str:
        return tail(self.log, lines)


def _terminate(pid: int, gone: Callable[[float], bool], timeout: float, *, kill: bool) -> None:
    """SIGTERM, and SIGKILL when ``gone(timeout)`` says it is still there (SIGKILL at once with ``kill``)."""
    signals = ((signal.SIGKILL, 5.0),) if kill else ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0))
    for sig, wait in signals:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if gone(wait):
            return


def _settled_command_line(pid: int) -> list[str] | None:
    # A process in the middle of exec (just started) shows an empty command line for a moment: wait that out.
    deadline = time.monotonic() + 1.0
    while (argv := command_line(pid)) == [] and _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.01)
    return argv


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (``Z`` for a zombie), None if it is gone."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _reap(pid: int) -> None:
    # A detached process started by this very process (`up` in a pytest fixture) is our child; collect its exit
    # status so it does not linger as a zombie.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
