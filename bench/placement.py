"""Figure 3, placement (pure part): the planner's speed on big fleets, and the offline model of its placements.

No cluster: the fleet and workload of ``planner_bench`` — NVL72 racks of 18 GB200 trays and servings of 20 groups
each (12 decode groups of 1–3 trays and 8 single-tray prefill groups per serving, 32 trays wanted). Two sizes are
timed: 1,000 groups on 100 racks (1,800 trays, 7,200 GPUs) and 10,000 groups on 1,000 racks (18,000 trays, a
72,000-GPU estate). ``planner.plan`` is timed on an inventory built once, as the operator calls it per
reconcile: one warm-up run, then ``repeats`` runs, reported as their median with min–max. The same 1,000-group
workload on the same fleet is then placed by the models in ``bench/baselines.py`` and scored with one yardstick:
LWS exclusive topology annotated on multi-tray groups only (at best), and plain pod affinity, required (groups
wait, never split) and preferred (groups split across racks instead of waiting). These are a model, labelled so:
the headline placement rows come from the real scheduler (``compare_placement``).
"""

from __future__ import annotations

import dataclasses
import os
import time

import baselines
import planner_bench

from nvlfleet.core import planner

REPEATS = 30
SCALE_REPEATS = 10  # a 10,000-group plan takes longer; ten runs give its spread


@dataclasses.dataclass(frozen=True)
class Timing:
    racks: int
    groups: int
    runs_ms: tuple[float, ...]
    load: float  # 1-minute load average right after the runs


def time_plan(racks: int, servings: int, repeats: int) -> Timing:
    inv = planner_bench.fleet(racks)
    work = planner_bench.workload(servings)
    planner.plan(inv, work)  # warm-up: first-call costs (imports, caches) are not what a reconcile pays
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        planner.plan(inv, work)
        runs.append((time.perf_counter() - started) * 1000)
    return Timing(racks, sum(d.groups for d in work), tuple(runs), os.getloadavg()[0])


@dataclasses.dataclass(frozen=True)
class Model:
    racks: int
    groups: int
    nvlfleet: baselines.Outcome
    lws_exclusive: baselines.Outcome
    pod_affinity: baselines.Outcome
    pod_affinity_preferred: baselines.Outcome


def model(racks: int = planner_bench.RACKS, servings: int = 50) -> Model:
    inv = planner_bench.fleet(racks)
    work = planner_bench.workload(servings)
    return Model(
        racks=racks,
        groups=sum(d.groups for d in work),
        nvlfleet=baselines.nvlfleet(inv, work),
        lws_exclusive=baselines.lws_exclusive(inv, work),
        pod_affinity=baselines.pod_affinity(inv, work),
        pod_affinity_preferred=baselines.pod_affinity(inv, work, affinity="preferred"),
    )
