"""High availability: two ``nvlfleet run`` replicas elect one leader through a Lease; only the leader reconciles.

Proven against the shared local cluster with two operator processes of the test's own (by PID):

- While both run, exactly one holds the Lease and runs kopf; the other only waits (no kopf start-up, no write).
- SIGKILL the leader: the standby takes the Lease after it expires and carries out a change made right after the
  kill — measured from the kill to the change being Ready, and required under 30 s.
- SIGTERM the leader: it releases the Lease on its way out, so the standby takes over without waiting for
  expiry (measured).
- A frozen leader (SIGSTOP past the Lease's expiry, then SIGCONT — a long GC pause or a stalled node) finds a new
  holder when it wakes and stops without writing anything; the new leader had carried on meanwhile.

Figures (takeover seconds per case) go to figures.py's file.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.operatorprocess import OperatorProcess

from nvlfleet.commands import run
from support import figures, servings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

LEASE = "nvlfleet-ha"
TAKEOVER_LIMIT_SECONDS = 30.0
Wait = Callable[..., Any]


class Replicas:
    """Operator replicas of one test, all candidates for the same Lease in the test's namespace."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, workdir: pathlib.Path, api: client.ApiClient) -> None:
        self.kubeconfig, self.namespace, self.workdir = kubeconfig, namespace, workdir
        self.coordination = client.CoordinationV1Api(api)
        self.all: list[OperatorProcess] = []

    def start(self) -> OperatorProcess:
        replica = OperatorProcess(
            self.workdir / f"replica-{len(self.all)}",
            self.kubeconfig,
            [self.namespace],
            recheck_seconds=5,
            extra=["--leader-election-lease", LEASE, "--leader-election-namespace", self.namespace],
        )
        self.all.append(replica)
        return replica.start()

    def holder(self) -> str | None:
        try:
            lease = self.coordination.read_namespaced_lease(LEASE, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return lease.spec.holder_identity

    def stop_all(self) -> None:
        for replica in self.all:
            if replica.running():
                os.kill(replica.pid, signal.SIGCONT)  # a frozen replica cannot act on SIGTERM
            replica.stop()
            print(f"--- {replica.log} ---\n{replica.tail(30)}")


def identity(replica: OperatorProcess) -> str:
    return f"{socket.gethostname()}-{replica.pid}"


def log_of(replica: OperatorProcess) -> str:
    return replica.log.read_text(errors="replace")


def leading(replica: OperatorProcess) -> bool:
    return "Activity 'startup' succeeded" in log_of(replica)


def standing_by(replica: OperatorProcess) -> bool:
    return "standing by" in log_of(replica) and not leading(replica)


def writes(replica: OperatorProcess, after: int = 0) -> list[str]:
    """Log lines of writes (children applied or deleted) from character offset ``after`` on."""
    text = log_of(replica)[after:]
    return [line for line in text.splitlines() if " applied " in line or " deleted " in line]


@pytest.fixture
def replicas(
    kubeconfig: pathlib.Path, namespace: str, tmp_path: pathlib.Path, api_client: client.ApiClient, crd: None
) -> Iterator[Replicas]:
    made = Replicas(kubeconfig, namespace, tmp_path, api_client)
    yield made
    made.stop_all()


def scaled_to(cluster: servings.Cluster, name: str, groups: int) -> Callable[[], bool]:
    def check() -> bool:
        obj = cluster.get(name)
        return servings.is_ready(obj) and (obj.get("status") or {}).get("ready") == f"{groups}/{groups}"

    return check


def test_one_leader_reconciles_and_a_standby_takes_over_within_30_seconds(
    replicas: Replicas, cluster: servings.Cluster, gb200_fleet: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=1)
    first = replicas.start()
    wait_for(lambda: leading(first), 120, "the first replica to lead")
    second = replicas.start()
    wait_for(lambda: standing_by(second), 60, "the second replica to stand by")
    cluster.create(servings.serving("ha", fleet, groups=2, nodes=1))
    wait_for(scaled_to(cluster, "ha", 2), 120, "the serving to be Ready")
    time.sleep(10)  # two re-checks and two renewals with both replicas up

    # Exactly one reconciles: the Lease holder ran kopf and wrote; the other never started kopf.
    assert replicas.holder() == identity(first)
    assert writes(first) and not writes(second)
    assert standing_by(second)
    # Both are alive to a liveness probe: a Deployment with two replicas keeps its standby.
    assert (first.healthz(), second.healthz()) == (200, 200)

    # 1. SIGKILL the leader; a change made right after must be carried out by the standby.
    assert first.stop(kill=True) == -9
    killed = time.monotonic()
    cluster.patch_spec("ha", {"roles": {"decode": {"groups": 3}}})
    wait_for(lambda: replicas.holder() == identity(second), 60, "the standby to take the Lease")
    lease_after_kill = time.monotonic() - killed
    wait_for(scaled_to(cluster, "ha", 3), 60, "the new leader to scale the serving")
    takeover_after_kill = time.monotonic() - killed
    assert takeover_after_kill < TAKEOVER_LIMIT_SECONDS
    assert second.healthz() == 200  # the standby's own /healthz gave the port to kopf's

    # 2. SIGTERM the leader: it releases the Lease, the restarted first replica takes over without expiry.
    third = replicas.start()
    wait_for(lambda: standing_by(third), 60, "a new standby")
    assert second.stop() == 0
    stopped = time.monotonic()
    cluster.patch_spec("ha", {"roles": {"decode": {"groups": 2}}})
    wait_for(lambda: replicas.holder() == identity(third), 60, "the standby to take the released Lease")
    lease_after_term = time.monotonic() - stopped
    wait_for(scaled_to(cluster, "ha", 2), 60, "the new leader to scale the serving")
    takeover_after_term = time.monotonic() - stopped
    assert lease_after_term < run.RENEW_SECONDS + 3, "a released Lease is taken at the standby's next attempt"

    # 3. Freeze the leader past its Lease; when it wakes up it must stop without writing.
    fourth = replicas.start()
    wait_for(lambda: standing_by(fourth), 60, "a new standby")
    os.kill(third.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    cluster.patch_spec("ha", {"roles": {"decode": {"groups": 3}}})
    wait_for(lambda: replicas.holder() == identity(fourth), 60, "the standby to take the frozen leader's Lease")
    wait_for(scaled_to(cluster, "ha", 3), 60, "the new leader to scale the serving")
    takeover_after_freeze = time.monotonic() - frozen
    woke_at = len(log_of(third))
    os.kill(third.pid, signal.SIGCONT)
    wait_for(lambda: not third.running(), 60, "the woken replica to stop")
    assert third.stop() == 1  # lost the Lease: exit 1, so that a Deployment restarts it as a standby
    assert "lost Lease" in log_of(third)[woke_at:]
    assert writes(third, after=woke_at) == []
    assert replicas.holder() == identity(fourth)
    wait_for(scaled_to(cluster, "ha", 3), 30, "the serving to stay as the new leader keeps it")

    figures.record(
        "high_availability",
        {
            "lease_seconds": run.LEASE_SECONDS,
            "renew_seconds": run.RENEW_SECONDS,
            "renew_deadline_seconds": run.RENEW_DEADLINE_SECONDS,
            "sigkill_lease_taken_seconds": round(lease_after_kill, 1),
            "sigkill_change_ready_seconds": round(takeover_after_kill, 1),
            "sigterm_lease_taken_seconds": round(lease_after_term, 1),
            "sigterm_change_ready_seconds": round(takeover_after_term, 1),
            "sigstop_change_ready_seconds": round(takeover_after_freeze, 1),
            "writes_by_a_woken_former_leader": 0,
            "limit_seconds": TAKEOVER_LIMIT_SECONDS,
        },
    )
