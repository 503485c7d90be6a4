"""The queue depth `python -m localdemo load` puts on a serving's simulated decode engines, handed to the agent.

Part of the demo's simulated data plane (load command → **<root>/load.json** → agent → decode leaders' /metrics →
Prometheus → KEDA → HPA → the serving's scale subresource → operator). The load command writes how many requests
wait at a serving's decode engines altogether; the agent reads the file on every pass and spreads that number
evenly over the decode leaders it runs for the serving, so ``sum(vllm:num_requests_waiting)`` — what the
ScaledObject's query reads — stays at the number asked for while groups come and go, as a router would spread
one queue over however many engines there are. Nothing here talks to Kubernetes: the file is the whole interface.
"""

from __future__ import annotations

import json
import math
import os
import pathlib

FILE = "load.json"
_KEY = "waitingRequests"

Key = tuple[str, str]  # (namespace, serving)


def path(root: pathlib.Path) -> pathlib.Path:
    return root / FILE


def read(root: pathlib.Path) -> dict[Key, float]:
    """The waiting requests asked for, per (namespace, serving); an absent or unreadable file asks for none."""
    try:
        data = json.loads(path(root).read_text())
    except (OSError, ValueError):
        return {}
    found: dict[Key, float] = {}
    for key, entry in (data if isinstance(data, dict) else {}).items():
        namespace, _, serving = str(key).partition("/")
        value = entry.get(_KEY) if isinstance(entry, dict) else None
        if serving and isinstance(value, int | float) and math.isfinite(value) and value >= 0:
            found[(namespace, serving)] = float(value)
    return found


def write(root: pathlib.Path, namespace: str, serving: str, waiting: float) -> None:
    """Ask for ``waiting`` requests at the serving's decode engines (0 removes the entry: no queue)."""
    if not math.isfinite(waiting) or waiting < 0:
        raise ValueError(f"waiting requests must be a number >= 0, not {waiting}")
    wanted = read(root)
    if waiting:
        wanted[(namespace, serving)] = waiting
    else:
        wanted.pop((namespace, serving), None)
    data = {f"{ns}/{name}": {_KEY: value} for (ns, name), value in sorted(wanted.items())}
    root.mkdir(parents=True, exist_ok=True)
    tmp = path(root).with_name(FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path(root))  # the agent never reads half a file


def shares(total: float, leaders: int) -> float:
    """Each of ``leaders`` decode leaders' part of ``total`` waiting requests (their sum is ``total``)."""
    return total / leaders if leaders > 0 else 0.0
