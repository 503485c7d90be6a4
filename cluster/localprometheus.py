"""A real Prometheus and promtool for tests and demos: Debian's package, unpacked into the cache, never installed.

Used by the tests that check every PromQL expression of the dashboards and alerts (``promtool check rules``,
``promtool test rules``, and queries against a live Prometheus scraping the operator), by the telemetry tests
and by the demo.

Where the binaries come from, in order:
1. ``$NVLFLEET_CACHE/prometheus/usr/bin`` — the Debian package ``prometheus`` unpacked with ``dpkg -x`` by
   ``ensure()`` / ``make prometheus``. Unpacking instead of ``apt-get install`` means no system service is
   installed or started (the package's postinst would start one listening on every interface).
2. ``prometheus`` and ``promtool`` on PATH (a system install).
``ensure()`` downloads with ``apt-get download`` (no root needed), running ``apt-get update`` first only when
the package lists do not know the package yet (that needs root, as on a fresh CI machine).

``Server`` runs one Prometheus bound to 127.0.0.1 on a free port with its TSDB in a directory of the caller's,
and stops it by its PID. ``python -m localprometheus install`` is the Makefile's entry point.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from localcluster import processes

DEBIAN_PACKAGE = "prometheus"


def _cache_dir() -> pathlib.Path:
    default = pathlib.Path.home() / ".cache" / "nvlfleet"
    return pathlib.Path(os.environ.get("NVLFLEET_CACHE") or default).expanduser().resolve() / "prometheus"


@dataclasses.dataclass(frozen=True)
class Binaries:
    prometheus: pathlib.Path
    promtool: pathlib.Path

    def version(self) -> str:
        out = subprocess.run([str(self.prometheus), "--version"], capture_output=True, text=True, check=True)
        return (out.stdout or out.stderr).splitlines()[0]


class Unavailable(RuntimeError):
    """Prometheus could not be found or unpacked; the message says what to run."""


def find() -> Binaries | None:
    """The cached binaries, else the ones on PATH, else None."""
    cached = _cache_dir() / "usr" / "bin"
    if all(os.access(cached / name, os.X_OK) for name in ("prometheus", "promtool")):
        return Binaries(cached / "prometheus", cached / "promtool")
    on_path = shutil.which("prometheus"), shutil.which("promtool")
    if on_path[0] and on_path[1]:
        return Binaries(pathlib.Path(on_path[0]), pathlib.Path(on_path[1]))
    return None


def ensure() -> Binaries:
    """The binaries, unpacking the Debian package into the cache first if there are none."""
    return find() or unpack()


def unpack() -> Binaries:
    """Download Debian's ``prometheus`` package and unpack it into the cache (replacing what is there)."""
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        raise Unavailable("no prometheus/promtool on PATH and no apt-get/dpkg to fetch Debian's package")
    with tempfile.TemporaryDirectory(prefix="nvlfleet-prometheus-") as tmp:
        if _apt_download(tmp).returncode != 0:
            update = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, check=False)
            if update.returncode != 0:
                raise Unavailable(f"apt-get update failed (root needed on a fresh machine): {update.stderr.strip()}")
            retry = _apt_download(tmp)
            if retry.returncode != 0:
                raise Unavailable(f"apt-get download {DEBIAN_PACKAGE} failed: {retry.stderr.strip()}")
        (deb,) = pathlib.Path(tmp).glob(f"{DEBIAN_PACKAGE}_*.deb")
        target = _cache_dir()
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg", "-x", str(deb), str(staging)], check=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)  # atomic: a half-unpacked folder is never mistaken for the cache
        (target / "VERSION").write_text(deb.name + "\n")
    bin_dir = target / "usr" / "bin"
    return Binaries(bin_dir / "prometheus", bin_dir / "promtool")


def _apt_download(cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", "download", "-qq", DEBIAN_PACKAGE], cwd=cwd, capture_output=True, text=True, check=False
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class QueryError(RuntimeError):
    """Prometheus refused a query (bad PromQL, or an evaluation error); the message is Prometheus' own."""


class Server:
    """One Prometheus process on 127.0.0.1, configured with ``scrape_configs`` and ``rule_files``."""

    def __init__(
        self,
        workdir: pathlib.Path,
        scrape_configs: Sequence[Mapping[str, Any]],
        *,
        rule_files: Sequence[pathlib.Path] = (),
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        binaries: Binaries | None = None,
        port: int = 0,
    ) -> None:
        self.workdir = workdir
        self.binaries = binaries or ensure()
        self.port = port or free_port()  # a fixed port for a server that outlives its caller (the demo)
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": list(scrape_configs),
        }
        self._child: processes.Child | None = None

    def start(self, timeout: float = 30.0) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        check = subprocess.run(
            [str(self.binaries.promtool), "check", "config", str(config)], capture_output=True, text=True, check=False
        )
        if check.returncode != 0:
            raise QueryError(f"promtool check config: {check.stdout}{check.stderr}")
        log = self.workdir / "prometheus.log"
        argv = [
            str(self.binaries.prometheus),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]
        # Detached, so that the demo's server outlives `make demo`; stopped by its recorded PID.
        pid_file = self.workdir / "prometheus.pid"
        child = processes.Child(argv, log, pid_file, cwd=self.workdir, env=os.environ, detach=True)
        self._child = child.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not child.running():
                raise RuntimeError(f"prometheus exited with {child.returncode()}; see {log}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready within {timeout:g} s; see {log}")

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop(timeout=15)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP API -----------------------------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as err:  # 400/422: Prometheus explains in the body
            body = json.load(err)
        if body.get("status") != "success":
            raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (or a one-element list for a scalar)."""
        data = self._get("/api/v1/query", {"query": expr})
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/targets")["activeTargets"])

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self._get("/api/v1/rules")["groups"] for rule in group["rules"]]

    def wait_for(self, expr: str, timeout: float = 60.0, min_series: int = 1) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns at least ``min_series`` series; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if len(result) >= min_series:
                return result
            time.sleep(0.5)
        raise TimeoutError(f"{expr!r} returned {len(result)} series after {timeout:g} s (wanted {min_series})")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["install"]:
        print("usage: python -m localprometheus install", file=sys.stderr)
        return 2
    try:
        binaries = ensure()
    except (Unavailable, subprocess.CalledProcessError) as err:
        print(f"localprometheus: {err}", file=sys.stderr)
        return 1
    print(f"{binaries.version()} ({binaries.prometheus.parent})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
