"""`make demo`'s requests: a small, bounded stream of real OpenAI requests through each serving's real router.

Step 9 of ``localdemo.demo.up``, after every serving is Ready: the agent (``localdemo.routers``) runs vllm-router for
each router pod and records where in ``routers.json``; this module waits until each serving's router has found
its engines (``/readiness``), sends ``REQUESTS`` requests through it (completions and chat completions, half of
them streamed), and reports per serving how many were answered, requests/s and the tokens the answers reported.
The curl it prints is one it has just sent, byte for byte, and seen answered.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from localdemo import routers
from nvlfleet.api import models

REQUESTS = 20  # per serving: a demonstration, not a benchmark
PROMPT = "Explain in one sentence why prefill and decode run on different GPUs."
MAX_TOKENS = 32
READY_SECONDS = 120.0  # the router watches pods and health-checks each engine before it routes


class FrontDoorError(RuntimeError):
    """A router never became ready or refused a request; the message names the serving and the router's log."""


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one serving's router answered."""

    serving: str
    router: str
    pid: int
    sent: int
    answered: int
    seconds: float
    prompt_tokens: int
    completion_tokens: int

    @property
    def requests_per_second(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0


def _body(model: str, index: int) -> tuple[str, dict[str, Any]]:
    base: dict[str, Any] = {"model": model, "max_tokens": MAX_TOKENS}
    if index % 2:
        base |= {"stream": True, "stream_options": {"include_usage": True}}
    if index % 4 >= 2:
        return "/v1/chat/completions", {**base, "messages": [{"role": "user", "content": PROMPT}]}
    return "/v1/completions", {**base, "prompt": PROMPT}


def _post(url: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """The answer's usage (from the final chunk when streamed)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text = answer.read().decode()
    if body.get("stream"):
        events = [e.removeprefix("data: ") for e in text.split("\n\n") if e.strip()]
        if events[-1] != "[DONE]":
            raise ValueError("the stream did not end with data: [DONE]")
        usage: dict[str, Any] = json.loads(events[-2])["usage"]
        return usage
    found: dict[str, Any] = json.loads(text)["usage"]
    return found


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readiness", timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _routers_by_serving(root: pathlib.Path, namespace: str) -> dict[str, dict[str, Any]]:
    return {e["serving"]: e for e in routers.read_state(root) if e.get("namespace") == namespace}


def exercise(
    root: pathlib.Path, namespace: str, servings: Sequence[dict[str, Any]], step: Callable[[str], None]
) -> list[Traffic]:
    """Send ``REQUESTS`` requests through the router of every serving that has one; raise if one is not answered."""
    wanted = {}
    for obj in servings:
        serving = models.DeepSeekServing.model_validate(obj)
        if serving.spec.router.enabled:
            wanted[serving.metadata.name] = models.served_name(serving)
    deadline = time.monotonic() + READY_SECONDS
    while True:
        found = _routers_by_serving(root, namespace)
        missing = [name for name in wanted if name not in found or not _ready(found[name]["url"])]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise FrontDoorError(
                f"no ready vllm-router for {', '.join(sorted(missing))} within {READY_SECONDS:.0f}s; "
                f"see {root / 'agent.log'} and {root / 'routers'}/*.log"
            )
        time.sleep(1.0)
    out = []
    for name, model in sorted(wanted.items()):
        entry = found[name]
        out.append(_stream(name, entry, model))
        step(f"  {name}: {REQUESTS} requests through vllm-router pid {entry['pid']} at {entry['url']}")
    return out


def _stream(name: str, entry: dict[str, Any], model: str) -> Traffic:
    prompt = completion = answered = 0
    started = time.monotonic()
    for index in range(REQUESTS):
        path, body = _body(model, index)
        try:
            usage = _post(entry["url"] + path, body)
        except (OSError, ValueError, KeyError) as err:
            raise FrontDoorError(f"{name}: request {index} through {entry['url']} failed: {err}") from err
        answered += 1
        prompt, completion = prompt + int(usage["prompt_tokens"]), completion + int(usage["completion_tokens"])
    seconds = time.monotonic() - started
    return Traffic(name, entry["url"], int(entry["pid"]), REQUESTS, answered, seconds, prompt, completion)


def curl(traffic: Traffic, model: str) -> str:
    """A curl against ``traffic``'s router, after sending exactly its request and seeing it answered."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": 16}
    _post(traffic.router + "/v1/completions", body)
    return (
        f"curl -s {traffic.router}/v1/completions -H 'Content-Type: application/json' "
        f"-d {shlex.quote(json.dumps(body))}"
    )


def table(rows: Sequence[Traffic]) -> tuple[list[str], list[list[str]]]:
    header = ["SERVING", "ROUTER", "ANSWERED", "REQUESTS/S", "PROMPT TOKENS", "OUTPUT TOKENS"]
    cells = [
        [
            t.serving,
            t.router,
            f"{t.answered}/{t.sent}",
            f"{t.requests_per_second:.1f}",
            str(t.prompt_tokens),
            str(t.completion_tokens),
        ]
        for t in rows
    ]
    return header, cells
