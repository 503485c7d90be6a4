"""The examples and what each needs of the cluster admin's policy beyond the default, as its comment says."""

from __future__ import annotations

import pathlib

from nvlfleet.api import policy

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))

# The policy line an example's comment names, and the field the default policy refuses without it.
NEEDS = {"gb300-throughput.yaml": ("--allow-weights-host-path=/mnt/nvme/models", "spec.model.weights.hostPath.path")}


def needed_policy(example: pathlib.Path) -> policy.Policy:
    """The policy under which ``example`` is valid: the default, plus the line its comment names."""
    flag = NEEDS.get(example.name, ("", ""))[0]
    return policy.Policy(weights_host_path_prefixes=(flag.partition("=")[2],)) if flag else policy.DEFAULT
