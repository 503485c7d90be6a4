"""Where the local cluster keeps things: the binary cache (outlives clones) and the cluster's own state.

$NVLFLEET_CACHE (default ~/.cache/nvlfleet) holds binaries keyed by version plus the Go module and build
caches that produced them; $NVLFLEET_CLUSTER_DIR (default <repo>/.cluster) holds one running cluster: its
PKI, kubeconfigs, etcd data, logs, PID files and state.json.
"""

from __future__ import annotations

import os
import pathlib

_REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def cache_dir() -> pathlib.Path:
    default = pathlib.Path.home() / ".cache" / "nvlfleet"
    return pathlib.Path(os.environ.get("NVLFLEET_CACHE") or default).expanduser().resolve()


def cluster_dir() -> pathlib.Path:
    default = _REPO_ROOT / ".cluster"
    return pathlib.Path(os.environ.get("NVLFLEET_CLUSTER_DIR") or default).expanduser().resolve()


def bin_dir() -> pathlib.Path:
    return cache_dir() / "bin"


def binary(name: str, version: str) -> pathlib.Path:
    return bin_dir() / f"{name}-{version}"
