"""Simulated fleets' pod networks: loopback where something listens on pod IPs, the benchmarking range where not.

The endpoint controllers refuse loopback pod IPs (and retry each Service's endpoints forever), so the benchmark's
fleets take routable-looking addresses; the demo's keep loopback ones a simulated vLLM can bind.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from localcluster import fleet


def pod_cidrs(nodes: list[dict[str, Any]]) -> list[ipaddress.IPv4Network]:
    return [ipaddress.IPv4Network(n["spec"]["podCIDR"]) for n in nodes]


def test_a_fleet_gets_one_loopback_slash_24_per_node_by_default() -> None:
    cidrs = pod_cidrs(fleet.fleet_nodes("GB200", 2))

    assert all(c.is_loopback and c.prefixlen == 24 for c in cidrs)
    assert len(set(cidrs)) == 36


def test_a_benchmark_fleet_gets_non_loopback_subnets_from_the_benchmarking_range_one_per_node() -> None:
    nodes = fleet.fleet_nodes("GB200", 2, first_slot=18, pods=fleet.BENCHMARK_PODS)
    cidrs = pod_cidrs(nodes)

    assert all(not c.is_loopback and c.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")) for c in cidrs)
    assert len(set(cidrs)) == len(cidrs) == 36
    assert all(n["spec"]["podCIDRs"] == [n["spec"]["podCIDR"]] for n in nodes)
    assert cidrs[0] == ipaddress.ip_network("198.18.4.128/26")  # slot 18: 18 × 64 addresses in


def test_a_benchmark_subnet_holds_more_pods_than_a_tray_admits() -> None:
    node = fleet.fleet_nodes("GB200", 1, pods=fleet.BENCHMARK_PODS)[0]

    usable = ipaddress.ip_network(node["spec"]["podCIDR"]).num_addresses - 2
    assert usable >= 4  # a tray runs one pod per GPU at most
    assert usable > int(node["status"]["allocatable"]["nvidia.com/gpu"])


def test_the_benchmarks_largest_run_has_a_subnet_for_every_tray() -> None:
    import convergence
    import run

    # bench/run.py's fleets: the shared one, then racks added after it for the largest convergence N.
    shared = run.FULL.racks
    needed = -(-(max(run.FULL.convergence) * convergence.PODS_PER_SERVING + 2) // 18)
    racks = max(shared, needed)
    fleet.BENCHMARK_PODS.cidr(racks * 18 - 1)  # the last tray's slot: no ValueError


def test_a_slot_beyond_the_pool_is_refused_with_the_pool_named() -> None:
    with pytest.raises(ValueError, match=r"outside the 2048 /26s of 198\.18\.0\.0/15"):
        fleet.BENCHMARK_PODS.cidr(2048)
