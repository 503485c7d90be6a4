"""The OpenAI API of a simulated vLLM 0.33 server: ``/v1/completions`` and ``/v1/chat/completions``, plain and SSE.

Test and demo adapter, called by ``vllmsim.Endpoint.handle`` for POSTs; not part of the operator's data flow. What
it answers is shaped like vLLM's OpenAI server, so the real vllm-router can sit in front of it:

- request ids from ``X-Request-Id`` (the router's ``___prefill_addr_…`` ids), the DP engine from
  ``X-data-parallel-rank`` (refused outside ``[0, engines)``; without it, engines take turns like vLLM's internal
  load balancer);
- ``kv_transfer_params`` handled by ``kvtransfer`` (prefill: one token and the params decode needs; decode: the
  prompt read by KV transfer, not computed), returned top-level when not streaming and on the final chunk when
  streaming;
- streaming as vLLM does it: ``data: {json}`` chunks, the finish reason on the last token's chunk, one more chunk
  with ``choices: []`` and the usage when ``stream_options.include_usage``, then ``data: [DONE]``;
- errors in vLLM's ``{"error": {"message", "type", "param", "code"}}`` form.

Simplifications, so that tests can count exactly: a token is a whitespace-separated word of the prompt (of every
message's content, for chat; a token-id list counts its ids); every response generates ``max_tokens`` tokens
(``max_completion_tokens`` for chat), 16 when the request gives none (vLLM would fill the context), and finishes
with ``length``; ``n`` must be 1. Each answered request is recorded in the endpoint's ``traffic``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nvlfleet.facts import vllm_metrics
from nvlfleet.sim import kvtransfer

if TYPE_CHECKING:
    from nvlfleet.sim import vllmsim

COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"
PATHS = (COMPLETIONS, CHAT_COMPLETIONS)
DEFAULT_MAX_TOKENS = 16
REQUEST_ID_HEADER = "X-Request-Id"
DP_RANK_HEADER = "X-data-parallel-rank"


class RequestError(Exception):
    """A request vLLM would refuse: the HTTP status, vLLM's error type and the message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def error_response(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}, status=status
    )


def count_tokens(text: str) -> int:
    return len(text.split())


def prompt_tokens(path: str, body: dict[str, Any]) -> int:
    """The prompt's length in simulated tokens (see the module docstring)."""
    if path == CHAT_COMPLETIONS:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "BadRequestError", "messages: a non-empty list is required")
        total = 0
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):  # content parts: count the text ones
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            total += count_tokens(content) if isinstance(content, str) else 0
        return max(total, 1)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return max(count_tokens(prompt), 1)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise RequestError(400, "BadRequestError", "prompt: one string or one list of token ids is required")


def _max_tokens(path: str, body: dict[str, Any], prompt: int, max_model_len: int) -> int:
    keys = ("max_completion_tokens", "max_tokens") if path == CHAT_COMPLETIONS else ("max_tokens",)
    wanted = next((body[k] for k in keys if body.get(k) is not None), DEFAULT_MAX_TOKENS)
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        raise RequestError(400, "BadRequestError", f"{keys[-1]}: must be a positive integer, got {wanted!r}")
    if prompt + wanted > max_model_len:
        raise RequestError(
            400,
            "BadRequestError",
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt + wanted} tokens ({prompt} in the messages, {wanted} in the completion).",
        )
    return wanted


def _engine(endpoint: vllmsim.Endpoint, request: web.Request) -> int:
    header = request.headers.get(DP_RANK_HEADER)
    if header is None:
        return endpoint.next_engine()
    try:
        rank = int(header)
    except ValueError:
        raise RequestError(400, "BadRequestError", f"{DP_RANK_HEADER}: not an integer: {header!r}") from None
    if not 0 <= rank < endpoint.engines:
        raise RequestError(400, "BadRequestError", f"data_parallel_rank {rank} is out of range [0, {endpoint.engines})")
    return rank


