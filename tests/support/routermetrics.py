"""What the real vllm-router exposes on its Prometheus port in P/D mode, read from the binary (not retyped).

Test helper and generator of the families of ``operator/nvlfleet/facts/data/vllm-router/<version>/metrics.yaml``:
``exposition()`` runs the wheel in front of simulated vLLM engines (a prefill and a decode server, two DP ranks
each), provokes every condition that file lists (two answered requests, one refused by prefill, one refused by
decode, one to a router whose discovery found no engine) and returns what the routers' exporters wrote;
``families`` reads each family's type and own labels from it. The requests are also what the dashboards' test
(tests/integration/test_promql.py) sends through a serving's router. Regenerate the facts' ``families`` with

    PYTHONPATH=tests .venv/bin/python -m support.routermetrics
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

import aiohttp
import yaml
from prometheus_client import parser

from nvlfleet.sim import kvtransfer, simulator, vllmsim
from support import routerprocess

Request = tuple[str, dict[str, Any], int]  # path, body, the status the router answers


def answered(model: str) -> list[Request]:
    """Requests the engines answer: a completion and a streamed chat completion."""
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    return [("/v1/completions", {"model": model, "prompt": "one two three", "max_tokens": 4}, 200),
            ("/v1/chat/completions", chat, 200)]  # fmt: skip


def refused_by_prefill() -> Request:
    """A model no engine serves: prefill answers 404 and the router relays it."""
    return ("/v1/completions", {"model": "no-such-model", "prompt": "one", "max_tokens": 2}, 404)


def refused_by_decode(model: str) -> Request:
    """Prefill is asked for one token; decode gets the client's max_tokens, past the simulated context: 400."""
    return ("/v1/completions", {"model": model, "prompt": "one", "max_tokens": 2 * vllmsim.DEFAULT_MAX_MODEL_LEN}, 400)


def no_pair(model: str) -> Request:
    """Any request to a P/D router that has no healthy prefill and decode engine: 503."""
    return ("/v1/completions", {"model": model, "prompt": "one", "max_tokens": 2}, 503)


def post(url: str, request: Request, timeout: float = 30.0) -> str | None:
    """Send ``request`` to the router at ``url`` (blocking); what went other than expected, or None."""
    path, body, status = request
    call = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=timeout) as answer:
            got, text = answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        got, text = error.code, error.read().decode(errors="replace")
    except OSError as error:
        return f"{path} {body}: {error}"
    return None if got == status else f"{path} {body}: {got} {text[:300]}"


MODEL = vllmsim.DEFAULT_MODEL
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
_NOT_OWN = {"le", "quantile"}  # a histogram's bucket bound and a summary's quantile are the format's, not labels


async def send(session: aiohttp.ClientSession, url: str, request: Request) -> None:
    """Send one request; AssertionError unless the router answers the status it is expected to."""
    path, body, status = request
    async with session.post(url + path, json=body) as response:
        text = await response.text()
        assert response.status == status, f"{path} {body}: {response.status} {text[:300]}"


async def _exposition() -> list[str]:
    producer = kvtransfer.KvConfig(role=kvtransfer.KvRole.PRODUCER)
    consumer = kvtransfer.KvConfig(role=kvtransfer.KvRole.CONSUMER)
    async with simulator.Simulator() as sim, aiohttp.ClientSession() as session:
        prefill = await sim.add("127.0.0.1", 0, load=vllmsim.Load(), engines=2, kv=producer)
        decode = await sim.add("127.0.0.1", 0, load=vllmsim.Load(), engines=2, kv=consumer)
        texts = []
        async with routerprocess.pd_router_process([prefill.url], [decode.url]) as router:
            for request in [*answered(MODEL), refused_by_prefill(), refused_by_decode(MODEL)]:
                await send(session, router.url, request)
            async with session.get(router.metrics_url) as response:
                texts.append(await response.text())
        async with routerprocess.undiscovering_pd_router() as router:
            await send(session, router.url, no_pair(MODEL))
            async with session.get(router.metrics_url) as response:
                texts.append(await response.text())
    return texts


def exposition() -> list[str]:
    """The exposition text of each router the run above used, after its requests."""
    return asyncio.run(_exposition())


def families(texts: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each family the texts declare (``# TYPE``), with its type and the labels its samples carry, sorted."""
    out: dict[str, dict[str, Any]] = {}
    for text in texts:
        declared = dict(_TYPE.findall(text))
        for family in parser.text_string_to_metric_families(text):
            # prometheus-client's parser drops a counter's _total from the family's name; the exposition keeps it.
            (name,) = [n for n in (family.name, family.name + "_total") if n in declared]
            labels = {label for sample in family.samples for label in sample.labels} - _NOT_OWN
            entry = out.setdefault(name, {"type": declared[name], "labels": []})
            entry["labels"] = sorted(set(entry["labels"]) | labels)
    return dict(sorted(out.items()))


if __name__ == "__main__":
    yaml.safe_dump({"families": families(exposition())}, sys.stdout, default_flow_style=None, sort_keys=False)
