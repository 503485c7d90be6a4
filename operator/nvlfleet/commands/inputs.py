"""The files the offline subcommands read (``nvlfleet validate``, ``render``, ``plan``): YAML or JSON documents
from a path or from stdin (``-``), each named for the messages that point at it.

First step of the offline data flow (files → documents → validate → plan → render). ``read`` gives every document
of one file; ``objects`` gives its objects, the items of a ``kind: ...List`` (``kubectl get -o yaml``) one by
one. A file that cannot be read or parsed raises ``Unreadable``, which carries what went wrong and where, so each
subcommand words the message in its own established way. Never a traceback for bad input.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator

import yaml

STDIN = "-"


class Unreadable(Exception):
    """``shown`` could not be read (``reason`` is ``cannot read: ...``), or is not YAML (``problem``, at ``line``
    and ``column`` when the parser knows them). ``str()`` is the message ``render`` and ``plan`` print."""

    def __init__(
        self,
        shown: str,
        *,
        reason: str | None = None,
        problem: str = "",
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{shown}: {reason}" if reason else f"{shown}: not valid YAML{where}: {problem}")
        self.shown = shown
        self.reason = reason
        self.problem = problem
        self.line = line
        self.column = column


@dataclasses.dataclass(frozen=True)
class Object:
    """One object of a file: ``source`` names its document (``nodes.yaml (document 2)`` when the file has
    several), ``at`` its place inside it (``items[3]`` for an item of a List, else empty)."""

    source: str
    at: str
    value: object


def shown(name: str) -> str:
    """How messages name the file given as ``name`` on the command line."""
    return "<stdin>" if name == STDIN else name


def read(name: str) -> list[object]:
    """Every document of ``name`` (``-``: stdin), empty documents included as None."""
    try:
        text = sys.stdin.read() if name == STDIN else _read(name)
    except OSError as error:
        raise Unreadable(shown(name), reason=f"cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise Unreadable(shown(name), reason="cannot read: not UTF-8 text") from None
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = str(getattr(error, "problem", None) or str(error).splitlines()[0])
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise Unreadable(shown(name), problem=problem, line=line, column=column) from None


def objects(name: str) -> Iterator[Object]:
    """The objects of ``name``'s non-empty documents; a List (a ``kind`` ending in ``List`` with a list of
    ``items``) gives its items instead. A List whose ``items`` is no list is given as it is."""
    documents = [d for d in read(name) if d is not None]
    for index, document in enumerate(documents, start=1):
        source = f"{shown(name)} (document {index})" if len(documents) > 1 else shown(name)
        kind = document.get("kind") if isinstance(document, dict) else None
        items = document.get("items") if isinstance(document, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            for position, item in enumerate(items):
                yield Object(source, f"items[{position}]", item)
        else:
            yield Object(source, "", document)


def _read(name: str) -> str:
    with open(name, encoding="utf-8") as handle:
        return handle.read()
