"""localcluster's node grace period as data: Kubernetes' default unless a cluster is started with another, and
kept in the cluster's recorded state, so ``status``, ``down`` and a later ``up`` see the command line it runs.

The benchmark cluster asks for a longer one (bench/benchcluster.py, "Node heartbeats"); the integration tests'
cluster keeps the default.
"""

from __future__ import annotations

import pathlib

import pytest
from localcluster import __main__ as localcluster_cli
from localcluster import cluster, components

GRACE_FLAG = "--node-monitor-grace-period"


def controller_manager_flags(layout: components.Layout) -> list[str]:
    return [arg for arg in components._kube_controller_manager(layout) if arg.startswith(GRACE_FLAG)]


def layout(tmp_path: pathlib.Path, grace: int | None) -> components.Layout:
    binaries = {"kube-controller-manager": tmp_path / "bin" / "kube-controller-manager"}
    ports = {"kube-apiserver": 6443, "kube-controller-manager": 10257}
    return components.Layout(tmp_path, ports, binaries, grace)


def test_a_cluster_started_without_a_grace_period_runs_the_controller_manager_with_kubernetes_default(
    tmp_path: pathlib.Path,
) -> None:
    assert controller_manager_flags(layout(tmp_path, None)) == []


def test_a_cluster_started_with_a_grace_period_hands_it_to_the_controller_manager(tmp_path: pathlib.Path) -> None:
    assert controller_manager_flags(layout(tmp_path, 300)) == [f"{GRACE_FLAG}=300s"]


def test_the_grace_period_is_recorded_with_the_cluster_so_its_command_line_is_known_later(
    tmp_path: pathlib.Path,
) -> None:
    for grace in (300, None):
        cluster._save_state(tmp_path, layout(tmp_path, grace))
        assert cluster._layout(tmp_path, cluster._load_state(tmp_path)).node_grace_seconds == grace


def test_a_cluster_recorded_before_the_grace_period_existed_reads_as_the_default(tmp_path: pathlib.Path) -> None:
    state = {"ports": {}, "binaries": {}}  # a state file written by an older localcluster
    assert cluster._layout(tmp_path, state).node_grace_seconds is None


def test_the_command_line_starts_the_cluster_with_the_grace_period_it_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    asked: list[int | None] = []

    def up(**options: int | None) -> cluster.Cluster:
        asked.append(options.get("node_grace_seconds"))
        return cluster.Cluster(layout(tmp_path, options.get("node_grace_seconds")), {})

    monkeypatch.setattr(cluster, "up", up)
    monkeypatch.setattr(localcluster_cli, "_print_components", lambda running: None)
    assert localcluster_cli.main(["up", "--node-grace-seconds", "300"]) == 0
    assert localcluster_cli.main(["up"]) == 0
    assert asked == [300, None]


@pytest.mark.parametrize("value", ["0", "-5", "five"])
def test_the_command_line_refuses_a_grace_period_that_is_not_a_positive_number_of_seconds(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        localcluster_cli.main(["up", "--node-grace-seconds", value])
    assert exit.value.code == 2
    assert "--node-grace-seconds" in capsys.readouterr().err
