"""How fast the planner is on a big fleet, and what LWS exclusive topology / pod affinity would get instead.

Run: ``.venv/bin/python bench/planner_bench.py`` (no cluster needed). The target from issue 5: 1,000 groups on
100 NVL72 racks (1,800 nodes, 7,200 GPUs) planned in well under 50 ms. Timings are the median of repeated
``planner.plan`` calls on an inventory built once, exactly what the operator does per reconcile.
"""

from __future__ import annotations

import statistics
import sys
import time

import baselines

from nvlfleet.api import names
from nvlfleet.core import inventory, placements, planner

RACKS, TRAYS, GPUS = 100, 18, 4
GB200 = inventory.NodeRequirements(gpu_product="NVIDIA-GB200", gpus_per_node=GPUS)


def fleet(racks: int = RACKS) -> inventory.Inventory:
    nodes = [
        inventory.Node(
            name=f"rack-{r:03d}-{t:02d}",
            labels={
                names.DEFAULT_DOMAIN_LABEL: f"{r:08x}-4785-4fbf-9cbd-231635e37e9d.{r}",
                names.PRODUCT_LABEL: GB200.gpu_product,
            },
            gpus=GPUS,
            ready=True,
            unschedulable=False,
        )
        for r in range(racks)
        for t in range(TRAYS)
    ]
    return inventory.build(nodes)


def workload(servings: int = 50, strategy: planner.Strategy = "pack") -> list[planner.Demand]:
    """20 groups per serving: 12 decode groups of 1-3 nodes and 8 single-node prefill groups (1,600 nodes)."""
    out = []
    for i in range(servings):
        key = inventory.ServingKey("bench", f"serving-{i:03d}")
        out.append(planner.Demand(key, "decode", 1 + i % 3, 12, GB200, strategy))
        out.append(planner.Demand(key, "prefill", 1, 8, GB200, strategy))
    return out


def timed(
    label: str, inv: inventory.Inventory, demands: list[planner.Demand], current: list[placements.Placement]
) -> planner.Plan:
    runs = []
    result = planner.plan(inv, demands, current)
    for _ in range(30):
        started = time.perf_counter()
        planner.plan(inv, demands, current)
        runs.append(time.perf_counter() - started)
    groups = sum(d.groups for d in demands)
    print(
        f"{label:<44} {groups:>5} groups  placed {groups - result.unplaced:>5}  "
        f"median {statistics.median(runs) * 1000:6.2f} ms  max {max(runs) * 1000:6.2f} ms"
    )
    return result


def main() -> int:
    inv = fleet()
    print(f"fleet: {RACKS} racks x {TRAYS} nodes x {GPUS} GPUs = {RACKS * TRAYS * GPUS} GPUs")
    pack = timed("fresh plan, pack", inv, workload(), [])
    timed("fresh plan, spread", inv, workload(strategy="spread"), [])
    current = [placements.Placement(r.serving, r.role, r.nodes_per_group, r.placed) for r in pack.roles]
    grown = [planner.Demand(d.serving, d.role, d.nodes_per_group, d.groups + 1, GB200) for d in workload()]
    timed("reconcile: every role +1 group, all kept", inv, grown, current)
    shrunk = [planner.Demand(d.serving, d.role, d.nodes_per_group, d.groups // 2, GB200) for d in workload()]
    timed("reconcile: every role halved", inv, shrunk, current)

    print("\nsame fleet, 2-node decode groups, 8 racks:")
    small = fleet(8)
    for groups in (8, 40, 72):
        work = [planner.Demand(inventory.ServingKey("bench", "flash"), "decode", 2, groups, GB200)]
        for outcome in baselines.compare(small, work):
            print(
                f"  {groups:>3} wanted  {outcome.engine:<24} placed {outcome.groups_placed:>3}  "
                f"split {outcome.groups_split:>2}  waiting {outcome.groups_waiting:>2}  "
                f"pods pending {outcome.pods_pending:>3}  GPUs stranded {outcome.gpus_stranded:>4}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
