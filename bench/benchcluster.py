"""The benchmark's own local cluster: a separate control plane, identities whose requests can be counted, a fleet.

Adapter for the cluster figures (convergence, steady state). It is a second ``localcluster`` instance in its own
directory (``NVLFLEET_CLUSTER_DIR``, free ports picked by localcluster), so a benchmark neither disturbs nor is
disturbed by the integration tests running on the shared one; it starts from an empty etcd and is stopped by its
recorded PIDs at the end.

Counting requests per client. ``apiserver_request_total`` has no user label, so each client the benchmark compares
(the operator, the plain-client baseline) gets its own ServiceAccount, and a FlowSchema per (client, reads|writes)
sends its requests to the ``exempt`` priority level: nothing is queued or throttled (as for the admin user), and
``apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}`` counts them — writes being create, update,
patch, delete and deletecollection, on any resource or subresource, kopf's own bookkeeping patches included.

Node heartbeats. The fleet's 2,000-odd kubelets are simulated by kwok, which renews a Lease per node on the same two
cores as the control plane and the clients measured. When a figure saturates the machine (figure 1 at N = 1,000),
kube-controller-manager saw Leases late, marked hundreds of nodes NotReady and every pod on them Ready=False, and
kwok set them Ready again 5–15 s later: in a probe at N = 1,000 the node controller updated 544 and 770 pods in the
two runs that took 634 and 669 s, and 2 in the one that took 533 s (docs/reliability.md). Only the side that
loaded the machine more paid for it, a cliff no real fleet has (a kubelet heartbeats from its own node), so this
cluster's node grace period is ``NODE_GRACE_SECONDS`` instead of 50 s.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import pathlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

import runtimevenv
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import fleet as fleets
from localcluster import processes
from prometheus_client import parser as prom_parser

from nvlfleet.api import crd, yamltext

REPO = pathlib.Path(__file__).resolve().parents[1]
IDENTITY_NAMESPACE = "nvlfleet-bench"
WRITE_VERBS = ["create", "update", "patch", "delete", "deletecollection"]
READ_VERBS = ["get", "list", "watch"]
CRD_NAME = "deepseekservings.nvlfleet.io"
CRD_GROUP_VERSION_PLURAL = ("nvlfleet.io", "v1alpha1", "deepseekservings")
NODE_GRACE_SECONDS = 300  # see "Node heartbeats" above
GPU = "GB200"  # the bench fleet's trays
TRAYS_PER_RACK = fleets.gpu_model(GPU).nodes_per_domain
MIN_RACKS = 24


def fleet_racks(servings: int) -> int:
    """Racks of the shared bench fleet: at least ``MIN_RACKS``, and one tray per single-tray serving (figure 2's)
    plus 2 spare trays."""
    return max(MIN_RACKS, -(-(servings + 2) // TRAYS_PER_RACK))


def cluster_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NVLFLEET_BENCH_CLUSTER_DIR") or REPO / ".bench" / "cluster").resolve()


class BenchCluster:
    """A running benchmark cluster: admin client, per-identity kubeconfigs, request counters, fleets."""

    def __init__(self, root: pathlib.Path, say: Any = print) -> None:
        self.root = root
        self.say = say
        self.kubeconfig: pathlib.Path | None = None
        self.api: client.ApiClient | None = None
        self.server_version = ""
        self.node_grace_seconds: int | None = None  # the running cluster's (None: Kubernetes' default)
        self._identities: dict[str, pathlib.Path] = {}

    # -- lifecycle --------------------------------------------------------------------------------------------

    def up(self) -> BenchCluster:
        """A fresh cluster (any previous one in ``root`` is stopped and wiped first): an empty etcd."""
        from localcluster import cluster

        with self._environment():
            cluster.down(progress=lambda m: None)
            running = cluster.up(
                progress=lambda m: self.say(f"  localcluster: {m}"), node_grace_seconds=NODE_GRACE_SECONDS
            )
        self.kubeconfig = running.kubeconfig
        self.node_grace_seconds = running.layout.node_grace_seconds
        self.api = config.new_client_from_config(config_file=str(running.kubeconfig))
        info = client.VersionApi(self.api).get_code()
        self.server_version = info.git_version
        self._install_crd()
        return self

    def attach(self) -> BenchCluster:
        """Use the cluster already running in ``root`` as it is (for working on the harness itself); one started
        without ``NODE_GRACE_SECONDS`` is used all the same, with a warning."""
        from localcluster import cluster

        with self._environment():
            running, health = cluster.status()
        if running is None or not all(health.values()):
            raise RuntimeError(f"no healthy benchmark cluster in {self.root}")
        self.kubeconfig = running.kubeconfig
        self.node_grace_seconds = running.layout.node_grace_seconds
        if self.node_grace_seconds != NODE_GRACE_SECONDS:
            self.say(
                f"  warning: this cluster's node grace period is {self.grace_text()}, not {NODE_GRACE_SECONDS} s: "
                "on a saturated machine its simulated nodes can flap NotReady (see benchcluster.py)"
            )
        self.api = config.new_client_from_config(config_file=str(running.kubeconfig))
        self.server_version = client.VersionApi(self.api).get_code().git_version
        self._install_crd()
        return self

    def grace_text(self) -> str:
        return f"{self.node_grace_seconds} s" if self.node_grace_seconds else "Kubernetes' default (50 s)"

    def down(self) -> list[str]:
        from localcluster import cluster

        if self.api is not None:
            self.api.close()
            self.api = None
        with self._environment():
            return cluster.down(progress=lambda m: None)

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        before = os.environ.get("NVLFLEET_CLUSTER_DIR")
        os.environ["NVLFLEET_CLUSTER_DIR"] = str(self.root)
        try:
            yield
        finally:
            if before is None:
                del os.environ["NVLFLEET_CLUSTER_DIR"]
            else:
                os.environ["NVLFLEET_CLUSTER_DIR"] = before

    def _install_crd(self) -> None:
        ext = client.ApiextensionsV1Api(self.admin)
        ext.patch_custom_resource_definition(
            CRD_NAME,
            crd.definition(),
            field_manager="nvlfleet-bench",
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            conditions = ext.read_custom_resource_definition(CRD_NAME).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            time.sleep(0.2)
        raise TimeoutError(f"CRD {CRD_NAME} not Established after 60s")

    # -- Kueue, on demand (the placement comparison's topology-aware-scheduling baseline) ----------------------

    def kueue(self) -> int:
        """Kueue installed and running on this cluster (``localcluster.kueue``); its manager's PID."""
        from localcluster import cluster, kueue

        with self._environment():
            running, _ = cluster.status()
            assert running is not None, "the bench cluster is not up"
            return kueue.ensure_running(running.layout, progress=lambda m: self.say(f"  localcluster: {m}"))

    def stop_kueue(self) -> bool:
        from localcluster import cluster, kueue

        with self._environment():
            running, _ = cluster.status()
            return kueue.stop(self.root, running.layout if running else None)

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        assert self.kubeconfig is not None, "the bench cluster is not up"
        return self.kubeconfig

    @property
    def admin(self) -> client.ApiClient:
        assert self.api is not None, "the bench cluster is not up"
        return self.api

    # -- identities and their request counters ---------------------------------------------------------------

    def identity(self, name: str) -> pathlib.Path:
        """A kubeconfig acting as ServiceAccount nvlfleet-bench/<name> (cluster-admin), its requests counted."""
        if name in self._identities:
            return self._identities[name]
        from localcluster import credentials

        core = client.CoreV1Api(self.admin)
        rbac = client.RbacAuthorizationV1Api(self.admin)
        _create(core.create_namespace, {"metadata": {"name": IDENTITY_NAMESPACE}})
        _create(core.create_namespaced_service_account, IDENTITY_NAMESPACE, {"metadata": {"name": name}})
        _create(
            rbac.create_cluster_role_binding,
            {
                "metadata": {"name": f"nvlfleet-bench-{name}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": IDENTITY_NAMESPACE}],
            },
        )
        flow = client.FlowcontrolApiserverV1Api(self.admin)
        for kind, verbs in (("writes", WRITE_VERBS), ("reads", READ_VERBS)):
            _create(flow.create_flow_schema, _flow_schema(name, kind, verbs))
        assert self.kubeconfig is not None
        path = self.root / f"{name}.kubeconfig"
        credentials.service_account_kubeconfig(self.kubeconfig, IDENTITY_NAMESPACE, name, path, 4 * 3600)
        self._identities[name] = path
        return path

    def requests(self) -> dict[str, float]:
        """Requests dispatched so far per flow schema (``<identity>-writes`` / ``<identity>-reads``)."""
        text = self.admin.call_api(*self.admin.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]))
        body = text.read().decode()
        counts: dict[str, float] = {}
        for family in prom_parser.text_string_to_metric_families(body):
            if family.name != "apiserver_flowcontrol_dispatched_requests":
                continue
            for sample in family.samples:
                schema = sample.labels.get("flow_schema", "")
                if schema.startswith("nvlfleet-bench-") and sample.name.endswith("_total"):
                    counts[schema.removeprefix("nvlfleet-bench-")] = sample.value
        return counts

    # -- namespaces and fleets -------------------------------------------------------------------------------

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds each of the cluster's processes has used so far, by component (from their recorded PIDs);
        a process that is gone is left out."""
        import proc

        found = {}
        for pid_file in sorted((self.root / "pids").glob("*.pid")):
            text = pid_file.read_text().split()
            try:
                found[pid_file.stem] = proc.cpu_seconds(int(text[0]))
            except (IndexError, ValueError, OSError):
                continue
        return found

    def namespace(self, name: str) -> str:
        """A fresh namespace whose default ServiceAccount exists (pods need it)."""
        core = client.CoreV1Api(self.admin)
        core.create_namespace({"metadata": {"name": name}})
        _until(lambda: _exists(lambda: core.read_namespaced_service_account("default", name)), 60, "default SA")
        return name

    def delete_namespace(self, name: str, timeout: float = 600) -> float:
        """Delete a namespace and wait until it and everything in it (pods included) are gone; returns seconds."""
        core = client.CoreV1Api(self.admin)
        started = time.monotonic()
        self.release_servings(name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(name, propagation_policy="Background")
        _until(lambda: not _exists(lambda: core.read_namespace(name)), timeout, f"namespace {name} to go")
        return time.monotonic() - started

    def release_servings(self, namespace: str) -> int:
        """Drop the finalizer of every DeepSeekServing in ``namespace`` (its operator is stopped: kopf adds one
        for the periodic re-check timer and nobody else would remove it); returns how many were released."""
        custom = client.CustomObjectsApi(self.admin)
        group, version, plural = CRD_GROUP_VERSION_PLURAL
        released = 0
        for obj in custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]:
            if obj["metadata"].get("finalizers"):
                with contextlib.suppress(ApiException):
                    custom.patch_namespaced_custom_object(
                        group, version, namespace, plural, obj["metadata"]["name"], {"metadata": {"finalizers": None}}
                    )
                    released += 1
        return released

    def fleet(
        self, racks: int, gpu: str = GPU, name: str = "bench", workers: int = 8, first_slot: int = 0
    ) -> list[dict[str, Any]]:
        """``racks`` kwok NVLink domains, created concurrently (a thousand nodes one by one take a minute); a second
        fleet passes the first network slot after the first fleet's (one per node). Their pods get addresses
        from the benchmarking range (``fleet.BENCHMARK_PODS``): nothing listens on them here, and the endpoint
        controllers accept them where they refuse loopback ones (and retry each Service's forever)."""
        nodes = fleets.fleet_nodes(gpu, racks, fleet=name, first_slot=first_slot, pods=fleets.BENCHMARK_PODS)
        core = client.CoreV1Api(self.admin)
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda node: _create(core.create_node, node), nodes))
        fleets.wait_ready(self.admin, [n["metadata"]["name"] for n in nodes], timeout=300)
        return nodes

    def operator_command(
        self, kubeconfig: pathlib.Path, namespaces: list[str], recheck_seconds: float, metrics_port: int = 0
    ) -> list[str]:
        """``nvlfleet run`` as its image runs it (``runtimevenv``: the locked runtime dependencies only), acting as
        ``kubeconfig``'s identity on ``namespaces``."""
        return [
            str(runtimevenv.python(self.say)),
            "-m",
            "nvlfleet.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(metrics_port),
            "--health-port",
            "0",
            "--recheck-seconds",
            str(recheck_seconds),
            "--log-level",
            os.environ.get("NVLFLEET_BENCH_OPERATOR_LOG_LEVEL", "warning"),
            *[arg for ns in namespaces for arg in ("--namespace", ns)],
        ]


