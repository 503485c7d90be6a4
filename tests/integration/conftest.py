"""Fixtures for integration tests: the local real cluster, a namespace per test, simulated GPU fleets.

- `local_cluster` (session): brings the cluster up through localcluster's Python API, or reuses the running
  one (`make integration` starts it first), and puts the pinned kubectl and helm first on PATH with
  KUBECONFIG pointing at it, so subprocesses in tests use exactly those. A cluster that cannot start fails
  every integration test with the component and log file named; it is never skipped.
- `kubeconfig`, `api_client` (session): the admin kubeconfig path and a kubernetes ApiClient on it.
- `namespace`: a fresh namespace whose `default` ServiceAccount exists; deleted after the test.
- `module_namespace`, `module_fleet_factory`, `module_gb200_fleet`, `module_start_operator`, `module_cluster`: the
  same for a whole module, for tests that share one expensive setup (one operator and fleet) and each prove one
  behaviour of it.
- `wait_for`: `wait_for(predicate, timeout, what)` polls until the predicate is truthy, else fails the test.
- `fleet_factory`: `fleet_factory(racks=2, gpu="GB200", oddities=...)` adds kwok nodes shaped like NVL72
  trays under a fleet name unique to the test and removes them afterwards.
- `crd` (session): the DeepSeekServing CRD as `nvlfleet crd` prints it, applied and Established.
- `imex` (session), `gb200_fleet`: the IMEX-channel stand-in (localcluster.computedomains) and GB200 racks whose trays
  publish a channel each, so pods claiming a ComputeDomain's channel schedule as on a real GB200 cluster.
- `start_operator`: `nvlfleet run` for the test's namespace as a child process by PID (localcluster.operatorprocess).
- `cluster`: servings.Cluster on the test's namespace (builders and readers are in tests/support/servings.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import binaries, cluster, computedomains, errors, fleet
from localcluster.operatorprocess import REPO, OperatorProcess

from support import servings


@dataclasses.dataclass(frozen=True)
class LocalCluster:
    kubeconfig: pathlib.Path
    api_client: client.ApiClient
    kubectl: pathlib.Path
    helm: pathlib.Path
    ports: dict[str, int]


def _progress(message: str) -> None:
    # Straight to the terminal: pytest captures fixture output, and a cold build takes minutes.
    print(f"localcluster: {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    try:
        running = cluster.up(progress=_progress)
    except errors.ComponentError as error:
        pytest.fail(error.line(), pytrace=False)
    api = config.new_client_from_config(config_file=str(running.kubeconfig))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KUBECONFIG", str(running.kubeconfig))
        env.setenv("PATH", f"{binaries.path_dir()}{os.pathsep}{os.environ.get('PATH', '')}")
        yield LocalCluster(running.kubeconfig, api, running.kubectl, running.helm, running.ports)
    api.close()


@pytest.fixture(scope="session")
def kubeconfig(local_cluster: LocalCluster) -> pathlib.Path:
    return local_cluster.kubeconfig


@pytest.fixture(scope="session")
def api_client(local_cluster: LocalCluster) -> client.ApiClient:
    return local_cluster.api_client


def _short_id(request: pytest.FixtureRequest) -> str:
    return hashlib.sha256(f"{request.node.nodeid}{time.time_ns()}".encode()).hexdigest()[:6]


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    with _namespace(api_client, request) as name:
        yield name


@pytest.fixture(scope="module")
def module_namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """One namespace for every test of a module that shares one expensive setup (operator, fleet, servings)."""
    with _namespace(api_client, request) as name:
        yield name


@contextlib.contextmanager
def _namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    readable = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().removesuffix(".py"))[:40].strip("-")
    name = f"it-{readable}-{_short_id(request)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: _exists(lambda: core.read_namespaced_service_account("default", name)), 60, "default SA")
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as error:
        if error.status != 404:
            raise


@dataclasses.dataclass(frozen=True)
class Fleet:
    name: str
    gpu: str
    nodes: list[dict[str, Any]]

    def rack(self, index: int) -> list[dict[str, Any]]:
        return [n for n in self.nodes if n["metadata"]["labels"][fleet.LABEL_RACK] == str(index)]

    def node_names(self, rack: int | None = None) -> set[str]:
        nodes = self.nodes if rack is None else self.rack(rack)
        return {n["metadata"]["name"] for n in nodes}

    def clique(self, rack: int) -> str:
        return fleet.clique(self.name, self.gpu, rack)


FleetFactory = Callable[..., Fleet]


@pytest.fixture
def fleet_factory(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[FleetFactory]:
    with _fleets(api_client, request) as make:
        yield make


@pytest.fixture(scope="module")
def module_fleet_factory(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[FleetFactory]:
    with _fleets(api_client, request) as make:
        yield make


@contextlib.contextmanager
def _fleets(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[FleetFactory]:
    made: list[str] = []

    def make(racks: int = 1, gpu: str = "GB200", **options: Any) -> Fleet:
        name = f"it{_short_id(request)}"
        made.append(name)
        nodes = fleet.apply_fleet(api_client, racks, gpu, fleet=name, **options)
        return Fleet(name, gpu, nodes)

    yield make
    for name in made:
        fleet.delete_fleet(api_client, name)


@pytest.fixture(name="wait_for", scope="session")  # a plain function: module fixtures use it too
def wait_for_fixture() -> Callable[..., Any]:
    return wait_for


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll until `predicate()` is truthy and return it; fail the test naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)
        time.sleep(interval)


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


# ---------------------------------------------------------------------------------------------------------------
# The operator under test: its CRD, the IMEX-channel stand-in, GB200 racks, `nvlfleet run` by PID


@pytest.fixture(scope="session")
def crd(local_cluster: LocalCluster) -> None:
    """The DeepSeekServing CRD as ``nvlfleet crd`` generates it, applied with server-side apply."""
    text = subprocess.run(
        [sys.executable, "-m", "nvlfleet.cli", "crd"], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout
    subprocess.run(
        ["kubectl", "apply", "--server-side", "--force-conflicts", "--field-manager=nvlfleet-tests", "-f", "-"],
        input=text,
        check=True,
        capture_output=True,
        text=True,
    )
    subprocess.run(
        ["kubectl", "wait", "--for=condition=Established", "crd/deepseekservings.nvlfleet.io", "--timeout=60s"],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="session")
def imex(api_client: client.ApiClient, crd: None) -> Iterator[None]:
    computedomains.install_device_class(api_client)
    with computedomains.driver(api_client):
        yield


@pytest.fixture
def gb200_fleet(fleet_factory: FleetFactory, api_client: client.ApiClient, imex: None) -> Iterator[FleetFactory]:
    """``gb200_fleet(racks)``: kwok NVL72 racks whose nodes publish an IMEX channel each."""
    with _gb200_fleets(fleet_factory, api_client) as make:
        yield make


@pytest.fixture(scope="module")
def module_gb200_fleet(
    module_fleet_factory: FleetFactory, api_client: client.ApiClient, imex: None
) -> Iterator[FleetFactory]:
    with _gb200_fleets(module_fleet_factory, api_client) as make:
        yield make


@contextlib.contextmanager
def _gb200_fleets(fleet_factory: FleetFactory, api_client: client.ApiClient) -> Iterator[FleetFactory]:
    made: list[Fleet] = []

    def make(racks: int = 1, **options: Any) -> Fleet:
        made_fleet = fleet_factory(racks=racks, gpu="GB200", **options)
        computedomains.publish_channels(api_client, made_fleet.node_names())
        made.append(made_fleet)
        return made_fleet

    yield make
    for made_fleet in made:
        computedomains.withdraw_channels(api_client, made_fleet.node_names())


@pytest.fixture
def start_operator(
    kubeconfig: pathlib.Path, namespace: str, tmp_path: pathlib.Path, crd: None
) -> Iterator[Callable[..., Any]]:
    """``start_operator(webhook=False, namespaces=None, wait=True)``: ``nvlfleet run --namespace <the test's>``
    with its PID recorded; stopped by that PID at the end of the test, its log tail printed."""
    with _operators(kubeconfig, namespace, tmp_path) as start:
        yield start


@pytest.fixture(scope="module")
def module_start_operator(
    kubeconfig: pathlib.Path, module_namespace: str, tmp_path_factory: pytest.TempPathFactory, crd: None
) -> Iterator[Callable[..., Any]]:
    """``start_operator`` for ``module_namespace``: stopped after the module's last test."""
    with _operators(kubeconfig, module_namespace, tmp_path_factory.mktemp("operators")) as start:
        yield start


@contextlib.contextmanager
def _operators(
    kubeconfig: pathlib.Path, namespace: str, tmp_path: pathlib.Path
) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start(*, namespaces: list[str] | None = None, wait: bool = True, **options: Any) -> OperatorProcess:
        process = OperatorProcess(
            tmp_path / f"operator-{len(started)}", kubeconfig, namespaces or [namespace], **options
        )
        started.append(process)
        process.start()
        if wait:
            process.wait_ready()
        return process

    yield start
    for process in started:
        process.stop()
        print(f"--- {process.log} ---\n{process.tail()}")


@pytest.fixture(name="cluster")
def cluster_fixture(api_client: client.ApiClient, namespace: str) -> servings.Cluster:
    """Reads and writes on the test's namespace (see servings.Cluster)."""
    return servings.Cluster(api_client, namespace)


@pytest.fixture(scope="module")
def module_cluster(api_client: client.ApiClient, module_namespace: str) -> servings.Cluster:
    return servings.Cluster(api_client, module_namespace)
