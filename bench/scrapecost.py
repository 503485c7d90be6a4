"""Figure 4, telemetry: scraping 1,000 vLLM leaders every 15 s — CPU cores used and how stale the gauges get.

Two processes, so the leaders' cost is not counted as the operator's: ``nvlfleet simulate`` serves the simulated
vLLM 0.33 endpoints (8 DP engines each), and ``bench/scrape_bench.py --steady`` runs the operator's scraper
(``Scraper.run``, the loop the operator runs) over all of them, renders the exposition once per interval
as Prometheus would, and samples every gauge's age each second. CPU is the scraper process's own, over the steady
rounds after a warm-up. The reference for staleness is the scrape interval itself: a gauge refreshed every 15 s
is up to 15 s old plus the round's own duration, so the ratio says how much the round adds.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from proc import REPO

INTERVAL = 15.0


def measure(targets: int, rounds: int, work: pathlib.Path, warmup: int = 2, port: int = 21000) -> dict[str, object]:
    urls = work / "leaders.txt"
    urls.unlink(missing_ok=True)
    log = work / "simulate.log"
    with log.open("wb") as out:
        sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nvlfleet.cli",
                "simulate",
                "--listen",
                f"127.0.0.1:{port}",
                "--count",
                str(targets),
                "--engines",
                "8",
                "--addresses-file",
                str(urls),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    (work / "simulate.pid").write_text(str(sim.pid))
    try:
        deadline = time.monotonic() + 120
        while not urls.exists():
            if sim.poll() is not None:
                raise RuntimeError(f"nvlfleet simulate exited: {log.read_text()[-500:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{targets} simulated endpoints not listening after 120 s; see {log}")
            time.sleep(0.2)
        answer = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "scrape_bench.py"),
                str(urls),
                "--steady",
                "--interval",
                str(INTERVAL),
                "--rounds",
                str(rounds),
                "--warmup",
                str(warmup),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "bench"), os.environ.get("PYTHONPATH", "")])},
        )
        result: dict[str, object] = json.loads(answer.stdout.strip().splitlines()[-1])
        return result
    finally:
        if sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
            try:
                sim.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sim.kill()
                sim.wait()
