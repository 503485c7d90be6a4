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

import yaml

from nvlfleet.api import names
from nvlfleet.core import validation

STDIN = "-"


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


def run(args: argparse.Namespace) -> int:
    status = 0
    for name in args.files:
        status |= _check_file(name, sys.stdout, sys.stderr, warnings=not args.no_warnings)
    return status


def _check_file(name: str, out: TextIO, err: TextIO, *, warnings: bool) -> int:
    shown = "<stdin>" if name == STDIN else name
    try:
        text = sys.stdin.read() if name == STDIN else _read(name)
    except OSError as error:
        err.write(f"{shown}: cannot read: {error.strerror or error}\n")
        return 1
    except UnicodeDecodeError:
        err.write(f"{shown}: cannot read: not UTF-8 text\n")
        return 1
    try:
        documents = [d for d in yaml.safe_load_all(text)]
    except yaml.YAMLError as error:
        err.write(f"{shown}: not valid YAML: {_yaml_error(error)}\n")
        return 1
    numbered = len(documents) > 1
    servings = errors = warned = 0
    for index, document in enumerate(documents, start=1):
        if document is None or not _is_serving(document):
            continue
        servings += 1
        where = f"{shown}#{index}" if numbered else shown
        review = validation.review(document)
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


def _read(name: str) -> str:
    with open(name, encoding="utf-8") as handle:
        return handle.read()


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


def _as_warning(problem: validation.Problem) -> str:
    return f"{problem.path}: warning: {problem.message}" if problem.path else f"warning: {problem.message}"


def _yaml_error(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    what = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else str(what)
