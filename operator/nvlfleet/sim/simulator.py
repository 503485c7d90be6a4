"""Many simulated vLLM servers in one process: one aiohttp application, one listening socket per endpoint.

Test and demo adapter beside ``vllmsim`` (which is what one simulated vLLM server answers), not part of the
operator's data flow: ``nvlfleet simulate``, the demo and the tests start a thousand leaders here at the cost of
one process and one event loop. The handler tells endpoints apart by the local address a request arrived on;
``down`` closes just that endpoint's socket (connection refused), and ``/_sim`` routes flip modes and loads over
HTTP for the demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import Sequence

from aiohttp import web

from nvlfleet.sim import kvtransfer, vllmsim


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class Simulator:
    """Many endpoints served by one aiohttp application in one event loop.

    ``async with Simulator() as sim: ep = await sim.add("127.0.0.1", 0, load=...)`` (port 0 = any free port;
    ``ep.port`` is the one bound). Each endpoint has its own listening socket; ``down`` closes just that one.
    """

    def __init__(self, *, clock: vllmsim.Clock = time.time) -> None:
        self._clock = clock
        # One lease store for every endpoint: a prefill here answers, a decode here reads (``kvtransfer``).
        self.kv_store = kvtransfer.KvStore()
        self._endpoints: dict[tuple[str, int], vllmsim.Endpoint] = {}
        # Per endpoint (by address): its listening site while it is not down, and the pending switch back.
        self._sites: dict[tuple[str, int], web.BaseSite] = {}
        self._restores: dict[tuple[str, int], asyncio.Task[None]] = {}
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # Handlers of ``slow`` endpoints must not hold up shutdown.
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
        self._started = False

    @property
    def endpoints(self) -> list[vllmsim.Endpoint]:
        return list(self._endpoints.values())

    async def __aenter__(self) -> Simulator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def add(
        self,
        host: str,
        port: int,
        *,
        load: vllmsim.Load,
        engines: int = 1,
        model_name: str = vllmsim.DEFAULT_MODEL,
        slow_seconds: float = 30.0,
        multiprocess: bool = False,
        kv: kvtransfer.KvConfig | None = None,
    ) -> vllmsim.Endpoint:
        """Listen on ``host:port`` (0 = any free port) as one more simulated vLLM server (``kv``: its connector)."""
        if not self._started:
            await self._runner.setup()
            self._started = True
        sock = _bind(host, port)
        host, port = sock.getsockname()[:2]
        endpoint = vllmsim.Endpoint(
            host,
            port,
            load=load,
            engines=engines,
            model_name=model_name,
            clock=self._clock,
            slow_seconds=slow_seconds,
            multiprocess=multiprocess,
            kv=kv,
            kv_store=self.kv_store,
        )
        self._endpoints[(host, port)] = endpoint
        await self._open(endpoint, sock)
        return endpoint

    async def _open(self, endpoint: vllmsim.Endpoint, sock: socket.socket | None = None) -> None:
        site = web.SockSite(self._runner, sock or _bind(endpoint.host, endpoint.port))
        await site.start()
        self._sites[(endpoint.host, endpoint.port)] = site

    async def set_mode(
        self, endpoint: vllmsim.Endpoint, mode: vllmsim.Mode | str, seconds: float | None = None
    ) -> None:
        """Switch an endpoint's mode, opening or closing its socket; with ``seconds``, switch back afterwards."""
        previous = endpoint.mode
        mode = vllmsim.Mode(mode)
        endpoint.set_mode(mode)
        address = (endpoint.host, endpoint.port)
        if mode == vllmsim.Mode.DOWN and address in self._sites:
            await self._sites.pop(address).stop()
        elif mode != vllmsim.Mode.DOWN and address not in self._sites:
            await self._open(endpoint)
        pending = self._restores.pop(address, None)
        if pending is not None:
            pending.cancel()
        if seconds is not None:
            self._restores[address] = asyncio.create_task(self._restore(endpoint, previous, seconds))

    async def _restore(self, endpoint: vllmsim.Endpoint, mode: vllmsim.Mode, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._restores.pop((endpoint.host, endpoint.port), None)  # this task: done, nothing to cancel
        await self.set_mode(endpoint, mode)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        endpoint = self._endpoints.get(tuple(sockname[:2])) if sockname else None
        if endpoint is None:
            raise web.HTTPNotFound()
        if request.path.startswith(vllmsim.CONTROL_PREFIX):
            return await self._control(endpoint, request)
        return await endpoint.handle(request)

    async def _control(self, endpoint: vllmsim.Endpoint, request: web.Request) -> web.StreamResponse:
        """``GET /_sim/state``; ``POST /_sim/mode?mode=stall[&seconds=60]``; ``POST /_sim/restart``;
        ``POST /_sim/load`` with a JSON body of ``vllmsim.Load`` fields."""
        action = request.path.removeprefix(vllmsim.CONTROL_PREFIX)
        try:
            if request.method == "POST" and action == "/mode":
                seconds = request.query.get("seconds")
                await self.set_mode(endpoint, request.query["mode"], float(seconds) if seconds else None)
            elif request.method == "POST" and action == "/restart":
                endpoint.restart()
            elif request.method == "POST" and action == "/load":
                endpoint.set_load(vllmsim.Load(**await request.json()))
            elif action != "/state":
                raise web.HTTPNotFound()
        except (KeyError, ValueError, TypeError) as err:
            raise web.HTTPBadRequest(text=f"{type(err).__name__}: {err}\n") from err
        return web.json_response(
            {"mode": endpoint.mode, "load": dataclasses.asdict(endpoint.load), "created": endpoint.created}
        )

    async def close(self) -> None:
        for pending in self._restores.values():
            pending.cancel()
        with contextlib.suppress(RuntimeError):
            await self._runner.cleanup()


async def start_many(
    addresses: Sequence[tuple[str, int]],
    *,
    load: vllmsim.Load,
    engines: int = 1,
    model_name: str = vllmsim.DEFAULT_MODEL,
    clock: vllmsim.Clock = time.time,
) -> Simulator:
    """Start one simulator serving an endpoint on each ``(host, port)``; close it with ``await sim.close()``."""
    sim = Simulator(clock=clock)
    try:
        for host, port in addresses:
            await sim.add(host, port, load=load, engines=engines, model_name=model_name)
    except BaseException:
        await sim.close()
        raise
    return sim
