"""Facts about the machine and the software a benchmark ran on, for the header of docs/benchmarks.md.

Adapter (reads /proc, the interpreter, git); ``bench/run.py`` calls ``facts()`` once at the start of a run and
once more for the load average at the end.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import platform
import subprocess
from importlib import metadata

REPO = pathlib.Path(__file__).resolve().parents[1]


def facts(kubernetes_server: str | None = None) -> dict[str, str]:
    out = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": _cpu_model(),
        "memory": f"{_mem_total_gib():.1f} GiB",
        "load average at start (1 min)": f"{os.getloadavg()[0]:.2f}",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "kopf / kubernetes client / aiohttp": " / ".join(_version(p) for p in ("kopf", "kubernetes", "aiohttp")),
        "git commit": _git_commit(),
    }
    if kubernetes_server:
        out["kubernetes (local control plane)"] = kubernetes_server
    return out


def load_average() -> float:
    return os.getloadavg()[0]


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib() -> float:
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return float("nan")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def _git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")
