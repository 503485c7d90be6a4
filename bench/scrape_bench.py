"""What one scrape round over N vLLM leaders costs the operator: CPU seconds and wall time.

Run the leaders in another process so their cost is not counted, then this:

    nvlfleet simulate --listen 127.0.0.1:21000 --count 1000 --engines 8 --addresses-file /tmp/urls &
    python bench/scrape_bench.py /tmp/urls            # prints one line per round
    kill %1

Each leader stands for an 8-GPU group (8 DP engines); servings of 10 leaders spread over 4 NVLink domains,
priced with an off-peak window. Round 0 only takes first samples; from round 1 every leader yields rates. The
figure to watch is CPU per round ÷ the scrape interval (15 s): the share of one core telemetry needs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import prometheus_client

from nvlfleet import models, telemetry

PRICING = models.PricingSpec.model_validate(
    {
        "inputCacheHitPerMillion": 0.006,
        "inputCacheMissPerMillion": 0.30,
        "outputPerMillion": 1.20,
        "schedule": [{"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}],
    }
)


async def bench(urls: list[str], rounds: int, interval: float, concurrency: int) -> None:
    metrics = telemetry.OperatorMetrics()
    scraper = telemetry.Scraper(metrics, concurrency=concurrency, timeout=10.0)
    per_serving = 10
    for first in range(0, len(urls), per_serving):
        targets = [
            telemetry.Target("decode", f"clique-{i % 4}", url, 8)
            for i, url in enumerate(urls[first : first + per_serving])
        ]
        scraper.set_serving("bench", f"s{first // per_serving}", targets, pricing=PRICING)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("urls", type=Path, help="file with one leader base URL per line (nvlfleet simulate)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--interval", type=float, default=15.0, help="the scrape interval to compare with")
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(bench(args.urls.read_text().split(), args.rounds, args.interval, args.concurrency))


if __name__ == "__main__":
    main()
