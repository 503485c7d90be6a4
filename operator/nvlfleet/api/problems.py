"""What is wrong with a spec, said with the field path a person can find in their YAML.

Pure core. ``validation``, ``profiles`` and ``render`` all report through ``Problem`` so the CLI, the admission
webhook and the status conditions print one format: ``spec.roles.decode.parallelism.tensor: <sentence>``.

A message never repeats a credential: a value that looks like one (a Hugging Face, OpenAI-style, AWS or GitHub
token, a JWT) is replaced by ``<redacted>`` when the Problem is made, because messages travel to places the
object itself does not (Events, the operator's log, ``kubectl apply`` output through the webhook).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

# Values that are credentials whatever field they sit in.
CREDENTIAL = re.compile(
    r"(?<![A-Za-z0-9])(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*)"
)
# The user information of a URL (``https://user:password@host``): a password in an address someone wrote.
USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def redacted(text: str) -> str:
    """``text`` with every credential-shaped string and every URL's user information replaced by ``<redacted>``:
    what is said of an object (its status, an Event) can be read by more people than the object itself."""
    return USERINFO.sub("<redacted>@", CREDENTIAL.sub("<redacted>", text))


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with an object: where (dotted camelCase path, list indexes in brackets) and why."""

    path: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redacted(self.message))

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


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun in the plural unless the count is 1: how every message counts things."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def summary(problems: Iterable[Problem]) -> str:
    """All problems, one per line, sorted by path so repeated runs print the same text."""
    return "\n".join(str(p) for p in sorted(problems))


class InvalidSpec(ValueError):
    """Raised by pure functions that cannot honour a spec; carries the problems that say why."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__(summary(problems))
        self.problems = list(problems)
