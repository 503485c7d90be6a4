"""What scraping N vLLM leaders costs the operator (CPU) and how fresh the gauges it exports are.

Run the leaders in another process so their cost is not counted, then this:

    nvlfleet simulate --listen 127.0.0.1:21000 --count 1000 --engines 8 --addresses-file /tmp/urls &
    python bench/scrape_bench.py /tmp/urls            # one line per round: CPU and wall time of the round
    python bench/scrape_bench.py /tmp/urls --steady   # the scraper's own loop: CPU cores, gauge staleness (JSON)
    kill %1

Each leader stands for an 8-GPU group (8 DP engines); servings of 10 leaders spread over NVLink domains (4 in the
round mode; one per leader in the steady mode, so every gauge group is one leader and its ``measured_at`` is that
leader's sample time), priced with an off-peak window. Round 0 only takes first samples; from round 1 every
leader yields rates. The figure to watch is CPU per round ÷ the scrape interval (15 s): the share of one core
telemetry needs.

``--steady`` runs ``Scraper.run`` (the operator's own loop) for ``--rounds`` intervals after ``--warmup`` of
them, renders the exposition once per interval as Prometheus would scrape it, and reads the gauges' age every
second: staleness = now − the sample time behind the gauge. It prints one JSON object (``bench/scrapecost.py``
reads it); CPU is this process's, measured over the steady rounds only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import prometheus_client

from nvlfleet.adapters.exporter import OperatorMetrics
from nvlfleet.adapters.scraper import Scraper
from nvlfleet.api import metric_names as names
from nvlfleet.api import models
from nvlfleet.core.group_telemetry import Target

PRICING = models.PricingSpec.model_validate(
    {
        "inputCacheHitPerMillion": 0.006,
        "inputCacheMissPerMillion": 0.30,
        "outputPerMillion": 1.20,
        "schedule": [{"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}],
    }
)
PER_SERVING = 10


def declare(scraper: Scraper, urls: list[str], domains: int) -> list[tuple[str, str]]:
    """Servings of ``PER_SERVING`` leaders over ``domains`` NVLink domains; returns their keys."""
    keys = []
    for first in range(0, len(urls), PER_SERVING):
        targets = [
            Target("decode", f"clique-{i % domains}", url, 8) for i, url in enumerate(urls[first : first + PER_SERVING])
        ]
        key = ("bench", f"s{first // PER_SERVING}")
        scraper.set_serving(*key, targets, pricing=PRICING)
        keys.append(key)
    return keys


async def bench(urls: list[str], rounds: int, interval: float, concurrency: int) -> None:
    metrics = OperatorMetrics()
    scraper = Scraper(metrics, concurrency=concurrency, timeout=10.0)
    declare(scraper, urls, domains=4)
    try:
        for i in range(rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            report = await scraper.scrape_once()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(
                f"round {i}: {report.up} up, {report.pending} pending, {report.down} down; "
                f"cpu {cpu:.2f} s, wall {wall:.2f} s; {cpu / interval:.1%} of a core at a {interval:g} s interval",
                flush=True,
            )
            await asyncio.sleep(1)
        cpu = time.process_time()
        body = prometheus_client.generate_latest(metrics.registry)
        lines = body.count(b"\n")
        print(f"exporter: {len(body):,} bytes, {lines:,} lines, {time.process_time() - cpu:.3f} s cpu")
    finally:
        await scraper.close()


async def steady(urls: list[str], interval: float, rounds: int, warmup: int, concurrency: int) -> dict[str, object]:
    """The scraper's own loop over every leader: CPU cores, round times, gauge staleness; see the docstring."""
    metrics = OperatorMetrics()
    scraper = Scraper(metrics, concurrency=concurrency, timeout=10.0)
    keys = declare(scraper, urls, domains=PER_SERVING)
    stop = asyncio.Event()
    loop = asyncio.create_task(scraper.run(interval, stop))
    staleness: list[float] = []
    round_seconds: list[float] = []
    exposition_bytes = 0
    try:
        await asyncio.sleep(warmup * interval)
        cpu, wall = time.process_time(), time.monotonic()
        end = wall + rounds * interval
        next_render = wall
        while (now := time.monotonic()) < end:
            if now >= next_render:
                exposition_bytes = len(prometheus_client.generate_latest(metrics.registry))
                next_render += interval
            at = time.time()
            for key in keys:
                for group in scraper.groups(*key):
                    staleness.append(at - group.measured_at if group.measured_at is not None else float("inf"))
            last_round = metrics.registry.get_sample_value(names.SCRAPE_ROUND_DURATION)
            if last_round is not None and (not round_seconds or round_seconds[-1] != last_round):
                round_seconds.append(last_round)
            await asyncio.sleep(1.0)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        up = metrics.registry.get_sample_value(names.SCRAPE_TARGETS, {"state": "up"})
    finally:
        stop.set()
        await loop
        await scraper.close()
    staleness.sort()
    return {
        "targets": len(urls),
        "interval_seconds": interval,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "cpu_cores": cpu / wall,
        "round_seconds_median": statistics.median(round_seconds) if round_seconds else None,
        "round_seconds_max": max(round_seconds) if round_seconds else None,
        "targets_up": up,
        "staleness_samples": len(staleness),
        "staleness_seconds_p50": _quantile(staleness, 0.50),
        "staleness_seconds_p99": _quantile(staleness, 0.99),
        "staleness_seconds_max": staleness[-1] if staleness else None,
        "exposition_bytes": exposition_bytes,
    }


def _quantile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank quantile of an ascending list (no interpolation: every answer was observed)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("urls", type=Path, help="file with one leader base URL per line (nvlfleet simulate)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--interval", type=float, default=15.0, help="the scrape interval")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--steady", action="store_true", help="run the scraper's loop; print one JSON object")
    parser.add_argument("--warmup", type=int, default=2, help="steady mode: intervals before measuring")
    args = parser.parse_args()
    urls = args.urls.read_text().split()
    if args.steady:
        result = asyncio.run(steady(urls, args.interval, args.rounds, args.warmup, args.concurrency))
        print(json.dumps(result))
    else:
        asyncio.run(bench(urls, args.rounds, args.interval, args.concurrency))


if __name__ == "__main__":
    main()
