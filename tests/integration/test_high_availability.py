"""High availability: ``nvlfleet run`` replicas elect one leader through a Lease; only the leader reconciles.

Proven against the shared local cluster with operator processes of the test's own (by PID):

- While two run, exactly one holds the Lease and writes; the other is a warm standby: it runs kopf (start-up done,
  watches open) and writes nothing, not even when it sees a spec change while the leader is frozen for a moment.
- SIGKILL the leader, five times over (a new warm standby each time): the standby takes the Lease once it expires
  and carries out a change made right after the kill. Takeover is measured from the SIGKILL (the test's clock,
  read just before the signal) to the new leader's first write (the time stamp of its first "applied" log line,
  logged once the API server accepted the LeaderWorkerSet); each is required under ``TAKEOVER_LIMIT_SECONDS``.
- SIGTERM the leader: it releases the Lease on its way out, so the standby takes over at its next attempt, without
  waiting for expiry (measured).
- A frozen leader (SIGSTOP past the Lease's expiry, then SIGCONT — a long GC pause or a stalled node) finds a new
  holder when it wakes and stops without writing anything; the new leader had carried on meanwhile.

Figures (takeover seconds per case, median and worst of the kills) go to figures.py's file.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import signal
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.operatorprocess import OperatorProcess

from nvlfleet.adapters import election
from support import figures, servings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

LEASE = "nvlfleet-ha"
KILLS = 5
# A killed leader renewed at most RENEW_SECONDS before the kill, so its Lease expires 10-15 s after it; the standby
# asks again just after the expiry it read (at most RETRY_SECONDS later), and its take-over passes start at once
# (no nudge debounce) and write. The limit keeps the retry period and 5 s beyond the Lease: room for a loaded
# 2-core machine (an ask, a pass and kopf's event handling slowed down by other work), not for a cold start: a
# takeover that restarts kopf blows it.
TAKEOVER_LIMIT_SECONDS = election.LEASE_SECONDS + election.RETRY_SECONDS + 5.0
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
    return "became the leader" in log_of(replica)


def warm(replica: OperatorProcess) -> bool:
    """kopf has started (the start-up handler ran) and the replica is not the leader: a warm standby."""
    text = log_of(replica)
    return "standing by" in text and "Activity 'startup' succeeded" in text and not leading(replica)


def logged_at(line: str) -> float:
    """The wall-clock time of a log line (kopf's format: ``[2025-01-31 12:00:00,123] name [LEVEL] message``)."""
    return datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def first_line_at(replica: OperatorProcess, text: str, after: int = 0) -> float | None:
    for line in log_of(replica)[after:].splitlines():
        if text in line and line.startswith("["):
            return logged_at(line)
    return None


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


def started_warm(replicas: Replicas, wait_for: Wait) -> OperatorProcess:
    """A new replica, once it stands by with kopf running and a moment for its watches to list what is there."""
    replica = replicas.start()
    wait_for(lambda: warm(replica), 120, "a new replica to stand by warm")
    time.sleep(3)
    return replica


@dataclasses.dataclass(frozen=True)
class Takeover:
    """Seconds from stopping the leader (the test's clock, just before the signal) to the standby's log lines."""

    leader_exited: float  # the leader's process ended (a SIGTERMed leader releases the Lease just before)
    lease_taken: float  # "became the leader"
    first_write: float  # its first "applied": the API server accepted a LeaderWorkerSet


def taken_over(
    leader: OperatorProcess,
    standby: OperatorProcess,
    cluster: servings.Cluster,
    groups: int,
    wait_for: Wait,
    *,
    kill: bool,
) -> Takeover:
    """Stop the leader (SIGKILL, else SIGTERM), change the serving's size at once, and time the standby's takeover;
    return once the change is Ready."""
    before = len(log_of(standby))
    stopped = time.time()
    assert leader.stop(kill=kill) == (-9 if kill else 0)
    exited = time.time()
    cluster.patch_spec("ha", {"roles": {"decode": {"groups": groups}}})
    wait_for(lambda: first_line_at(standby, " applied ", before), 60, "the standby to take over and write")
    lease_taken = first_line_at(standby, "became the leader", before)
    first_write = first_line_at(standby, " applied ", before)
    assert lease_taken is not None and first_write is not None
    wait_for(scaled_to(cluster, "ha", groups), 60, "the new leader to scale the serving")
    return Takeover(exited - stopped, lease_taken - stopped, first_write - stopped)


def test_one_leader_reconciles_and_a_warm_standby_takes_over_within_the_leases_expiry_and_one_pass(
    replicas: Replicas, cluster: servings.Cluster, gb200_fleet: Callable[..., Any], wait_for: Wait
) -> None:
    fleet = gb200_fleet(racks=1)
    first = replicas.start()
    wait_for(lambda: leading(first) and "Activity 'startup' succeeded" in log_of(first), 120, "the first to lead")
    second = started_warm(replicas, wait_for)
    cluster.create(servings.serving("ha", fleet, groups=2, nodes=1))
    wait_for(scaled_to(cluster, "ha", 2), 120, "the serving to be Ready")
    time.sleep(10)  # two re-checks and two renewals with both replicas up

    # Exactly one reconciles: the Lease holder wrote; the other runs kopf too (warm) and wrote nothing.
    assert replicas.holder() == identity(first)
    assert writes(first) and not writes(second)
    assert warm(second)
    # Both are alive to a liveness probe: a Deployment with two replicas keeps its standby.
    assert (first.healthz(), second.healthz()) == (200, 200)

    # 0. The standby sees a spec change while the leader is frozen for a moment (well within its renew deadline)
    # and writes nothing at all on the serving: no child, no status, no kopf annotation (its resourceVersion holds).
    os.kill(first.pid, signal.SIGSTOP)
    cluster.patch_spec("ha", {"roles": {"decode": {"groups": 3}}})
    version = cluster.get("ha")["metadata"]["resourceVersion"]
    time.sleep(3)
    assert cluster.get("ha")["metadata"]["resourceVersion"] == version
    os.kill(first.pid, signal.SIGCONT)
    wait_for(scaled_to(cluster, "ha", 3), 60, "the leader, woken, to scale the serving")
    assert not writes(second)

    # 1. SIGKILL the leader, again and again; a change made right after each kill is carried out by the standby.
    leader, standby, groups = first, second, 3
    kills: list[Takeover] = []
    for _ in range(KILLS):
        groups = 2 if groups == 3 else 3
        kills.append(taken_over(leader, standby, cluster, groups, wait_for, kill=True))
        assert replicas.holder() == identity(standby)
        assert standby.healthz() == 200
        leader, standby = standby, started_warm(replicas, wait_for)
    takeovers = [kill.first_write for kill in kills]
    print("SIGKILL takeovers (s):", [round(t, 1) for t in takeovers])
    assert max(takeovers) < TAKEOVER_LIMIT_SECONDS, takeovers

    # 2. SIGTERM the leader: it releases the Lease, the standby takes over without waiting for expiry.
    groups = 2 if groups == 3 else 3
    term = taken_over(leader, standby, cluster, groups, wait_for, kill=False)
    # kopf's graceful stop takes a few seconds (it gives its per-object workers time to finish) before the
    # leader releases the Lease; from there, the standby takes it at its next attempt.
    assert term.lease_taken - term.leader_exited < election.RETRY_SECONDS + 3, "taken at the standby's next attempt"

    # 3. Freeze the leader past its Lease; when it wakes up it must stop without writing.
    third, fourth = standby, started_warm(replicas, wait_for)
    os.kill(third.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    groups = 2 if groups == 3 else 3
    cluster.patch_spec("ha", {"roles": {"decode": {"groups": groups}}})
    wait_for(lambda: replicas.holder() == identity(fourth), 60, "the standby to take the frozen leader's Lease")
    wait_for(scaled_to(cluster, "ha", groups), 60, "the new leader to scale the serving")
    takeover_after_freeze = time.monotonic() - frozen
    woke_at = len(log_of(third))
    os.kill(third.pid, signal.SIGCONT)
    wait_for(lambda: not third.running(), 60, "the woken replica to stop")
    assert third.stop() == 1  # lost the Lease: exit 1, so that a Deployment restarts it as a standby
    assert "lost Lease" in log_of(third)[woke_at:]
    assert writes(third, after=woke_at) == []
    assert replicas.holder() == identity(fourth)
    wait_for(scaled_to(cluster, "ha", groups), 30, "the serving to stay as the new leader keeps it")

    figures.record(
        "high_availability",
        {
            "lease_seconds": election.LEASE_SECONDS,
            "renew_seconds": election.RENEW_SECONDS,
            "renew_deadline_seconds": election.RENEW_DEADLINE_SECONDS,
            "retry_seconds": election.RETRY_SECONDS,
            "sigkill_kills": len(kills),
            "sigkill_lease_taken_seconds": [round(kill.lease_taken, 1) for kill in kills],
            "sigkill_first_write_seconds": [round(t, 1) for t in takeovers],
            "sigkill_first_write_median_seconds": round(statistics.median(takeovers), 1),
            "sigkill_first_write_worst_seconds": round(max(takeovers), 1),
            "sigterm_leader_exited_seconds": round(term.leader_exited, 1),
            "sigterm_lease_taken_seconds": round(term.lease_taken, 1),
            "sigterm_first_write_seconds": round(term.first_write, 1),
            "sigstop_change_ready_seconds": round(takeover_after_freeze, 1),
            "writes_by_a_standby_seeing_a_change": 0,
            "writes_by_a_woken_former_leader": 0,
            "limit_seconds": TAKEOVER_LIMIT_SECONDS,
        },
    )
