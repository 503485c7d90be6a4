"""Prometheus text exposition (format 0.0.4) → sample lines: a pure parser for what a vLLM leader serves.

Pure core, first step of the telemetry flow: vLLM /metrics text → **exposition** (sample lines) → ``samples``
(the families nvlfleet reads, as one ``Sample``) → ``rates`` → ``economics``. It reads text only: no network,
no clock, no prometheus-client (whose package import drags in its HTTP server and registry).

It reads exactly as prometheus-client's ``text_string_to_metric_families`` (0.2x) reads, which the scraper
used before and which vLLM's own exposition is written for — lax where that parser is lax (no check that a
sample belongs to the family typed above it), strict where it is strict (names, label quoting and escapes,
values) — and a unit test compares the two on valid and broken texts. Like it, a ``counter`` family typed
without the ``_total`` suffix has its samples renamed with it. Any unreadable line raises ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Iterator, Mapping

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_RESERVED_LABEL = re.compile(r"^__.*$")
_ESCAPES = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_ESCAPING = re.compile(r'\\[\\n"]')
_TYPES = ("counter", "gauge", "summary", "histogram", "gaugehistogram", "untyped", "unknown", "info", "stateset")
# Sample names that belong to a family of each type (suffixes of the family's name).
_MEMBER_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}


@dataclasses.dataclass(frozen=True)
class SampleLine:
    """One sample of an exposition; ``value`` is an ``int`` when the text is one, as prometheus-client reads it."""

    name: str
    labels: Mapping[str, str]
    value: float


def sample_lines(text: str) -> Iterator[SampleLine]:
    """Every sample line of ``text``, family by family; ``ValueError`` at the first line that cannot be read."""
    family, kind = "", "untyped"
    members: tuple[str, ...] = ()
    pending: list[SampleLine] = []  # the current family's samples, renamed (or not) once its type is final
    for raw in text.split("\n"):
        line = raw.strip()
        if line.startswith("#"):
            parts = _split_quoted(line, 3)
            if len(parts) < 2:
                continue
            name, quoted = "", False
            if len(parts) > 2:
                if parts[1] not in ("TYPE", "HELP"):
                    continue  # a comment
                name, quoted = _unquote_unescape(parts[2])
                if not quoted and not _METRIC_NAME.match(name):
                    raise ValueError(f"invalid metric name in {line!r}")
            if parts[1] == "HELP" and name != family:
                yield from _family(family, kind, pending)
                family, kind, members, pending = name, "untyped", (name,), []
            elif parts[1] == "TYPE":
                if len(parts) < 4:
                    raise ValueError(f"TYPE line without a type: {line!r}")
                if name != family:
                    yield from _family(family, kind, pending)
                    family, pending = name, []
                kind = parts[3]
                members = tuple(family + suffix for suffix in _MEMBER_SUFFIXES.get(kind, ("",)))
        elif line:
            sample = _sample(line)
            if sample.name in members:
                pending.append(sample)
                continue
            yield from _family(family, kind, pending)
            family, kind, members, pending = "", "untyped", (), []
            if not sample.name:
                raise ValueError(f"a sample with an empty name: {line!r}")
            yield sample  # a sample of no declared family stands alone, untyped
    yield from _family(family, kind, pending)


def _family(name: str, kind: str, samples: list[SampleLine]) -> list[SampleLine]:
    """A family's samples as prometheus-client gives them: a counter typed without ``_total`` gets it added."""
    if not name:
        return []  # samples of a nameless family are dropped, as prometheus-client drops them
    if kind not in _TYPES:
        raise ValueError(f"invalid metric type {kind!r} for {name}")
    if kind == "counter" and not name.endswith("_total"):
        return [dataclasses.replace(s, name=s.name + "_total") for s in samples]
    return samples


