"""The generated dashboards and alerts: committed files match the code, names match what is exported, every
PromQL expression parses (promtool), and every alert fires on the situation it describes and not otherwise
(``promtool test rules``). Evaluating the queries against live metrics is tests/integration/test_promql.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import pathlib
import re
import subprocess
from typing import Any

import localprometheus
import prometheus_client
import pytest
import yaml
from prometheus_client import parser

from nvlfleet.adapters.exporter import OperatorMetrics
from nvlfleet.adapters.scraper import Scraper
from nvlfleet.api import metric_names as names
from nvlfleet.api import models
from nvlfleet.api import parity as parity_api
from nvlfleet.artifacts import alerts, dashboards
from nvlfleet.core.group_telemetry import Target
from nvlfleet.facts import vllm_metrics, vllm_router
from nvlfleet.sim import simulator, vllmsim

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nvlfleet"

NVLFLEET_NAME = re.compile(r"\bnvlfleet_[a-z0-9_]+\b")
VLLM_NAME = re.compile(r"\bvllm:[a-z0-9_:]+\b")
ROUTER_NAME = re.compile(r"\bvllm_router_[a-z0-9_]+\b")


def every_expression() -> list[tuple[str, str]]:
    """(where, PromQL) for every dashboard query, variable and alert."""
    found = [(f"{e.dashboard} / {e.panel}", e.expr) for e in dashboards.promql_expressions()]
    found += [(f"alert {a.name}", a.expr) for a in alerts.all_alerts()]
    return found


@pytest.fixture(scope="module")
def promtool() -> pathlib.Path:
    return localprometheus.ensure().promtool


# ---------------------------------------------------------------------------------------------------------------
# The committed files are the generator's output


def test_committed_dashboards_are_what_the_code_generates() -> None:
    committed = {p.name: p.read_text(encoding="utf-8") for p in (CHART / "dashboards").glob("*.json")}
    generated = {d.file_name: dashboards.render(d) for d in dashboards.all_dashboards()}
    assert committed == generated, "run `make generated` and commit charts/nvlfleet/dashboards/"


def test_committed_rule_file_is_what_the_code_generates() -> None:
    committed = (CHART / alerts.RULE_FILE).read_text(encoding="utf-8")
    assert committed == alerts.render(), "run `make generated` and commit charts/nvlfleet/files/"


# ---------------------------------------------------------------------------------------------------------------
# Names: nvlfleet_* as telemetry exports them, vllm:* as the pinned vLLM exposes them


T0 = datetime.datetime(2026, 10, 20, 12, 0, tzinfo=datetime.UTC).timestamp()
PRICING = models.PricingSpec.model_validate(
    {
        "inputCacheHitPerMillion": 0.006,
        "inputCacheMissPerMillion": 0.30,
        "outputPerMillion": 1.20,
        "schedule": [{"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}],
        "gpuHourCost": 3.0,
    }
)


@dataclasses.dataclass
class FakeClock:
    now: float

    def __call__(self) -> float:
        return self.now


async def _exercise_telemetry() -> str:
    """Everything the operator can export, made to appear: a priced disaggregated serving with speculative
    decoding and a parity reference, a serving whose leader is down, reconciles (one failing), a plan, free nodes,
    status conditions.
    Returns the exposition text of the operator's registry."""
    clock = FakeClock(T0 - 3600)
    sim = simulator.Simulator(clock=clock)
    metrics = OperatorMetrics()
    scraper = Scraper(metrics, clock=clock, timeout=2.0)
    try:
        decode = await sim.add(
            "127.0.0.1",
            0,
            load=vllmsim.Load(
                prompt=90_000,
                prompt_cached=60_000,
                generation=12_000,
                running_requests=96,
                speculative_tokens=3,
                acceptance_rate=0.6,
            ),
            engines=4,
        )
        prefill = await sim.add(
            "127.0.0.1", 0, load=vllmsim.Load(prompt=90_000, prompt_cached=60_000, generation=50), engines=4
        )
        down = await sim.add("127.0.0.1", 0, load=vllmsim.Load(prompt=1, generation=1), engines=1)
        await sim.set_mode(down, vllmsim.Mode.DOWN)
        scraper.set_serving(
            "ml",
            "flash",
            [
                Target("prefill", "clique-a", prefill.url, 8),
                Target("decode", "clique-b", decode.url, 8),
            ],
            pricing=PRICING,
            parity_reference=parity_api.ParitySpec(reference_tokens_per_second_per_gpu=5_000.0),
        )
        scraper.set_serving("ml", "broken", [Target("decode", "clique-c", down.url, 4)], pricing=None)
        for _ in range(2):
            clock.now += 15
            await scraper.scrape_once()
        with metrics.reconciling("ml", "flash"), metrics.planning():
            pass
        with pytest.raises(RuntimeError), metrics.reconciling("ml", "flash"):
            raise RuntimeError("a failing pass")
        metrics.set_free_nodes({"clique-a": 3, "clique-b": 0})
        metrics.set_conditions("ml", "flash", {"Ready": True, "Placed": True, "Progressing": False})
        metrics.set_groups("ml", "flash", {"prefill": (2, 2), "decode": (4, 3)}, max_groups=4)
        return prometheus_client.generate_latest(metrics.registry).decode()
    finally:
        await scraper.close()
        await sim.close()


