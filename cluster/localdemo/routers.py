"""The demo's front doors: the real vllm-router binary for every router pod, run the way the kubelet would run it.

Part of the demo's data plane (``localdemo.agent`` calls ``Routers.sync`` on every pass, beside the simulated
vLLM leaders). For each Running router pod (the Deployment ``nvlfleet.core.router`` renders):

    pod's container args ──► vllm-router (the 0.1.17 wheel in .venv), listening where the pod would: its own
                             (loopback) pod IP on the ports its args give (--host/--port, and the exporter's
                             --prometheus-host/--prometheus-port); 127.0.0.1 on free ports when those are taken
    pod's ServiceAccount ──► a TokenRequest token bound to the pod (not admin credentials) in a kubeconfig of its
                             own: the router's Kubernetes discovery watches pods with exactly the Role rendered for it

Everything else is the pod's own command line: discovery in the serving's namespace over its selectors, on the
engines' port. kwok gives every pod a loopback IP and the agent serves each leader's simulated vLLM on exactly
``podIP:port``, so the URLs the router discovers (``http://<podIP>:<port>``) are the simulated engines. The router
listens on its own pod IP in the same way (kwok's pod IPs are loopback addresses, 127.x, so nothing is reachable
from off this machine). Pod IPs are per cluster, and two local clusters on one machine (the shared one and a
test's own) can hand out the same one; when the pod's address and port are already taken, the router listens on
127.0.0.1 on free ports instead, and says so in the agent's log and in ``routers.json`` (``bound``). Nothing the
demo starts binds a Service address: a client reaches the router by the URL in ``routers.json``.

Each process's PID, executable, argv, URLs and serving are recorded in ``<root>/routers.json``; a router whose pod
is gone, or whose args changed, is stopped by that PID (``localcluster.processes``: only while the PID still runs
that executable), and ``make demo-down`` stops any the agent left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import pathlib
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

import localprometheus
import yaml
from kubernetes import client
from localcluster import processes

from nvlfleet.api import names
from nvlfleet.facts import vllm_router

log = logging.getLogger("localdemo.routers")

SELECTOR = f"{names.COMPONENT_LABEL}={names.ROUTER_COMPONENT}"
BINARY = pathlib.Path(sys.executable).with_name("vllm-router")  # installed by the [dev] extras
# A router is known by its executable, not its argv: a few seconds after start it retitles itself "vllm::router"
# (its /proc/<pid>/cmdline changes), while /proc/<pid>/exe stays the Python that runs the launcher.
EXE = pathlib.Path(os.path.realpath(sys.executable))
LOOPBACK = "127.0.0.1"
TOKEN_SECONDS = 24 * 3600  # a demo day; the token dies with its pod anyway (bound to it)
STATE_FILE = "routers.json"
# The flags whose values the demo replaces: where the router listens and where its exporter listens.
_LOCAL_FLAGS = ("--host", "--port", "--prometheus-host", "--prometheus-port")


@dataclasses.dataclass(frozen=True)
class RouterPod:
    """A Running router pod as the cluster shows it."""

    namespace: str
    serving: str
    pod: str
    uid: str
    service_account: str
    args: tuple[str, ...]
    ip: str | None = None  # status.podIP


@dataclasses.dataclass
class Running:
    """One router process the agent started, as recorded in ``routers.json``."""

    pod: RouterPod
    pid: int
    argv: list[str]
    url: str
    metrics_url: str
    bound: str = "127.0.0.1"  # where it listens: "pod IP", or why not

    def record(self) -> dict[str, Any]:
        return {
            "namespace": self.pod.namespace,
            "serving": self.pod.serving,
            "pod": self.pod.pod,
            "pid": self.pid,
            "exe": str(EXE),
            "argv": self.argv,
            "url": self.url,
            "metricsUrl": self.metrics_url,
            "bound": self.bound,
        }


def local_args(args: Sequence[str], port: int, metrics_port: int, host: str = LOOPBACK) -> list[str]:
    """The pod's router args with where it listens replaced by ``host`` (127.0.0.1) and the given ports."""
    values = {
        "--host": host,
        "--port": str(port),
        "--prometheus-host": host,
        "--prometheus-port": str(metrics_port),
    }
    out = list(args)
    for flag in _LOCAL_FLAGS:
        if flag in out and out.index(flag) + 1 < len(out):
            out[out.index(flag) + 1] = values[flag]
        else:
            out += [flag, values[flag]]
    return out


