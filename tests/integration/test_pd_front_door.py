"""Requests in, tokens out, through a prefill/decode serving's front door on the real local cluster.

The GB200 P/D example (examples/gb200-pd-nixl.yaml: prefill 2 groups of 2 trays, decode 1 group of 4 trays) in
the module's own namespace and on its own rack, with the module's own processes, each stopped by its PID:

- ``nvlfleet run`` for that namespace (scrapes every 5 s);
- the demo's agent (``python -m localdemo agent``): the ComputeDomain stand-in, a simulated vLLM 0.33 server on
  each group leader's pod IP, and the real vllm-router binary for the router pod, discovering the engines
  through the API server with a token of the router's own ServiceAccount. ``--measured-traffic``: the simulated
  leaders publish no rates of their own, so every counter holds exactly what the requests below made.

The example's weights PVC is left out (this test is about the data path, not the weights volume). The tests run
in file order on one setup: the router finds the leaders, requests are answered, the engines and the operator
count them, the pods share a channel, then a prefill leader is deleted.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import os
import pathlib
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster import fleet as fleets
from localcluster import processes
from localcluster.operatorprocess import REPO, OperatorProcess
from localdemo import routers

from nvlfleet.api import metric_names, reasons
from nvlfleet.facts import vllm_metrics
from support import openaiclient
from support.servings import Cluster, condition_of

pytestmark = pytest.mark.integration

Wait = Callable[..., Any]
EXAMPLE = REPO / "examples" / "gb200-pd-nixl.yaml"
NAME = "v41-flash-nixl"
LEADER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
ROLE_LABEL = "nvlfleet.io/role"
REQUESTS = 200
ATTEMPTS = 5  # per request while a prefill group is replaced: the router needs a moment to drop the dead leader
READY_SECONDS = 420.0  # 12 pods and a router on a loaded 2-core machine
SCRAPE_SECONDS = 5.0


def counter(name: str) -> str:
    return f"{name}_total"  # prometheus-client's sample name of a counter family


@dataclasses.dataclass
class FrontDoor:
    cluster: Cluster
    root: pathlib.Path
    operator: OperatorProcess
    model: str
    pricing: dict[str, float]

    def router(self) -> dict[str, Any]:
        (entry,) = [e for e in routers.read_state(self.root) if e.get("serving") == NAME]
        return entry

    def router_log(self) -> str:
        """The agent's vllm-router's log, without the terminal colours it writes."""
        (log,) = (self.root / "routers").glob("*.log")
        return re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))

    def leaders(self, role: str) -> list[client.V1Pod]:
        pods = self.cluster.pods(NAME)
        return [p for p in pods if p.metadata.labels[LEADER_LABEL] == "0" and p.metadata.labels[ROLE_LABEL] == role]

    def router_ready(self) -> dict[str, Any] | None:
        return condition_of(self.cluster.get(NAME), reasons.ROUTER_READY)

    def operator_metrics(self) -> list[openaiclient.Sample]:
        return openaiclient.scrape(f"http://127.0.0.1:{self.operator.metrics_port}/metrics")


def engine_url(pod: client.V1Pod) -> str:
    port = next(p.container_port for c in pod.spec.containers for p in c.ports or [] if p.name == "http")
    return f"http://{pod.status.pod_ip}:{port}"


def engine_metrics(pod: client.V1Pod) -> list[openaiclient.Sample]:
    return openaiclient.scrape(engine_url(pod) + "/metrics")


def example(namespace: str, fleet_name: str) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc["metadata"]["namespace"] = namespace
    del doc["spec"]["model"]["weights"]
    doc["spec"]["pod"] = {"nodeSelector": {fleets.LABEL_FLEET: fleet_name}}
    return doc


@contextlib.contextmanager
def agent(root: pathlib.Path, kubeconfig: pathlib.Path, namespace: str) -> Iterator[processes.Child]:
    argv = [
        sys.executable, "-m", "localdemo", "agent", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
        "--targets-file", str(root / "targets.json"), "--state-dir", str(root), "--measured-traffic",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = processes.Child(argv, root / "agent.log", root / "agent.pid", cwd=REPO, env=env).start()
    try:
        yield child
    finally:
        child.stop(timeout=30.0)  # SIGTERM to its recorded PID: it stops the routers it started, by their PIDs
        print(f"--- {root / 'agent.log'} ---\n{processes.tail(root / 'agent.log', 40)}")


@pytest.fixture(scope="module")
def front_door(
    module_cluster: Cluster,
    module_gb200_fleet: Callable[..., Any],
    module_start_operator: Callable[..., Any],
    kubeconfig: pathlib.Path,
    tmp_path_factory: pytest.TempPathFactory,
    wait_for: Wait,
) -> Iterator[FrontDoor]:
    fleet = module_gb200_fleet(racks=1)
    operator = module_start_operator(extra=["--scrape-seconds", str(SCRAPE_SECONDS), "--status-metrics-seconds", "2"])
    root = tmp_path_factory.mktemp("agent")
    doc = example(module_cluster.namespace, fleet.name)
    with agent(root, kubeconfig, module_cluster.namespace) as child:
        module_cluster.create(doc)
        door = FrontDoor(module_cluster, root, operator, doc["spec"]["model"]["servedName"], doc["spec"]["pricing"])

        def routing() -> bool:
            assert child.running(), processes.tail(root / "agent.log", 40)
            found = door.router_ready()
            return module_cluster.ready(NAME) and found is not None and found["status"] == "True"

        wait_for(routing, READY_SECONDS, "the P/D serving Ready and RouterReady=True", interval=2.0)
        wait_for(lambda: _serves_every_leader(door), 180, "the agent to serve every leader", interval=1.0)
        wait_for(lambda: _answers(door), 180, "the agent's vllm-router to answer /readiness", interval=1.0)
        yield door
        for log in sorted((root / "routers").glob("*.log")):
            print(f"--- {log} ---\n{processes.tail(log, 20)}")


def _serves_every_leader(door: FrontDoor) -> bool:
    """The agent logged a simulated server for each leader pod (it retries, and says so, while an address is taken
    by a server another process left on a pod IP the cluster has since reused)."""
    log = (door.root / "agent.log").read_text(errors="replace")
    pods = [*door.leaders("prefill"), *door.leaders("decode")]
    return len(pods) == 3 and all(f"leader {door.cluster.namespace}/{p.metadata.name} (" in log for p in pods)


def _answers(door: FrontDoor) -> bool:
    """The agent's router for the serving answers /readiness (it has a healthy prefill and decode worker)."""
    try:
        entry = door.router()
    except ValueError:  # routers.json not written yet
        return False
    try:
        with urllib.request.urlopen(entry["url"] + "/readiness", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclasses.dataclass(frozen=True)
class Traffic:
    """The 200 requests: each answer's usage, the requests that failed, the operator's rounds around them."""

    sent: list[openaiclient.Usage]
    failures: list[str]
    rounds: list[Round]
    seconds: float


@pytest.fixture(scope="module")
def traffic(front_door: FrontDoor, wait_for: Wait) -> Traffic:
    """``REQUESTS`` requests through the router, one after another, while the operator's rounds are read.

    They start once the operator publishes rates for both roles, all zero: it has sampled every leader before the
    first request, so the rounds that follow cover all of them, and what it sampled is the agent's idle servers
    (not a server another process left on a reused pod IP, which would publish rates of its own)."""

    def idle_rates_for_both_roles() -> bool:
        groups = _round(front_door.operator_metrics(), front_door.cluster.namespace).groups
        idle = all(rates["prompt"] == rates["generation"] == 0 for rates, _, _ in groups.values())
        return idle and {role for role, _ in groups} == {"prefill", "decode"}

    wait_for(idle_rates_for_both_roles, 180, "the operator's first (idle) rates for both roles", interval=1.0)
    url = front_door.router()["url"]
    sent, failures = [], []
    started = time.monotonic()
    with RoundWatcher(front_door) as watcher:
        for index, (path, body) in enumerate(openaiclient.request_mix(front_door.model, REQUESTS)):
            try:
                sent.append(openaiclient.post(url + path, body))
            except (OSError, ValueError, KeyError) as error:
                failures.append(f"request {index} ({path}, stream={bool(body.get('stream'))}): {error}")
    seconds = time.monotonic() - started
    print(f"{REQUESTS} requests in {seconds:.1f} s; {len(watcher.rounds)} operator rounds read")
    return Traffic(sent, failures, watcher.rounds, seconds)


# ---------------------------------------------------------------------------------------------------------------


def test_the_router_finds_exactly_the_two_prefill_leaders_and_the_decode_leader(front_door: FrontDoor) -> None:
    assert _answers(front_door)  # the real router: a healthy worker of each role
    found = front_door.router_ready()
    assert found is not None and found["reason"] == reasons.ROUTING
    assert "routing to 2 prefill group leaders, 1 decode group leader" in found["message"], found
    assert len(front_door.leaders("prefill")) == 2 and len(front_door.leaders("decode")) == 1


def test_200_requests_streamed_and_not_are_all_answered_through_the_router(
    front_door: FrontDoor, traffic: Traffic
) -> None:
    assert traffic.failures == [] and len(traffic.sent) == REQUESTS
    expected = [b["max_tokens"] for _, b in openaiclient.request_mix(front_door.model, REQUESTS)]
    assert [u.completion_tokens for u in traffic.sent] == expected
    # The router found exactly the three leaders: its per-worker counters name their URLs and no other.
    router_metrics = openaiclient.scrape(front_door.router()["metricsUrl"] + "/metrics")
    workers = {
        role: {labels["worker"].split("@")[0] for name, labels, _ in router_metrics if name == sample}
        for role, sample in (
            ("prefill", "vllm_router_pd_prefill_requests_total"),
            ("decode", "vllm_router_pd_decode_requests_total"),
        )
    }
    assert workers == {role: {engine_url(p) for p in front_door.leaders(role)} for role in ("prefill", "decode")}


def test_each_prefill_engine_made_one_token_per_request_and_decode_loaded_every_prompt_by_kv_transfer(
    front_door: FrontDoor, traffic: Traffic
) -> None:
    prompt = sum(u.prompt_tokens for u in traffic.sent)
    served = []
    for pod in front_door.leaders("prefill"):
        samples = engine_metrics(pod)
        requests = openaiclient.total(samples, counter(vllm_metrics.REQUEST_SUCCESS))
        assert requests > 0, pod.metadata.name  # round robin: both prefill leaders take their share
        assert openaiclient.total(samples, counter(vllm_metrics.GENERATION_TOKENS)) == requests, pod.metadata.name
        served.append(requests)
    assert sum(served) == REQUESTS

    (decode,) = front_door.leaders("decode")
    samples = engine_metrics(decode)
    by_source = counter(vllm_metrics.PROMPT_TOKENS_BY_SOURCE)
    assert openaiclient.total(samples, by_source, source=vllm_metrics.SOURCE_EXTERNAL_KV_TRANSFER) == prompt
    assert openaiclient.total(samples, by_source, source=vllm_metrics.SOURCE_LOCAL_COMPUTE) == 0
    assert openaiclient.total(samples, counter(vllm_metrics.GENERATION_TOKENS)) == sum(
        u.completion_tokens for u in traffic.sent
    )


def test_prefill_and_decode_pods_claim_the_same_compute_domain_channel(front_door: FrontDoor) -> None:
    (compute_domain,) = front_door.cluster.children(NAME)["ComputeDomain"]
    channel = compute_domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    pods = front_door.cluster.pods(NAME)
    assert {p.metadata.labels[ROLE_LABEL] for p in pods} == {"prefill", "decode"} and len(pods) == 8
    assert {c.resource_claim_template_name for p in pods for c in p.spec.resource_claims} == {channel}
    assert all(p.status.phase == "Running" and p.status.resource_claim_statuses for p in pods)


def test_the_operators_tokens_per_second_and_revenue_add_up_to_the_requests_token_counts(
    front_door: FrontDoor, traffic: Traffic
) -> None:
    prompt = sum(u.prompt_tokens for u in traffic.sent)
    completion = sum(u.completion_tokens for u in traffic.sent)
    rounds = traffic.rounds
    # Billed once, where computed: prompts at prefill (cache misses: every prompt is new), output at decode.
    revenue = (prompt * front_door.pricing["inputCacheMissPerMillion"] + completion * front_door.pricing[
        "outputPerMillion"
    ]) / 1e6  # fmt: skip
    accrued = rounds[-1].revenue_total - rounds[0].revenue_total
    assert accrued == pytest.approx(revenue, rel=0.01)
    # Each scrape round publishes per group the rates its engines counted over the round's interval; that
    # interval is what the group's revenue counter accrued in the round at its revenue per hour. Rate × interval,
    # summed over the rounds, is what the group's engines counted: per role, every prompt (decode's by KV
    # transfer), prefill's one token per request and decode's output.
    counted = {(role, kind): 0.0 for role in ("prefill", "decode") for kind in ("prompt", "generation")}
    for previous, current in itertools.pairwise(rounds):
        for (role, domain), (rates, per_hour, total) in current.groups.items():
            accrued_here = total - previous.groups.get((role, domain), ({}, 0.0, 0.0))[2]
            if per_hour > 0:
                for kind in ("prompt", "generation"):
                    counted[role, kind] += rates[kind] * 3600 * accrued_here / per_hour
    assert counted == pytest.approx(
        {
            ("prefill", "prompt"): prompt,
            ("prefill", "generation"): REQUESTS,
            ("decode", "prompt"): prompt,
            ("decode", "generation"): completion,
        },
        rel=0.01,
    )


def test_a_deleted_prefill_leader_is_dropped_requests_keep_succeeding_and_the_group_comes_back(
    front_door: FrontDoor, traffic: Traffic, wait_for: Wait
) -> None:
    url = front_door.router()["url"]
    victim, survivor = sorted(front_door.leaders("prefill"), key=lambda p: p.metadata.name)
    served_before = openaiclient.total(engine_metrics(survivor), counter(vllm_metrics.REQUEST_SUCCESS))
    front_door.cluster.core.delete_namespaced_pod(victim.metadata.name, front_door.cluster.namespace)

    # Every request is answered within ATTEMPTS tries while the group is replaced (_post_with_retries raises
    # otherwise): the router drops the dead leader and the survivor takes the requests.
    retries = [_post_with_retries(url + path, body) for path, body in openaiclient.request_mix(front_door.model, 40)]
    print(f"40 requests during the replacement: {sum(retries)} retries, at most {max(retries)} for one")
    served_after = openaiclient.total(engine_metrics(survivor), counter(vllm_metrics.REQUEST_SUCCESS))
    assert served_after > served_before
    # vllm-router 0.1.17's discovery says so itself when its pod watch sees the leader go.
    dropped = f"Removing pod (deletion): {victim.metadata.name} "
    wait_for(lambda: dropped in front_door.router_log(), 60, "the router to log that it dropped the leader")

    def replaced() -> client.V1Pod | None:
        pod = next((p for p in front_door.leaders("prefill") if p.metadata.name == victim.metadata.name), None)
        if pod is None or pod.metadata.uid == victim.metadata.uid or not pod.status.pod_ip:
            return None
        return pod if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []) else None

    new = wait_for(replaced, READY_SECONDS, "the LeaderWorkerSet to bring the prefill group back", interval=2.0)
    wait_for(
        lambda: (
            (c := front_door.router_ready()) is not None
            and c["status"] == "True"
            and "2 prefill group leaders" in c["message"]
        ),
        180,
        "RouterReady back to 2 prefill group leaders",
        interval=2.0,
    )

    # The router found the new leader: it takes its share of new requests.
    def served_by_new() -> float:
        try:
            return openaiclient.total(engine_metrics(new), counter(vllm_metrics.REQUEST_SUCCESS))
        except OSError:  # the agent has not started its simulated server yet
            return -1.0

    baseline = served_by_new()

    def new_leader_serves() -> bool:
        for path, body in openaiclient.request_mix(front_door.model, 8):
            _post_with_retries(url + path, body)
        return served_by_new() > max(baseline, 0.0)

    wait_for(new_leader_serves, 180, "the router to send requests to the new prefill leader", interval=2.0)