async def handle(endpoint: vllmsim.Endpoint, request: web.Request) -> web.StreamResponse:
    """Answer one completion or chat completion POST (``request.path`` is one of ``PATHS``)."""
    try:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError(400, "BadRequestError", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError(400, "BadRequestError", "the body must be a JSON object")
        model = body.get("model", endpoint.model_name)
        if model != endpoint.model_name:
            raise RequestError(404, "NotFoundError", f"The model `{model}` does not exist.")
        if body.get("n", 1) != 1:
            raise RequestError(400, "BadRequestError", "n: the simulated server answers one choice (n=1)")
        engine = _engine(endpoint, request)
        prompt = prompt_tokens(request.path, body)
        wanted = _max_tokens(request.path, body, prompt, endpoint.max_model_len)
    except RequestError as err:
        return error_response(err.status, err.kind, str(err))
    request_id = request.headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex
    now = endpoint.clock()
    served = kvtransfer.plan(endpoint.kv, body.get("kv_transfer_params"), prompt, endpoint.kv_store, now)
    if served.failed:
        endpoint.traffic.add(vllm_metrics.REQUEST_SUCCESS, engine, 1, vllm_metrics.FINISHED_ERROR)
        return error_response(500, "InternalServerError", f"request {request_id}: KV load failed (policy fail)")
    generated = 1 if served.remote_decode else wanted
    params = None
    if served.remote_decode:
        assert endpoint.kv is not None
        params = kvtransfer.producer_params(
            endpoint.kv,
            endpoint.kv_store,
            engine_id=endpoint.engine_ids[engine],
            rank=engine,
            request_id=request_id,
            host=endpoint.host,
            tokens=served.computed,
            now=now,
        )
    endpoint.traffic.record(
        engine, computed=served.computed, external=served.external, generated=generated, finished="length"
    )
    reply = _Reply(request.path, request_id, endpoint.model_name, prompt, generated, params)
    if body.get("stream") is True:
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return await _stream(request, reply, usage, request_id)
    return web.json_response(reply.whole(), headers={REQUEST_ID_HEADER: request_id})


class _Reply:
    """One answer in vLLM's shapes: the whole response, or its stream of chunks."""

    def __init__(
        self, path: str, request_id: str, model: str, prompt: int, generated: int, params: dict[str, Any] | None
    ) -> None:
        self.chat = path == CHAT_COMPLETIONS
        self.id = f"{'chatcmpl' if self.chat else 'cmpl'}-{request_id}"
        self.model, self.prompt, self.generated, self.params = model, prompt, generated, params
        self.created = int(time.time())

    def tokens(self) -> list[str]:
        return [f" t{i}" for i in range(self.generated)]

    def usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.generated,
            "total_tokens": self.prompt + self.generated,
            "prompt_tokens_details": None,
        }

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self) -> dict[str, Any]:
        text = "".join(self.tokens())
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            out = self._head("chat.completion")
        else:
            choice["text"] = text
            choice["prompt_logprobs"] = None
            out = self._head("text_completion")
        return {**out, "choices": [choice], "usage": self.usage(), "kv_transfer_params": self.params}

    def chunks(self, usage: bool) -> list[dict[str, Any]]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = []
        tokens = self.tokens()
        if self.chat:  # vLLM opens a chat stream with the role
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            out.append({**self._head(obj), "choices": [role]})
        for i, token in enumerate(tokens):
            last = i == len(tokens) - 1
            choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length" if last else None}
            choice["stop_reason"] = None
            if self.chat:
                choice["delta"] = {"content": token}
            else:
                choice["text"] = token
            chunk = {**self._head(obj), "choices": [choice]}
            if last:
                chunk["kv_transfer_params"] = self.params
            out.append(chunk)
        if usage:
            for chunk in out:
                chunk["usage"] = None
            out.append({**self._head(obj), "choices": [], "usage": self.usage()})
        return out


async def _stream(request: web.Request, reply: _Reply, usage: bool, request_id: str) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", REQUEST_ID_HEADER: request_id}
    )
    await response.prepare(request)
    for chunk in reply.chunks(usage):
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
