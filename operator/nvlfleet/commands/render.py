"""``nvlfleet render``: print every child manifest a serving becomes, exactly as the operator would apply it.

Adapter around the pure core, run by people (and CI) before ``kubectl apply`` of a DeepSeekServing: it reads the
serving file(s), validates them (``validation.review`` under the policy flags ``nvlfleet validate`` and ``plan``
take: any error stops here, printed with its field path, exit 1), places the groups when given ``kubectl get
nodes -o yaml`` output (``planner``, the same call the operator makes), and prints ``render.render``'s manifests
as multi-document YAML or a JSON list. Owner references are the only thing the operator adds.

Without ``--nodes`` the LeaderWorkerSets are rendered unpinned (node affinity ``<domainLabel> Exists``, one
LeaderWorkerSet per role) and a note on stderr says so. With ``--nodes``, groups that do not fit are reported on
stderr and the exit code is 2; the placed ones are still printed. ``--explain`` prints every effective tuning
setting with its reason, and what the router is told and why, to stderr. Exit codes: 0 rendered, 1 bad input,
2 some groups could not be placed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from nvlfleet.api import models, names, policy, problems, yamltext
from nvlfleet.commands import inputs, policyflags
from nvlfleet.core import (
    autoscaling,
    demands,
    disaggregation,
    inventory,
    kubeobjects,
    planner,
    profiles,
    render,
    validation,
)


class BadInput(Exception):
    """Input the command cannot use; the message names the file and the field path."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="SERVING.yaml",
        help="DeepSeekServing manifest(s); repeat for several. Other kinds in the files are ignored.",
    )
    parser.add_argument(
        "--nodes",
        metavar="NODES.yaml",
        help="output of `kubectl get nodes -o yaml`: place the groups on these nodes (default: unpinned)",
    )
    parser.add_argument(
        "--pods",
        metavar="PODS.yaml",
        help="optional `kubectl get pods -A -o yaml` with --nodes: nodes running GPU pods are not free",
    )
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format")
    parser.add_argument(
        "--explain", action="store_true", help="print each role's effective tuning settings and why, on stderr"
    )
    policyflags.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        servings = _servings(args.files, policyflags.policy_of(args))
        placements, unplaced = _placements(servings, args.nodes, args.pods)
        manifests: list[dict[str, Any]] = []
        for where, serving in servings:
            try:
                manifests += render.render(serving, placements.get(_key(serving)))
            except problems.InvalidSpec as err:
                raise BadInput(_problems(where, err.problems)) from None
    except (BadInput, ValueError) as err:
        print(f"nvlfleet render: {err}", file=sys.stderr)
        return 1
    if args.nodes is None:
        for _, serving in servings:
            label = serving.spec.placement.domain_label
            print(
                f"nvlfleet render: {serving.metadata.name}: no --nodes given, so its LeaderWorkerSets are unpinned "
                f"(node affinity '{label} Exists', each group kept inside one domain by pod affinity); the "
                "scheduler, not nvlfleet, picks the NVLink domains, and a group whose leader lands in a domain "
                "without room for its workers stays pending; pass --nodes to pin",
                file=sys.stderr,
            )
    for line in unplaced:
        print(f"nvlfleet render: {line}", file=sys.stderr)
    if args.explain:
        for _, serving in servings:
            for role, _spec in serving.spec.roles_present():
                print(f"# {serving.metadata.name} {role.value}", file=sys.stderr)
                for line in profiles.explain(profiles.effective(serving.spec, role)):
                    print(f"#   {line}", file=sys.stderr)
                for line in disaggregation.explain(serving.spec, role):
                    print(f"#   {line}", file=sys.stderr)
            print(f"# {serving.metadata.name} router", file=sys.stderr)
            for line in render.explain_router(serving):
                print(f"#   {line}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps(manifests, indent=2))
    else:
        sys.stdout.write(yamltext.dump_all(manifests, width=1000))
    return 2 if unplaced else 0


def _key(serving: models.DeepSeekServing) -> inventory.ServingKey:
    return inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)


# ---------------------------------------------------------------------------------------------------------------
# Input


def _documents(path: str) -> Iterator[tuple[str, object]]:
    """(where, object) for every YAML document, and every item of a List, in ``path``."""
    try:
        for found in inputs.objects(path):
            yield (f"{found.source}: {found.at}" if found.at else found.source), found.value
    except inputs.Unreadable as err:
        raise BadInput(str(err)) from None


def _servings(paths: Sequence[str], allowed: policy.Policy) -> list[tuple[str, models.DeepSeekServing]]:
    """Every DeepSeekServing in ``paths``, validated as ``nvlfleet validate`` validates it under the cluster admin's
    policy ``allowed`` (the same flags); the first file with errors stops the command."""
    out: list[tuple[str, models.DeepSeekServing]] = []
    seen: dict[inventory.ServingKey, str] = {}
    for path in paths:
        found = 0
        for where, obj in _documents(path):
            if not isinstance(obj, dict) or obj.get("kind") != names.KIND:
                continue
            found += 1
            review = validation.review(obj, allowed)
            if review.errors or review.serving is None:
                raise BadInput(_problems(where, review.errors))
            for warning in review.warnings:
                print(f"nvlfleet render: warning: {where}: {warning}", file=sys.stderr)
            key = _key(review.serving)
            if key in seen:
                raise BadInput(f"{where}: metadata.name: {key} is also defined in {seen[key]}")
            seen[key] = where
            out.append((where, autoscaling.followed(review.serving)))  # prefill as the operator sizes it
        if not found:
            raise BadInput(f"{path}: kind: no {names.KIND} in this file")
    return out


def _placements(
    servings: Sequence[tuple[str, models.DeepSeekServing]], nodes_path: str | None, pods_path: str | None
) -> tuple[dict[inventory.ServingKey, dict[str, dict[str, int]]], list[str]]:
    """Each serving's placement planned on the given nodes (all servings in one plan), and why groups are left."""
    if nodes_path is None:
        if pods_path is not None:
            raise BadInput("--pods needs --nodes")
        return {}, []
    labels = {s.spec.placement.domain_label for _, s in servings}
    if len(labels) > 1:
        raise BadInput(f"spec.placement.domainLabel differs between servings ({', '.join(sorted(labels))})")
    nodes = [obj for _, obj in _documents(nodes_path)]
    pods = [obj for _, obj in _documents(pods_path)] if pods_path else []
    try:
        inv = kubeobjects.from_objects(nodes, pods, labels.pop())
        wanted = [d for _, s in servings for d in demands.of(s)]
    except problems.InvalidSpec as err:
        raise BadInput(_problems(nodes_path, err.problems)) from None
    current = [p for _, s in servings for p in demands.current(s)]
    result = planner.plan(inv, wanted, current)
    unplaced = [
        f"{role.serving} {role.role}: {role.unplaced} of {role.groups} group(s) not placed: {reason}"
        for role in result.roles
        if role.unplaced
        for reason in role.reasons or ("no NVLink domain has room",)
    ]
    return {_key(s): result.placement(_key(s)) for _, s in servings}, unplaced


def _problems(where: str, found: Sequence[problems.Problem]) -> str:
    lines = [f"{where}: {p}" for p in sorted(found)]
    return lines[0] if len(lines) == 1 else "\n  " + "\n  ".join(lines)
