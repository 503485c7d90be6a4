"""Figure 3, placement: the planner's speed on a big fleet, and its placements next to LWS and pod affinity.

Pure computation, no cluster: the fleet and workload of ``planner_bench`` — 100 NVL72 racks (1,800 GB200 trays,
7,200 GPUs) and 50 servings of 20 groups each (1,000 groups: 12 decode groups of 1–3 trays and 8 single-tray
prefill groups per serving, 1,600 trays wanted). ``planner.plan`` is timed on an inventory built once, as the
operator calls it per reconcile (median of repeated runs after one warm-up run). The same workload on the same
fleet is then placed by the models in ``bench/baselines.py`` and scored with one yardstick: LWS exclusive
topology (one group per rack, at best), and plain pod affinity, required (groups wait, never split) and
preferred (groups split across racks instead of waiting).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import baselines
import planner_bench

from nvlfleet.core import planner

REPEATS = 30


@dataclasses.dataclass(frozen=True)
class Result:
    racks: int
    groups: int
    plan_ms_median: float
    plan_ms_max: float
    nvlfleet: baselines.Outcome
    lws_exclusive: baselines.Outcome
    pod_affinity: baselines.Outcome
    pod_affinity_preferred: baselines.Outcome


def measure(racks: int = planner_bench.RACKS, servings: int = 50, repeats: int = REPEATS) -> Result:
    inv = planner_bench.fleet(racks)
    work = planner_bench.workload(servings)
    planner.plan(inv, work)  # warm-up: first-call costs (imports, caches) are not what a reconcile pays
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        planner.plan(inv, work)
        runs.append(time.perf_counter() - started)
    return Result(
        racks=racks,
        groups=sum(d.groups for d in work),
        plan_ms_median=statistics.median(runs) * 1000,
        plan_ms_max=max(runs) * 1000,
        nvlfleet=baselines.nvlfleet(inv, work),
        lws_exclusive=baselines.lws_exclusive(inv, work),
        pod_affinity=baselines.pod_affinity(inv, work),
        pod_affinity_preferred=baselines.pod_affinity(inv, work, affinity="preferred"),
    )
