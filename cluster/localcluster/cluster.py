"""Bringing the local cluster up, reporting on it and taking it down: the public API of localcluster.

The local-cluster data flow: versions → binaries (cache/PATH/build) → PKI + kubeconfigs → processes (etcd,
kube-apiserver, CRDs/webhooks, controller-manager, scheduler, kwok, LWS) → fleet (kwok nodes).

`up()` is idempotent: components whose recorded PID still runs the expected binary and answer their health
check are kept; the rest are (re)started on their recorded ports. A cluster built from other versions is
replaced. State lives in $NVLFLEET_CLUSTER_DIR/state.json plus one PID file per component; `down()` stops by
those PIDs only and removes the state (logs are kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import shutil
import socket
import time
from collections.abc import Iterator

from localcluster import binaries, components, errors, paths, processes, versions

_STATE = "state.json"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A running cluster, as `up()` and `status()` report it."""

    layout: components.Layout
    pids: dict[str, int]

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.layout.admin_kubeconfig

    @property
    def ports(self) -> dict[str, int]:
        return dict(self.layout.ports)

    @property
    def server(self) -> str:
        return self.layout.server

    @property
    def kubectl(self) -> pathlib.Path:
        return binaries.kubectl()

    @property
    def helm(self) -> pathlib.Path:
        return binaries.helm()


def up(progress: binaries.Progress = binaries.say, *, node_grace_seconds: int | None = None) -> Cluster:
    """Start (or reuse, when healthy and started the same way) the cluster in ``paths.cluster_dir()``.

    ``node_grace_seconds``: how long the node lifecycle controller waits for a node's heartbeat (None: the default,
    50 s). Thousands of simulated kubelets renew their Leases through kwok on the same cores as the control plane,
    so a saturated machine delays heartbeats a real node would send on its own CPU: a benchmark that saturates
    the machine on purpose waits longer, or its nodes flap NotReady and every pod on them with it."""
    root = paths.cluster_dir()
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root):
        state = _load_state(root)
        if state and state.get("versions") != versions.summary():
            progress("cluster was built from other versions: replacing it")
            _stop_all(root, state)
            _wipe(root)
            state = {}
        recorded = _layout(root, state) if state else None
        if recorded and recorded.node_grace_seconds == node_grace_seconds and _all_healthy(recorded):
            progress(f"reusing the healthy cluster in {root}")
            return Cluster(recorded, _recorded_pids(root))
        found = binaries.ensure_all(progress)
        if recorded:
            _stop_moved(recorded, found)
        ports = state.get("ports") or _pick_ports()
        layout = components.Layout(root, ports, found, node_grace_seconds)
        _save_state(root, layout)
        _prepare_files(layout)
        started = time.monotonic()
        for component in components.STORAGE_AND_API:
            _ensure_running(layout, component, progress)
            _wait_healthy(layout, [component])
        from localcluster import manifests  # needs PyYAML, which only `up` requires

        manifests.install(layout)
        restarted = [c for c in components.CONTROLLERS if _ensure_running(layout, c, progress)]
        _wait_healthy(layout, restarted)
        progress(f"cluster ready in {time.monotonic() - started:.1f}s ({layout.server})")
        return Cluster(layout, _recorded_pids(root))


def status() -> tuple[Cluster | None, dict[str, bool]]:
    """The recorded cluster (None if there is none) and each component's health."""
    root = paths.cluster_dir()
    state = _load_state(root)
    if not state:
        return None, {}
    layout = _layout(root, state)
    pids = _recorded_pids(root)
    health = {
        c.name: processes.alive(pids.get(c.name), layout.binaries[c.name]) and c.healthy(layout) for c in components.ALL
    }
    return Cluster(layout, pids), health


def down(progress: binaries.Progress = binaries.say) -> list[str]:
    """Stop every recorded component; returns the names of those that were still running."""
    root = paths.cluster_dir()
    if not root.exists():
        return []
    from localcluster import kueue

    with _lock(root):
        state = _load_state(root)
        # An on-demand Kueue first, while the API server still answers (its webhook configurations go with it).
        stopped = [kueue.NAME] if kueue.stop(root, _layout(root, state) if state else None) else []
        if state:
            from localcluster import keda

            stopped += keda.stop(_layout(root, state))  # opt-in, but stopped with the cluster it runs on
        stopped += _stop_all(root, state)
        _wipe(root)
    for name in stopped:
        progress(f"stopped {name}")
    return stopped