def _post_with_retries(url: str, body: dict[str, Any]) -> int:
    """Send until answered, at most ``ATTEMPTS`` times; the number of retries it took."""
    for attempt in range(ATTEMPTS):
        try:
            openaiclient.post(url, body)
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(1.0)
            continue
        return attempt
    raise AssertionError(f"{url}: not answered in {ATTEMPTS} attempts")


# ---------------------------------------------------------------------------------------------------------------
# The operator's scrape rounds, as its exporter shows them


@dataclasses.dataclass(frozen=True)
class Round:
    """One scrape round's gauges of the serving: per (role, domain) the billed tokens/s by kind, revenue/h and
    the revenue accrued so far; and the serving's accrued revenue."""

    groups: dict[tuple[str, str], tuple[dict[str, float], float, float]]
    revenue_total: float


def _revenue_total(samples: list[openaiclient.Sample], namespace: str) -> float:
    return openaiclient.total(samples, metric_names.REVENUE_TOTAL, namespace=namespace, serving=NAME)


def _round(samples: list[openaiclient.Sample], namespace: str) -> Round:
    mine = [(n, lbl, v) for n, lbl, v in samples if lbl.get("namespace") == namespace and lbl.get("serving") == NAME]
    groups = {}
    for key in {(lbl["role"], lbl["domain"]) for n, lbl, _ in mine if n == metric_names.TOKENS_PER_SECOND}:
        labels = {"role": key[0], "domain": key[1]}
        rates = {
            k: openaiclient.total(mine, metric_names.TOKENS_PER_SECOND, kind=k, **labels)
            for k in ("prompt", "generation")
        }
        per_hour = openaiclient.total(mine, metric_names.REVENUE_PER_HOUR, **labels)
        groups[key] = (rates, per_hour, openaiclient.total(mine, metric_names.REVENUE_TOTAL, **labels))
    return Round(groups, _revenue_total(samples, namespace))


