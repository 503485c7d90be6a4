"""How the operator decodes JSON from the API server: one object nested too deep never stops the process.

Adapter, at the very first step of the data flow (the watch streams, the lists and the admission requests that
feed everything else). Python's ``json`` raises ``RecursionError`` on a document about 1,000 levels deep, while the
API server stores up to 10,000 levels in a field that keeps unknown fields (a loosened CRD, an older nvlfleet's
schema, another CRD). In kopf's watch stream that error ends the watcher and so the operator, on every restart
while the object exists. ``loads`` decodes such a document with everything deeper than ``nesting.MAX_DEPTH`` cut
off (``nesting.CUT``): the object then reaches the handlers and the webhook like any other, and validation
refuses it with the field path (``Ready=False, InvalidSpec``) while every other serving goes on being reconciled.

``install`` puts ``loads`` where kopf decodes: its watch-stream lines, its list and get answers (aiohttp's
``ClientResponse.json``) — there as ``watched_loads``, which keeps only what the operator reads of pods and nodes
(``caches.kept``) —, and its webhook server's requests. The patch points are kopf 1.x internals; ``install``
fails loudly (at start-up, not at the first deep object) if they move, and a unit test pins them.
"""

from __future__ import annotations

import json
import logging
import types
from typing import Any

from nvlfleet.adapters import caches
from nvlfleet.api import nesting

log = logging.getLogger(__name__)


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads``, except that containers nested deeper than ``nesting.MAX_DEPTH`` become ``nesting.CUT``."""
    try:
        decoded = json.loads(text)
    except RecursionError:
        raw = text if isinstance(text, str) else bytes(text).decode("utf-8")
        log.warning("a JSON document from the API server nests too deep to decode; cut at %d levels", nesting.MAX_DEPTH)
        return json.loads(nesting.cut_text(raw))
    if isinstance(decoded, dict | list) and _brackets(text) > nesting.MAX_DEPTH and not _typed(decoded):
        nesting.cut(decoded)  # decodable, but deep enough to stop a recursive walk further on (kopf's diff)
    return decoded


def watched_loads(text: str | bytes | bytearray) -> Any:
    """``loads``, then only what the operator keeps of it (``caches.kept``): how kopf's watch streams and its
    list and get answers are decoded."""
    return caches.kept(loads(text))


def _typed(decoded: dict[str, Any] | list[Any]) -> bool:
    """Whether the document is a core/v1 object, list or watch event of one (a pod, a node, a Service, an Event):
    every core/v1 field has a type (no free-form JSON but in the generic ``List``), so its depth is bounded by
    its schema, far below ``nesting.MAX_DEPTH``. Walking every pod event anyway cost twice its decoding (a pod
    has more than 64 brackets in all)."""
    if not isinstance(decoded, dict):
        return False
    obj = decoded.get("object") if "type" in decoded and isinstance(decoded.get("object"), dict) else decoded
    return isinstance(obj, dict) and obj.get("apiVersion") == "v1" and obj.get("kind") not in (None, "List")


def _brackets(text: str | bytes | bytearray) -> int:
    """An upper bound of the nesting depth, counted at C speed: most documents need no walk at all."""
    if isinstance(text, str):
        return text.count("{") + text.count("[")
    return text.count(b"{") + text.count(b"[")


def _json_with(decode: Any) -> types.ModuleType:
    shim = types.ModuleType("json", f"json, with nvlfleet.decoding.{decode.__name__} as loads")
    shim.__dict__.update({k: v for k, v in vars(json).items() if not k.startswith("__")})
    shim.loads = decode  # type: ignore[attr-defined]
    return shim


def install() -> None:
    """Make every JSON decoding kopf does go through ``loads`` (idempotent)."""
    import aiohttp
    from kopf._cogs.clients import api as kopf_api
    from kopf._kits import webhooks as kopf_webhooks

    for module, decode in ((kopf_api, watched_loads), (kopf_webhooks, loads)):
        if not isinstance(getattr(module, "json", None), types.ModuleType):
            raise RuntimeError(f"{module.__name__} no longer decodes with the json module: update nvlfleet.decoding")
        if module.json.loads is not decode:
            module.json = _json_with(decode)  # type: ignore[attr-defined]
    response_json = aiohttp.ClientResponse.json
    if getattr(response_json, "__wrapped__", None) is None:

        async def guarded_json(self: aiohttp.ClientResponse, *, loads: Any = watched_loads, **kwargs: Any) -> Any:
            return await response_json(self, loads=loads, **kwargs)

        guarded_json.__wrapped__ = response_json  # type: ignore[attr-defined]
        aiohttp.ClientResponse.json = guarded_json  # type: ignore[method-assign]
