"""The real vllm-router (the 0.1.17 wheel the [dev] extras install) in P/D mode in front of simulated engines.

Test helper: ``async with pd_router(prefill_urls, decode_urls) as url:`` runs the router binary bound to
127.0.0.1 on a free port, with static worker URLs (no Kubernetes discovery), waits for ``/readiness`` and stops
the process it started when the block ends. ``pd_router_process`` is the same and also gives the exporter's URL
(``--prometheus-port``); ``undiscovering_pd_router`` is a P/D router whose Kubernetes discovery has found no
engine yet (its API server refuses connections), so every request it gets finds no prefill/decode pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence

import aiohttp

ROUTER = pathlib.Path(sys.executable).with_name("vllm-router")
READY_SECONDS = 60.0  # it is ready in about 2 s; margin for a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclasses.dataclass(frozen=True)
class RouterProcess:
    """A running router: where it serves requests and where its Prometheus exporter answers."""

    url: str
    metrics_url: str


@contextlib.asynccontextmanager
async def pd_router(prefill: Sequence[str], decode: Sequence[str], policy: str = "round_robin") -> AsyncIterator[str]:
    """The router's URL, once it answers /readiness (both roles have a healthy worker)."""
    async with pd_router_process(prefill, decode, policy) as router:
        yield router.url


@contextlib.asynccontextmanager
async def pd_router_process(
    prefill: Sequence[str], decode: Sequence[str], policy: str = "round_robin"
) -> AsyncIterator[RouterProcess]:
    """The router with static workers, once it answers /readiness (both roles have a healthy worker)."""
    workers = [arg for url in prefill for arg in ("--prefill", url)]
    workers += [arg for url in decode for arg in ("--decode", url)]
    async with _router(["--policy", policy, *workers], "/readiness") as router:
        yield router


@contextlib.asynccontextmanager
async def undiscovering_pd_router() -> AsyncIterator[RouterProcess]:
    """A P/D router with Kubernetes discovery whose API server refuses connections, once it answers /liveness."""
    with tempfile.TemporaryDirectory() as directory:
        kubeconfig = pathlib.Path(directory) / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: none\n"
            f"clusters: [{{name: none, cluster: {{server: 'https://127.0.0.1:{free_port()}'}}}}]\n"
            "users: [{name: none, user: {token: none}}]\n"
            "contexts: [{name: none, context: {cluster: none, user: none, namespace: none}}]\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(kubeconfig)
        discovery = ["--policy", "round_robin", "--service-discovery", "--service-discovery-namespace", "none",
                     "--prefill-selector", "role=prefill", "--decode-selector", "role=decode"]  # fmt: skip
        async with _router(discovery, "/liveness", env) as router:
            yield router


@contextlib.asynccontextmanager
async def _router(
    args: Sequence[str], ready_path: str, env: dict[str, str] | None = None
) -> AsyncIterator[RouterProcess]:
    port, metrics_port = free_port(), free_port()
    argv = [str(ROUTER), "--host", "127.0.0.1", "--port", str(port), "--vllm-pd-disaggregation", *args,
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)]  # fmt: skip
    process = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    router = RouterProcess(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics")
    try:
        async with aiohttp.ClientSession() as session:
            deadline = asyncio.get_running_loop().time() + READY_SECONDS
            while not await _answers(session, router.url + ready_path):
                if asyncio.get_running_loop().time() > deadline or process.returncode is not None:
                    raise TimeoutError(f"vllm-router did not answer {ready_path} on {router.url}")
                await asyncio.sleep(0.2)
        yield router
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    with contextlib.suppress(aiohttp.ClientError):
        async with session.get(url) as response:
            return response.status == 200
    return False