@pytest.fixture(scope="module")
def exported_samples() -> set[str]:
    text = asyncio.run(_exercise_telemetry())
    return {sample.name for family in parser.text_string_to_metric_families(text) for sample in family.samples}


def test_every_nvlfleet_metric_in_the_dashboards_and_alerts_is_exported_by_the_operator(
    exported_samples: set[str],
) -> None:
    used = {name: where for where, expr in every_expression() for name in NVLFLEET_NAME.findall(expr)}
    missing = {name: where for name, where in used.items() if name not in exported_samples}
    assert missing == {}, f"not exported by nvlfleet.adapters.exporter: {missing}"


def test_every_vllm_metric_in_the_dashboards_is_one_the_pinned_vllm_exposes() -> None:
    facts = vllmsim.metric_facts()["metrics"]["vllm_metrics"]
    exposed = {m["exposed_as"] for m in facts if m["type"] != "histogram"}
    exposed |= {f"{m['family']}_{s}" for m in facts if m["type"] == "histogram" for s in ("bucket", "sum", "count")}
    used = {name for _, expr in every_expression() for name in VLLM_NAME.findall(expr)}
    assert used, "the serving dashboard shows vLLM's own latency metrics"
    assert used <= exposed, used - exposed


def test_every_router_metric_in_the_dashboards_is_one_the_pinned_router_exposes() -> None:
    facts = vllm_router.load()
    exposed = {sample for metric in facts.metrics.values() for sample in metric.samples}
    used = {name for _, expr in every_expression() for name in ROUTER_NAME.findall(expr)}
    assert used, "the serving dashboard shows the router's own metrics"
    assert used <= exposed, used - exposed


def test_a_router_label_the_pinned_router_does_not_give_a_family_is_refused() -> None:
    with pytest.raises(KeyError, match="labels vllm_router_pd_errors_total with no"):
        dashboards._router(vllm_router.PD_ERRORS, by="route")


def test_the_router_panels_do_not_select_by_role() -> None:
    """The router's PodMonitor gives its series no role: a role matcher would hide them once a role is picked."""
    router_queries = [e for e in dashboards.promql_expressions() if ROUTER_NAME.search(e.expr)]
    assert router_queries
    assert [e.panel for e in router_queries if "role" in e.expr] == []


def test_a_vllm_name_the_pinned_version_does_not_expose_is_refused() -> None:
    with pytest.raises(KeyError, match="exposes no sample"):
        vllm_metrics.exposed("vllm:time_to_first_token_bucket", dashboards.VLLM_VERSION)


# ---------------------------------------------------------------------------------------------------------------
# Dashboard structure


def _dashboard_json(dashboard: dashboards.Dashboard) -> dict[str, Any]:
    return json.loads(dashboards.render(dashboard))


@pytest.mark.parametrize("dashboard", dashboards.all_dashboards(), ids=lambda d: d.uid)
def test_every_query_reads_the_datasource_variable(dashboard: dashboards.Dashboard) -> None:
    model = _dashboard_json(dashboard)
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in model["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"]), panel["title"]


@pytest.mark.parametrize("dashboard", [dashboards.fleet(), dashboards.serving()], ids=lambda d: d.uid)
def test_every_per_serving_series_is_filtered_by_the_namespace_and_serving_selectors(
    dashboard: dashboards.Dashboard,
) -> None:
    fleet_wide = {names.DOMAIN_FREE_NODES}  # a rack's free nodes belong to no serving
    selectors = re.compile(r"\b((?:nvlfleet_|vllm:|vllm_router_)[a-z0-9_:]+)(\{[^}]*\})?")
    for expression in dashboards.promql_expressions():
        if expression.dashboard != dashboard.title or expression.panel.startswith("variable"):
            continue
        for metric, matchers in selectors.findall(expression.expr):
            if metric in fleet_wide:
                continue
            assert 'namespace=~"$namespace"' in matchers, (expression.panel, metric)
            assert 'serving=~"$serving"' in matchers, (expression.panel, metric)


