"""The demo's agent in measured-traffic mode: its simulated leaders publish no rates of their own."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from localdemo import __main__ as command
from localdemo import agent


def test_measured_traffic_leaders_count_only_what_they_answer() -> None:
    assert set(agent.MEASURED.counter_rates().values()) == {0.0}
    assert (agent.MEASURED.requests, agent.MEASURED.running_requests) == (0.0, 0.0)


@pytest.mark.parametrize(("flag", "measured"), [([], False), (["--measured-traffic"], True)])
def test_the_agent_command_passes_measured_traffic_on(
    monkeypatch: pytest.MonkeyPatch, flag: list[str], measured: bool
) -> None:
    seen: dict[str, Any] = {}

    def main(*args: Any, **options: Any) -> int:
        seen.update(options, args=args)
        return 0

    monkeypatch.setattr(agent, "main", main)
    argv = ["agent", "--kubeconfig", "k", "--namespace", "ns", "--targets-file", "t.json", "--state-dir", "s"]
    assert command.main([*argv, *flag]) == 0
    assert seen["measured_traffic"] is measured
    assert seen["args"] == (pathlib.Path("k"), "ns", pathlib.Path("t.json"), pathlib.Path("s"))
