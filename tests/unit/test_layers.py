"""The layers stay one-directional: the pure core imports neither kopf, the Kubernetes client nor the adapters.

pyproject.toml's import-linter contract is the single list of pure modules and forbidden imports. This test reads
it and checks it with ``ast`` (following imports inside nvlfleet, including imports inside functions), and also
runs ``lint-imports`` itself, so a broken contract cannot pass silently.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys
import tomllib
from functools import cache

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "nvlfleet"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CONTRACT = PYPROJECT["tool"]["importlinter"]["contracts"][0]
PURE: list[str] = CONTRACT["source_modules"]
FORBIDDEN: list[str] = CONTRACT["forbidden_modules"]
# Calls that would make a pure function depend on the clock or on chance.
IMPURE_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today"), ("time", "time")}


def module_file(module: str) -> pathlib.Path:
    relative = pathlib.Path(*module.split(".")[1:])
    package = PACKAGE / relative / "__init__.py"
    return package if package.is_file() else PACKAGE / f"{relative}.py"


def imports_in(source: str) -> set[str]:
    """Modules a source imports, anywhere in it (imports inside functions count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "nvlfleet":  # `from nvlfleet import models` imports the module nvlfleet.models
                found.update(f"nvlfleet.{alias.name}" for alias in node.names)
    return found


@cache
def direct_imports(module: str) -> frozenset[str]:
    return frozenset(imports_in(module_file(module).read_text()))


def transitive_imports(module: str) -> dict[str, str]:
    """Every module imported by ``module`` directly or through nvlfleet modules, with the importer."""
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        for imported in direct_imports(current):
            if imported in seen:
                continue
            seen[imported] = current
            if imported.startswith("nvlfleet.") and module_file(imported).is_file():
                todo.append(imported)
    return seen


def test_the_contract_lists_the_same_pure_core_as_mypy_strict() -> None:
    strict = next(o["module"] for o in PYPROJECT["tool"]["mypy"]["overrides"] if o.get("strict"))
    assert set(PURE) == set(strict)


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_nothing_forbidden(module: str) -> None:
    assert module_file(module).is_file(), f"{module} is in the contract but does not exist"
    imports = transitive_imports(module)
    bad = {
        name: importer
        for name, importer in imports.items()
        if any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN)
    }
    assert bad == {}, f"{module} reaches forbidden modules (module: imported by): {bad}"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_not_read_the_clock(module: str) -> None:
    tree = ast.parse(module_file(module).read_text())
    calls = {
        (node.func.value.id, node.func.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
    }
    assert not calls & IMPURE_CALLS, calls & IMPURE_CALLS


def test_the_checker_sees_imports_inside_functions() -> None:
    """A checker that cannot fail proves nothing."""
    source = "import json\ndef f():\n    from kubernetes import client\n    import kopf\nfrom nvlfleet import kube\n"
    assert imports_in(source) == {"json", "kubernetes", "kopf", "nvlfleet", "nvlfleet.kube"}


def test_import_linter_contract_holds() -> None:
    lint_imports = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    assert lint_imports is not None, "lint-imports is a dev dependency (pip install -e '.[dev]')"
    result = subprocess.run(
        [lint_imports], cwd=REPO, capture_output=True, text=True, check=False, env={"PATH": "", "PYTHONPATH": ""}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout
