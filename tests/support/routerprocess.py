"""The real vllm-router (the 0.1.17 wheel the [dev] extras install) in P/D mode in front of simulated engines.

Test helper: ``async with pd_router(prefill_urls, decode_urls) as url:`` runs the router binary bound to
127.0.0.1 on a free port, with static worker URLs (no Kubernetes discovery), waits for ``/readiness`` and stops
the process it started when the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence

import aiohttp

ROUTER = pathlib.Path(sys.executable).with_name("vllm-router")
READY_SECONDS = 60.0  # it is ready in about 2 s; margin for a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.asynccontextmanager
async def pd_router(prefill: Sequence[str], decode: Sequence[str], policy: str = "round_robin") -> AsyncIterator[str]:
    """The router's URL, once it answers /readiness (both roles have a healthy worker)."""
    port = free_port()
    argv = [str(ROUTER), "--host", "127.0.0.1", "--port", str(port), "--vllm-pd-disaggregation", "--policy", policy]
    for url in prefill:
        argv += ["--prefill", url]
    for url in decode:
        argv += ["--decode", url]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    process = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = asyncio.get_running_loop().time() + READY_SECONDS
            while not await _ready(session, url):
                if asyncio.get_running_loop().time() > deadline or process.returncode is not None:
                    raise TimeoutError(f"vllm-router did not become ready on {url}")
                await asyncio.sleep(0.2)
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


async def _ready(session: aiohttp.ClientSession, url: str) -> bool:
    with contextlib.suppress(aiohttp.ClientError):
        async with session.get(url + "/readiness") as response:
            return response.status == 200
    return False
