"""Control-plane faults: the API server and etcd are killed and restarted under a running operator.

The operator must notice nothing it cannot recover from by itself: its watches (DeepSeekServings, Nodes, GPU pods,
LeaderWorkerSets) reconnect, the passes that failed mid-way are retried, and the fleet converges — without the
operator process being restarted (same PID, still running) and without a duplicate or orphaned child.

These faults would break every other test using the shared cluster, so this module brings up a cluster of its
own (the same pinned binaries, its own directory and ports, through localcluster's API) and takes it down at the
end; components are killed and restarted by their recorded PIDs with ``localcluster.cluster.restart``.

A serving created after the restart can only be seen through a re-established watch (nvlfleet's periodic re-check
nudges only servings it already knows). The component is killed while the pass of a new rollout is part-way (the
operator is frozen with SIGSTOP as that pass begins and continued during the outage, so the kill cannot miss a pass
of a fraction of a second). With the API server gone that pass fails and is retried; with etcd gone the API
server keeps serving watches from its cache and holds the requests that need storage until etcd is back, so the
pass stalls through the outage.
Figures: outage (kill → healthy again), convergence (healthy again → every serving's current generation
observed, its LeaderWorkerSet at the wanted size and that many pods ready) and Ready (the same, and
LeaderWorkerSet's own status agreeing), in figures.py's file.

Leader election is off here: with ``--leader-election-lease`` a leader that cannot renew its Lease for 10 s
stops on purpose (exit 1, its Deployment restarts it), so an outage longer than that is survived by a restart,
not in-process; docs/reliability.md says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import cluster as localcluster
from localcluster import computedomains
from localcluster import fleet as fleets
from localcluster.operatorprocess import REPO, OperatorProcess

from nvlfleet.api import metric_names
from support import figures, servings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

# (case, component killed, seconds it stays down before it is started again). etcd longer: the API server answers
# reads and watches from its cache meanwhile, so only writes and uncached reads notice. The long API server outage
# outlasts kopf's own retries of one request (1+1+2+3+5+8+13+21 s).
FAULTS = [
    ("kube-apiserver", "kube-apiserver", 3.0, 0),
    ("etcd", "etcd", 8.0, 1),
    ("kube-apiserver-75s", "kube-apiserver", 75.0, 0),
]


@dataclasses.dataclass
class Private:
    root: pathlib.Path
    kubeconfig: pathlib.Path
    api_client: client.ApiClient
    fleet: Any


class _Fleet:
    def __init__(self, name: str) -> None:
        self.name = name


@contextlib.contextmanager
def _channel_driver(api_client: client.ApiClient) -> Iterator[None]:
    """The IMEX stand-in's template pass in a loop that outlives API server outages (it only retries)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.5):
            with contextlib.suppress(Exception):  # connection refused while the API server is down: next pass
                computedomains.sync_templates(api_client)

    thread = threading.Thread(target=loop, name="computedomain-driver", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Private]:
    root = tmp_path_factory.mktemp("faults") / "cluster"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NVLFLEET_CLUSTER_DIR", str(root))
        try:
            running = localcluster.up(progress=lambda m: print(f"faults cluster: {m}", file=sys.__stderr__))
            api = config.new_client_from_config(config_file=str(running.kubeconfig))
            crd = subprocess.run(
                [sys.executable, "-m", "nvlfleet.cli", "crd"], check=True, capture_output=True, text=True, cwd=REPO
            ).stdout
            kubectl = [str(running.kubectl), "--kubeconfig", str(running.kubeconfig)]
            subprocess.run(
                [*kubectl, "apply", "--server-side", "--field-manager=nvlfleet-tests", "-f", "-"],
                input=crd,
                check=True,
                capture_output=True,
                text=True,
            )
            subprocess.run(
                [*kubectl, "wait", "--for=condition=Established", "crd/deepseekservings.nvlfleet.io", "--timeout=60s"],
                check=True,
                capture_output=True,
            )
            computedomains.install_device_class(api)
            nodes = fleets.apply_fleet(api, 2, "GB200", fleet="faults")
            computedomains.publish_channels(api, [n["metadata"]["name"] for n in nodes])
            with _channel_driver(api):
                yield Private(root, running.kubeconfig, api, _Fleet("faults"))
        finally:
            localcluster.down(progress=lambda m: print(f"faults cluster: {m}", file=sys.__stderr__))


