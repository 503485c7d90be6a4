"""nvlfleet's Prometheus alerts, as code: the one source of charts/nvlfleet/files/nvlfleet.rules.yaml.

Where it sits: next to ``dashboards``, at the end of the telemetry flow — operator gauges (``adapters.exporter``,
named in ``api.metric_names``) → Prometheus → **these rules** → Alertmanager. ``make generated`` writes the rule
file; the Helm chart wraps it in a PrometheusRule (with kube-prometheus-stack's knobs: disable by name, extra
labels/annotations, runbook links), and ``promtool check rules`` / ``promtool test rules`` run on the very same
file in the tests.

What each alert is for, and why its expression looks the way it does:

- *Parity below target*: tokens/s per GPU, on the basis the serving's reference counts (spec.parity.basis:
  output tokens by default, or total), under ``PARITY_TARGET`` of that reference for a sustained period. Per GPU,
  so adding or removing groups does not move it; but a reference is a figure measured at full load, so a lightly
  loaded group reads low too: the description says to tell the two apart.
- *Revenue per GPU-hour drop*: compared with the preceding hours *at base price*. Dividing by the time-of-day
  price multiplier first keeps an off-peak discount window from looking like a collapse.
- *Serving not Ready* / *group unplaceable*: the reconciler's status, exported as gauges, so they reach someone
  who is not watching ``kubectl get``.
- *Autoscaling pinned at maxGroups* / *autoscaling blocked by capacity*: an autoscaled serving whose decode groups
  have asked for ``spec.autoscaling.maxGroups`` for 15 minutes needs a higher ceiling (or is mis-targeted); one whose
  scale-up found no room for 15 minutes has an HPA that holds below what the signal asks (ready < desired). Both
  are joined on ``nvlfleet_autoscaling_max_groups``, which only autoscaled servings export, so a serving sized by
  hand never fires them (the unplaceable-group alert covers those).
- *Scrape failures* and *reconcile errors*: the operator cannot see (or cannot act on) a serving; its numbers
  and status go stale while this lasts.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import yaml

from nvlfleet.api import metric_names, reasons, yamltext

PARITY_TARGET = 0.9
REVENUE_DROP_RATIO = 0.7  # fire below 70 % of the preceding hours' base-price revenue per GPU-hour
GROUP_NAME = "nvlfleet"
RULE_FILE = pathlib.Path("files") / "nvlfleet.rules.yaml"

_SERVING = "{{ $labels.namespace }}/{{ $labels.serving }}"
_GROUP = _SERVING + " {{ $labels.role }} in NVLink domain {{ $labels.domain }}"


@dataclasses.dataclass(frozen=True)
class Alert:
    """One alert: ``signal`` is the quantity watched, ``condition`` what makes it bad (``expr`` joins them).

    Keeping the signal apart lets the tests check that every alert watches a series that really exists (a typo
    in a metric name would otherwise just be an alert that never fires).
    """

    name: str
    signal: str
    condition: str
    for_: str
    severity: str  # critical | warning | info
    summary: str
    description: str

    @property
    def expr(self) -> str:
        joiner = "\n  " if "\n" in self.signal or len(self.signal) + len(self.condition) > 100 else " "
        return f"{self.signal}{joiner}{self.condition}"

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "description": self.description},
        }


def _base_price_revenue_per_gpu_hour(window: str, offset: str = "") -> str:
    """Revenue per GPU-hour with the time-of-day multiplier divided out, averaged over ``window``."""
    at = f" offset {offset}" if offset else ""
    ratio = f"{metric_names.REVENUE_PER_GPU_HOUR} / ignoring(currency) group_left {metric_names.PRICE_MULTIPLIER}"
    return f"avg_over_time(({ratio})[{window}:1m]{at})"


def all_alerts() -> list[Alert]:
    return [
        Alert(
            name="NvlfleetParityBelowTarget",
            signal=metric_names.PARITY_RATIO,
            condition=f"< {PARITY_TARGET}",
            for_="30m",
            severity="warning",
            summary=f"{_GROUP} delivers {{{{ $value | humanizePercentage }}}} of its reference tokens/s per GPU.",
            description=(
                f"Tokens/s per GPU, counted as spec.parity.basis says (output tokens unless it says total), have "
                f"stayed below {PARITY_TARGET:.0%} of spec.parity.referenceTokensPerSecondPerGpu for 30 minutes. "
                "The reference was measured at full load, so first check the load: a group running fewer requests "
                "than its max-num-seqs reads low without being slow. If it is busy, compare the rendered vLLM flags "
                "and the tuning profile with the reference run, and check the speculative acceptance rate."
            ),
        ),
        Alert(
            name="NvlfleetRevenuePerGpuHourDrop",
            signal=_base_price_revenue_per_gpu_hour("30m"),
            condition=f"< {REVENUE_DROP_RATIO} * {_base_price_revenue_per_gpu_hour('6h', offset='30m')}",
            for_="15m",
            severity="warning",
            summary=f"Revenue per GPU-hour of {_GROUP} fell below {REVENUE_DROP_RATIO:.0%} of the preceding 6 hours.",
            description=(
                "Measured at base price (the time-of-day multiplier divided out), so a discount window does not "
                "trigger it. Either fewer tokens per GPU (load, cache hit rate, a slow group) or a shift towards "
                "cheaper tokens (more cache hits, less output)."
            ),
        ),
        Alert(
            name="NvlfleetServingNotReady",
            signal=f'{metric_names.SERVING_CONDITION}{{condition="{reasons.READY}"}}',
            condition="== 0",
            for_="45m",
            severity="critical",
            summary=f"DeepSeekServing {_SERVING} has not been Ready for 45 minutes.",
            description=(
                "Longer than loading the weights of a 72-GPU group takes. "
                "`kubectl describe deepseekserving -n {{ $labels.namespace }} {{ $labels.serving }}` shows the "
                "conditions and events; the LeaderWorkerSets' pods show why a group does not start."
            ),
        ),
        Alert(
            name="NvlfleetGroupUnplaceable",
            signal=f'{metric_names.SERVING_CONDITION}{{condition="{reasons.PLACED}"}}',
            condition="== 0",
            for_="10m",
            severity="warning",
            summary=f"Groups of {_SERVING} fit in no NVLink domain.",
            description=(
                "No NVLink domain has enough free nodes for a whole group, and groups never span domains. "
                "The serving's Placed condition names the largest free block; free nodes (drain, repair) or "
                "shrink the group (spec.roles.*.parallelism)."
            ),
        ),
        Alert(
            name="NvlfleetAutoscalingPinnedAtMax",
            signal=f'{metric_names.GROUPS_DESIRED}{{role="decode"}}',
            condition=f">= on(namespace, serving) {metric_names.AUTOSCALING_MAX_GROUPS}",
            for_="15m",
            severity="warning",
            summary=f"{_SERVING} has asked for its maxGroups ({{{{ $value }}}}) decode groups for 15 minutes.",
            description=(
                "The autoscaler's signal is still above its target at the ceiling: requests queue or the KV cache "
                "stays full. Raise spec.autoscaling.maxGroups if the fleet has room, or check the target."
            ),
        ),
        Alert(
            name="NvlfleetAutoscalingBlockedByCapacity",
            signal=f'{metric_names.SERVING_CONDITION}{{condition="{reasons.INSUFFICIENT_CAPACITY}"}}',
            condition=f"== 1 and on(namespace, serving) {metric_names.AUTOSCALING_MAX_GROUPS}",
            for_="15m",
            severity="warning",
            summary=f"Autoscaled {_SERVING} has not found room for the groups it asks for in 15 minutes.",
            description=(
                "The autoscaler asked for more groups than any NVLink domain has free nodes for; the groups that "
                "fit run, the HPA holds with ready < desired. The InsufficientCapacity condition says what is "
                "missing; free nodes or lower spec.autoscaling.maxGroups."
            ),
        ),
        Alert(
            name="NvlfleetTelemetryScrapeFailing",
            signal=f"sum by (namespace, serving, reason) (rate({metric_names.SCRAPE_ERRORS_TOTAL}[5m]))",
            condition="> 0",
            for_="15m",
            severity="warning",
            summary=f"The operator cannot scrape vLLM leaders of {_SERVING} ({{{{ $labels.reason }}}}).",
            description=(
                "Throughput, revenue and parity of the affected groups are missing (never zero-filled) while "
                "this lasts. Reasons: timeout, connection, http_status, too_large, parse, missing_metrics, "
                "invalid_value, internal."
            ),
        ),
        Alert(
            name="NvlfleetReconcileErrors",
            signal=f"sum by (namespace, serving, reason) (rate({metric_names.RECONCILE_ERRORS_TOTAL}[10m]))",
            condition="> 0",
            for_="15m",
            severity="warning",
            summary=f"Reconciling {_SERVING} keeps failing ({{{{ $labels.reason }}}}).",
            description="The operator retries with backoff; its log and the serving's events say what fails.",
        ),
    ]


def rule_file() -> dict[str, Any]:
    return {"groups": [{"name": GROUP_NAME, "rules": [a.rule() for a in all_alerts()]}]}


class _Dumper(yamltext.Dumper):
    """Multi-line expressions as literal blocks, long lines unfolded: the file reads like a hand-written one."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        if "\n" in data:
            return self.represent_scalar("tag:yaml.org,2002:str", data, style="|")
        return super().represent_str(data)


_Dumper.add_representer(str, _Dumper.represent_str)


def render() -> str:
    header = "# Generated by `make generated` from operator/nvlfleet/artifacts/alerts.py — edit that, not this file.\n"
    body = yamltext.dump(rule_file(), dumper=_Dumper, allow_unicode=True, width=1000)
    return header + body


def write(chart_dir: pathlib.Path) -> pathlib.Path:
    path = chart_dir / RULE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(), encoding="utf-8")
    return path
