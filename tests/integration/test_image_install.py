"""The operator image's install steps, run for real without a container engine.

No Docker (or any OCI builder) runs where these tests run, so instead of building the image this test executes
the Dockerfile's own build-stage RUN lines, unchanged, with the container's absolute paths mapped into a
temporary directory and a fresh virtualenv standing in for the base image's Python. What it proves: the pinned
lock installs from wheels alone, the operator wheel builds with the pinned backend, `pip check` passes, the
console script the ENTRYPOINT names starts, and the virtualenv holds the runtime and nothing else. What it
cannot prove: that the base image tag resolves, and anything about layers or the image filesystem.

Needs PyPI (it downloads the locked wheels), hence the integration marker.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import venv

import pytest

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
RUNTIME_LOCK = REPO / "requirements" / "runtime.lock"


@dataclasses.dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


@dataclasses.dataclass
class Dockerfile:
    args: dict[str, str]
    stages: dict[str, Stage]


def parse_dockerfile(text: str) -> Dockerfile:
    """Instructions per stage, continuation lines joined, comments dropped (enough for this one file)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            current = Stage(base=base.strip(), name=name.strip())
            stages[current.name] = current
        elif current is None and keyword == "ARG":
            key, _, default = rest.partition("=")
            args[key.strip()] = default.strip()
        else:
            assert current is not None, f"instruction before FROM: {line}"
            current.instructions.append((keyword, rest.strip()))
    return Dockerfile(args=args, stages=stages)


def env_pairs(arg: str) -> dict[str, str]:
    return dict(token.split("=", 1) for token in shlex.split(arg))


class Emulator:
    """Runs a stage's WORKDIR/ENV/COPY/RUN with the container's `/` mapped to ``root``."""

    def __init__(self, root: pathlib.Path, base_python_bin: pathlib.Path) -> None:
        self.root = root
        self.workdir = root
        root.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
        self.env["PATH"] = f"{base_python_bin}{os.pathsep}{self.env['PATH']}"

    def path(self, container_path: str) -> pathlib.Path:
        if container_path.startswith("/"):
            return self.root / container_path.lstrip("/")
        return self.workdir / container_path

    def map_value(self, value: str) -> str:
        """Absolute paths (also inside PATH-like lists) move under root; $VARS expand from the stage env."""
        expanded = re.sub(r"\$(\w+)", lambda m: self.env.get(m.group(1), ""), value)
        parts = expanded.split(os.pathsep)
        mapped = [str(self.path(p)) if p.startswith("/") and not p.startswith(str(self.root)) else p for p in parts]
        return os.pathsep.join(mapped)

    def run_stage(self, stage: Stage, *, skip_copy_from: bool = True) -> None:
        for keyword, arg in stage.instructions:
            if keyword == "WORKDIR":
                self.workdir = self.path(arg)
                self.workdir.mkdir(parents=True, exist_ok=True)
            elif keyword == "ENV":
                for key, value in env_pairs(arg).items():
                    self.env[key] = self.map_value(value)
            elif keyword == "COPY":
                if arg.startswith("--from="):
                    assert skip_copy_from
                    continue
                *sources, dest = shlex.split(arg)
                for source in sources:
                    self.copy(REPO / source, self.path(dest), into_dir=dest.endswith("/") or len(sources) > 1)
            elif keyword == "RUN":
                subprocess.run(["/bin/sh", "-c", arg], cwd=self.workdir, env=self.env, check=True)

    @staticmethod
    def copy(source: pathlib.Path, dest: pathlib.Path, *, into_dir: bool) -> None:
        target = dest / source.name if into_dir else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")  # as .dockerignore does
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy2(source, target)


def fresh_base_python(where: pathlib.Path) -> pathlib.Path:
    """A clean interpreter with pip only: the stand-in for the base image's /usr/local/bin/python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin"


def installed_distributions(python: pathlib.Path) -> dict[str, str]:
    script = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True).stdout
    return {canonical(name): version for name, version in json.loads(out).items()}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    pins = {}
    for line in RUNTIME_LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonical(name)] = version
    return pins


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, dockerfile: Dockerfile) -> Emulator:
    """The build stage, executed; returns the emulator holding the final ENV of the runtime stage too."""
    work = tmp_path_factory.mktemp("image")
    emulator = Emulator(work / "rootfs", fresh_base_python(work / "base-python"))
    emulator.run_stage(dockerfile.stages["build"])
    return emulator


def test_run_steps_name_container_paths_only_through_env_or_workdir(dockerfile: Dockerfile) -> None:
    # Otherwise this emulation would write to the real /opt of the machine running the tests.
    for stage in dockerfile.stages.values():
        for command in stage.all("RUN"):
            words = shlex.split(command)
            assert not [w for w in words if w.startswith("/") or "=/" in w], command


def test_both_stages_use_the_same_pinned_base_and_its_python_is_the_one_tested_here(dockerfile: Dockerfile) -> None:
    assert [s.base for s in dockerfile.stages.values()] == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    image = dockerfile.args["PYTHON_IMAGE"]
    match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-\w+", image)
    assert match, f"base image {image!r} is not pinned to a full Python version"
    # The wheels verified below are for this interpreter's ABI; the image must run the same minor version.
    assert (int(match[1]), int(match[2])) == sys.version_info[:2]


def test_the_image_runs_as_a_numeric_non_root_user_and_starts_the_operator(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.stages["runtime"]
    (user,) = runtime.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    assert runtime.all("ENTRYPOINT") == ['["nvlfleet", "run"]']
    assert runtime.all("COPY") == ["--from=build /opt/nvlfleet /opt/nvlfleet"]


def test_the_virtualenv_holds_exactly_the_locked_runtime_and_the_operator(built: Emulator) -> None:
    venv_python = pathlib.Path(built.env["VENV"]) / "bin" / "python"
    expected = {**locked(), "nvlfleet": _project_version()}
    assert installed_distributions(venv_python) == expected


def test_the_entrypoint_starts_from_the_runtime_path(built: Emulator, dockerfile: Dockerfile) -> None:
    runtime_env = dict(built.env)
    for arg in dockerfile.stages["runtime"].all("ENV"):
        for key, value in env_pairs(arg).items():
            runtime_env[key] = built.map_value(value)
    entrypoint = json.loads(dockerfile.stages["runtime"].all("ENTRYPOINT")[0])
    command = [shutil.which(entrypoint[0], path=runtime_env["PATH"]), *entrypoint[1:], "--help"]
    assert command[0] == str(pathlib.Path(built.env["VENV"]) / "bin" / "nvlfleet")
    result = subprocess.run(command, env=runtime_env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_runtime_stage_removes_the_base_images_installer(tmp_path: pathlib.Path, dockerfile: Dockerfile) -> None:
    base_bin = fresh_base_python(tmp_path / "base-python")
    emulator = Emulator(tmp_path / "rootfs", base_bin)
    emulator.run_stage(dockerfile.stages["runtime"])
    assert "pip" not in installed_distributions(base_bin / "python")


def _project_version() -> str:
    import tomllib

    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])
