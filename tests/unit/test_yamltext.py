"""YAML text for Go readers (``nvlfleet.api.yamltext``): strings kubectl would take for numbers, booleans or null
are quoted; every other string is written as PyYAML writes it. The real kubectl reading them back is in
tests/integration/test_render_cluster.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from nvlfleet import cli
from nvlfleet.api import names, yamltext
from nvlfleet.core import render
from support import fleetbuilder as fb
from support import servingbuilder as sb

# Plain, each of these is a number, a boolean or null to go-yaml v2, and all but the last five are strings to
# PyYAML (which therefore wrote them plain).
GO_NOT_STRINGS = ["12345e67", "09876543", "0o17", "1_0e5", "y", "N", ".5e3", "+.inf", "2026-12-05", "123", "true", "~"]
STRINGS = ["decode", "1Gi", "v41-flash", "2af52b49.24571", "e5", "1e", "12ab", "0x", "767ef970", "yes-no"]


@pytest.mark.parametrize("value", GO_NOT_STRINGS)
def test_a_string_a_go_reader_takes_for_a_number_boolean_or_null_is_quoted(value: str) -> None:
    text = yamltext.dump({"v": value})

    assert text == f"v: '{value}'\n"
    assert yaml.safe_load(text) == {"v": value}


@pytest.mark.parametrize("value", STRINGS)
def test_a_string_a_go_reader_keeps_as_a_string_is_written_as_pyyaml_writes_it(value: str) -> None:
    assert yamltext.dump({"v": value}) == yaml.safe_dump({"v": value}) == f"v: {value}\n"


def test_a_stream_keeps_key_order_and_separates_documents() -> None:
    text = yamltext.dump_all([{"b": 1, "a": "0o17"}, {"c": None}])

    assert text == "b: 1\na: '0o17'\n---\nc: null\n"


def test_render_command_quotes_a_domain_label_kubectl_would_read_as_a_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first clique id whose 8-digit hash kubectl reads as a float (digits, an unsigned exponent, in range).
    clique = next(
        f"cafe.{i}" for i in range(10_000) if re.fullmatch(r"[0-9]+e[0-9]{1,2}", render.short_hash(f"cafe.{i}"))
    )
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump(fb.node_list(fb.node(f"tray-{t}", labels={fb.CLIQUE_LABEL: clique}) for t in range(4)))
    )
    serving = tmp_path / "serving.yaml"
    serving.write_text(yaml.safe_dump(sb.serving_dict(tensor=1, nodes=2, groups=1)))

    assert cli.main(["render", "-f", str(serving), "--nodes", str(nodes)]) == 0

    out = capsys.readouterr().out
    assert f"{names.DOMAIN_LABEL}: '{render.short_hash(clique)}'\n" in out
