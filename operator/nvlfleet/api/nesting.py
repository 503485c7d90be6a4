"""How deep a JSON document nests, and the same document with whatever lies deeper than a limit cut off.

Pure, beside ``problems`` at the start of the data flow. A DeepSeekServing is a few levels deep; no Kubernetes
object nvlfleet reads comes near ``MAX_DEPTH``. An object nested thousands of levels deep (the API server decodes
up to 10,000) is an attack or an accident: Python's ``json`` and every recursive walk over it (pydantic's error
report, ``json.dumps``, kopf's diff) stop at about 1,000 levels with ``RecursionError``. So nothing here
recurses: depth is measured with an explicit stack, and a document too deep to decode is cut on its text first.
``validation.parse`` refuses a serving deeper than ``MAX_DEPTH`` with the path where it gets too deep; the
operator's decoding of watch streams and webhook requests cuts such a document (``cut_text`` / ``cut``) so that
one object can never stop the process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

MAX_DEPTH: Final = 64
CUT: Final = f"<nvlfleet: nested more than {MAX_DEPTH} levels deep; cut here>"

# A JSON string (escapes included) or a bracket: what depth is counted from. Everything else is skipped.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def too_deep(obj: object, limit: int = MAX_DEPTH) -> str | None:
    """The path (``a.b[3].c``) of the first container nested deeper than ``limit`` levels, or of a ``CUT`` left
    where the operator's decoding cut one off; None when there is neither."""
    stack: list[tuple[object, str, int]] = [(obj, "", 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, Mapping):
            children = [(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()]
        elif isinstance(node, list | tuple):
            children = [(v, f"{where}[{i}]") for i, v in enumerate(node)]
        elif node == CUT:
            return where
        else:
            continue
        if depth > limit:
            return where
        stack.extend((value, path, depth + 1) for value, path in children)
    return None


def cut(obj: Any, limit: int = MAX_DEPTH) -> Any:
    """``obj`` with every container deeper than ``limit`` replaced by ``CUT`` (in place, returned)."""
    if not isinstance(obj, dict | list):
        return obj
    stack: list[tuple[dict[Any, Any] | list[Any], int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for key in list(keys):
            value = node[key]
            if isinstance(value, dict | list):
                if depth >= limit:
                    node[key] = CUT
                else:
                    stack.append((value, depth + 1))
    return obj


def cut_text(text: str, limit: int = MAX_DEPTH) -> str:
    """JSON text with every container deeper than ``limit`` replaced by the string ``CUT``, without decoding it:
    for a document whose depth stops ``json.loads`` itself."""
    pieces: list[str] = []
    depth = 0
    start = 0  # where the text kept since the last cut begins
    cut_from: int | None = None
    for token in _TOKEN.finditer(text):
        char = token.group()
        if char in "{[":
            depth += 1
            if depth == limit + 1:
                cut_from = token.start()
        elif char in "}]":
            if depth == limit + 1 and cut_from is not None:
                pieces += [text[start:cut_from], f'"{CUT}"']
                start, cut_from = token.end(), None
            depth -= 1
    pieces.append(text[start:] if cut_from is None else text[start:cut_from] + f'"{CUT}"')
    return "".join(pieces)
