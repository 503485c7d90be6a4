"""``nvlfleet dashboards --out CHART_DIR``: write the generated Grafana dashboards and Prometheus alerts.

Run by ``make generated`` (which also copies the generated CRD into the chart). Writes
``CHART_DIR/dashboards/*.json`` (``nvlfleet.artifacts.dashboards``) and ``CHART_DIR/files/nvlfleet.rules.yaml``
(``nvlfleet.artifacts.alerts``); the Helm chart turns them into sidecar ConfigMaps and a PrometheusRule, and a unit test
fails while the committed files differ from what this writes. Exit code 0, or 1 if CHART_DIR cannot be written.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from nvlfleet.artifacts import alerts, dashboards


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", required=True, type=pathlib.Path, metavar="CHART_DIR", help="the chart folder, e.g. charts/nvlfleet"
    )


def run(args: argparse.Namespace) -> int:
    try:
        written = [*dashboards.write(args.out), alerts.write(args.out)]
    except OSError as err:
        print(f"nvlfleet dashboards: cannot write to {args.out}: {err.strerror or err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