def _namespace(api: client.ApiClient, name: str) -> str:
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 60
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return name
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _until(predicate: Any, timeout: float, what: str, every: float = 0.25) -> float:
    """Seconds until ``predicate()`` holds (asked every ``every`` seconds); API errors while the control plane is
    away count as not yet."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(Exception):
            if predicate():
                return time.monotonic() - started
        if time.monotonic() - started > timeout:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)
        time.sleep(every)


def _rack(body: dict[str, Any], rack: int) -> dict[str, Any]:
    body["spec"]["pod"]["nodeSelector"][fleets.LABEL_RACK] = str(rack)
    return body


def passes_started(operator: OperatorProcess, serving: str) -> bool:
    """Whether the operator has begun a pass for ``serving`` (its reconcile counter counts at the start)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return any(
        line.startswith(metric_names.RECONCILE_TOTAL + "{")
        and f'serving="{serving}"' in line
        and float(line.split()[-1]) >= 1
        for line in text.splitlines()
    )


@contextlib.contextmanager
def _frozen_until(pid: int, thaw_after: float) -> Iterator[None]:
    """The process stopped (SIGSTOP) now and continued (SIGCONT) ``thaw_after`` seconds into the block, or at its
    end if that comes first: whatever it had in flight meets the world as the block left it."""
    os.kill(pid, signal.SIGSTOP)
    thaw = threading.Timer(thaw_after, os.kill, (pid, signal.SIGCONT))
    thaw.start()
    try:
        yield
    finally:
        thaw.cancel()
        os.kill(pid, signal.SIGCONT)


def _write_stalled_by(log: str, killed_at: datetime.datetime) -> float | None:
    """Seconds from the kill to the operator's first write after it, when a write was logged after the kill."""
    stamps = [
        datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
        for stamp in re.findall(r"^\[([0-9-]+ [0-9:,]+)\] nvlfleet +\[INFO +\] applied ", log, re.M)
    ]
    after = [s for s in stamps if s >= killed_at]
    return (after[0] - killed_at).total_seconds() if after else None


def nvlfleet_tracebacks(log: str) -> list[str]:
    """Tracebacks through nvlfleet's own code (kopf's internal retries of its own requests may log theirs)."""
    blocks = [block.split("\n[", 1)[0] for block in log.split("Traceback (most recent call last):")[1:]]
    return [block for block in blocks if "/nvlfleet/" in block]


def _carried_out(cluster: servings.Cluster, name: str, groups: int) -> bool:
    """The operator's part is done: the serving's current generation observed, its LeaderWorkerSet at ``groups``
    replicas, and that many pods running and ready."""
    obj = cluster.get(name)
    if (obj.get("status") or {}).get("observedGeneration") != obj["metadata"]["generation"]:
        return False
    if [lws["spec"]["replicas"] for lws in cluster.children(name)["LeaderWorkerSet"]] != [groups]:
        return False
    pods = [p for p in cluster.pods(name) if p.metadata.deletion_timestamp is None]
    ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return len(pods) == len(ready) == groups


def _children_are_exactly(cluster: servings.Cluster, names: dict[str, int]) -> None:
    """One LeaderWorkerSet (with ``groups`` replicas), one ComputeDomain, the decode Service and the router's per
    serving, nothing else."""
    for name, groups in names.items():
        children = cluster.children(name)
        assert [lws["spec"]["replicas"] for lws in children["LeaderWorkerSet"]] == [groups], name
        assert len(children["ComputeDomain"]) == 1, name
        assert sorted(s["metadata"]["name"] for s in children["Service"]) == [f"{name}-decode", f"{name}-router"], name
        assert len(servings.groups_of(cluster.pods(name))) == groups, name


