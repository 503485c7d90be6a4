"""validate, render and plan share one policy: over generated specs, what one accepts all accept (render renders it,
plan places it on a fleet it fits), and what one refuses all refuse, at the same field paths.

The specs come from ``support.specgen``; the commands run as a user runs them (``nvlfleet <command> -f FILE``),
and the field paths are read from what they print.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import tempfile

import yaml
from hypothesis import HealthCheck, given, settings

from nvlfleet import cli
from support import specgen

# A field path as the commands print it, between ": " and ": ".
_PATH = re.compile(r"(?<=: )((?:metadata|spec|apiVersion|kind)(?:[.\[][^\s:]*)?)(?=: )")
_TMP = tempfile.TemporaryDirectory(prefix="nvlfleet-agree-")  # removed when the test process exits
_DIR = pathlib.Path(_TMP.name)


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue() + err.getvalue()


def _refused_at(text: str, file: pathlib.Path) -> set[str]:
    return {m for line in text.splitlines() if str(file) in line for m in _PATH.findall(line)}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(specgen.specs())
def test_validate_render_and_plan_accept_and_refuse_the_same_specs_at_the_same_fields(obj: dict) -> None:
    file = _DIR / "serving.yaml"
    file.write_text(yaml.safe_dump(obj))
    nodes = _DIR / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(specgen.fleet(obj)))

    validated = _run("validate", "--no-warnings", "-f", str(file))
    rendered = _run("render", "--nodes", str(nodes), "-f", str(file))
    planned = _run("plan", "--nodes", str(nodes), "-f", str(file))

    if validated[0] == 0:
        assert (rendered[0], planned[0]) == (0, 0), (obj, rendered[1][-2000:], planned[1][-2000:])
    else:
        refused = _refused_at(validated[1], file)
        assert refused, validated[1]
        assert (rendered[0], _refused_at(rendered[1], file)) == (1, refused), (obj, validated[1], rendered[1])
        assert (planned[0], _refused_at(planned[1], file)) == (1, refused), (obj, validated[1], planned[1])
