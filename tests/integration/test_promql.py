"""Every PromQL expression of the dashboards and alerts, evaluated by a real Prometheus against a live operator.

The chain is the production one, end to end, on this machine:

    kwok GB200 fleet (local cluster) ← nvlfleet run (the operator, a process) → LeaderWorkerSets → leader pods
    leader pods' loopback IPs ← nvlfleet simulate (vLLM 0.33 /metrics) ← scraped by the operator (tokens, $)
    router pod's loopback IP  ← the real vllm-router (the 0.1.17 wheel) with the pod's own args, discovering
                                the leaders with a token of the router's ServiceAccount (localdemo.routers),
                                sent requests all along by a thread of this module
    Prometheus (Debian's binary) ← the operator's /metrics (as the chart's ServiceMonitor: honor_labels)
                                 ← the leaders' /metrics and the router's exporter (as the operator's two
                                   PodMonitors, translated the way prometheus-operator translates them)

Then each dashboard query, with Grafana's variables set to the live serving (and to "All"), and each alert's
signal (the quantity it watches) must return at least one series, and each alert expression must evaluate.
"metric not found" — a renamed metric, a label the PodMonitor does not produce, a join that matches nothing —
fails here.

Situations the alerts watch are made real, not faked: a serving whose leader answers nobody (scrape errors), a
serving whose LeaderWorkerSet a ResourceQuota refuses (reconcile errors), status conditions of every serving.
So are the router's: a request that arrives before the engines answer (no prefill/decode pair: 503), requests
prefill refuses (an unknown model) and decode refuses (max_tokens past the context) beside answered ones.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import localprometheus
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster import fleet, processes
from localdemo import routers

from nvlfleet.api import metric_names, models, names
from nvlfleet.artifacts import alerts, dashboards
from nvlfleet.core import render
from nvlfleet.facts import vllm_router
from support import routermetrics

pytestmark = pytest.mark.integration

DSS = ("nvlfleet.io", "v1alpha1", "deepseekservings")
LEADER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
NVLFLEET = str(pathlib.Path(sys.executable).with_name("nvlfleet"))
RATE_INTERVAL = "20s"  # Grafana's $__rate_interval at a 1 s scrape interval is far shorter; 20 s is safe
ROUTER_STARTUP_SECONDS = 60.0  # it answers /liveness in about 3 s
TRAFFIC_SECONDS = 0.5  # one answered request through the router this often; refused ones every tenth

# Per leader (the whole vLLM server): prefill computes prompts, decode generates with speculative decoding.
LOADS = {
    "prefill": ["--prompt", "80000", "--cached", "50000", "--generation", "50", "--speculative-tokens", "0"],
    "decode": ["--prompt", "80000", "--cached", "80000", "--generation", "9000", "--running", "128",
               "--kv-usage", "0.6", "--speculative-tokens", "3", "--acceptance", "0.65"],
}  # fmt: skip


def serving(namespace: str, name: str, roles: dict[str, Any], fleet_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "nvlfleet.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "servedName": name},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": roles,
            # No NVIDIA DRA driver runs in the local cluster: pods claiming a ComputeDomain channel would never
            # be scheduled, and these tests are about metrics.
            "placement": {"computeDomain": False},
            # Only this test's racks: the cluster is shared with tests running side by side.
            "pod": {"nodeSelector": {fleet.LABEL_FLEET: fleet_name}},
            "pricing": {
                "currency": "USD",
                "inputCacheHitPerMillion": 0.003,
                "inputCacheMissPerMillion": 0.15,
                "outputPerMillion": 0.60,
                "schedule": [{"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}],
                "gpuHourCost": 2.5,
            },
            "parity": {"referenceTokensPerSecondPerGpu": 20000},
            # The local cluster has no Prometheus Operator CRDs; the PodMonitor the operator would apply is
            # rendered below and translated into Prometheus' own configuration instead.
            "monitoring": {"podMonitor": False},
        },
    }


ONE_GROUP = {"groups": 1, "parallelism": {"tensor": 1, "data": 4}}


def child(command: list[str], log: pathlib.Path, env: dict[str, str] | None = None) -> processes.Child:
    """A started child process (its own session) logging to ``log``, its PID beside it, stopped by that PID."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    pid_file = log.with_suffix(".pid")
    return processes.Child(command, log, pid_file, cwd=log.parent, env=environment, detach=True).start()


def self_signed_certificate(directory: pathlib.Path) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt"), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return directory


