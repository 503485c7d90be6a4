"""GPU generations as data: how many GPUs a Kubernetes node has and how many nodes share one NVLink domain.

Pure core, read by ``models`` (topology arithmetic), ``validation``, ``inventory`` (GPU product labels) and the
fleet simulator. The facts live in ``data/hardware.yaml`` so that a new generation is a data change.
"""

from __future__ import annotations

import dataclasses
import functools
from importlib import resources

import yaml


@dataclasses.dataclass(frozen=True)
class Generation:
    """The shape of one GPU generation as Kubernetes sees it."""

    name: str
    product: str  # the GFD label value nvidia.com/gpu.product
    gpus_per_node: int
    nodes_per_domain: int  # nodes that share one NVLink domain; 1 where NVLink stops at the node
    multi_node_nvlink: bool
    compute_capability: str
    memory_mib: int | None
    arch: str

    @property
    def gpus_per_domain(self) -> int:
        return self.gpus_per_node * self.nodes_per_domain


@functools.cache
def generations() -> dict[str, Generation]:
    """Every known generation by name (GB200, GB300, B200, H200)."""
    raw = yaml.safe_load(resources.files("nvlfleet.facts").joinpath("data/hardware.yaml").read_text())
    return {
        name: Generation(
            name=name,
            product=str(entry["product"]),
            gpus_per_node=int(entry["gpusPerNode"]),
            nodes_per_domain=int(entry["nodesPerDomain"]),
            multi_node_nvlink=bool(entry["multiNodeNvlink"]),
            compute_capability=str(entry["computeCapability"]),
            memory_mib=None if entry["memoryMiB"] is None else int(entry["memoryMiB"]),
            arch=str(entry["arch"]),
        )
        for name, entry in raw.items()
    }


def generation(name: str) -> Generation:
    """The generation called ``name``; raises KeyError for an unknown one (the API enum prevents that)."""
    return generations()[name]