def router_pod(pod: client.V1Pod) -> RouterPod:
    """What the demo needs of a router pod: whose it is, its ServiceAccount and its container's args."""
    (container,) = pod.spec.containers[:1]
    return RouterPod(
        namespace=pod.metadata.namespace,
        serving=(pod.metadata.labels or {}).get(names.SERVING_LABEL, ""),
        pod=pod.metadata.name,
        uid=pod.metadata.uid,
        service_account=pod.spec.service_account_name,
        args=tuple(container.args or ()),
        ip=pod.status.pod_ip if pod.status is not None else None,
    )


def pod_ports(args: Sequence[str]) -> tuple[int, int]:
    """The router's port and its exporter's, as the pod's args give them (the router's defaults otherwise)."""

    def value(flag: str, default: int) -> int:
        if flag in args and args.index(flag) + 1 < len(args):
            return int(args[args.index(flag) + 1])
        return default

    defaults = vllm_router.load().defaults
    return value("--port", int(defaults["--port"])), value("--prometheus-port", int(defaults["--prometheus-port"]))


def listen_address(
    pod: RouterPod, free: Callable[[str, int], bool], spare: Callable[[], int]
) -> tuple[str, int, int, str]:
    """Where the router of ``pod`` listens: (host, port, exporter port, how it was chosen). The pod's own IP and
    ports when it has a loopback IP and both are free; else 127.0.0.1 on ``spare()`` ports, with the reason."""
    port, metrics_port = pod_ports(pod.args)
    if pod.ip is None or not ipaddress.ip_address(pod.ip).is_loopback:
        why = f"127.0.0.1: the pod's IP {pod.ip or '(none yet)'} is not a loopback address this machine can bind"
    elif not (free(pod.ip, port) and free(pod.ip, metrics_port)):
        why = f"127.0.0.1: {pod.ip}:{port} or :{metrics_port} is taken (another local cluster's pod with this IP?)"
    else:
        return pod.ip, port, metrics_port, "pod IP"
    return LOOPBACK, spare(), spare(), why


def can_bind(host: str, port: int) -> bool:
    """Whether ``host:port`` is free to listen on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def router_env(kubeconfig: pathlib.Path) -> dict[str, str]:
    """The router's environment: the pod's own kubeconfig, no in-cluster variables, no API key to forward."""
    # The router's kube client reads KUBECONFIG; no in-cluster variables, so it cannot fall back to others.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(kubeconfig)
    env.pop("OPENAI_API_KEY", None)  # the router forwards it to the engines as a bearer token
    return env


def pod_kubeconfig(
    api: client.ApiClient, admin_kubeconfig: pathlib.Path, pod: RouterPod, directory: pathlib.Path
) -> pathlib.Path:
    """A kubeconfig presenting a token of the pod's own ServiceAccount, bound to the pod (TokenRequest API)."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=TOKEN_SECONDS,
            bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=pod.pod, uid=pod.uid),
        )
    )
    core = client.CoreV1Api(api)
    token = core.create_namespaced_service_account_token(pod.service_account, pod.namespace, request).status.token
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    user = f"system:serviceaccount:{pod.namespace}:{pod.service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {k: cluster[k] for k in ("server", "certificate-authority")}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user, "namespace": pod.namespace}}],
        "current-context": user,
    }
    path = directory / f"{pod.pod}.kubeconfig"
    directory.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def read_state(root: pathlib.Path) -> list[dict[str, Any]]:
    """The routers recorded under ``root`` (none if the file is absent or unreadable)."""
    try:
        found = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return []
    return list(found) if isinstance(found, list) else []


