"""requirements/runtime.lock, the operator image's exact dependencies, still satisfies pyproject.toml.

The Dockerfile installs the lock with --no-deps and then runs `pip check`; this catches the drift earlier and
without a network: a dependency added to or re-ranged in pyproject.toml must be re-pinned (`make lock`).
"""

from __future__ import annotations

import pathlib
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = pathlib.Path(__file__).resolve().parents[2]


def pins() -> dict[str, Version]:
    found = {}
    for line in (REPO / "requirements" / "runtime.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = Version(version)
    return found


def test_every_runtime_dependency_is_pinned_within_its_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = pins()
    outside = {}
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        version = locked.get(canonicalize_name(requirement.name))
        if version is None or version not in requirement.specifier:
            outside[requirement.name] = (str(requirement.specifier), str(version))
    assert outside == {}, "run `make lock`"


def test_the_lock_pins_exact_versions_only() -> None:
    for line in (REPO / "requirements" / "runtime.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert line.count("==") == 1 and " " not in line, line
