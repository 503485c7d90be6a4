"""``nvlfleet validate -f FILE [-f FILE ...]``: check DeepSeekServing files offline, before anything is applied.

Runs ``nvlfleet.core.validation`` on every DeepSeekServing document of every file (multi-document YAML; ``-f -`` reads
stdin) and prints one line per problem::

    FILE[#doc] namespace/name: spec.path: message          (an error: the serving would be refused)
    FILE[#doc] namespace/name: spec.path: warning: message (accepted, but it will run badly)
    FILE: ok (N servings)

``#doc`` (1-based) appears for files with more than one document. Documents of other kinds (a Secret or a PVC
kept beside the serving) are skipped. Exit status: 0 when every file is valid, 1 otherwise (problems, unreadable
files, YAML errors, files without a DeepSeekServing). Never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from nvlfleet.api import names, policy, problems
from nvlfleet.commands import inputs, policyflags
from nvlfleet.core import validation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML or JSON file with one or more DeepSeekServing documents; '-' reads stdin; repeatable",
    )
    parser.add_argument("--no-warnings", action="store_true", help="print errors only")
    policyflags.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        allowed = policyflags.policy_of(args)
    except ValueError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    status = 0
    for name in args.files:
        status |= _check_file(name, sys.stdout, sys.stderr, warnings=not args.no_warnings, allowed=allowed)
    return status


def _check_file(name: str, out: TextIO, err: TextIO, *, warnings: bool, allowed: policy.Policy = policy.DEFAULT) -> int:
    shown = inputs.shown(name)
    try:
        documents = inputs.read(name)
    except inputs.Unreadable as error:
        err.write(f"{shown}: {error.reason or f'not valid YAML: {_yaml_error(error)}'}\n")
        return 1
    numbered = len(documents) > 1
    servings = errors = warned = 0
    for index, document in enumerate(documents, start=1):
        if document is None or not _is_serving(document):
            continue
        servings += 1
        where = f"{shown}#{index}" if numbered else shown
        review = validation.review(document, allowed)
        label = f"{where} {_name(document)}"
        for problem in sorted(review.errors):
            out.write(f"{label}: {problem}\n")
        if warnings:
            for problem in sorted(review.warnings):
                out.write(f"{label}: {_as_warning(problem)}\n")
        errors += len(review.errors)
        warned += len(review.warnings)
    if servings == 0:
        err.write(f"{shown}: no {names.KIND} found (kind: {names.KIND}, apiVersion: {names.API_VERSION})\n")
        return 1
    if errors:
        return 1
    plural = "serving" if servings == 1 else "servings"
    note = f", {warned} warning{'s' if warned != 1 else ''}" if warned and warnings else ""
    out.write(f"{shown}: ok ({servings} {plural}{note})\n")
    return 0


def _is_serving(document: Any) -> bool:
    """A document meant as a DeepSeekServing: its kind or group says so (a misspelt kind is still checked)."""
    if not isinstance(document, Mapping):
        return True  # validation explains what a serving must look like
    kind = str(document.get("kind", ""))
    api_version = str(document.get("apiVersion", ""))
    return kind.lower() == names.KIND.lower() or api_version.startswith(f"{names.GROUP}/") or not kind


def _name(document: Any) -> str:
    metadata = document.get("metadata") if isinstance(document, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "<unnamed>"
    namespace = metadata.get("namespace") or "default"
    return f"{namespace}/{metadata.get('name') or '<unnamed>'}"


def _as_warning(problem: problems.Problem) -> str:
    return f"{problem.path}: warning: {problem.message}" if problem.path else f"warning: {problem.message}"


def _yaml_error(error: inputs.Unreadable) -> str:
    where = f" (line {error.line}, column {error.column})" if error.line is not None else ""
    return f"{error.problem}{where}"
