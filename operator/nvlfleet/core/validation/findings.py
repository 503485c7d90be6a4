"""What validation found: the errors and warnings of one serving, and the words messages share.

Pure core, inside the validate step (spec → **validate** → plan → render → apply → status): every check module of
``nvlfleet.core.validation`` reports into one ``Findings``; the entry points turn it into a ``Review``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvlfleet.api import models, problems
from nvlfleet.facts import facts


@dataclasses.dataclass(frozen=True)
class Review:
    """What validation found. ``serving`` is the parsed object (None when it did not parse)."""

    serving: models.DeepSeekServing | None
    errors: tuple[problems.Problem, ...]
    warnings: tuple[problems.Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors


class Findings:
    """Errors and warnings as the checks report them, each said once."""

    def __init__(self) -> None:
        self.errors: list[problems.Problem] = []
        self.warnings: list[problems.Problem] = []

    def error(self, path: str, message: str) -> None:
        self.add("error", path, message)

    def warn(self, path: str, message: str) -> None:
        self.add("warning", path, message)

    def add(self, severity: facts.Severity, path: str, message: str) -> None:
        bucket = self.errors if severity == "error" else self.warnings
        problem = problems.Problem(path, message)
        if problem not in bucket:
            bucket.append(problem)


def either(words: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
