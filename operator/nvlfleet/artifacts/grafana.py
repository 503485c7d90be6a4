"""A small model of a Grafana dashboard (schema 39, Grafana 10.4+/11), just what nvlfleet's dashboards use, and its
JSON.

Part of the artifacts layer (pure: no cluster, no clock): ``artifacts.dashboards`` builds nvlfleet's three
dashboards out of these pieces (rows of panels of PromQL queries, template variables) and ``to_json`` turns each
into the JSON the Helm chart ships. Layout is computed here (panels tile a 24-column grid, row by row), so a
dashboard definition says only what to chart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39


@dataclasses.dataclass(frozen=True)
class Query:
    expr: str
    legend: str = "__auto"
    instant: bool = False


@dataclasses.dataclass(frozen=True)
class Panel:
    """A panel; ``width`` is in Grafana's 24-column grid, rows wrap automatically."""

    title: str
    queries: Sequence[Query]
    kind: str = "timeseries"  # timeseries | stat | bargauge | table
    unit: str = "short"
    description: str = ""
    width: int = 8
    height: int = 8
    stacked: bool = False
    decimals: int | None = None
    min: float | None = None
    max: float | None = None
    thresholds: Sequence[tuple[float | None, str]] = ((None, "green"),)


@dataclasses.dataclass(frozen=True)
class Row:
    title: str
    panels: Sequence[Panel]


@dataclasses.dataclass(frozen=True)
class Variable:
    """A query variable over label values; ``multi`` selections render as a regex (hence ``=~`` everywhere)."""

    name: str
    label: str
    query: str  # label_values(...)
    multi: bool = True


@dataclasses.dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: Sequence[Variable]
    rows: Sequence[Row]
    file_name: str


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in panel.thresholds],
        },
        "color": {"mode": "thresholds" if panel.kind in ("stat", "bargauge") else "palette-classic"},
    }
    for key in ("decimals", "min", "max"):
        if getattr(panel, key) is not None:
            defaults[key] = getattr(panel, key)
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 25 if panel.stacked else 10,
            "showPoints": "never",
            "spanNulls": False,  # a gap is a gap: no number beats a wrong number
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        }
    options: dict[str, Any] = {}
    if panel.kind == "timeseries":
        options = {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "mean", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    elif panel.kind == "bargauge":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "gradient",
            "showUnfilled": True,
        }
    elif panel.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm"}
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [
            {
                "datasource": DATASOURCE,
                "refId": chr(ord("A") + i),
                "expr": q.expr,
                "legendFormat": q.legend,
                "range": not q.instant,
                "instant": q.instant,
            }
            for i, q in enumerate(panel.queries)
        ],
    }
    if panel.kind == "table":
        body["transformations"] = [{"id": "merge", "options": {}}, {"id": "organize", "options": {}}]
        for target in body["targets"]:
            target["format"] = "table"
    return body


def _variable_json(variable: Variable) -> dict[str, Any]:
    return {
        "name": variable.name,
        "label": variable.label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": variable.query, "refId": f"{variable.name}-values"},
        "definition": variable.query,
        "refresh": 2,  # on time-range change: new servings appear without reloading the dashboard
        "sort": 1,
        "multi": variable.multi,
        "includeAll": variable.multi,
        "allValue": ".*" if variable.multi else None,
        "current": {},
        "hide": 0,
        "options": [],
    }


def to_json(dashboard: Dashboard) -> dict[str, Any]:
    """The Grafana JSON model of ``dashboard`` (deterministic: same code, same bytes)."""
    panels: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for row in dashboard.rows:
        panels.append(
            {"id": panel_id, "type": "row", "title": row.title, "collapsed": False, "panels": [],
             "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}
        )  # fmt: skip
        panel_id, y = panel_id + 1, y + 1
        x, row_height = 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel_json(panel, panel_id, x, y))
            panel_id, x, row_height = panel_id + 1, x + panel.width, max(row_height, panel.height)
        y += row_height
    datasource_variable = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["nvlfleet"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "utc",  # price windows are UTC
        "links": [
            {
                "type": "dashboards",
                "tags": ["nvlfleet"],
                "asDropdown": True,
                "title": "nvlfleet",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": [datasource_variable, *(_variable_json(v) for v in dashboard.variables)]},
        "panels": panels,
    }