def _sanitize(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _snake(key: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m[1].lower(), key)


def pod_monitor_scrape_config(
    pod_monitor: dict[str, Any], pods: list[dict[str, Any]], listening: dict[str, str] | None = None
) -> dict[str, Any]:
    """The scrape job prometheus-operator generates for ``pod_monitor``, with the pods it would discover given as
    static targets carrying the same ``__meta_kubernetes_*`` labels Kubernetes discovery would set.

    ``listening``: host:port by pod name, for a pod whose process here listens elsewhere than its IP and port (the
    target's address; its labels are the pod's all the same)."""
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    meta = pod_monitor["metadata"]
    targets = []
    for pod in pods:
        port = next(
            p["containerPort"]
            for c in pod["spec"]["containers"]
            for p in c.get("ports") or []
            if p.get("name") == endpoint["port"]
        )
        labels = {
            "__meta_kubernetes_namespace": pod["metadata"]["namespace"],
            "__meta_kubernetes_pod_name": pod["metadata"]["name"],
            **{f"__meta_kubernetes_pod_label_{_sanitize(k)}": v for k, v in pod["metadata"]["labels"].items()},
        }
        address = (listening or {}).get(pod["metadata"]["name"], f"{pod['status']['podIP']}:{port}")
        targets.append({"targets": [address], "labels": labels})
    relabel = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
        {"target_label": "endpoint", "replacement": endpoint["port"]},
    ]
    for label in pod_monitor["spec"].get("podTargetLabels") or []:
        relabel.append(
            {
                "source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(label)}"],
                "regex": "(.+)",
                "target_label": _sanitize(label),
                "replacement": "${1}",
            }
        )
    for rule in endpoint.get("relabelings") or []:
        relabel.append({_snake(k): v for k, v in rule.items()})
    return {
        "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/0",
        "metrics_path": endpoint.get("path", "/metrics"),
        "static_configs": targets,
        "relabel_configs": relabel,
    }


@pytest.fixture(scope="module")
def quota_namespace(api_client: client.ApiClient, module_namespace: str) -> Iterator[str]:
    """A namespace whose ResourceQuota allows no LeaderWorkerSet: a serving there fails to reconcile, for real."""
    core = client.CoreV1Api(api_client)
    name = f"{module_namespace[:50]}-quota"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-groups"),
        spec=client.V1ResourceQuotaSpec(hard={"count/leaderworkersets.leaderworkerset.x-k8s.io": "0"}),
    )
    core.create_namespaced_resource_quota(name, quota)
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as error:
        if error.status != 404:
            raise


# ---------------------------------------------------------------------------------------------------------------
# One chain for the module: operator, three servings, simulated leaders, Prometheus; each test queries it


@dataclasses.dataclass
class Chain:
    """The running chain the tests query, and how to wait on it with the whole chain's state in the failure."""

    server: localprometheus.Server
    namespace: str
    quota_namespace: str
    until: Callable[[Callable[[], Any], float, str], Any]
    router_trouble: list[str]  # the router traffic's answers other than expected, as they came
    deadline: float | None = None  # set by the first wait for data: 150 s from then for all of them

    def returns_data(self, expr: str) -> bool:
        try:
            return bool(self.server.query(expr))
        except localprometheus.QueryError:
            return False

    def without_data(self, queries: list[tuple[str, str]]) -> str:
        """The queries still without data at the chain's deadline, one ``where: expr`` per line."""
        if self.deadline is None:  # rates, subqueries and status need a few scrapes and a minute boundary
            self.deadline = time.monotonic() + 150
        empty = [(where, expr) for where, expr in queries if not self.returns_data(expr)]
        while empty and time.monotonic() < self.deadline:
            time.sleep(3)
            empty = [(where, expr) for where, expr in empty if not self.returns_data(expr)]
        report = "\n".join(f"{where}: {expr}" for where, expr in empty)
        if report and self.router_trouble:
            report += "\nthe router answered other than expected:\n" + "\n".join(self.router_trouble[-5:])
        return report


