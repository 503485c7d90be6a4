"""``nvlfleet run`` beside the local cluster as a child process: started with a recorded PID, stopped by that PID.

Used by the operator integration tests (tests/integration/conftest.py's ``start_operator`` and the reliability
tests) and by ``make compare-placement`` (bench/compare_placement.py). The process is a ``processes.Child``: it logs
to a file the test names on failure; every listening port is on 127.0.0.1 and chosen free at start.
"""

from __future__ import annotations

import os
import pathlib
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from localcluster import processes

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """One ``nvlfleet run`` process; ``start`` records its PID in ``pid_file``, ``stop`` signals only that PID."""

    def __init__(
        self,
        workdir: pathlib.Path,
        kubeconfig: pathlib.Path,
        namespaces: Sequence[str],
        *,
        webhook: bool = False,
        recheck_seconds: float = 3.0,
        extra: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.namespaces = list(namespaces)
        self.webhook = webhook
        self.recheck_seconds = recheck_seconds
        self.extra = list(extra)
        self.pid_file = workdir / "operator.pid"
        self.log = workdir / "operator.log"
        self.metrics_port = 0
        self.health_port = 0
        self._child: processes.Child | None = None

    def start(self) -> OperatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.metrics_port, self.health_port = free_port(), free_port()
        command = [
            sys.executable,
            "-m",
            "nvlfleet.cli",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            "--recheck-seconds",
            str(self.recheck_seconds),
            *[arg for ns in self.namespaces for arg in ("--namespace", ns)],
            *self.extra,
        ]
        if self.webhook:
            command += ["--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._child = processes.Child(command, self.log, self.pid_file, cwd=REPO, env=env).start()
        return self

    @property
    def pid(self) -> int:
        """The recorded PID (it raises when none is recorded: a test must never signal a PID it guessed)."""
        pid = processes.read_pid(self.pid_file)
        if pid is None:
            raise RuntimeError(f"no PID recorded in {self.pid_file}")
        return pid

    def healthz(self) -> int | None:
        """The HTTP status of the process's /healthz (what a liveness probe sees), None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None

    def running(self) -> bool:
        return self._child is not None and self._child.running()

    def stop(self, *, kill: bool = False, timeout: float = 20.0) -> int | None:
        """SIGTERM (or SIGKILL with ``kill``) to the recorded PID; returns the exit code."""
        child, self._child = self._child, None
        return None if child is None else child.stop(kill=kill, timeout=timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until kopf has run the start-up handlers and is still running a moment later, or fail naming the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"nvlfleet run exited; see {self.log}:\n{self.tail()}")
            if "Activity 'startup' succeeded" in self.log.read_text(errors="replace"):
                time.sleep(2.0)  # kopf fills its node and pod indexes before handlers run; a bad start dies here
                if self.running():
                    return
            time.sleep(0.2)
        raise RuntimeError(f"nvlfleet run did not start within {timeout:.0f}s; see {self.log}")

    def tail(self, lines: int = 60) -> str:
        return processes.tail(self.log, lines)