class OperatorProcess:
    """``nvlfleet run`` as a child process (``localcluster.processes.Child``), its PID recorded next to its log,
    stopped by that PID only."""

    def __init__(self, command: list[str], log: pathlib.Path) -> None:
        self.command = command
        self.log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.child = processes.Child(command, log, log.parent / f"{log.stem}.pid", cwd=REPO, env=env)

    def start(self, timeout: float = 60) -> OperatorProcess:
        self.child.start()
        # kopf lists nodes and pods into its indexes before any handler runs; a short settle covers it.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.running():
                raise RuntimeError(f"nvlfleet run exited with {self.child.returncode()}; see {self.log}")
            if "starting (namespaces" in self.log.read_text(errors="replace") or time.monotonic() > deadline - 55:
                break
            time.sleep(0.2)
        time.sleep(3.0)
        return self

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self, timeout: float = 30) -> int | None:
        return self.child.stop(timeout=timeout)


def _flow_schema(identity: str, kind: str, verbs: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": f"nvlfleet-bench-{identity}-{kind}"},
        "spec": {
            "matchingPrecedence": 100,
            "priorityLevelConfiguration": {"name": "exempt"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": identity, "namespace": IDENTITY_NAMESPACE},
                        }
                    ],
                    "resourceRules": [
                        {
                            "verbs": verbs,
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                }
            ],
        },
    }


def _create(create: Any, *args: Any) -> None:
    try:
        create(*args)
    except ApiException as error:
        if error.status != 409:
            raise


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _until(predicate: Any, timeout: float, what: str, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def dump(obj: Mapping[str, Any]) -> str:
    return yamltext.dump(obj)
