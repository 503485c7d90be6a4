"""The cluster admin's policy as command-line flags, shared by ``nvlfleet run``, ``validate``, ``plan`` and
``render`` so that an offline check refuses exactly what admission refuses.

Each ``api.policy`` setting is a repeatable flag (``--allow-weights-host-path /mnt/nvme/models``); ``--policy
FILE`` reads the chart's ``policy:`` values (or a whole values file) and the flags add to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

import yaml

from nvlfleet.api import policy

_HELP = {
    "weights_host_path_prefixes": "let spec.model.weights.hostPath lie under this directory",
    "volume_host_paths": "let a spec.pod.volumes hostPath lie under this directory",
    "service_accounts": "let spec.pod.serviceAccountName name this ServiceAccount",
    "priority_classes": "let spec.pod.priorityClassName name this PriorityClass",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "policy", "what a DeepSeekServing may ask for beyond what vLLM needs (default: nothing; each flag repeatable)"
    )
    group.add_argument("--policy", metavar="FILE", help="a YAML file with the chart's policy: values")
    for setting, (flag, _) in policy.FLAGS.items():
        group.add_argument(
            flag, dest=f"allow_{setting}", action="append", default=[], metavar="VALUE", help=_HELP[setting]
        )


def policy_of(args: argparse.Namespace) -> policy.Policy:
    """The policy the flags give; raises ValueError with one line for a bad --policy file."""
    base = policy.DEFAULT
    if args.policy:
        try:
            data = yaml.safe_load(pathlib.Path(args.policy).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ValueError(f"--policy {args.policy}: cannot read it: {err}") from err
        inner = data.get("policy", data) if isinstance(data, dict) else data
        if not isinstance(inner, dict):
            raise ValueError(f"--policy {args.policy}: the policy is a mapping of lists")
        try:
            base = policy.from_mapping(inner)
        except ValueError as err:
            raise ValueError(f"--policy {args.policy}: {err}") from err
    extra = {s: (*getattr(base, s), *getattr(args, f"allow_{s}")) for s in policy.FLAGS}
    return dataclasses.replace(base, **extra)
