"""``nvlfleet run`` as a child process of a test: started with a recorded PID, stopped by that PID only.

Used by the operator integration tests and by ``make compare-placement``. The process logs to a file the test
names on failure; every listening port is on 127.0.0.1 and chosen free at start.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

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
        self._process: subprocess.Popen[bytes] | None = None

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
        with self.log.open("ab") as log:
            log.write(f"\n==> {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        self.pid_file.write_text(str(self._process.pid))
        return self

    @property
    def pid(self) -> int:
        return int(self.pid_file.read_text())

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
        return self._process is not None and self._process.poll() is None

    def stop(self, *, kill: bool = False, timeout: float = 20.0) -> int | None:
        """SIGTERM (or SIGKILL with ``kill``) to the recorded PID; returns the exit code."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self._process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self._process.wait(timeout=timeout)
        code = self._process.returncode
        self._process = None
        self.pid_file.unlink(missing_ok=True)
        return code

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
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""
