"""Parsing a raw DeepSeekServing the way the API server type-checks it, with pydantic's errors as sentences.

Pure core, the start of the validate step (raw object → **parse** → the checks on the parsed serving): strict
JSON-mode parsing ("4" is not an integer), metadata checks pydantic does not make, and one ``Problem`` per
pydantic error at the wire path of the field, with "did you mean" for a misspelt field.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from nvlfleet.api import models, nesting, problems, schema
from nvlfleet.core.validation import pod

# What the API's string patterns mean, for messages ("is not a DNS label" rather than a regex).
PATTERN_MEANINGS: Mapping[str, str] = {
    schema.DNS_LABEL: "a DNS-1123 label (lowercase letters, digits and '-', "
    "starting and ending with a letter or digit)",
    r"^([01][0-9]|2[0-3]):[0-5][0-9]$": "a UTC time of day HH:MM between 00:00 and 23:59",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "an environment variable name (letters, digits and '_', not starting with a digit)",
    schema.UNSIGNED_QUANTITY: "a Kubernetes quantity without a minus sign, such as 64Gi, 1.5Gi or 1e9",
    schema.WHOLE_QUANTITY: "a whole cpu or memory quantity such as 2, 500m or 1Gi (suffix m, Ki, Mi, Gi or Ti)",
    r"^[0-9]+\.[0-9]+\.[0-9]+$": "a version MAJOR.MINOR.PATCH such as 0.33.0",
    r"^[A-Z0-9_]+$": "an upper-case backend name such as FLASHMLA_SPARSE_DSV41",
    r"^[a-z0-9_]+$": "a lower-case name such as flashinfer_nvlink_one_sided",
    r"^[A-Za-z0-9_]*$": "a KV connector class name such as NixlConnector (letters, digits and '_'), or empty",
    r"^[A-Z]{3}$": "an ISO 4217 currency code such as USD",
    r"^/": "an absolute path (starting with /)",
    r"^[^/]": "a relative path (not starting with /)",
    r"^[A-Za-z0-9._-]+$": "a revision (commit or tag: letters, digits, '.', '_' and '-')",
    r"^[A-Za-z0-9][A-Za-z0-9._/-]*$": "a Hugging Face repository id or path such as deepseek-ai/DeepSeek-V4.1-Flash",
    schema.IMAGE: "a container image reference such as vllm/vllm-openai:v0.33.0",
    r"^[A-Za-z0-9][A-Za-z0-9._:-]*$": "a served model name (letters, digits, '.', '_', ':' and '-')",
    r"^/.*": "an absolute path",
    r"^https?://[^\s]+$": "an http:// or https:// URL without spaces",
    r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$": "a Kubernetes label key such as "
    "nvidia.com/gpu.clique",
}

_DNS_LABEL = re.compile(schema.DNS_LABEL)


def parse(obj: object) -> tuple[models.DeepSeekServing | None, list[problems.Problem]]:
    """Parse a raw object the way the API server would type-check it (strict: "4" is not an integer)."""
    if not isinstance(obj, Mapping):
        return None, [
            problems.Problem(
                "", f"a DeepSeekServing is a mapping with apiVersion, kind, metadata and spec, not {_a(obj)}"
            )
        ]
    deep = nesting.too_deep(obj)
    if deep is not None:  # before anything walks it recursively: json.dumps and pydantic stop near 1,000 levels
        return None, [
            problems.Problem(deep, f"nests more than {nesting.MAX_DEPTH} levels deep; no field of a serving does")
        ]
    found = _metadata_problems(obj.get("metadata"))
    try:
        # JSON round trip: strict JSON mode accepts enum values and ISO strings but no "4" for 4, like the API.
        # Wire names only (by_name=False): the API server knows nodesPerGroup, not the Python nodes_per_group.
        text = json.dumps(obj, default=str)
    except (TypeError, ValueError) as err:
        return None, [*found, problems.Problem("", f"the object cannot be read as JSON: {err}")]
    try:
        serving = models.DeepSeekServing.model_validate_json(text, strict=True, by_alias=True, by_name=False)
    except pydantic.ValidationError as err:
        converted = [_pydantic_problem(e) for e in err.errors(include_url=False)]
        return None, [*found, *dict.fromkeys(converted)]
    return serving, found


def _metadata_problems(metadata: object) -> list[problems.Problem]:
    if metadata is None:
        return [problems.Problem("metadata.name", "is required")]
    if not isinstance(metadata, Mapping):
        return []  # pydantic reports the type
    found: list[problems.Problem] = []
    name = metadata.get("name")
    if not name:
        found.append(problems.Problem("metadata.name", "is required"))
    elif not isinstance(name, str) or len(name) > 253 or not pod.DNS_SUBDOMAIN.fullmatch(name):
        found.append(
            problems.Problem(
                "metadata.name",
                f"{name!r} is not a valid name: use lowercase letters, digits, '-' and '.', at most 253 characters",
            )
        )
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _DNS_LABEL.match(namespace)):
        found.append(
            problems.Problem("metadata.namespace", f"{namespace!r} is not {PATTERN_MEANINGS[_DNS_LABEL.pattern]}")
        )
    return found


def _pydantic_problem(error: Mapping[str, Any]) -> problems.Problem:
    loc: tuple[str | int, ...] = tuple(error["loc"])
    kind: str = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    given = error.get("input")
    if kind == "extra_forbidden":
        field = str(loc[-1])
        known = _field_names_at(loc[:-1])
        close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else (f"; known fields: {', '.join(known)}" if known else "")
        return problems.Problem(problems.pydantic_path(loc), f"unknown field{hint}")
    return problems.Problem(problems.pydantic_path(loc), _type_message(kind, ctx, given, error["msg"], loc))


def _type_message(kind: str, ctx: Mapping[str, Any], given: object, fallback: str, loc: Sequence[str | int]) -> str:
    got = f", got {_a(given)}"
    if kind == "missing":
        return "is required"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number{got}"
    if kind == "finite_number":
        return f"must be a finite number, got {given!r}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number{got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false{got}"
    if kind == "string_type":
        if loc and loc[-1] in ("start", "end") and isinstance(given, int):
            return (
                f'must be a quoted time such as "01:00"; YAML reads an unquoted 01:00 as the number {given}'
                if given < 24 * 60
                else f'must be a quoted time such as "01:00"{got}'
            )
        return f"must be a string{got}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return f"{given!r} is not {PATTERN_MEANINGS.get(pattern, f'matching {pattern}')}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must be at least {ctx.get('min_length')} long"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items, got {ctx.get('actual_length')}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}{got}"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')}{got}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}{got}"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')}{got}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}{got}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping{got}"
    if kind == "list_type":
        return f"must be a list{got}"
    if kind == "json_invalid":
        return f"is not valid JSON: {ctx.get('error', fallback)}"
    return fallback[0].lower() + fallback[1:] if fallback else kind


def _a(value: object) -> str:
    """A value as a YAML reader would name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    return repr(value)


def _field_names_at(loc: Sequence[str | int]) -> list[str]:
    """The wire names of the fields of the model found at ``loc`` (for "did you mean")."""
    model: Any = models.DeepSeekServing
    for part in loc:
        if isinstance(part, int):
            continue  # list items: the item type was already unwrapped
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            return []
        field = next(
            (f for name, f in model.model_fields.items() if part in (name, f.alias, f.serialization_alias)), None
        )
        if field is None:
            return []
        model = _model_in(field.annotation)
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
        return sorted(f.alias or name for name, f in model.model_fields.items())
    return []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside X | None, list[X], Annotated[X, ...]."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if isinstance(found, type) and issubclass(found, pydantic.BaseModel):
                return found
    return annotation