def restart(
    name: str, *, kill: bool = False, down_seconds: float = 0.0, progress: binaries.Progress = binaries.say
) -> float:
    """Stop one component by its recorded PID (SIGTERM, or SIGKILL with `kill`: a crash), leave it down for
    `down_seconds`, start it again on its recorded ports and wait until it is healthy; returns the seconds from
    the stop to healthy again. For fault tests: every other component keeps running as it was."""
    root = paths.cluster_dir()
    with _lock(root):
        state = _load_state(root)
        if not state:
            raise errors.ComponentError(name, "no cluster is recorded here", root)
        layout = _layout(root, state)
        component = next((c for c in components.ALL if c.name == name), None)
        if component is None:
            raise errors.ComponentError(name, f"not a component (one of {', '.join(c.name for c in components.ALL)})")
        binary = layout.binaries[name]
        pid = processes.read_pid(layout.pid_file(name))
        stopped = time.monotonic()
        processes.stop(pid, binary, kill=kill)
        time.sleep(down_seconds)
        _ensure_running(layout, component, progress)
        _wait_healthy(layout, [component])
        return time.monotonic() - stopped


def keda_up(progress: binaries.Progress = binaries.say) -> dict[str, int]:
    """KEDA on the running cluster (``localcluster.keda``); returns its ports."""
    from localcluster import keda

    root = paths.cluster_dir()
    with _lock(root):
        state = _load_state(root)
        if not state or not _all_healthy(_layout(root, state)):
            raise errors.ComponentError("keda", "the cluster is not running (python -m localcluster up)", root)
        return keda.up(_layout(root, state), progress)


def keda_crds() -> list[str]:
    """Only KEDA's CRDs on the running cluster (the ScaledObject API, without KEDA's processes)."""
    from localcluster import keda

    root = paths.cluster_dir()
    with _lock(root):
        state = _load_state(root)
        if not state:
            raise errors.ComponentError("keda", "the cluster is not running (python -m localcluster up)", root)
        return keda.install_crds(_layout(root, state))


def keda_down() -> list[str]:
    from localcluster import keda

    root = paths.cluster_dir()
    with _lock(root):
        state = _load_state(root)
        return keda.down(_layout(root, state)) if state else []


def default_kubeconfig() -> pathlib.Path:
    return paths.cluster_dir() / "kubeconfig"