@pytest.fixture(scope="module")
def chain(
    kubeconfig: pathlib.Path,
    api_client: client.ApiClient,
    module_namespace: str,
    quota_namespace: str,
    module_fleet_factory: Callable[..., Any],
    wait_for: Callable[..., Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Chain]:
    namespace, tmp_path = module_namespace, tmp_path_factory.mktemp("promql")
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    racks = module_fleet_factory(racks=2, gpu="GB200")
    metrics_port = localprometheus.free_port()
    operator = child(
        [NVLFLEET, "run", "--kubeconfig", str(kubeconfig), "--namespace", namespace, "--namespace", quota_namespace,
         "--bind-address", "127.0.0.1", "--metrics-port", str(metrics_port),
         "--health-port", str(localprometheus.free_port()), "--webhook-port", str(localprometheus.free_port()),
         "--webhook-cert-dir", str(self_signed_certificate(tmp_path / "webhook")), "--recheck-seconds", "3",
         "--scrape-seconds", "2", "--status-metrics-seconds", "5"],
        tmp_path / "operator.log",
    )  # fmt: skip
    started = [operator]
    prometheus: localprometheus.Server | None = None
    traffic: RouterTraffic | None = None

    def until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        try:
            return wait_for(predicate, timeout, what)
        except pytest.fail.Exception:
            logs = "\n".join(f"--- {p.log.name}\n{p.log.read_text(errors='replace')[-4000:]}" for p in started)
            status = {
                name: (custom.get_namespaced_custom_object(*DSS[:2], ns, DSS[2], name).get("status") or {})
                for ns, name in ((namespace, "flash"), (namespace, "dark"))
            }
            listed = core.list_namespaced_pod(namespace).items
            pods = [(p.metadata.name, p.status.phase, p.status.pod_ip) for p in listed]
            pytest.fail(
                f"timed out after {timeout:.0f}s waiting for {what}\nstatus: {json.dumps(status, indent=1)}\n"
                f"pods: {pods}\n{logs}",
                pytrace=False,
            )

    try:
        flash = serving(namespace, "flash", {"prefill": ONE_GROUP, "decode": ONE_GROUP}, racks.name)
        # Autoscaled (no KEDA here: it runs at its groups, Autoscaling=False), so the ceiling panel has a series.
        flash["spec"]["autoscaling"] = {
            "minGroups": 1,
            "maxGroups": 1,
            "signal": "waitingRequests",
            "target": 8,
            "prefillPerDecode": 1,
        }
        dark = serving(namespace, "dark", {"decode": ONE_GROUP}, racks.name)  # its leader answers nobody
        stuck = serving(quota_namespace, "stuck", {"decode": ONE_GROUP}, racks.name)  # no group allowed
        for obj in (flash, dark, stuck):
            custom.create_namespaced_custom_object(*DSS[:2], obj["metadata"]["namespace"], DSS[2], obj)

        def leaders(name: str, expected: int) -> list[dict[str, Any]]:
            pods = core.list_namespaced_pod(namespace, label_selector=f"nvlfleet.io/serving={name},{LEADER_LABEL}=0")
            ready = [api_client.sanitize_for_serialization(p) for p in pods.items if p.status.pod_ip]
            return ready if len(ready) == expected else []

        flash_leaders = until(lambda: leaders("flash", 2), 120, "flash's prefill and decode leaders with an IP")
        until(lambda: leaders("dark", 1), 120, "dark's leader pod with an IP")
        router_pod = until(lambda: running_router(core, namespace, "flash"), 120, "flash's router pod with an IP")
        router = real_router(api_client, kubeconfig, router_pod, tmp_path, started)
        router_url = router.url
        until(lambda: answers(router_url + "/liveness"), ROUTER_STARTUP_SECONDS, "flash's vllm-router to start")
        # Before the engines answer: discovery has found the leaders but admits none until its /health answers.
        early = routermetrics.post(router_url, routermetrics.no_pair("flash"))
        assert early is None, f"a request before the engines answer: {early}"
        for address_file in [simulated_leader(pod, tmp_path, started) for pod in flash_leaders]:
            until(address_file.exists, 30, f"the simulated leader of {address_file.stem}")
        until(lambda: answers(router_url + "/readiness"), 120, "flash's vllm-router to admit both leaders")
        traffic = RouterTraffic(router_url, "flash")
        traffic.start()
        served = [api_client.sanitize_for_serialization(p) for p in (*flash_leaders, router_pod)]
        listening = {router_pod.metadata.name: router.exporter}
        prometheus = scraping(flash, served, listening, metrics_port, tmp_path / "prometheus").start()
        yield Chain(prometheus, namespace, quota_namespace, until, traffic.trouble)
    finally:
        if traffic is not None:
            traffic.stopping.set()
            traffic.join(timeout=60)
        for obj_ns, name in ((namespace, "flash"), (namespace, "dark"), (quota_namespace, "stuck")):
            try:
                custom.delete_namespaced_custom_object(*DSS[:2], obj_ns, DSS[2], name)
            except ApiException as error:
                if error.status != 404:
                    raise
        if prometheus is not None:
            prometheus.stop()
        for process in reversed(started):
            process.stop(timeout=30)


def simulated_leader(pod: dict[str, Any], tmp_path: pathlib.Path, started: list[processes.Child]) -> pathlib.Path:
    """vLLM at a leader pod's address (the fleet's pod IPs are loopback addresses), added to ``started`` (to be
    stopped whatever happens next); it is listening once the returned addresses file exists."""
    role = pod["metadata"]["labels"]["nvlfleet.io/role"]
    (port,) = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []
               if p.get("name") == "http"]  # fmt: skip
    addresses = tmp_path / f"sim-{role}.addresses"
    command = [NVLFLEET, "simulate", "--listen", f"{pod['status']['podIP']}:{port}", "--engines", "4",
               "--model", "flash", "--addresses-file", str(addresses), *LOADS[role]]  # fmt: skip
    started.append(child(command, tmp_path / f"sim-{role}.log"))
    return addresses


