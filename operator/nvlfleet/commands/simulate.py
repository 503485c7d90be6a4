"""``nvlfleet simulate``: run simulated vLLM 0.33 servers (``/metrics``, ``/health``, ``/v1/models``) until stopped.

For the demo and benchmarks: one process serves any number of endpoints, e.g. a thousand leaders with
``--listen 127.0.0.1:20000 --count 1000`` (consecutive ports) or ``--listen 127.1.0.1:8000 --count 1000
--vary host`` (consecutive loopback addresses, vLLM's default port). Every endpoint grows its counters at the
given rates (the whole server's, split evenly over ``--engines`` DP engines) on the wall clock.

Faults per endpoint at run time, over HTTP: ``POST /_sim/mode?mode=stall|garbage|slow|down|normal[&seconds=N]``,
``POST /_sim/restart``, ``POST /_sim/load`` (JSON body of load fields), ``GET /_sim/state``.

``--addresses-file`` receives one base URL per line once every endpoint listens (write-then-rename, so a
reader never sees half a list). Exit codes: 0 stopped by SIGINT/SIGTERM, 1 bad input or an address in use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import sys
from pathlib import Path

from nvlfleet.sim import simulator, vllmsim


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        action="append",
        metavar="HOST:PORT",
        help="address of an endpoint; repeat for several (default 127.0.0.1:8000)",
    )
    parser.add_argument("--count", type=int, default=1, help="endpoints per --listen, counting up from it")
    parser.add_argument(
        "--vary", choices=("port", "host"), default="port", help="what --count counts up: the port or the IPv4 host"
    )
    load = parser.add_argument_group("load (per endpoint, whole server)")
    load.add_argument("--prompt", type=float, default=20_000.0, help="prompt tokens/s, cache hits included")
    load.add_argument("--cached", type=float, default=15_000.0, help="prompt tokens/s served from the prefix cache")
    load.add_argument("--generation", type=float, default=3_000.0, help="generated tokens/s")
    load.add_argument("--running", type=float, default=64.0, help="requests running (gauge)")
    load.add_argument("--waiting", type=float, default=0.0, help="requests waiting (gauge)")
    load.add_argument("--kv-usage", type=float, default=0.5, help="KV-cache usage per engine, 0..1")
    load.add_argument("--speculative-tokens", type=int, default=3, help="tokens per draft; 0 = no spec decode")
    load.add_argument("--acceptance", type=float, default=0.7, help="accepted / draft tokens, 0..1")
    parser.add_argument("--engines", type=int, default=1, help="DP engines behind each endpoint (engine label)")
    parser.add_argument("--model", default=vllmsim.DEFAULT_MODEL, help="served model name (model_name label)")
    parser.add_argument("--multiprocess", action="store_true", help="like --api-server-count > 1: no _created samples")
    parser.add_argument("--addresses-file", type=Path, help="write the endpoints' base URLs here, one per line")


def run(args: argparse.Namespace) -> int:
    try:
        load = vllmsim.Load(
            prompt=args.prompt,
            prompt_cached=args.cached,
            generation=args.generation,
            running_requests=args.running,
            waiting_requests=args.waiting,
            kv_cache_usage=args.kv_usage,
            speculative_tokens=args.speculative_tokens,
            acceptance_rate=args.acceptance,
        )
        addresses = expand(args.listen or ["127.0.0.1:8000"], args.count, args.vary)
        if args.engines < 1:
            raise ValueError(f"--engines must be at least 1, got {args.engines}")
    except ValueError as err:
        print(f"nvlfleet simulate: {err}", file=sys.stderr)
        return 1
    return asyncio.run(_serve(args, load, addresses))


def expand(listens: list[str], count: int, vary: str) -> list[tuple[str, int]]:
    """``HOST:PORT`` × ``count``, counting up ports or IPv4 hosts."""
    if count < 1:
        raise ValueError(f"--count must be at least 1, got {count}")
    out: list[tuple[str, int]] = []
    for listen in listens:
        host, sep, port_text = listen.rpartition(":")
        if not sep or not port_text.isdigit() or not host:
            raise ValueError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8000")
        port = int(port_text)
        if vary == "port":
            if port + count - 1 > 65535:
                raise ValueError(f"--listen {listen} --count {count}: ports beyond 65535")
            out += [(host, port + i) for i in range(count)]
        else:
            try:
                first = ipaddress.IPv4Address(host)
            except ValueError as err:
                raise ValueError(f"--vary host needs an IPv4 address, got {host!r}") from err
            out += [(str(first + i), port) for i in range(count)]
    if len(set(out)) != len(out):
        raise ValueError("the --listen ranges overlap")
    return out


async def _serve(args: argparse.Namespace, load: vllmsim.Load, addresses: list[tuple[str, int]]) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sim = simulator.Simulator()
    try:
        for host, port in addresses:
            await sim.add(
                host, port, load=load, engines=args.engines, model_name=args.model, multiprocess=args.multiprocess
            )
    except OSError as err:
        await sim.close()
        print(f"nvlfleet simulate: cannot listen on {host}:{port}: {err.strerror or err}", file=sys.stderr)
        return 1
    urls = [ep.url for ep in sim.endpoints]
    if args.addresses_file:
        tmp = args.addresses_file.with_name(args.addresses_file.name + ".tmp")
        tmp.write_text("".join(u + "\n" for u in urls))
        os.replace(tmp, args.addresses_file)
    shown = urls[0] if len(urls) == 1 else f"{urls[0]} … {urls[-1]}"
    print(f"serving {len(urls)} simulated vLLM {vllmsim.VLLM_VERSION} endpoint(s): {shown}", flush=True)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await sim.close()
    return 0
