"""GPU generations as data: how many GPUs a Kubernetes node has and how many nodes share one NVLink domain.

Pure core, read by ``models`` (topology arithmetic), ``validation``, ``inventory`` (GPU product labels) and the
fleet simulator. The facts live in ``data/hardware.yaml`` so that a new generation is a data change.
"""

from __future__ import annotations

import dataclasses
import functools
import re
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
    capabilities: tuple[str, ...]  # Linux capabilities a vLLM container needs here, beyond none (render drops ALL)

    @property
    def gpus_per_domain(self) -> int:
        return self.gpus_per_node * self.nodes_per_domain


_CAPABILITY = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _capabilities(name: str, raw: object) -> tuple[str, ...]:
    """A generation's ``capabilities`` as Kubernetes spells them (``IPC_LOCK``, no ``CAP_`` prefix, never ``ALL``)."""
    if not isinstance(raw, list) or not all(isinstance(c, str) and _CAPABILITY.match(c) for c in raw):
        raise ValueError(f"hardware.yaml {name}.capabilities must be a list of capability names, got {raw!r}")
    if "ALL" in raw or any(c.startswith("CAP_") for c in raw):
        raise ValueError(f"hardware.yaml {name}.capabilities names single capabilities without CAP_, got {raw!r}")
    return tuple(raw)


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
            capabilities=_capabilities(name, entry["capabilities"]),
        )
        for name, entry in raw.items()
    }


def generation(name: str) -> Generation:
    """The generation called ``name``; raises KeyError for an unknown one (the API enum prevents that)."""
    return generations()[name]
