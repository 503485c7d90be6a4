"""What is wrong with a spec, said with the field path a person can find in their YAML.

Pure core. ``validation``, ``profiles`` and ``render`` all report through ``Problem`` so the CLI, the admission
webhook and the status conditions print one format: ``spec.roles.decode.parallelism.tensor: <sentence>``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with an object: where (dotted camelCase path, list indexes in brackets) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def path(*parts: str | int) -> str:
    """Join path parts the way kubectl prints them: ``spec.extraArgs[2]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part:
            out += f".{part}" if out else part
    return out


def pydantic_path(loc: Sequence[str | int], prefix: str = "") -> str:
    """A pydantic error location as a field path (pydantic reports aliases, i.e. camelCase)."""
    return path(*([prefix] if prefix else []), *loc)


def summary(problems: Iterable[Problem]) -> str:
    """All problems, one per line, sorted by path so repeated runs print the same text."""
    return "\n".join(str(p) for p in sorted(problems))


class InvalidSpec(ValueError):
    """Raised by pure functions that cannot honour a spec; carries the problems that say why."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__(summary(problems))
        self.problems = list(problems)
