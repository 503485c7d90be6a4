"""YAML text that kubectl, Helm, Prometheus and the API server read back as the values nvlfleet meant.

Where it sits: the last step of every flow that ends in a YAML file or on standard output (`nvlfleet render`,
the CRD, the alert rules, the demo's and the tests' `kubectl apply`); the operator itself speaks JSON.

PyYAML leaves a string plain when *its own* YAML 1.1 resolver would read it back as a string. The Go readers
(go-yaml v2 behind sigs.k8s.io/yaml in kubectl and the API server, v2/v3 in Prometheus and Helm) take more plain
scalars for numbers and booleans: ``12345e67`` (an exponent without a sign), ``09876543`` (digits that are not
octal), ``0o17``, ``y`` and ``n``. A DeepSeekServing's NVLink-domain label is an 8-digit hex hash, and about
one such hash in 130 is a number to Go (counted over the hashes of 200,000 integers); ``kubectl apply`` then
refused the whole file with "cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type
string" (a CI run found it). Here every string a Go reader may take for something else is quoted, a few more than
it would (an exponent too large for a float stays a string to Go, and is quoted all the same).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

# go-yaml v2's resolve(): a plain scalar starting with a digit or a sign is tried, with `_` removed, as an integer
# (Go's base prefixes 0x/0o/0b and a leading 0 for octal), then against its float pattern (an exponent's sign is
# optional there, unlike in PyYAML's), then as 0b binary; a leading `.` as a float; a date as a timestamp.
_GO_NUMBER = re.compile(
    r"[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)"
)
_GO_SPECIAL_FLOAT = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_GO_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ].*)?")
# Booleans of YAML 1.1 as go-yaml v2 spells them (PyYAML's own list lacks y, Y, n and N), nulls, the merge key.
_GO_WORDS = frozenset(
    {"y", "Y", "n", "N", "~", "<<"}
    | {
        spelt
        for word in ("yes", "no", "true", "false", "on", "off", "null")
        for spelt in (word, word.title(), word.upper())
    }
)


def read_as_other_than_string(value: str) -> bool:
    """True when a Go YAML reader would take ``value``, written plain, for something other than that string."""
    if value == "" or value in _GO_WORDS:
        return True
    if _GO_SPECIAL_FLOAT.fullmatch(value) or _GO_TIMESTAMP.fullmatch(value):
        return True
    return bool(_GO_NUMBER.fullmatch(value.replace("_", "")))


class Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string a Go reader would take for a number, a boolean or null."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        if read_as_other_than_string(data):
            return self.represent_scalar("tag:yaml.org,2002:str", data, style="'")
        return super().represent_str(data)


Dumper.add_representer(str, Dumper.represent_str)


def dump(document: Mapping[str, Any], *, dumper: type[Dumper] = Dumper, **options: Any) -> str:
    """One YAML document; ``options`` are PyYAML's (``sort_keys``, ``width``...), key order kept by default."""
    text: str = yaml.dump(dict(document), Dumper=dumper, **{"sort_keys": False, **options})
    return text


def dump_all(documents: Iterable[Mapping[str, Any]], **options: Any) -> str:
    """A stream of YAML documents separated by ``---``, as ``kubectl apply -f -`` takes them."""
    text: str = yaml.dump_all([dict(d) for d in documents], Dumper=Dumper, **{"sort_keys": False, **options})
    return text
