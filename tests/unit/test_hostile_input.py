"""Input built to break the operator: nesting deeper than Python's recursion, text YAML cannot carry as escaped."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
import yaml
from kopf._cogs.clients import api as kopf_api
from kopf._kits import webhooks as kopf_webhooks

from nvlfleet.adapters import decoding, kube
from nvlfleet.api import nesting
from nvlfleet.core import validation
from support.servingbuilder import serving_dict as serving


def deep_json(levels: int, leaf: str = "1") -> str:
    return '{"a":' * levels + leaf + "}" * levels


def test_a_document_too_deep_for_json_is_decoded_with_its_depths_cut() -> None:
    text = '{"kind":"DeepSeekServing","spec":{"pod":{"volumes":[' + deep_json(3000) + "]}}}"
    with pytest.raises(RecursionError):
        json.loads(text)
    decoded = decoding.loads(text)
    assert decoded["kind"] == "DeepSeekServing"
    assert nesting.too_deep(decoded, limit=10_000) is not None  # the cut is still there to be seen ...
    assert nesting.too_deep(decoded).startswith("spec.pod.volumes[0].a.a")  # ... and where it is


def test_a_decodable_but_deep_document_is_cut_too() -> None:
    decoded = decoding.loads(deep_json(500).encode())
    cut_at = nesting.too_deep(decoded, limit=10_000)  # only the cut is reported: nothing is deeper
    assert cut_at == ".".join(["a"] * nesting.MAX_DEPTH)


def test_a_core_v1_watch_event_is_not_walked_its_schema_bounds_its_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[object] = []
    monkeypatch.setattr(nesting, "cut", walked.append)
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"ports": [{"x": 1}]}] * 40}}
    decoding.loads(json.dumps({"type": "MODIFIED", "object": pod}))
    assert walked == []
    decoding.loads(json.dumps({"type": "MODIFIED", "object": {**pod, "apiVersion": "nvlfleet.io/v1alpha1"}}))
    assert len(walked) == 1  # a custom resource can nest as deep as its author likes


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    text = json.dumps({"s": "{[" * 5000, "t": ['"\\{']})
    assert nesting.cut_text(text) == text


def test_ordinary_documents_decode_unchanged() -> None:
    pod = {"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"containers": [{"ports": [{"x": 1}]}] * 40}}
    assert decoding.loads(json.dumps(pod)) == pod


def test_a_serving_nested_too_deep_is_refused_at_the_field_where_it_gets_too_deep() -> None:
    obj = serving()
    obj["spec"]["pod"] = {"volumes": [json.loads(deep_json(200))]}
    (problem,) = validation.validate(obj)
    assert problem.path.startswith("spec.pod.volumes[0].a.a.a")
    assert "nests more than 64 levels deep" in problem.message


def test_a_serving_cut_by_the_operator_decoding_is_refused_where_it_was_cut() -> None:
    text = json.dumps(serving()).replace('"spec": {', '"spec": {"pod": {"volumes": [' + deep_json(3000) + "]}, ", 1)
    (problem,) = validation.validate(decoding.loads(text))
    assert problem.path.startswith("spec.pod.volumes[0].a")


def test_volumes_are_a_closed_typed_subset_of_the_kubernetes_volume() -> None:
    obj = serving()
    obj["spec"]["pod"] = {"volumes": [{"name": "x", "nfs": {"server": "a", "path": "/"}}]}
    assert [p.path for p in validation.validate(obj)] == ["spec.pod.volumes[0].nfs"]


def test_install_routes_every_kopf_decoding_through_the_guard() -> None:
    decoding.install()
    decoding.install()  # idempotent
    assert kopf_api.json.loads is decoding.watched_loads
    assert kopf_webhooks.json.loads is decoding.loads
    assert kopf_webhooks.json.JSONDecodeError is json.JSONDecodeError  # kopf's webhook still catches bad JSON
    assert aiohttp.ClientResponse.json.__wrapped__ is not None  # type: ignore[attr-defined]


def test_install_decodes_aiohttp_answers_with_the_guard() -> None:
    decoding.install()

    async def fetch() -> object:
        from aiohttp import web

        async def deep(_: web.Request) -> web.Response:
            return web.Response(text=deep_json(3000), content_type="application/json")

        app = web.Application()
        app.router.add_get("/", deep)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/") as response:
                return await response.json()
        finally:
            await runner.cleanup()

    assert nesting.too_deep(asyncio.run(fetch())) is not None


@pytest.mark.parametrize(
    "text", ["/🔥", "ü", "\u202e", "中文", "\x85", "\u2028", "\x7f", "\ufeff", "tab\there", "\\ud83d", '"quoted"']
)
def test_apply_bodies_read_back_as_the_same_text_in_yaml_and_json(text: str) -> None:
    body = {"metadata": {"annotations": {"example.com/n": text}}, "args": [f"--root-path={text}"]}
    sent = kube.yaml_safe_json(body)
    assert yaml.safe_load(sent.decode("utf-8")) == body
    assert json.loads(sent) == body