class RoundWatcher:
    """Reads the operator's /metrics four times a second while the requests run, and after them until a round
    with no tokens shows every request counted; keeps each distinct round."""

    def __init__(self, door: FrontDoor) -> None:
        self.door = door
        self.rounds: list[Round] = []
        self._traffic_done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._error: BaseException | None = None

    def __enter__(self) -> RoundWatcher:
        self.rounds.append(_round(self.door.operator_metrics(), self.door.cluster.namespace))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._traffic_done.set()
        self._thread.join(timeout=120.0)
        assert not self._thread.is_alive(), (
            f"no idle scrape round within 120 s of the last request; {len(self.rounds)} rounds, the last: "
            f"{self.rounds[-1]}; the operator's log: {self.door.operator.log}"
        )
        if self._error is not None:
            raise self._error

    def _watch(self) -> None:
        try:
            busy = False
            while True:
                current = _round(self.door.operator_metrics(), self.door.cluster.namespace)
                if current != self.rounds[-1]:
                    self.rounds.append(current)
                idle = all(r["prompt"] == r["generation"] == 0 for r, _, _ in current.groups.values())
                busy = busy or not idle
                # A round with no tokens after the last answer: every request is in an earlier round.
                if idle and busy and self._traffic_done.is_set():
                    return
                time.sleep(0.25)
        except BaseException as error:  # handed to the test's thread
            self._error = error