# --- state -----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _lock(root: pathlib.Path) -> Iterator[None]:
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _load_state(root: pathlib.Path) -> dict[str, object]:
    try:
        data = json.loads((root / _STATE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(root: pathlib.Path, layout: components.Layout) -> None:
    state = {
        "versions": versions.summary(),
        "ports": layout.ports,
        "binaries": {name: str(path) for name, path in layout.binaries.items()},
        "kubeconfig": str(layout.admin_kubeconfig),
        "server": layout.server,
        "node_grace_seconds": layout.node_grace_seconds,
    }
    tmp = root / (_STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(root / _STATE)


def _layout(root: pathlib.Path, state: dict[str, object]) -> components.Layout:
    ports = state.get("ports")
    recorded = state.get("binaries")
    assert isinstance(ports, dict) and isinstance(recorded, dict)
    grace = state.get("node_grace_seconds")
    return components.Layout(
        root, dict(ports), {k: pathlib.Path(v) for k, v in recorded.items()}, grace if isinstance(grace, int) else None
    )


def _recorded_pids(root: pathlib.Path) -> dict[str, int]:
    pids = {}
    for component in components.ALL:
        pid = processes.read_pid(root / "pids" / f"{component.name}.pid")
        if pid is not None:
            pids[component.name] = pid
    return pids


def _wipe(root: pathlib.Path) -> None:
    """Remove everything but the logs (kept for a post-mortem) and the lock file."""
    for entry in root.iterdir():
        if entry.name in {"logs", ".lock"}:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


# --- ports -----------------------------------------------------------------------------------------------


def _pick_ports() -> dict[str, int]:
    """A free 127.0.0.1 port per port name; NVLFLEET_PORT_<NAME> (e.g. NVLFLEET_PORT_KUBE_APISERVER) pins one."""
    ports: dict[str, int] = {}
    held = []
    try:
        for name in components.PORT_NAMES:
            pinned = os.environ.get("NVLFLEET_PORT_" + name.upper().replace("-", "_"))
            if pinned:
                ports[name] = int(pinned)
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            held.append(sock)  # keep it bound until all are picked, so no two names get the same port
            ports[name] = sock.getsockname()[1]
    finally:
        for sock in held:
            sock.close()
    return ports


def _port_freed(port: int, wait: float = 5.0) -> bool:
    """Whether ``port`` is free within ``wait`` seconds: a process just stopped (a flag changed) can be gone from
    the process table a moment before the kernel has closed its listening socket."""
    deadline = time.monotonic() + wait
    while not _port_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the Go servers do: TIME_WAIT is fine
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --- processes -------------------------------------------------------------------------------------------


def _prepare_files(layout: components.Layout) -> None:
    from localcluster import credentials, pki

    pki.ensure(layout.pki, components.SERVICE_IP)
    credentials.client_cert_kubeconfig(layout.admin_kubeconfig, layout.server, layout.pki, "admin")
    for identity in pki.CLIENTS:
        credentials.client_cert_kubeconfig(layout.kubeconfig(identity.name), layout.server, layout.pki, identity.name)
    layout.config.mkdir(parents=True, exist_ok=True)
    data = pathlib.Path(__file__).with_name("data")
    shutil.copyfile(data / components.KWOK_STAGES, layout.config / "kwok.yaml")
    shutil.copyfile(data / components.AUDIT_POLICY, layout.config / components.AUDIT_POLICY)
    (layout.config / "lws.yaml").write_text(components.lws_config(layout) + "\n")
    certs = layout.root / "lws-certs"
    certs.mkdir(exist_ok=True)
    shutil.copyfile(layout.pki / "lws-webhook.crt", certs / "tls.crt")
    shutil.copyfile(layout.pki / "lws-webhook.key", certs / "tls.key")


def _ensure_running(layout: components.Layout, component: components.Component, progress: binaries.Progress) -> bool:
    """Start `component` unless its recorded process is alive, healthy and runs today's command line; True if
    it was (re)started. Comparing command lines lets `up` converge after a flag changes in components.py."""
    binary = layout.binaries[component.name]
    pid_file = layout.pid_file(component.name)
    pid = processes.read_pid(pid_file)
    if processes.alive(pid, binary):
        if _runs_current_argv(layout, component) and component.healthy(layout):
            return False
        processes.stop(pid, binary)
    log = layout.log(component.name)
    for port_name in component.ports:
        port = layout.ports[port_name]
        if not _port_freed(port):
            raise errors.ComponentError(component.name, f"port 127.0.0.1:{port} ({port_name}) is in use", log)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # each component gets its own --kubeconfig
    processes.start(component.argv(layout), log, pid_file, cwd=layout.root, env=env)
    progress(f"started {component.name} (log: {log})")
    return True


def _runs_current_argv(layout: components.Layout, component: components.Component) -> bool:
    pid = processes.read_pid(layout.pid_file(component.name))
    return pid is not None and processes.command_line(pid) == component.argv(layout)


def _wait_healthy(layout: components.Layout, waiting: list[components.Component]) -> None:
    pending = list(waiting)
    started = time.monotonic()
    while pending:
        for component in list(pending):
            binary = layout.binaries[component.name]
            pid = processes.read_pid(layout.pid_file(component.name))
            log = layout.log(component.name)
            if not processes.alive(pid, binary):
                last = processes.last_lines(log)
                raise errors.ComponentError(component.name, f"exited during startup: {last[-300:]}", log)
            if component.healthy(layout):
                pending.remove(component)
            elif time.monotonic() - started > component.startup_timeout:
                raise errors.ComponentError(component.name, f"not healthy after {component.startup_timeout:.0f}s", log)
        if pending:
            time.sleep(0.25)


def _stop_moved(recorded: components.Layout, found: dict[str, pathlib.Path]) -> None:
    """Stop components still running a binary other than the one we are about to start (e.g. a moved cache)."""
    pids = _recorded_pids(recorded.root)
    for component in components.ALL:
        old = recorded.binaries.get(component.name)
        if old is not None and old != found.get(component.name):
            processes.stop(pids.get(component.name), old)


def _all_healthy(layout: components.Layout) -> bool:
    pids = _recorded_pids(layout.root)
    return all(
        processes.alive(pids.get(c.name), layout.binaries[c.name])
        and _runs_current_argv(layout, c)
        and c.healthy(layout)
        for c in components.ALL
    )


def _stop_all(root: pathlib.Path, state: dict[str, object]) -> list[str]:
    if not state:
        return []
    layout = _layout(root, state)
    pids = _recorded_pids(root)
    stopped = []
    for component in reversed(components.ALL):
        binary = layout.binaries.get(component.name)
        pid = pids.get(component.name)
        if binary is not None and processes.alive(pid, binary):
            processes.stop(pid, binary)
            stopped.append(component.name)
    still = [c.name for c in components.ALL if processes.alive(pids.get(c.name), layout.binaries[c.name])]
    if still:
        raise errors.ComponentError(", ".join(still), "still running after SIGKILL", root / "pids")
    return stopped
