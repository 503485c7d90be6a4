"""`python -m localdemo load`: the queue it hands the agent, the HPA arithmetic it expects, what it refuses, the watch.

The loop itself (KEDA, the HPA, the operator) runs in tests/integration/test_autoscaling_keda.py; the agent's half
(the queue reaching the decode leaders' /metrics) in tests/integration/test_demo.py. These tests pin the pure parts.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator
from typing import Any

import prometheus_client
import pytest
import yaml
from localdemo import __main__ as command
from localdemo import agent, demo, load, pressure

from nvlfleet.adapters import exporter
from nvlfleet.api import autoscaling, models, reasons
from nvlfleet.core import autoscaling as scaling_core
from nvlfleet.core import validation
from nvlfleet.facts import vllm_metrics
from nvlfleet.sim import vllmsim
from support.examples import EXAMPLES, needed_policy
from support.servingbuilder import role, serving, serving_dict

KEDA_UP = {"status": {"conditions": [{"type": "Available", "status": "True"}]}}


def scaling(**fields: Any) -> autoscaling.AutoscalingSpec:
    values: dict[str, Any] = {"minGroups": 2, "maxGroups": 6, "signal": "waitingRequests", "target": 8} | fields
    return autoscaling.AutoscalingSpec.model_validate(values)


def autoscaled(**fields: Any) -> models.DeepSeekServing:
    spec = {"minGroups": 2, "maxGroups": 6, "signal": "waitingRequests", "target": 8} | fields
    return serving(groups=2, nodes=4, prefill=role(groups=2, tensor=1, nodes=2), autoscaling=spec)


# --- the queue the command hands the agent ------------------------------------------------------------------------


def test_the_queue_asked_for_is_read_back_per_serving_and_zero_removes_it(tmp_path: pathlib.Path) -> None:
    pressure.write(tmp_path, "inference", "pd", 32)
    pressure.write(tmp_path, "inference", "other", 5)
    assert pressure.read(tmp_path) == {("inference", "pd"): 32.0, ("inference", "other"): 5.0}
    pressure.write(tmp_path, "inference", "pd", 0)
    assert pressure.read(tmp_path) == {("inference", "other"): 5.0}


def test_a_missing_or_broken_queue_file_asks_for_no_queue(tmp_path: pathlib.Path) -> None:
    assert pressure.read(tmp_path) == {}
    pressure.path(tmp_path).write_text("{not json")
    assert pressure.read(tmp_path) == {}


def test_a_negative_queue_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="waiting requests must be a number >= 0"):
        pressure.write(tmp_path, "inference", "pd", -1)


def leader(name: str, role_: models.RoleName, index: int) -> agent.Leader:
    load_, engines = vllmsim.Load(generation=1000.0, running_requests=64, kv_cache_usage=0.8), 8
    pod = f"{name}-{role_.value}-{index}"
    return agent.Leader("inference", name, role_, pod, "d1", load_, engines, "deepseek-v4.1-flash")


def test_the_agent_spreads_a_servings_queue_over_its_decode_leaders_only() -> None:
    decode = models.RoleName.DECODE
    leaders = {
        ("127.0.0.1", 1): leader("pd", decode, 0),
        ("127.0.0.2", 1): leader("pd", decode, 1),
        ("127.0.0.3", 1): leader("pd", decode, 2),
        ("127.0.0.4", 1): leader("pd", models.RoleName.PREFILL, 0),
        ("127.0.0.5", 1): leader("other", decode, 0),
    }
    out = agent.pressed(leaders, {("inference", "pd"): 30.0})
    waiting = {address: lead.load.waiting_requests for address, lead in out.items()}
    assert sum(waiting[a] for a in leaders if leaders[a].serving == "pd" and leaders[a].role == decode) == 30.0
    assert len({waiting[("127.0.0.1", 1)], waiting[("127.0.0.2", 1)], waiting[("127.0.0.3", 1)]}) == 1
    assert waiting[("127.0.0.4", 1)] == 0.0 and waiting[("127.0.0.5", 1)] == 0.0
    # The rest of each leader's load is what the workload gave it.
    assert all(out[a].load.generation == leaders[a].load.generation for a in leaders)
    assert all(out[a].load.kv_cache_usage == leaders[a].load.kv_cache_usage for a in leaders)


def test_the_queue_follows_the_decode_leaders_as_groups_come_and_go() -> None:
    decode = models.RoleName.DECODE
    two = {("127.0.0.1", 1): leader("pd", decode, 0), ("127.0.0.2", 1): leader("pd", decode, 1)}
    four = two | {("127.0.0.3", 1): leader("pd", decode, 2), ("127.0.0.4", 1): leader("pd", decode, 3)}
    for leaders in (two, four):
        out = agent.pressed(leaders, {("inference", "pd"): 48.0})
        assert math.isclose(sum(lead.load.waiting_requests for lead in out.values()), 48.0)


# --- what the command expects of the HPA --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ready", "waiting", "expected"),
    [
        (2, 32, 4),  # ceil(32 / 8)
        (2, 33, 5),  # rounds up
        (2, 1000, 6),  # maxGroups
        (4, 0, 2),  # drained: minGroups
        (2, 17, 2),  # 17 / (8 × 2) = 1.06: within the HPA's 10% tolerance, it keeps 2
        (3, 20, 3),  # ceil(20 / 8) = 3 = ready: settled where it is
    ],
)
def test_the_expected_decode_groups_follow_the_hpas_average_value_arithmetic(
    ready: int, waiting: float, expected: int
) -> None:
    assert load.expected_decode(scaling(), ready, waiting) == expected


def test_prefill_is_expected_to_follow_decode_by_the_ratio() -> None:
    pd = autoscaled(prefillPerDecode=0.5)
    assert load.expected_prefill(pd, 4) == 2
    assert load.expected_prefill(pd, 3) == 2  # halves round up
    assert load.expected_prefill(autoscaled(), 4) == 2  # no ratio: the spec's own prefill groups
    assert (
        load.expected_prefill(serving(autoscaling={"maxGroups": 4, "signal": "waitingRequests", "target": 8}), 4)
        is None
    )


def test_the_default_watch_covers_the_stabilisation_window_of_the_direction() -> None:
    spec = scaling(scaleUpStabilizationSeconds=0, scaleDownStabilizationSeconds=600, pollingSeconds=5)
    up, down = load.default_timeout(spec, scaling_down=False), load.default_timeout(spec, scaling_down=True)
    assert down - up == 600
    assert up >= spec.polling_seconds + load.HPA_SYNC_SECONDS


# --- what it refuses ----------------------------------------------------------------------------------------------


def test_a_serving_without_autoscaling_is_refused_naming_the_one_the_demo_autoscales() -> None:
    why = load.refusal(serving(name="gb300"), {}, KEDA_UP)
    assert why is not None and why.startswith("gb300 has no spec.autoscaling")
    assert f"python -m localdemo load {demo.AUTOSCALED} --waiting" in why


def test_a_serving_scaled_on_another_signal_is_refused() -> None:
    why = load.refusal(autoscaled(signal="kvCacheUsage", target=0.7), {}, KEDA_UP)
    assert why is not None and "scales on kvCacheUsage" in why and "waitingRequests" in why


@pytest.mark.parametrize(
    "apiservice",
    [None, {"status": {"conditions": [{"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck"}]}}],
)
def test_a_cluster_without_an_available_keda_is_refused_with_the_command_that_starts_it(
    apiservice: dict[str, Any] | None,
) -> None:
    why = load.refusal(autoscaled(), {}, apiservice)
    assert why is not None and "KEDA is not running" in why and "python -m localcluster keda up" in why


def test_an_operator_without_a_prometheus_to_point_keda_at_is_refused_in_its_own_words() -> None:
    message = "no Prometheus to read the signal from: ..."
    status = {
        "conditions": [{"type": reasons.AUTOSCALING, "reason": reasons.NO_PROMETHEUS_ADDRESS, "message": message}]
    }
    assert load.refusal(autoscaled(), status, KEDA_UP) == f"dsv41: {message}"


def test_an_autoscaled_serving_on_a_cluster_with_keda_is_accepted() -> None:
    assert load.refusal(autoscaled(), {}, KEDA_UP) is None


def test_the_command_refuses_with_exit_2_when_no_demo_runs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NVLFLEET_DEMO_DIR", str(tmp_path))
    assert command.main(["load", "--waiting", "32"]) == load.EXIT_REFUSED
    out = capsys.readouterr().out.strip()
    assert out.startswith("load: the demo is not running here") and out.endswith("make demo") and "\n" not in out


@pytest.mark.parametrize("bad", ["-1", "2.5", "many"])
def test_waiting_must_be_a_whole_number_of_requests(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        command.main(["load", "--waiting", bad])
    assert exit_.value.code == 2
    assert "a whole number of requests >= 0" in capsys.readouterr().err


def test_the_help_says_what_it_needs_and_how_to_get_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        command.main(["load", "--help"])
    text = capsys.readouterr().out
    for needed in ("spec.autoscaling", "python -m localcluster keda up", demo.AUTOSCALED, "--waiting 0", "130"):
        assert needed in text, needed


# --- the watch ----------------------------------------------------------------------------------------------------

TARGET = load.Target(waiting=32, decode=4, prefill=4)


def seen(queue: float | None, hpa: int | None, decode: tuple[int, int], prefill: tuple[int, int]) -> load.Observation:
    return load.Observation(queue=queue, hpa_desired=hpa, groups={"decode": decode, "prefill": prefill})


@pytest.mark.parametrize(
    ("observation", "done"),
    [
        (seen(32, 4, (4, 4), (4, 4)), True),
        (seen(None, 4, (4, 4), (4, 4)), False),  # Prometheus has not been read yet
        (seen(16, 4, (4, 4), (4, 4)), False),  # the queue is not (yet) what was asked
        (seen(32, 2, (2, 2), (2, 2)), False),  # the HPA has not acted yet
        (seen(32, 4, (4, 2), (4, 4)), False),  # decode groups not all ready
        (seen(32, 4, (4, 4), (4, 3)), False),  # prefill has not followed
    ],
)
def test_the_loop_has_settled_only_when_every_step_says_so(observation: load.Observation, done: bool) -> None:
    assert load.settled(observation, TARGET) is done


def test_the_progress_line_shows_queue_hpa_and_ready_over_desired_per_role_decode_first() -> None:
    line = load.progress(seen(32, 4, (4, 2), (4, 3)))
    assert line == "queue 32 · HPA wants 4 · decode 2/4 ready, prefill 3/4 ready"
    short = load.Observation(queue=32, hpa_desired=4, groups={"decode": (6, 5)}, capacity="decode needs 1 free node")
    assert load.progress(short).endswith("InsufficientCapacity: decode needs 1 free node")


def test_the_groups_are_read_from_the_operators_own_gauges() -> None:
    metrics = exporter.OperatorMetrics()
    metrics.set_groups("inference", "pd", {"decode": (4, 2), "prefill": (4, 3)}, 6)
    metrics.set_groups("inference", "other", {"decode": (1, 1)}, None)
    text = prometheus_client.generate_latest(metrics.registry).decode()
    assert load.groups_from_exposition(text, "inference", "pd") == {"decode": (4, 2), "prefill": (4, 3)}


def watch(observations: list[load.Observation | BaseException], timeout: float = 100.0) -> tuple[int, list[str]]:
    """Run the watch over ``observations`` (the first 10 s after the start, then one per 10 s); its exit code and
    printed lines."""
    looks: Iterator[load.Observation | BaseException] = iter(observations)
    times = iter(range(0, 10_000, 10))
    lines: list[str] = []

    def observe(*_: Any) -> load.Observation:
        look = next(looks)
        if isinstance(look, BaseException):
            raise look
        return look

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load, "observe", observe)
        patch.setattr(load.time, "sleep", lambda _: None)
        code = load._watch(None, "http://m", "inference", "pd", TARGET, timeout, lines.append, lambda: next(times))  # type: ignore[arg-type]
    return code, lines


def test_the_watch_prints_each_change_once_and_ends_when_settled() -> None:
    before = seen(0, 2, (2, 2), (2, 2))
    code, lines = watch([before, before, seen(32, 4, (4, 2), (4, 2)), seen(32, 4, (4, 4), (4, 4))])
    assert code == 0
    assert [line.split("] ", 1)[1] for line in lines] == [
        "queue 0 · HPA wants 2 · decode 2/2 ready, prefill 2/2 ready",
        "queue 32 · HPA wants 4 · decode 2/4 ready, prefill 2/4 ready",
        "queue 32 · HPA wants 4 · decode 4/4 ready, prefill 4/4 ready",
        "settled after 40s: decode 4/4 ready, prefill 4/4 ready at 32 waiting requests",
    ]


def test_the_watch_gives_up_at_the_timeout_saying_where_it_stood() -> None:
    stuck = seen(32, 4, (4, 3), (4, 3))
    code, lines = watch([stuck] * 5, timeout=25)
    assert code == load.EXIT_NOT_SETTLED
    assert lines[-1].endswith("not settled after 30s (expected decode 4): " + load.progress(stuck))


def test_ctrl_c_stops_the_watch_cleanly_and_says_the_queue_stays() -> None:
    code, lines = watch([seen(0, 2, (2, 2), (2, 2)), KeyboardInterrupt()])
    assert code == load.EXIT_INTERRUPTED
    assert "stopped watching; the queue stays at 32" in lines[-1] and "--waiting 0" in lines[-1]


# --- the serving the demo autoscales ------------------------------------------------------------------------------


def autoscaled_example() -> dict[str, Any]:
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc["metadata"]["name"] == demo.AUTOSCALED:
                return demo._for_demo(doc, demo.Options())
    raise AssertionError(f"no example named {demo.AUTOSCALED}")


def test_the_demo_autoscales_its_pd_example_from_its_own_size_with_prefill_in_its_own_ratio() -> None:
    doc = autoscaled_example()
    roles, spec = doc["spec"]["roles"], doc["spec"]["autoscaling"]
    assert spec["minGroups"] == roles["decode"]["groups"]
    assert spec["maxGroups"] == roles["decode"]["groups"] * demo.SCALE_CEILING
    assert spec["prefillPerDecode"] == roles["prefill"]["groups"] / roles["decode"]["groups"]
    assert spec["signal"] == autoscaling.Signal.WAITING_REQUESTS.value


def test_the_autoscaled_demo_serving_passes_the_webhooks_validation() -> None:
    doc = autoscaled_example()
    path = next(p for p in EXAMPLES if demo.AUTOSCALED in p.read_text())
    assert validation.validate(doc, needed_policy(path)) == []


def test_only_the_autoscaled_example_gets_autoscaling_in_the_demo() -> None:
    other = demo._for_demo(serving_dict(name="not-it"), demo.Options())
    assert "autoscaling" not in other["spec"]


def test_the_queue_metric_the_agent_sets_is_the_one_the_scaled_object_reads() -> None:
    promql, metric_type = scaling_core.query(autoscaled())
    assert vllm_metrics.exposed(vllm_metrics.NUM_REQUESTS_WAITING) in promql and metric_type == "AverageValue"
    endpoint = vllmsim.Endpoint("127.0.0.1", 0, load=vllmsim.Load(waiting_requests=12.0), engines=4)
    text = endpoint.exposition().decode()
    samples = [line for line in text.splitlines() if line.startswith(vllm_metrics.NUM_REQUESTS_WAITING + "{")]
    assert math.isclose(sum(float(line.rsplit(" ", 1)[1]) for line in samples), 12.0)
