"""Why groups wait, in words: the sentences of a plan's reasons, which the InsufficientCapacity condition carries.

Pure core, inside the plan step (inventory + spec → validate → **plan** → render → apply): ``planner`` counts
(free nodes, what placed groups need, the largest block), this module says it so a person sees which role, how
many nodes in one domain, and what is free. Domains are named by ``inventory.short_domain``.
"""

from __future__ import annotations

from nvlfleet.api import names, problems
from nvlfleet.core import inventory, pairing


def waiting(role: str, groups: int, domain: str, need: int, limit: int) -> str:
    """Groups placed in ``domain`` whose nodes are not all there (it lost nodes)."""
    return (
        f"{role}: {problems.counted(groups, 'group')} placed in domain {inventory.short_domain(domain)} "
        f"wait for nodes: groups placed there still need {problems.counted(need, 'free node')} "
        f"but it has {limit} they can use"
    )


def largest(key: str, nodes: int) -> str:
    """Where the most free nodes a requirement can still claim are (``nodes`` 0: nowhere)."""
    if not nodes:
        return "no domain has a free node it can use"
    return f"the largest free block is {problems.counted(nodes, 'node')} in domain {inventory.short_domain(key)}"


def unplaced(role: str, nodes_per_group: int, req: inventory.NodeRequirements, groups: int, room: str) -> str:
    """Why ``groups`` more groups of one role found no domain."""
    if req.scope == "node" and nodes_per_group > 1:
        return (
            f"{role} needs {nodes_per_group} nodes per group, but NVLink stops at the node for {req.gpu_product}: "
            f"{problems.counted(groups, 'group')} cannot be placed"
        )
    where = "one NVLink domain" if req.scope == "clique" else "one node"
    return (
        f"{role} needs {problems.counted(nodes_per_group, 'free node')} ({nodes_per_group * req.gpus_per_node} GPUs) "
        f"in {where} for each of {problems.counted(groups, 'more group')}; {room}"
    )


def fleet(inv: inventory.Inventory, req: inventory.NodeRequirements, free: int, left: int) -> str:
    """Where every node of the wanted product went (``free``: free and usable, ``left``: of those, not needed by
    placed groups), so a person can see what to fix."""
    census = inv.census(req)
    total, busy, excluded = census.total, census.busy, census.excluded
    if total == 0:
        have = ", ".join(f"{p} ×{c}" for p, c in sorted(census.products.items())) or "no GPU nodes"
        return f"no node has {names.PRODUCT_LABEL}={req.gpu_product} (the fleet has {have})"
    parts = [
        f"of {problems.counted(total, req.gpu_product + ' node')}, {free} free and usable "
        f"({free - left} of them needed by placed groups)",
        f"{busy} running GPU pods",
    ]
    if excluded:
        parts.append(
            f"{sum(excluded.values())} not usable: "
            + ", ".join(f"{c} {r}" for r, c in sorted(excluded.items(), key=lambda rc: (-rc[1], rc[0])))
        )
    return "; ".join(parts)


def unit_unplaced(
    r: pairing.Ratio, count: int, fed_each: int, anchor_nodes: int, fed_nodes: int, gpus_per_node: int, largest: str
) -> str:
    """Why ``count`` units found no domain; ``largest`` says where the most room is."""
    nodes = anchor_nodes + fed_each * fed_nodes
    unit = f"1 {r.anchor_role} group of {problems.counted(anchor_nodes, 'node')}"
    if fed_each:
        unit += (
            f" with the {problems.counted(fed_each, r.fed_role + ' group')} of "
            f"{problems.counted(fed_nodes, 'node')} it {'feeds' if r.anchor_role == pairing.PREFILL else 'is fed by'}"
        )
    return (
        f"{r.fed_role} and {r.anchor_role} are placed together ({r.fed} {r.fed_role} : {r.anchors} {r.anchor_role} "
        f"groups): {unit} needs {problems.counted(nodes, 'free node')} ({nodes * gpus_per_node} GPUs) in one NVLink "
        f"domain for each of {problems.counted(count, 'more unit')}; {largest}"
    )


def top_up_unplaced(r: pairing.Ratio, groups: int, domain: str, fed_nodes: int, free: int) -> str:
    """Why ``groups`` fed groups could not join the anchors already running in ``domain``."""
    return (
        f"{r.fed_role}: {problems.counted(groups, 'more group')} must join the {r.anchor_role} groups in domain "
        f"{inventory.short_domain(domain)} ({r.fed} {r.fed_role} : {r.anchors} {r.anchor_role} groups), which needs "
        f"{problems.counted(groups * fed_nodes, 'free node')} there but it has {free} they can use"
    )
