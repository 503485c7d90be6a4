"""``nvlfleet plan``: will these servings fit on these nodes, where will each group go, what is left per rack.

Adapter around the pure core, run by people before ``kubectl apply``: it reads DeepSeekServing files and
``kubectl get nodes -o yaml`` output (optionally ``kubectl get pods -A -o yaml`` so busy nodes count), calls
``planner.plan`` once, measures how long that took, and prints a table for people or JSON for programs.

The JSON form is a stable interface (keys may be added, never renamed)::

    {"servings": [{"namespace", "name", "gpu", "strategy",
                   "roles": [{"role", "nodesPerGroup", "gpusPerGroup", "groups", "placed": {CLIQUE: GROUPS},
                              "unplaced", "reasons": [TEXT]}]}],
     "domains": [{"clique", "label", "shortId", "nodes", "schedulableNodes", "freeNodesBefore",
                  "freeNodesAfter", "shortNodes"}],
     "planningSeconds": SECONDS}

``clique`` is the domain's label value (a host name for single-node generations, whose ``label`` is
``kubernetes.io/hostname``). A serving's ``status.placement``, when present in its file, is its current
placement: those groups stay where they are. Exit codes: 0 every group placed, 2 some groups cannot be placed
(reasons say why), 1 bad input (the message names the file and the field path).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from nvlfleet.api import models, names, policy, problems
from nvlfleet.commands import inputs, policyflags
from nvlfleet.core import autoscaling, demands, inventory, kubeobjects, placements, planner, validation

_T = TypeVar("_T")


class BadInput(Exception):
    """Input the command cannot use; the message already names the file and the field."""


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
        required=True,
        metavar="NODES.yaml",
        help="output of `kubectl get nodes -o yaml` (a List of Nodes, or Node documents)",
    )
    parser.add_argument(
        "--pods",
        metavar="PODS.yaml",
        help="optional `kubectl get pods -A -o yaml`: nodes running GPU pods are not free",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    policyflags.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        servings = _servings(args.files, policyflags.policy_of(args))
        labels = {s.spec.placement.domain_label for _, s in servings}
        if len(labels) > 1:
            raise BadInput(
                "spec.placement.domainLabel differs between servings ("
                + ", ".join(sorted(labels))
                + "); plan servings that name NVLink domains differently separately"
            )
        label = labels.pop() if labels else names.DEFAULT_DOMAIN_LABEL
        inv = _inventory(args.nodes, args.pods, label)
        wanted: list[planner.Demand] = []
        current: list[placements.Placement] = []
        for source, serving in servings:
            try:
                wanted += demands.of(serving)
            except problems.InvalidSpec as err:
                raise BadInput(_problems(source, err.problems)) from None
            current += demands.current(serving)
    except (BadInput, ValueError) as err:
        print(f"nvlfleet plan: {err}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    result = planner.plan(inv, wanted, current)
    seconds = time.perf_counter() - started
    gpus = {inventory.ServingKey(s.metadata.namespace, s.metadata.name): s.spec for _, s in servings}
    if args.output == "json":
        print(json.dumps(as_json(result, gpus, seconds), indent=2))
    else:
        print(as_table(result, seconds))
    return 2 if result.unplaced else 0


# ---------------------------------------------------------------------------------------------------------------
# Output


def as_json(
    result: planner.Plan, specs: dict[inventory.ServingKey, models.DeepSeekServingSpec], seconds: float
) -> dict[str, Any]:
    servings: dict[inventory.ServingKey, dict[str, Any]] = {}
    for role in result.roles:
        spec = specs[role.serving]
        entry = servings.setdefault(
            role.serving,
            {
                "namespace": role.serving.namespace,
                "name": role.serving.name,
                "gpu": spec.gpu.value,
                "strategy": spec.placement.strategy,
                "roles": [],
            },
        )
        entry["roles"].append(
            {
                "role": role.role,
                "nodesPerGroup": role.nodes_per_group,
                "gpusPerGroup": role.nodes_per_group * demands.requirements(spec).gpus_per_node,
                "groups": role.groups,
                "placed": dict(role.placed),
                "unplaced": role.unplaced,
                "reasons": list(role.reasons),
            }
        )
    return {
        "servings": list(servings.values()),
        "domains": [
            {
                "clique": d.key,
                "label": d.label,
                "shortId": inventory.short_domain(d.key),
                "nodes": d.nodes,
                "schedulableNodes": d.schedulable,
                "freeNodesBefore": d.free_before,
                "freeNodesAfter": d.free_after,
                "shortNodes": d.short,
            }
            for d in result.domains
        ],
        "planningSeconds": seconds,
    }


def as_table(result: planner.Plan, seconds: float) -> str:
    roles = [
        [
            str(r.serving),
            r.role,
            str(r.groups),
            str(r.nodes_per_group),
            str(r.placed_groups),
            str(r.unplaced),
            ", ".join(f"{inventory.short_domain(k)} ×{g}" for k, g in r.placed.items()) or "-",
        ]
        for r in result.roles
    ]
    domains = [
        [
            inventory.short_domain(d.key),
            str(d.nodes),
            str(d.schedulable),
            str(d.free_before),
            str(d.free_after),
            str(d.short) if d.short else "",
        ]
        for d in result.domains
    ]
    out = [
        _table(["SERVING", "ROLE", "GROUPS", "NODES/GROUP", "PLACED", "UNPLACED", "DOMAINS"], roles),
        "",
        _table(["DOMAIN", "NODES", "SCHEDULABLE", "FREE BEFORE", "FREE AFTER", "SHORT"], domains),
    ]
    notes = [f"  {r.serving} {r.role}: {reason}" for r in result.roles for reason in r.reasons]
    if notes:
        out += ["", "Why:", *notes]
    out += ["", f"{result.unplaced} group(s) unplaced; planned in {seconds * 1000:.1f} ms"]
    return "\n".join(out)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Input


def _documents(path: str) -> Iterator[tuple[str, str, object]]:
    """(file, path inside the document, object) for every YAML document and every item of a List in ``path``.

    ``file`` names the document when there are several: ``nodes.yaml (document 2)``.
    """
    try:
        for found in inputs.objects(path):
            kind = found.value.get("kind") if isinstance(found.value, dict) else None
            if not found.at and isinstance(kind, str) and kind.endswith("List"):  # a List whose items are no list
                raise BadInput(f"{found.source}: items: a {kind} needs a list of items")
            yield found.source, found.at, found.value
    except inputs.Unreadable as err:
        raise BadInput(str(err)) from None


def _servings(paths: Sequence[str], allowed: policy.Policy) -> list[tuple[str, models.DeepSeekServing]]:
    """The servings in ``paths``, each refused as ``nvlfleet validate`` refuses it (the same checks and policy):
    a plan of a serving that cannot run would be a plan of nothing."""
    out: list[tuple[str, models.DeepSeekServing]] = []
    seen: dict[inventory.ServingKey, str] = {}
    for path in paths:
        found = 0
        for source, at, obj in _documents(path):
            if not isinstance(obj, dict) or obj.get("kind") != names.KIND:
                continue
            found += 1
            review = validation.review(obj, allowed)
            if review.errors or review.serving is None:
                raise BadInput(
                    _problems(source, [problems.Problem(problems.path(at, p.path), p.message) for p in review.errors])
                )
            serving = autoscaling.followed(review.serving)  # prefill as the operator sizes it
            if not serving.metadata.name:
                raise BadInput(
                    _problems(
                        source,
                        [problems.Problem(problems.path(at, "metadata", "name"), "a DeepSeekServing needs a name")],
                    )
                )
            key = inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)
            if key in seen:
                raise BadInput(
                    f"{source}: {problems.path(at, 'metadata', 'name')}: {key} is also defined in {seen[key]}"
                )
            seen[key] = source
            out.append((source, serving))
        if not found:
            raise BadInput(f"{path}: kind: no {names.KIND} in this file")
    return out


def _inventory(nodes_path: str, pods_path: str | None, label: str) -> inventory.Inventory:
    nodes = [
        node
        for source, at, obj in _documents(nodes_path)
        if (node := _parsed(source, at, obj, "Node", kubeobjects.parse_node)) is not None
    ]
    pods = [
        pod
        for source, at, obj in (_documents(pods_path) if pods_path else ())
        if (pod := _parsed(source, at, obj, "Pod", kubeobjects.parse_pod)) is not None
    ]
    return inventory.build(nodes, pods, label)


def _parsed(
    source: str, at: str, obj: object, kind: str, parse: Callable[[object, str, list[problems.Problem]], _T | None]
) -> _T | None:
    found: list[problems.Problem] = []
    parsed: _T | None = None
    got = obj.get("kind") if isinstance(obj, dict) else None
    if got not in (None, kind):
        found.append(problems.Problem(problems.path(at, "kind"), f"expected {kind} (or a List of them), got {got}"))
    else:
        parsed = parse(obj, at, found)
    if found:
        raise BadInput(_problems(source, found))
    return parsed


def _problems(where: str, found: Sequence[problems.Problem]) -> str:
    """``file: field.path: message``, one problem per line."""
    lines = [f"{where}: {p}" for p in found]
    return lines[0] if len(lines) == 1 else f"{len(lines)} problems:\n  " + "\n  ".join(lines)