def stop_recorded(root: pathlib.Path) -> list[str]:
    """Stop every router recorded under ``root`` by its PID (a PID running something else is left alone)."""
    stopped = []
    for entry in read_state(root):
        pid, exe = entry.get("pid"), pathlib.Path(entry.get("exe") or EXE)
        if processes.alive(pid, exe):
            processes.stop(pid, exe, timeout=10.0)
            stopped.append(f"vllm-router for {entry.get('serving')} (pid {pid})")
    (root / STATE_FILE).unlink(missing_ok=True)
    return stopped


class Routers:
    """The router processes of one namespace, kept in step with its router pods."""

    def __init__(self, api: client.ApiClient, admin_kubeconfig: pathlib.Path, namespace: str, root: pathlib.Path):
        self.api, self.admin_kubeconfig, self.namespace = api, admin_kubeconfig, namespace
        self.root = root / "routers"
        self.state_file = root / STATE_FILE
        self.running: dict[str, Running] = {}
        # Routers a previous agent started and recorded are ours to stop: a new agent starts fresh ones.
        stop_recorded(root)

    def pods(self) -> list[RouterPod]:
        listed = client.CoreV1Api(self.api).list_namespaced_pod(self.namespace, label_selector=SELECTOR).items
        running = [p for p in listed if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        return [router_pod(p) for p in running]

    def sync(self) -> None:
        """Start a router for each new router pod; stop those whose pod went away or changed."""
        wanted = {p.pod: p for p in self.pods()}
        for name in list(self.running):
            current = self.running[name]
            if wanted.get(name) != current.pod or not processes.alive(current.pid, EXE):
                self._stop(name)
        for name, pod in wanted.items():
            if name not in self.running:
                with contextlib.suppress(client.ApiException):  # the ServiceAccount or pod not there yet
                    self.running[name] = self._start(pod)
        self._write_state()

    def close(self) -> None:
        for name in list(self.running):
            self._stop(name)
        self._write_state()

    def _stop(self, name: str) -> None:
        gone = self.running.pop(name)
        processes.stop(gone.pid, EXE, timeout=10.0)
        log.info("router pod %s gone or changed: stopped vllm-router pid %d", name, gone.pid)

    def _start(self, pod: RouterPod) -> Running:
        kubeconfig = pod_kubeconfig(self.api, self.admin_kubeconfig, pod, self.root)
        host, port, metrics_port, bound = listen_address(pod, can_bind, localprometheus.free_port)
        argv = [sys.executable, str(BINARY), *local_args(pod.args, port, metrics_port, host)]
        env = router_env(kubeconfig)
        process = processes.start(
            argv, self.root / f"{pod.pod}.log", self.root / f"{pod.pod}.pid", cwd=self.root, env=env
        )
        running = Running(pod, process.pid, argv, f"http://{host}:{port}", f"http://{host}:{metrics_port}", bound)
        log.info(
            "router pod %s (%s, ServiceAccount %s): vllm-router pid %d on %s (%s)",
            pod.pod,
            pod.serving,
            pod.service_account,
            process.pid,
            running.url,
            bound,
        )
        return running

    def _write_state(self) -> None:
        text = json.dumps([r.record() for _, r in sorted(self.running.items())], indent=1) + "\n"
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.state_file)

    def targets(self) -> list[dict[str, Any]]:
        """Prometheus file_sd entries for the routers' exporters, labelled like the engines' targets."""
        return [
            {
                "targets": [r.metrics_url.removeprefix("http://")],
                "labels": {"namespace": r.pod.namespace, "serving": r.pod.serving, "pod": r.pod.pod},
            }
            for _, r in sorted(self.running.items())
        ]