def running_router(core: client.CoreV1Api, namespace: str, serving_name: str) -> client.V1Pod | None:
    """The serving's one router pod, once it runs and has an IP."""
    selector = f"{names.SERVING_LABEL}={serving_name},{routers.SELECTOR}"
    pods = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items if p.status.pod_ip]
    return pods[0] if len(pods) == 1 and pods[0].status.phase == "Running" else None


@dataclasses.dataclass(frozen=True)
class RealRouter:
    url: str
    exporter: str  # host:port of its --prometheus-port


def real_router(
    api_client: client.ApiClient,
    kubeconfig: pathlib.Path,
    pod: client.V1Pod,
    tmp_path: pathlib.Path,
    started: list[processes.Child],
) -> RealRouter:
    """The real vllm-router run with the router pod's own args as the demo runs it (``localdemo.routers``: on
    127.0.0.1 and free ports, because another process may have left a server on a pod IP the cluster has since
    reused), discovering the leaders with a token of the pod's ServiceAccount; added to ``started``."""
    described = routers.router_pod(pod)
    env = routers.router_env(routers.pod_kubeconfig(api_client, kubeconfig, described, tmp_path / "router"))
    port, metrics_port = localprometheus.free_port(), localprometheus.free_port()
    argv = [sys.executable, str(routers.BINARY), *routers.local_args(described.args, port, metrics_port)]
    log = tmp_path / "router.log"
    started.append(processes.Child(argv, log, log.with_suffix(".pid"), cwd=tmp_path, env=env, detach=True).start())
    return RealRouter(f"http://{routers.LOOPBACK}:{port}", f"{routers.LOOPBACK}:{metrics_port}")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


class RouterTraffic(threading.Thread):
    """Requests through the router for as long as the chain runs: answered ones, and every tenth round one that
    prefill refuses and one that decode refuses; what came back other than expected is kept in ``trouble``."""

    def __init__(self, url: str, model: str) -> None:
        super().__init__(name="router-traffic", daemon=True)
        self.url, self.model = url, model
        self.stopping = threading.Event()
        self.trouble: list[str] = []

    def run(self) -> None:
        for turn in itertools.count():
            if self.stopping.wait(TRAFFIC_SECONDS):
                return
            refused = [routermetrics.refused_by_prefill(), routermetrics.refused_by_decode(self.model)]
            for request in routermetrics.answered(self.model) if turn % 10 else refused:
                problem = routermetrics.post(self.url, request)
                if problem is not None:
                    self.trouble.append(problem)


def scraping(
    flash: dict[str, Any],
    pods: list[dict[str, Any]],
    listening: dict[str, str],
    metrics_port: int,
    workdir: pathlib.Path,
) -> localprometheus.Server:
    """Prometheus scraping the operator (as the chart's ServiceMonitor) and flash's leaders and router (as its two
    PodMonitors, each given the pods its selector matches; ``listening``: see ``pod_monitor_scrape_config``)."""
    with_pod_monitor = {**flash, "spec": {**flash["spec"], "monitoring": {"podMonitor": True}}}
    monitors = [
        m for m in render.render(models.DeepSeekServing.model_validate(with_pod_monitor)) if m["kind"] == "PodMonitor"
    ]
    assert len(monitors) == 2, [m["metadata"]["name"] for m in monitors]  # the engines' and the router's

    def selected(monitor: dict[str, Any]) -> list[dict[str, Any]]:
        wanted = monitor["spec"]["selector"]["matchLabels"].items()
        return [p for p in pods if wanted <= p["metadata"]["labels"].items()]

    return localprometheus.Server(
        workdir,
        [
            {
                "job_name": "nvlfleet-operator",
                "honor_labels": True,  # as the chart's ServiceMonitor: the serving's namespace label stays
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            },
            *(pod_monitor_scrape_config(m, selected(m), listening) for m in monitors),
        ],
    )


