"""A plain client of an OpenAI endpoint and a reader of Prometheus text, for tests that send real requests.

Test helper: ``post`` sends one completions or chat-completions request (streamed or not) and returns the usage
its answer reported; ``request_mix`` is a varied, deterministic stream of such requests; ``scrape`` reads a
``/metrics`` page into samples that ``total`` sums by name and labels. Standard library only (plus
prometheus-client's parser), so a test can call it from any thread.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import parser


@dataclasses.dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


def request_mix(model: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """``count`` requests of varied prompt and output lengths: completions and chat, each streamed and not."""
    out = []
    for i in range(count):
        words = " ".join(f"w{i}x{j}" for j in range(3 + 7 * i % 41))
        body: dict[str, Any] = {"model": model, "max_tokens": 2 + 5 * i % 17}
        if i % 2:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        if i % 4 >= 2:
            out.append(("/v1/chat/completions", {**body, "messages": [{"role": "user", "content": words}]}))
        else:
            out.append(("/v1/completions", {**body, "prompt": words}))
    return out


def post(url: str, body: Mapping[str, Any], timeout: float = 30.0) -> Usage:
    """The usage of the answer (its last data chunk when streamed, which must be followed by ``[DONE]``)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text = answer.read().decode()
    if body.get("stream"):
        events = [e.removeprefix("data: ") for e in text.split("\n\n") if e.strip()]
        if events[-1] != "[DONE]":
            raise ValueError(f"the stream did not end with data: [DONE]: {text[-200:]!r}")
        usage = json.loads(events[-2])["usage"]
    else:
        usage = json.loads(text)["usage"]
    return Usage(int(usage["prompt_tokens"]), int(usage["completion_tokens"]))


Sample = tuple[str, dict[str, str], float]


def scrape(url: str, timeout: float = 10.0) -> list[Sample]:
    """Every sample of the Prometheus text at ``url`` as (name, labels, value)."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        text = answer.read().decode()
    return [
        (s.name, dict(s.labels), float(s.value)) for f in parser.text_string_to_metric_families(text) for s in f.samples
    ]


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` that carry every one of ``labels``."""
    return sum(v for n, have, v in samples if n == name and all(have.get(k) == x for k, x in labels.items()))
