"""`make demo` end to end: the same `localdemo.demo.up` the Makefile runs, on the session's local cluster.

The demo gets its own namespace, fleet name and state directory, so it runs beside a user's `make demo` and
other tests. It must print `kubectl get dss` with every serving Ready and non-zero TOKENS/S and $/GPU-H (the
numbers the operator measured from the simulated vLLM leaders), Prometheus must answer the sample query, every
serving must answer its requests through the real vllm-router, the queue `python -m localdemo load` asks for must
reach the autoscaled serving's decode leaders (and only theirs), and `down` must stop exactly the processes `up`
started (the routers with the agent) and remove the fleet.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
import urllib.parse
import urllib.request
import uuid

import pytest
from kubernetes import client
from localcluster import fleet as fleets
from localdemo import demo, frontdoor, pressure, routers

from nvlfleet.facts import vllm_metrics

pytestmark = pytest.mark.integration


def dss_table(text: str) -> list[dict[str, str]]:
    """The rows of the `kubectl get dss` block of the demo's report, as {column: cell}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$ kubectl get dss")) + 1
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line.split())
    header, *rows = block
    return [dict(zip(header, row, strict=True)) for row in rows]


def pids(root: pathlib.Path) -> dict[str, int]:
    files = {
        "operator": root / "operator.pid",
        "agent": root / "agent.pid",
        "prometheus": root / "prometheus" / "prometheus.pid",
    }
    return {name: int(path.read_text()) for name, path in files.items() if path.exists()}


def waiting_by_leader(root: pathlib.Path, serving: str) -> dict[tuple[str, str], float]:
    """Per (role, pod) of the serving's leaders, the requests waiting on its /metrics (all engines together)."""
    targets = json.loads((root / "prometheus" / "vllm-targets.json").read_text())
    found = {}
    for target in targets:
        labels = target["labels"]
        if labels.get("serving") != serving or "role" not in labels:
            continue
        with urllib.request.urlopen(f"http://{target['targets'][0]}/metrics", timeout=10) as answer:
            lines = answer.read().decode().splitlines()
        prefix = vllm_metrics.NUM_REQUESTS_WAITING + "{"
        found[(labels["role"], labels["pod"])] = sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith(prefix))
    return found


def wait_waiting(root: pathlib.Path, serving: str, total: float, timeout: float = 60.0) -> dict[tuple[str, str], float]:
    deadline = time.monotonic() + timeout
    while True:
        found = waiting_by_leader(root, serving)
        decode = sum(value for (role, _), value in found.items() if role == "decode")
        if math.isclose(decode, total) or time.monotonic() > deadline:
            return found
        time.sleep(1)


def alive(pid: int) -> bool:
    stat = pathlib.Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_demo_prints_ready_servings_with_tokens_and_revenue(local_cluster, tmp_path: pathlib.Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    options = demo.Options(
        root=tmp_path / "demo",
        namespace=f"it-demo-{suffix}",
        fleet=f"itdemo{suffix}",
        # Room for every example (a P/D unit needs 6 trays in one rack); the full demo has 4 + 2.
        racks=(("GB200", 3), ("GB300", 1)),
    )
    router_pids: list[int] = []
    try:
        result = demo.up(options, progress=lambda line: print(line, flush=True))
        started = pids(options.root)

        rows = dss_table(result.text)
        assert {row["NAME"] for row in rows} == {s["metadata"]["name"] for s in result.servings}
        for row in rows:
            ready, desired = row["READY"].split("/")
            assert ready == desired != "0", row
            assert int(row["GPUS"]) > 0, row
            assert float(row["TOKENS/S"]) > 0, row
            assert float(row["$/GPU-H"]) > 0, row

        query = urllib.parse.urlencode({"query": demo.SAMPLE_QUERY})
        with urllib.request.urlopen(f"{result.prometheus_url}/api/v1/query?{query}", timeout=10) as answer:
            series = json.load(answer)["data"]["result"]
        revenue = {
            s["metric"]["serving"]: float(s["value"][1])
            for s in series
            if s["metric"]["namespace"] == options.namespace
        }
        assert set(revenue) == {row["NAME"] for row in rows}
        assert all(value > 0 for value in revenue.values()), revenue
        assert set(started) == {"operator", "agent", "prometheus"}

        # Every serving answered its requests through the real router the agent runs for its router pod.
        assert {t.serving for t in result.traffic} == {row["NAME"] for row in rows}
        for traffic in result.traffic:
            assert traffic.answered == traffic.sent > 0 and traffic.requests_per_second > 0, traffic
            assert traffic.completion_tokens == traffic.sent * frontdoor.MAX_TOKENS, traffic
        assert "REQUESTS/S" in result.text
        assert any(f"Try it      curl -s {t.router}/" in result.text for t in result.traffic), result.text
        # Each router listens where its pod would: the pod's (loopback) IP, unless another cluster holds it.
        bound = {entry["url"]: entry["bound"] for entry in routers.read_state(options.root)}
        assert "pod IP" in bound.values(), bound
        router_pids = [entry["pid"] for entry in routers.read_state(options.root)]
        assert len(router_pids) >= len(result.traffic) and all(alive(pid) for pid in router_pids)

        # The queue `python -m localdemo load` hands the agent reaches the autoscaled serving's decode leaders,
        # spread over them, and none of its prefill leaders; 0 drains it again.
        assert f"make demo-load SERVING={demo.AUTOSCALED}" in result.text
        pressure.write(options.root, options.namespace, demo.AUTOSCALED, 30)
        queued = wait_waiting(options.root, demo.AUTOSCALED, 30)
        decode = [value for (role, _), value in queued.items() if role == "decode"]
        assert len(decode) >= 2 and math.isclose(sum(decode), 30) and len(set(decode)) == 1, queued
        assert all(value == 0 for (role, _), value in queued.items() if role != "decode"), queued
        pressure.write(options.root, options.namespace, demo.AUTOSCALED, 0)
        drained = wait_waiting(options.root, demo.AUTOSCALED, 0)
        assert all(value == 0 for value in drained.values()), drained
    finally:
        stopped = demo.down(options, progress=lambda line: print(line, flush=True))

    assert len(stopped) == 3, stopped
    assert not [name for name, pid in started.items() if alive(pid)]
    assert not [pid for pid in router_pids if alive(pid)]  # the agent stopped its routers when it was stopped
    core = client.CoreV1Api(local_cluster.api_client)
    assert core.list_node(label_selector=f"{fleets.LABEL_FLEET}={options.fleet}").items == []