def _sample(text: str) -> SampleLine:
    label_start = _next_unquoted(text, "{")
    if label_start == -1 or " # " in text[:label_start]:
        name_end = _next_unquoted(text, " \t")
        name = text[:name_end].strip()
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name: {text!r}")
        return SampleLine(name, {}, _value_and_timestamp(text[name_end + 1 :]))
    name = text[:label_start].strip()
    label_end = _next_unquoted(text[label_start:], "}") + label_start
    labels = _labels(text[label_start + 1 : label_end])
    if not name:
        if "__name__" not in labels:
            raise ValueError(f"a sample without a name: {text!r}")
        name = labels.pop("__name__")
    elif "__name__" in labels:
        raise ValueError(f"metric name specified more than once: {text!r}")
    return SampleLine(name, labels, _value_and_timestamp(text[label_end + 1 :]))


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    rest = text.strip()
    try:
        while rest:
            name_term, value_term, rest = _next_term(rest)
            if not value_term:
                continue
            name, quoted_name = _unquote_unescape(name_term)
            if not quoted_name and not _METRIC_NAME.match(name):
                raise ValueError("unquoted UTF-8 label name")
            if value_term[0] != '"':
                raise ValueError("unquoted label value")
            i = 1  # the value's closing quote must be the term's last character
            while i < len(value_term):
                i = value_term.index('"', i)
                if not _escaped(value_term[:i], i):
                    break
                i += 1
            if i + 1 != len(value_term):
                raise ValueError("text after the closing quote")
            value, _ = _unquote_unescape(value_term)
            if name != "__name__" and _RESERVED_LABEL.match(name):
                raise ValueError(f"reserved label name {name}")
            if name in labels:
                raise ValueError(f"duplicate label name {name}")
            labels[name] = value
        return labels
    except ValueError as err:
        raise ValueError(f"invalid labels: {text}") from err


def _next_term(text: str) -> tuple[str, str, str]:
    """The next ``name="value"`` term: (name, stripped value, rest from the following ``,`` or ``}``)."""
    if text[0] == ",":
        text = text[1:]
        if not text:
            return "", "", ""
        if text[0] == ",":
            raise ValueError("multiple commas")
    split = _next_unquoted(text, "=,}")
    if split >= 0 and text[split] == "=":
        name = text[:split]
        text = text[split + 1 :]
        split = _next_unquoted(text, ",}")
    else:
        name = "__name__"
    if split == -1:
        split = len(text)
    return name, text[:split].strip(), text[split:].strip()


def _escaped(s: str, position: int) -> bool:
    backslashes = 0
    while position > backslashes and s[position - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _next_unquoted(text: str, chars: str | None, start: int = 0) -> int:
    """Position of the next character of ``chars`` (default: whitespace) outside quotes, or -1."""
    in_quotes = False
    targets = string.whitespace if chars is None else chars
    for i, c in enumerate(text[start:]):
        if c == '"' and not _escaped(text, start + i):
            in_quotes = not in_quotes
        if not in_quotes and c in targets:
            return start + i
    return -1


def _split_quoted(text: str, maxsplit: int) -> list[str]:
    """``text.split(None, maxsplit)``, except that whitespace inside quotes does not split."""
    tokens = [""]
    x = 0
    while x < len(text):
        split = _next_unquoted(text, None, x)
        if split == -1:
            tokens[-1] = text[x:]
            break
        if split == x:  # runs of whitespace separate once
            x += 1
            continue
        if len(tokens) > maxsplit:
            tokens[-1] = text[x:]
            break
        tokens[-1] = text[x:split]
        x = split + 1
        tokens.append("")
    return tokens


def _unquote_unescape(text: str) -> tuple[str, bool]:
    """The text without its quotes and escapes, and whether it was quoted."""
    if not text:
        return text, False
    quoted = False
    text = text.strip()
    if text[0] == '"':
        if len(text) == 1 or text[-1] != '"':
            raise ValueError("missing close quote")
        text = text[1:-1]
        quoted = True
    if "\\" in text:
        text = _ESCAPING.sub(lambda m: _ESCAPES[m.group(0)], text)
    return text, quoted


def _value_and_timestamp(text: str) -> float:
    """The sample's value; a timestamp after it must be a number too (it is read, then dropped)."""
    text = text.lstrip()
    separator = " " if " " in text else "\t"
    fields = [field.strip() for field in text.split(separator) if field.strip()]
    if not fields:
        return float(text)
    value = _number(fields[0])
    if len(fields) > 1:
        _number(fields[-1])
    return value


def _number(text: str) -> float:
    if text != text.strip() or "_" in text:
        raise ValueError(f"invalid value: {text!r}")
    try:
        return int(text)
    except ValueError:
        return float(text)
