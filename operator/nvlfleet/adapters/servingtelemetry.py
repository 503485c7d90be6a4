"""Each serving's telemetry, as the operator feeds it: where the scraper reads and what goes back into status.

Adapter, beside the reconcile pass (``adapters.operator``) on the telemetry flow:

    ready group leaders (kopf's GPU-pod and node indexes) → **scrape targets** → ``adapters.scraper`` (rates,
    economics, gauges) → summary → **status fields** (tokensPerSecond, revenuePerGpuHour, …) → status patch

Each pass points the scraper at the serving's ready leaders (``point``); on its own timer the operator copies the
scraper's summary into each serving's status (``write_status``), only when a field changed, so an idle fleet
whose figures hold writes nothing. A figure that cannot be computed is null (the field removed), never 0.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from nvlfleet.adapters import exporter, kube, scraper
from nvlfleet.api import models, names, problems
from nvlfleet.core import group_telemetry, health, inventory

log = logging.getLogger("nvlfleet")


class ServingTelemetry:
    """The scraper, and per serving the telemetry fields its status holds (to write only what changed)."""

    def __init__(self, metrics: exporter.OperatorMetrics) -> None:
        self.scraper = scraper.Scraper(metrics)
        self._written: dict[inventory.ServingKey, dict[str, Any]] = {}

    def point(
        self,
        key: inventory.ServingKey,
        serving: Mapping[str, Any],
        pods: Iterable[Mapping[str, Any]],
        node_labels: Callable[[object], Mapping[str, str]],
    ) -> None:
        """After a pass: scrape ``serving``'s ready group leaders among ``pods`` (vLLM's API port serves
        /metrics). The first time a serving is seen, what its status already says is taken as written, so a
        restart rewrites nothing that holds."""
        if key not in self._written:
            observed = serving.get("status") or {}
            self._written[key] = {field: observed.get(field) for field in status_fields(None)}
        try:
            parsed = models.DeepSeekServing.model_validate(dict(serving))
        except ValueError:
            return
        if not parsed.spec.monitoring.scrape:
            self.scraper.remove_serving(key.namespace, key.name)
            return
        targets = []
        for pod in pods:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if (meta.get("namespace"), labels.get(names.SERVING_LABEL)) != (key.namespace, key.name):
                continue
            leader = labels.get(names.LWS_WORKER_INDEX_LABEL) == "0"
            if not leader or not pod["status"].get("podIP") or not health.pod_ready(pod):
                continue
            role = labels.get(names.ROLE_LABEL, models.RoleName.DECODE.value)
            role_spec = parsed.spec.roles.prefill if role == models.RoleName.PREFILL.value else parsed.spec.roles.decode
            if role_spec is None:
                continue
            topology = models.role_topology(parsed.spec.gpu, role_spec)
            node = node_labels(pod["spec"].get("nodeName"))
            domain = node.get(parsed.spec.placement.domain_label) or pod["spec"].get("nodeName") or "unknown"
            url = f"http://{pod['status']['podIP']}:{_api_port(pod)}"
            targets.append(group_telemetry.Target(role=role, domain=domain, url=url, gpus=topology.gpus_per_group))
        try:
            self.scraper.set_serving(
                key.namespace,
                key.name,
                sorted(targets, key=lambda t: t.url),
                pricing=parsed.spec.pricing,
                parity_reference=parsed.spec.parity,
            )
        except problems.InvalidSpec as err:
            log.warning("telemetry for %s disabled: %s", key, err)

    def forget(self, key: inventory.ServingKey) -> None:
        self._written.pop(key, None)
        self.scraper.remove_serving(key.namespace, key.name)

    async def write_status(
        self, api: kube.Api, keys: Collection[inventory.ServingKey], may_write: Callable[[], bool]
    ) -> None:
        """Copy tokens/s and revenue into each of ``keys``' status, only when they changed."""
        for key in list(keys):
            fields = status_fields(self.scraper.summary(key.namespace, key.name))
            if fields == self._written.get(key) or not may_write():
                continue
            try:
                await asyncio.to_thread(api.patch_status, names.DEEPSEEK_SERVING, key.namespace, key.name, fields)
            except kube.ApiError as err:
                if not err.not_found:
                    log.warning("could not write telemetry status of %s: %s", key, err)
                continue
            self._written[key] = fields


def status_fields(summary: group_telemetry.GroupTelemetry | None) -> dict[str, Any]:
    """The status telemetry fields; a figure that cannot be computed is null (removed), never 0."""
    figures = summary.figures if summary is not None else None
    tokens = summary.tokens_per_second if summary is not None else None
    revenue = summary.revenue_per_hour if summary is not None else None

    def r(value: float | None) -> float | None:
        return None if value is None else float(f"{value:.4g}")

    measured = summary.measured_at if summary is not None else None
    return {
        "tokensPerSecond": r(tokens.total if tokens else None),
        "tokensPerSecondPerGpu": r(figures.tokens_per_second_per_gpu if figures else None),
        "revenuePerHour": r(revenue),
        "revenuePerGpuHour": r(figures.revenue_per_gpu_hour if figures else None),
        "parity": r(figures.parity if figures else None),
        "currency": figures.currency if figures else None,
        "metricsTime": (
            datetime.datetime.fromtimestamp(measured, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if measured is not None
            else None
        ),
    }


def _api_port(pod: Mapping[str, Any]) -> int:
    """The vLLM API server's port on a leader: its container port named http, else its first port, else 8000."""
    ports = [p for c in pod["spec"].get("containers") or [] for p in c.get("ports") or []]
    for port in ports:
        if port.get("name") == "http":
            return int(port["containerPort"])
    return int(ports[0]["containerPort"]) if ports else 8000