@pytest.mark.parametrize(("case", "component", "down", "rack"), FAULTS, ids=[f[0] for f in FAULTS])
def test_the_operator_rides_out_a_killed_control_plane_component_and_converges(
    private: Private,
    case: str,
    component: str,
    down: float,
    rack: int,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NVLFLEET_CLUSTER_DIR", str(private.root))
    namespace = _namespace(private.api_client, f"faults-{case}")
    cluster = servings.Cluster(private.api_client, namespace)
    operator = OperatorProcess(tmp_path / "operator", private.kubeconfig, [namespace], recheck_seconds=2)
    operator.start().wait_ready(timeout=120)
    pid = operator.pid
    try:
        cluster.create(_rack(servings.serving("steady", private.fleet, groups=2, nodes=1), rack))
        _until(lambda: cluster.ready("steady"), 180, "steady to be Ready")

        # Kill the component while the rollout's pass is part-way: its remaining reads and writes fail and are
        # retried. The pass takes about 0.2 s, so the operator is frozen (SIGSTOP) the moment the pass is seen to
        # begin, and thawed in the middle of the outage; otherwise the pass may end before the kill lands.
        cluster.create(_rack(servings.serving("rolling", private.fleet, groups=4, nodes=1), rack))
        _until(lambda: passes_started(operator, "rolling"), 60, "the rollout's pass to start", every=0.01)
        with _frozen_until(pid, min(1.0, down / 2)):
            killed_at = datetime.datetime.now()
            outage = localcluster.restart(component, kill=True, down_seconds=down, progress=lambda _: None)
        healthy = time.monotonic()

        # Only a re-established watch can bring news of a new object.
        cluster.create(_rack(servings.serving("after", private.fleet, groups=1, nodes=1), rack))
        cluster.patch_spec("steady", {"roles": {"decode": {"groups": 3}}})
        _until(lambda: (cluster.get("after").get("status") or {}).get("observedGeneration"), 180, "news of 'after'")
        seen = time.monotonic() - healthy
        want = {"steady": 3, "rolling": 4, "after": 1}
        _until(lambda: all(_carried_out(cluster, n, g) for n, g in want.items()), 300, "the operator's convergence")
        recovery = time.monotonic() - healthy
        # Ready also needs the pods' Ready condition back: after an outage longer than the node grace period,
        # kube-controller-manager marks every node NotReady on the API server's return, and each pod on it
        # Ready=False, until the (simulated) kubelets report in again (localcluster's pod-ready-again stage).
        _until(lambda: all(cluster.ready(n) for n in want), 120, "Ready")
        ready_after = time.monotonic() - healthy
        assert operator.running() and operator.pid == pid, "the operator was restarted or died"
        _children_are_exactly(cluster, want)
        log = operator.log.read_text(errors="replace")
        watch_retries = log.count("Request attempt #")
        failed_steps = len(re.findall(r"refused a step|retrying in|could not record|could not write", log))
        # With etcd down the API server holds the requests that need storage until etcd answers again, so a
        # write in flight stalls through the outage rather than failing.
        stalled = _write_stalled_by(log, killed_at)
        if component == "kube-apiserver":
            assert watch_retries and failed_steps, "the outage never reached the operator's watches and passes"
        assert nvlfleet_tracebacks(log) == [], "an unreachable API server is retried, never a traceback in a pass"
    finally:
        operator.stop()
        print(f"--- {operator.log} ---\n{operator.tail(80)}")

    figures.record(
        f"control_plane_fault_{case}",
        {
            "component": component,
            "killed_with": "SIGKILL",
            "held_down_seconds": down,
            "outage_seconds": round(outage, 1),
            "first_new_object_reconciled_seconds_after_healthy": round(seen, 1),
            "converged_seconds_after_healthy": round(recovery, 1),
            "ready_condition_seconds_after_healthy": round(ready_after, 1),
            "operator_restarts": 0,
            "watch_request_retries_logged": watch_retries,
            "failed_steps_logged": failed_steps,
            "first_write_seconds_after_kill": None if stalled is None else round(stalled, 1),
            "kopf_requests_escalated_after_its_retries": log.count("failed; escalating"),
            "servings": 3,
            "groups": 8,
        },
    )