def test_the_fleet_dashboard_selects_many_servings_and_the_serving_dashboard_one() -> None:
    def selector(dashboard: dashboards.Dashboard, name: str) -> dict[str, Any]:
        return next(v for v in _dashboard_json(dashboard)["templating"]["list"] if v["name"] == name)

    for name in ("namespace", "serving"):
        assert selector(dashboards.fleet(), name)["multi"] is True
        assert selector(dashboards.fleet(), name)["allValue"] == ".*"
        assert selector(dashboards.serving(), name)["multi"] is False


@pytest.mark.parametrize("dashboard", dashboards.all_dashboards(), ids=lambda d: d.uid)
def test_panels_have_unique_ids_and_tile_the_grid_without_overlap(dashboard: dashboards.Dashboard) -> None:
    panels = _dashboard_json(dashboard)["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        columns, rows = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        mine = {(x, y) for x in columns for y in rows}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine


# ---------------------------------------------------------------------------------------------------------------
# PromQL parses: promtool reads each expression as a recording rule (Grafana variables substituted as Grafana
# would for an "All" selection)


def test_every_promql_expression_parses(tmp_path: pathlib.Path, promtool: pathlib.Path) -> None:
    values = {"namespace": ".*", "serving": ".*", "role": ".*"}
    rules = [
        {"record": f"check:{i}", "expr": dashboards.substitute(expr, values)}
        for i, (_, expr) in enumerate(every_expression())
    ]
    rule_file = tmp_path / "every-expression.rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "parse", "rules": rules}]}))
    result = subprocess.run([str(promtool), "check", "rules", str(rule_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_the_shipped_rule_file_passes_promtool_check(promtool: pathlib.Path) -> None:
    result = subprocess.run(
        [str(promtool), "check", "rules", str(CHART / alerts.RULE_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------------------------
# Alerts behave: promtool test rules on the shipped file, one bad and one healthy situation per alert

GROUP = {"namespace": "ml", "serving": "flash", "role": "decode", "domain": "clique-a"}
SERVING = {"namespace": "ml", "serving": "flash"}


def series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def expected(alert_name: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
    alert = next(a for a in alerts.all_alerts() if a.name == alert_name)
    description = alert.description
    for key, value in labels.items():  # the only template the descriptions use
        description = description.replace(f"{{{{ $labels.{key} }}}}", value)
    return {
        "exp_labels": {"severity": alert.severity, **labels},
        "exp_annotations": {"summary": summary, "description": description},
    }


def alert_case(
    alert_name: str, input_series: list[dict[str, str]], at: str, firing: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": input_series,
        "alert_rule_test": [{"eval_time": at, "alertname": alert_name, "exp_alerts": firing}],
    }


ALERT_CASES = {
    "parity below target fires after 30 minutes": alert_case(
        "NvlfleetParityBelowTarget",
        [series(names.PARITY_RATIO, GROUP, "0.8x40")],
        "35m",
        [
            expected(
                "NvlfleetParityBelowTarget",
                GROUP,
                "ml/flash decode in NVLink domain clique-a delivers 80% of its reference tokens/s per GPU.",
            )
        ],
    ),
    "parity at target stays quiet": alert_case(
        "NvlfleetParityBelowTarget", [series(names.PARITY_RATIO, GROUP, "0.95x40")], "35m", []
    ),
    "revenue per GPU-hour halving at base price fires": alert_case(
        "NvlfleetRevenuePerGpuHourDrop",
        [
            series(names.REVENUE_PER_GPU_HOUR, {**GROUP, "currency": "USD"}, "40x420 20x60"),
            series(names.PRICE_MULTIPLIER, GROUP, "1x480"),
        ],
        "7h55m",
        [
            expected(
                "NvlfleetRevenuePerGpuHourDrop",
                {**GROUP, "currency": "USD"},
                "Revenue per GPU-hour of ml/flash "
                "decode in NVLink domain clique-a fell below 70% of the preceding 6 hours.",
            )
        ],
    ),
    "an off-peak discount that halves revenue stays quiet": alert_case(
        "NvlfleetRevenuePerGpuHourDrop",
        [
            series(names.REVENUE_PER_GPU_HOUR, {**GROUP, "currency": "USD"}, "40x420 20x60"),
            series(names.PRICE_MULTIPLIER, GROUP, "1x420 0.5x60"),
        ],
        "7h55m",
        [],
    ),
    "a serving not Ready for 45 minutes fires": alert_case(
        "NvlfleetServingNotReady",
        [series(names.SERVING_CONDITION, {**SERVING, "condition": "Ready"}, "0x50")],
        "50m",
        [
            expected(
                "NvlfleetServingNotReady",
                {**SERVING, "condition": "Ready"},
                "DeepSeekServing ml/flash has not been Ready for 45 minutes.",
            )
        ],
    ),
    "a serving loading its weights for 30 minutes stays quiet": alert_case(
        "NvlfleetServingNotReady",
        [series(names.SERVING_CONDITION, {**SERVING, "condition": "Ready"}, "0x30 1x20")],
        "50m",
        [],
    ),
    "an unplaceable group fires after 10 minutes": alert_case(
        "NvlfleetGroupUnplaceable",
        [series(names.SERVING_CONDITION, {**SERVING, "condition": "Placed"}, "0x15")],
        "15m",
        [
            expected(
                "NvlfleetGroupUnplaceable",
                {**SERVING, "condition": "Placed"},
                "Groups of ml/flash fit in no NVLink domain.",
            )
        ],
    ),
    "decode asking for maxGroups for 15 minutes fires": alert_case(
        "NvlfleetAutoscalingPinnedAtMax",
        [
            series(names.GROUPS_DESIRED, {**SERVING, "role": "decode"}, "2x3 8x20"),
            series(names.AUTOSCALING_MAX_GROUPS, SERVING, "8x23"),
        ],
        "22m",
        [
            expected(
                "NvlfleetAutoscalingPinnedAtMax",
                SERVING,  # matched on(namespace, serving): the role label is not carried over
                "ml/flash has asked for its maxGroups (8) decode groups for 15 minutes.",
            )
        ],
    ),
    "decode below maxGroups stays quiet": alert_case(
        "NvlfleetAutoscalingPinnedAtMax",
        [
            series(names.GROUPS_DESIRED, {**SERVING, "role": "decode"}, "7x23"),
            series(names.AUTOSCALING_MAX_GROUPS, SERVING, "8x23"),
        ],
        "22m",
        [],
    ),
    "a serving sized by hand at any size stays quiet": alert_case(
        "NvlfleetAutoscalingPinnedAtMax",
        [series(names.GROUPS_DESIRED, {**SERVING, "role": "decode"}, "8x23")],
        "22m",
        [],
    ),
    "an autoscaled serving without room for 15 minutes fires": alert_case(
        "NvlfleetAutoscalingBlockedByCapacity",
        [
            series(names.SERVING_CONDITION, {**SERVING, "condition": "InsufficientCapacity"}, "0x3 1x20"),
            series(names.AUTOSCALING_MAX_GROUPS, SERVING, "8x23"),
        ],
        "22m",
        [
            expected(
                "NvlfleetAutoscalingBlockedByCapacity",
                {**SERVING, "condition": "InsufficientCapacity"},
                "Autoscaled ml/flash has not found room for the groups it asks for in 15 minutes.",
            )
        ],
    ),
    "a scale-up that found room within minutes stays quiet": alert_case(
        "NvlfleetAutoscalingBlockedByCapacity",
        [
            series(names.SERVING_CONDITION, {**SERVING, "condition": "InsufficientCapacity"}, "0x3 1x10 0x10"),
            series(names.AUTOSCALING_MAX_GROUPS, SERVING, "8x23"),
        ],
        "22m",
        [],
    ),
    "failing scrapes fire after 15 minutes": alert_case(
        "NvlfleetTelemetryScrapeFailing",
        [series(names.SCRAPE_ERRORS_TOTAL, {**SERVING, "reason": "timeout"}, "0+4x30")],
        "25m",
        [
            expected(
                "NvlfleetTelemetryScrapeFailing",
                {**SERVING, "reason": "timeout"},
                "The operator cannot scrape vLLM leaders of ml/flash (timeout).",
            )
        ],
    ),
    "errors that stopped stay quiet": alert_case(
        "NvlfleetTelemetryScrapeFailing",
        [series(names.SCRAPE_ERRORS_TOTAL, {**SERVING, "reason": "timeout"}, "0+4x5 20x30")],
        "30m",
        [],
    ),
    "failing reconciles fire after 15 minutes": alert_case(
        "NvlfleetReconcileErrors",
        [series(names.RECONCILE_ERRORS_TOTAL, {**SERVING, "reason": "ApiError"}, "0+1x30")],
        "25m",
        [
            expected(
                "NvlfleetReconcileErrors",
                {**SERVING, "reason": "ApiError"},
                "Reconciling ml/flash keeps failing (ApiError).",
            )
        ],
    ),
}


def test_every_alert_has_a_firing_case() -> None:
    checks = [test["alert_rule_test"][0] for test in ALERT_CASES.values()]
    fired = {check["alertname"] for check in checks if check["exp_alerts"]}
    assert fired == {a.name for a in alerts.all_alerts()}


@pytest.mark.parametrize("case", ALERT_CASES, ids=list(ALERT_CASES))
def test_alert_behaviour(case: str, tmp_path: pathlib.Path, promtool: pathlib.Path) -> None:
    tests = {
        "rule_files": [str(CHART / alerts.RULE_FILE)],
        "evaluation_interval": "1m",
        "tests": [ALERT_CASES[case]],
    }
    path = tmp_path / "alerts.test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([str(promtool), "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