def test_the_operators_revenue_gauge_reaches_prometheus(chain: Chain) -> None:
    chain.until(
        lambda: chain.returns_data(f'{metric_names.REVENUE_PER_HOUR}{{serving="flash"}}'),
        120,
        "the operator's revenue gauge for flash in Prometheus",
    )


def test_the_routers_series_carry_the_servings_namespace_and_serving_and_no_role(chain: Chain) -> None:
    """What the router row selects by: its PodMonitor's labels, not the engines' role."""
    family = vllm_router.PD_REQUESTS
    chain.until(lambda: chain.returns_data(family), 120, f"{family} in Prometheus")
    (first, *_) = chain.server.query(family)
    assert first["metric"]["namespace"] == chain.namespace
    assert first["metric"]["serving"] == "flash"
    assert "role" not in first["metric"]


def test_every_dashboard_query_returns_data_with_the_variables_a_user_sets(chain: Chain) -> None:
    """The live serving; on the operator dashboard both namespaces, as a multi-selection renders."""
    live = {"namespace": chain.namespace, "serving": "flash", "role": ".*"}
    both_namespaces = {"namespace": f"({chain.namespace}|{chain.quota_namespace})"}
    queries = [
        (
            f"{e.dashboard} / {e.panel}",
            dashboards.substitute(
                e.expr, both_namespaces if e.dashboard == dashboards.operator_health().title else live, RATE_INTERVAL
            ),
        )
        for e in dashboards.promql_expressions()
    ]
    empty = chain.without_data(queries)
    assert empty == "", "queries without data:\n" + empty


def test_every_dashboard_query_returns_data_with_the_variables_set_to_all(chain: Chain) -> None:
    everything = {"namespace": ".*", "serving": ".*", "role": ".*"}
    queries = [
        (f"{e.dashboard} / {e.panel}", dashboards.substitute(e.expr, everything, RATE_INTERVAL))
        for e in dashboards.promql_expressions()
    ]
    empty = chain.without_data(queries)
    assert empty == "", "queries without data:\n" + empty


def test_every_alerts_signal_returns_data(chain: Chain) -> None:
    empty = chain.without_data([(f"alert {a.name} (signal)", a.signal) for a in alerts.all_alerts()])
    assert empty == "", "queries without data:\n" + empty


def test_every_alerts_expression_evaluates(chain: Chain) -> None:
    for alert in alerts.all_alerts():
        chain.server.query(alert.expr)  # raises QueryError if Prometheus cannot evaluate it


def test_the_podmonitor_translation_matches_prometheus_operator_conventions() -> None:
    """The translation above is itself checked against a PodMonitor whose outcome is known."""
    monitor = {
        "metadata": {"namespace": "ml", "name": "flash"},
        "spec": {
            "podTargetLabels": ["nvlfleet.io/role"],
            "podMetricsEndpoints": [
                {"port": "http", "path": "/metrics",
                 "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_label_nvlfleet_io_serving"],
                                  "targetLabel": "serving"}]}
            ],
        },
    }  # fmt: skip
    pod = {
        "metadata": {"namespace": "ml", "name": "flash-0", "labels": {"nvlfleet.io/role": "decode",
                                                                     "nvlfleet.io/serving": "flash"}},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {"podIP": "127.16.0.5"},
    }  # fmt: skip
    config = pod_monitor_scrape_config(monitor, [pod])
    assert config["static_configs"] == [
        {
            "targets": ["127.16.0.5:8000"],
            "labels": {
                "__meta_kubernetes_namespace": "ml",
                "__meta_kubernetes_pod_name": "flash-0",
                "__meta_kubernetes_pod_label_nvlfleet_io_role": "decode",
                "__meta_kubernetes_pod_label_nvlfleet_io_serving": "flash",
            },
        }
    ]
    assert config["relabel_configs"][-2:] == [
        {"source_labels": ["__meta_kubernetes_pod_label_nvlfleet_io_role"], "regex": "(.+)",
         "target_label": "nvlfleet_io_role", "replacement": "${1}"},
        {"source_labels": ["__meta_kubernetes_pod_label_nvlfleet_io_serving"], "target_label": "serving"},
    ]  # fmt: skip
    assert json.dumps(config)  # a plain document Prometheus' YAML loader reads
