"""The layers stay one-directional: each subpackage of nvlfleet imports only the layers below it, and the pure
layers import neither kopf, the Kubernetes client, the network, the clock, prometheus-client nor the adapters.

pyproject.toml's import-linter contracts are the single statement of the layers and of the forbidden imports.
This test reads them and checks them again with ``ast`` (following imports inside nvlfleet, including imports
inside functions), and also runs ``lint-imports`` itself, so a broken contract cannot pass silently.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterable
from functools import cache

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "nvlfleet"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CONTRACTS: list[dict] = PYPROJECT["tool"]["importlinter"]["contracts"]
LAYERS_CONTRACT = next(c for c in CONTRACTS if c["type"] == "layers")
FORBIDDEN_CONTRACT = next(c for c in CONTRACTS if c["type"] == "forbidden")
PURE_LAYERS: list[str] = FORBIDDEN_CONTRACT["source_modules"]
FORBIDDEN: list[str] = FORBIDDEN_CONTRACT["forbidden_modules"]
# Top to bottom; each layer a list of independent siblings ("a | b"), as nvlfleet.<name>.
LAYERS: list[list[str]] = [
    [f"nvlfleet.{name.strip()}" for name in layer.split("|")] for layer in LAYERS_CONTRACT["layers"]
]
# Calls that would make a pure function depend on the clock or on chance.
IMPURE_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today"), ("time", "time")}


def module_file(module: str) -> pathlib.Path:
    relative = pathlib.Path(*module.split(".")[1:])
    package = PACKAGE / relative / "__init__.py"
    return package if package.is_file() else PACKAGE / f"{relative}.py"


def is_module(module: str) -> bool:
    return module.split(".")[0] == "nvlfleet" and module_file(module).is_file()


def modules_in(package: str) -> list[str]:
    """``package`` and every module under it, as dotted names."""
    root = module_file(package)
    if root.name != "__init__.py":
        return [package]
    return sorted(
        ".".join(["nvlfleet", *path.relative_to(PACKAGE).with_suffix("").parts]).removesuffix(".__init__")
        for path in root.parent.rglob("*.py")
    )


def imports_in(source: str) -> set[str]:
    """Modules a source imports, anywhere in it (imports inside functions count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module.split(".")[0] == "nvlfleet":  # `from nvlfleet.api import models` imports a module
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@cache
def direct_imports(module: str) -> frozenset[str]:
    """What an nvlfleet module imports; nothing for a name that is no module (``nvlfleet.__version__``)."""
    return frozenset(imports_in(module_file(module).read_text())) if is_module(module) else frozenset()


def transitive_imports(module: str, imports_of: Callable[[str], Iterable[str]] = direct_imports) -> dict[str, str]:
    """Every module imported by ``module`` directly or through nvlfleet modules, with the importer."""
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        for imported in imports_of(current):
            if imported in seen:
                continue
            seen[imported] = current
            if imported.startswith("nvlfleet."):
                todo.append(imported)
    return seen


def forbidden_reached(module: str, imports_of: Callable[[str], Iterable[str]] = direct_imports) -> dict[str, str]:
    return {
        name: importer
        for name, importer in transitive_imports(module, imports_of).items()
        if any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN)
    }


def layer_of(module: str) -> tuple[int, str] | None:
    """(index from the top, subpackage) of an nvlfleet module; None for the root package itself."""
    for index, siblings in enumerate(LAYERS):
        for sibling in siblings:
            if module == sibling or module.startswith(f"{sibling}."):
                return index, sibling
    return None


PURE_MODULES = [m for layer in PURE_LAYERS for m in modules_in(layer)]
ALL_MODULES = [m for layer in LAYERS for sibling in layer for m in modules_in(sibling)]


def test_every_module_of_the_package_sits_in_a_layer() -> None:
    on_disk = {
        ".".join(["nvlfleet", *p.relative_to(PACKAGE).with_suffix("").parts]).removesuffix(".__init__")
        for p in PACKAGE.rglob("*.py")
    }
    assert on_disk - {"nvlfleet"} == set(ALL_MODULES)
    assert LAYERS_CONTRACT.get("exhaustive") is True


def test_the_pure_layers_are_strictly_typed() -> None:
    strict = {m for o in PYPROJECT["tool"]["mypy"]["overrides"] if o.get("strict") for m in o["module"]}
    assert {f"{layer}.*" for layer in PURE_LAYERS} <= strict


@pytest.mark.parametrize("module", ALL_MODULES)
def test_modules_import_only_their_own_layer_or_the_layers_below(module: str) -> None:
    own = layer_of(module)
    assert own is not None
    bad = {}
    for imported in direct_imports(module):
        target = layer_of(imported) if is_module(imported) else None
        if target is None or target[1] == own[1]:
            continue
        if target[0] <= own[0]:  # above, or an independent sibling
            bad[imported] = target[1]
    assert bad == {}, f"{module} imports outside the layers below it (module: its layer): {bad}"


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_import_nothing_forbidden(module: str) -> None:
    assert module_file(module).is_file(), f"{module} is in the contract but does not exist"
    bad = forbidden_reached(module)
    assert bad == {}, f"{module} reaches forbidden modules (module: imported by): {bad}"


@pytest.mark.parametrize("module", PURE_MODULES)
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
    source = (
        "import json\ndef f():\n    from kubernetes import client\n    import kopf\nfrom nvlfleet.core import render\n"
    )
    assert imports_in(source) == {"json", "kubernetes", "kopf", "nvlfleet.core", "nvlfleet.core.render"}


def test_the_checker_fails_when_a_core_module_reaches_kopf() -> None:
    """A core module importing kopf, directly or through another nvlfleet module, is caught."""
    assert "nvlfleet.core" in PURE_LAYERS and "kopf" in FORBIDDEN
    graph = {
        "nvlfleet.core.render": ["json", "nvlfleet.api.models", "nvlfleet.core.planner"],
        "nvlfleet.core.planner": ["kopf"],
        "nvlfleet.api.models": ["pydantic"],
    }
    assert forbidden_reached("nvlfleet.core.render", lambda m: graph.get(m, [])) == {"kopf": "nvlfleet.core.planner"}


def test_import_linter_contract_holds() -> None:
    lint_imports = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    assert lint_imports is not None, "lint-imports is a dev dependency (pip install -e '.[dev]')"
    result = subprocess.run(
        [lint_imports], cwd=REPO, capture_output=True, text=True, check=False, env={"PATH": "", "PYTHONPATH": ""}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout
