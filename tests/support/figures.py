"""Measurements the reliability tests take, written where docs/reliability.md says they come from.

Each test calls ``record(section, {...})``; the figures of one section replace that section's previous figures in
one JSON file (``$NVLFLEET_RELIABILITY_FIGURES``, default ``.cluster/reliability-figures.json`` next to the local
cluster's state) together with the time, the machine's core count and load, and the command that produced them.
The same figures are printed, so ``pytest -s`` shows them too. Nothing here decides whether a test passes.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import pathlib
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]


def path() -> pathlib.Path:
    default = REPO / ".cluster" / "reliability-figures.json"
    return pathlib.Path(os.environ.get("NVLFLEET_RELIABILITY_FIGURES") or default)


def record(section: str, figures: dict[str, Any]) -> None:
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "measured_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["python", "-m", "pytest", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
        **figures,
    }
    with (target.parent / (target.name + ".lock")).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            everything = json.loads(target.read_text())
        except (OSError, ValueError):
            everything = {}
        everything[section] = entry
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(everything, indent=2, sort_keys=True) + "\n")
        tmp.replace(target)
    print(f"reliability figures [{section}] -> {target}\n{json.dumps(entry, indent=2, sort_keys=True)}")
