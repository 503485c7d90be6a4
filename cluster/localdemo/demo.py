"""`make demo`: a simulated GB200/GB300 NVL72 fleet served by nvlfleet, with live tokens/s and $/GPU-hour.

The steps, each one reusing what already runs, so `make demo` twice changes nothing the second time:

 1. the local cluster (``localcluster.cluster.up``: etcd, kube-apiserver, controllers, scheduler, kwok, LWS);
 2. the fleet: NVL72 racks of kwok trays (4 × GB200 and 2 × GB300 by default) with their IMEX channels;
 3. the DeepSeekServing CRD from crds/, the demo namespace and the weights volume the examples mount;
 4. the operator, ``nvlfleet run`` beside the cluster (validating webhook, metrics on 127.0.0.1);
 5. the agent (``localdemo.agent``): ComputeDomain claim templates and a simulated vLLM server per leader;
 6. Prometheus (Debian's package via ``localprometheus``) scraping the operator and the leaders, with the
    chart's alert rules loaded;
 7. the GB200/GB300 examples, each with a nodeSelector that keeps it on the demo's racks, and one of them
    (``AUTOSCALED``) with ``spec.autoscaling`` on queue depth: idle at its example's size until KEDA runs on the
    cluster and ``python -m localdemo load`` queues requests at it (``localdemo.load``);
 8. wait until every serving is Ready and reports tokens/s and $/GPU-hour;
 9. send a small, bounded stream of real requests through each serving's router (``localdemo.frontdoor``: the
    real vllm-router the agent runs for each router pod), then print what to look at, with a working curl.

Background processes (operator, agent, Prometheus) record their PID and command line under ``.demo/`` and log
there (``localcluster.processes``); ``down`` stops exactly those PIDs (a PID whose command line differs is not ours
and is left alone), then removes the demo's namespace, nodes and volumes. The cluster keeps running
(``make cluster-down``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import localprometheus
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import binaries, cluster, computedomains, fleet, processes

from localdemo import frontdoor, pressure, routers
from nvlfleet.api import autoscaling, models, names, yamltext
from nvlfleet.core import inventory

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = tuple(sorted((REPO / "examples").glob("gb*.yaml")))  # the demo has no H200 nodes
CRD = REPO / "crds" / "nvlfleet.io_deepseekservings.yaml"
DASHBOARDS = REPO / "charts" / "nvlfleet" / "dashboards"
ALERT_RULES = REPO / "charts" / "nvlfleet" / "files" / "nvlfleet.rules.yaml"
FIELD_MANAGER = "nvlfleet-demo"
PROMETHEUS_PORT = 9090  # preferred; any free port when taken
SAMPLE_QUERY = "sum by (namespace, serving) (nvlfleet_revenue_per_hour)"
# The example the demo autoscales on waiting requests (`python -m localdemo load`): the P/D one, so prefill follows.
AUTOSCALED = "v41-flash-pd"
SCALE_CEILING = 3  # maxGroups = 3 × the example's decode groups: room on the demo's GB200 racks
WAITING_PER_GROUP = 8  # the target: waiting requests per decode group
SCALE_DOWN_SECONDS = 60  # HPA stabilisation before a scale-down (KEDA's default 300 s is long for a demo)
POLLING_SECONDS = 5  # how often KEDA asks the demo's Prometheus (it scrapes every 5 s)
_LIFECYCLE_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}

Say = Callable[[str], None]


def default_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NVLFLEET_DEMO_DIR") or REPO / ".demo").resolve()


@dataclasses.dataclass(frozen=True)
class Options:
    root: pathlib.Path = dataclasses.field(default_factory=default_root)
    namespace: str = "inference"
    fleet: str = "demo"
    racks: tuple[tuple[str, int], ...] = (("GB200", 4), ("GB300", 2))
    examples: tuple[pathlib.Path, ...] = EXAMPLES
    timeout: float = 300.0


class DemoError(RuntimeError):
    """A step failed; the message names the step and the log to read."""


@dataclasses.dataclass(frozen=True)
class Result:
    """What `up` printed, and the numbers behind its table (for tests and scripts)."""

    servings: list[dict[str, Any]]
    prometheus_url: str
    text: str
    traffic: list[frontdoor.Traffic] = dataclasses.field(default_factory=list)


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


# --- up ------------------------------------------------------------------------------------------------------


def up(options: Options | None = None, progress: Say = say) -> Result:
    options = options or Options()
    options.root.mkdir(parents=True, exist_ok=True)
    state = _State.load(options.root)
    started = time.monotonic()

    def step(message: str) -> None:
        progress(f"[{time.monotonic() - started:5.1f}s] {message}")

    step("local cluster")
    running = cluster.up(progress=lambda m: step(f"  {m}"))
    api = config.new_client_from_config(config_file=str(running.kubeconfig))
    try:
        nodes = _fleet(api, options, step)
        _prerequisites(api, running, options, step)
        metrics_port = _operator(running, options, state, _prometheus_url(state), step)
        _agent(running, options, state, step)
        prometheus = _prometheus(options, state, metrics_port, step)
        _apply_examples(running, options, step)
        servings = _wait_ready(api, options, step)
        step("every serving is Ready and reports tokens/s and $/GPU-h")
        step(f"requests through each serving's vllm-router ({frontdoor.REQUESTS} each)")
        traffic = frontdoor.exercise(options.root, options.namespace, servings, step)
        text = _report(api, running, options, prometheus, nodes) + _requests_report(traffic, servings)
    finally:
        api.close()
    state.save()
    print(text, flush=True)
    return Result(servings, prometheus, text, traffic)


def _fleet(api: client.ApiClient, options: Options, step: Say) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    present = _ready_nodes(api, options.fleet)
    for gpu, racks in options.racks:
        wanted = fleet.fleet_nodes(gpu, racks, fleet=options.fleet)
        if all(_same_labels(n, present.get(n["metadata"]["name"])) for n in wanted):
            step(f"fleet {options.fleet!r}: reusing {racks} {gpu} NVL72 rack(s), {len(wanted)} trays Ready")
            nodes += [present[n["metadata"]["name"]] for n in wanted]
            continue
        step(f"fleet {options.fleet!r}: {racks} {gpu} NVL72 rack(s) of 18 trays (kwok nodes)")
        nodes += fleet.apply_fleet(api, racks, gpu, fleet=options.fleet)
    computedomains.install_device_class(api)
    computedomains.publish_channels(api, [n["metadata"]["name"] for n in nodes])
    _wait_untainted(api, options, len(nodes), step)
    return nodes


def _ready_nodes(api: client.ApiClient, fleet_name: str) -> dict[str, dict[str, Any]]:
    """The fleet's Ready nodes by name, as plain dicts (like the ones ``fleet.apply_fleet`` returns)."""
    listed = client.CoreV1Api(api).list_node(label_selector=f"{fleet.LABEL_FLEET}={fleet_name}").items
    ready = {}
    for node in listed:
        if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
            ready[node.metadata.name] = api.sanitize_for_serialization(node)
    return ready


def _same_labels(wanted: dict[str, Any], present: dict[str, Any] | None) -> bool:
    labels = (present or {}).get("metadata", {}).get("labels") or {}
    return present is not None and all(labels.get(k) == v for k, v in wanted["metadata"]["labels"].items())


def _wait_untainted(api: client.ApiClient, options: Options, count: int, step: Say, timeout: float = 120.0) -> None:
    """Until the node lifecycle controller has lifted its not-ready taints from every tray of the fleet.

    A fresh controller-manager taints nodes it has not yet seen Ready; the operator rightly treats such trays
    as unusable, so servings applied in that moment would be placed around racks that are about to be free.
    """
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    said = False
    while True:
        nodes = core.list_node(label_selector=f"{fleet.LABEL_FLEET}={options.fleet}").items
        tainted = [n for n in nodes if any(t.key in _LIFECYCLE_TAINTS for t in n.spec.taints or [])]
        if len(nodes) >= count and not tainted:
            return
        if not said:
            step(f"waiting for the controller-manager to clear the not-ready taint ({len(tainted)} trays)")
            said = True
        if time.monotonic() > deadline:
            raise DemoError(f"{len(tainted)} trays still tainted not-ready after {timeout:.0f}s (is kwok running?)")
        time.sleep(1)


def _prerequisites(api: client.ApiClient, running: cluster.Cluster, options: Options, step: Say) -> None:
    step(f"DeepSeekServing CRD from {CRD.relative_to(REPO)}")
    _kubectl(running, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", str(CRD))
    _kubectl(running, "wait", "--for=condition=Established", "--timeout=60s", "crd/deepseekservings.nvlfleet.io")
    core = client.CoreV1Api(api)
    _wait_namespace_gone(core, options, step)
    with _exists_ok():
        core.create_namespace({"metadata": {"name": options.namespace}})
    # The GB200 examples mount their weights from a PVC; a pre-bound PV lets the scheduler place the pods.
    for claim in sorted(_claims(options.examples)):
        step(f"weights volume: PVC {options.namespace}/{claim} bound to a placeholder PV")
        pv = f"{options.namespace}-{claim}"
        with _exists_ok():
            core.create_persistent_volume(
                {
                    "metadata": {"name": pv, "labels": {fleet.LABEL_FLEET: options.fleet}},
                    "spec": {
                        "capacity": {"storage": "2Ti"},
                        "accessModes": ["ReadOnlyMany"],
                        "storageClassName": "",
                        "hostPath": {"path": "/mnt/models"},
                        "claimRef": {"namespace": options.namespace, "name": claim},
                    },
                }
            )
        with _exists_ok():
            core.create_namespaced_persistent_volume_claim(
                options.namespace,
                {
                    "metadata": {"name": claim},
                    "spec": {
                        "accessModes": ["ReadOnlyMany"],
                        "storageClassName": "",
                        "volumeName": pv,
                        "resources": {"requests": {"storage": "2Ti"}},
                    },
                },
            )


def _wait_namespace_gone(core: client.CoreV1Api, options: Options, step: Say, timeout: float = 120.0) -> None:
    """A namespace still terminating from `make demo-down` accepts nothing new: wait until it is gone."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        try:
            namespace = core.read_namespace(options.namespace)
        except ApiException as error:
            if error.status == 404:
                return
            raise
        if namespace.metadata.deletion_timestamp is None:
            return
        if not said:
            step(f"namespace {options.namespace} is still being deleted (make demo-down): waiting")
            said = True
        if time.monotonic() > deadline:
            raise DemoError(f"namespace {options.namespace} still terminating after {timeout:.0f}s")
        time.sleep(1)


def _operator(running: cluster.Cluster, options: Options, state: _State, prometheus: str, step: Say) -> int:
    metrics, webhook = state.port("metrics"), state.port("webhook")
    argv = [
        sys.executable, "-m", "nvlfleet.cli", "run",
        "--kubeconfig", str(running.kubeconfig),
        "--namespace", options.namespace,
        "--bind-address", "127.0.0.1",
        "--metrics-port", str(metrics),
        "--health-port", "0",
        "--webhook-port", str(webhook),
        "--webhook-host", "127.0.0.1",
        "--recheck-seconds", "10",
        # Scrape every 5 s and copy the figures into status every 10 s (defaults 15 s and 60 s), so the demo's
        # table fills within a minute.
        "--scrape-seconds", "5",
        "--status-metrics-seconds", "10",
        # examples/gb300-throughput.yaml caches its weights on the node: the one policy line that allows it.
        "--allow-weights-host-path", "/mnt/nvme/models",
        # One active operator per demo namespace, even if a second `make demo` starts from another checkout.
        "--leader-election-lease", "nvlfleet-demo",
        "--leader-election-namespace", options.namespace,
        # What the autoscaled serving's ScaledObject queries: the demo's own Prometheus, scraping the leaders.
        "--prometheus-address", prometheus,
    ]  # fmt: skip
    env = {"PYTHONUNBUFFERED": "1"}  # kopf's login and the operator both use --kubeconfig
    process = state.process("operator", argv)
    if process.running():
        step(f"operator: reusing pid {process.pid()} (log {_rel(process.log)})")
    else:
        pid = process.start(env)
        step(f"operator: started nvlfleet run, pid {pid}, metrics on 127.0.0.1:{metrics} (log {_rel(process.log)})")
    _wait_http(f"http://127.0.0.1:{metrics}/metrics", process, timeout=60)
    return metrics


def _agent(running: cluster.Cluster, options: Options, state: _State, step: Say) -> None:
    argv = [
        sys.executable, "-m", "localdemo", "agent",
        "--kubeconfig", str(running.kubeconfig),
        "--namespace", options.namespace,
        "--targets-file", str(_targets_file(options)),
        "--state-dir", str(options.root),
    ]  # fmt: skip
    process = state.process("agent", argv)
    if process.running():
        step(f"agent: reusing pid {process.pid()} (log {_rel(process.log)})")
        return
    path = os.pathsep.join(p for p in (str(REPO / "cluster"), os.environ.get("PYTHONPATH")) if p)
    pid = process.start({"PYTHONUNBUFFERED": "1", "PYTHONPATH": path})
    step(f"agent: started pid {pid}: ComputeDomain stand-in + simulated vLLM leaders (log {_rel(process.log)})")


def _prometheus_url(state: _State) -> str:
    return f"http://127.0.0.1:{state.port('prometheus', PROMETHEUS_PORT)}"


def _prometheus(options: Options, state: _State, metrics_port: int, step: Say) -> str:
    workdir = options.root / "prometheus"
    port = state.port("prometheus", PROMETHEUS_PORT)
    scrape = [
        {"job_name": "nvlfleet-operator", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]},
        {
            "job_name": "vllm",
            "file_sd_configs": [{"files": [str(_targets_file(options))], "refresh_interval": "5s"}],
        },
    ]
    server = localprometheus.Server(
        workdir, scrape, rule_files=[ALERT_RULES], scrape_interval="5s", evaluation_interval="5s", port=port
    )
    desired = yaml.safe_dump(server.config, sort_keys=False)
    config_file = workdir / "prometheus.yml"
    recorded = state.processes.get("prometheus") or []
    pid_file = workdir / "prometheus.pid"
    if processes.alive(processes.read_pid(pid_file), recorded) and _read(config_file) == desired:
        step(f"Prometheus: reusing {server.url}")
        return server.url
    processes.stop(processes.read_pid(pid_file), recorded, timeout=20.0)
    _targets_file(options).parent.mkdir(parents=True, exist_ok=True)
    if not _targets_file(options).exists():
        _targets_file(options).write_text("[]\n")
    step(f"Prometheus: starting {server.binaries.version().split(' (')[0]} on {server.url} (data in {_rel(workdir)})")
    try:
        server.start()
    except (RuntimeError, localprometheus.QueryError) as err:
        raise DemoError(f"Prometheus: {err}") from None
    state.processes["prometheus"] = processes.command_line(processes.read_pid(pid_file)) or []
    state.save()
    return server.url


def _apply_examples(running: cluster.Cluster, options: Options, step: Say) -> None:
    docs = []
    for path in options.examples:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == names.KIND:
                docs.append(_for_demo(doc, options))
    listed = ", ".join(d["metadata"]["name"] for d in docs)
    step(f"applying {len(docs)} DeepSeekServings from examples/ into namespace {options.namespace}: {listed}")
    _kubectl(
        running,
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=yamltext.dump_all(docs),
    )


def _for_demo(doc: dict[str, Any], options: Options) -> dict[str, Any]:
    """The example in the demo's namespace, kept on the demo's racks (the planner honours spec.pod.nodeSelector)."""
    doc = json.loads(json.dumps(doc))
    doc["metadata"]["namespace"] = options.namespace
    pod = doc["spec"].setdefault("pod", {})
    pod.setdefault("nodeSelector", {})[fleet.LABEL_FLEET] = options.fleet
    if doc["metadata"]["name"] == AUTOSCALED and not doc["spec"].get("autoscaling"):
        doc["spec"]["autoscaling"] = demo_autoscaling(doc["spec"]["roles"])
    return doc


def demo_autoscaling(roles: dict[str, Any]) -> dict[str, Any]:
    """``spec.autoscaling`` for the demo's autoscaled example: decode from its own size up to ``SCALE_CEILING``
    times that on waiting requests, prefill following in the example's own prefill:decode ratio."""
    decode = int(roles["decode"]["groups"])
    prefill = (roles.get("prefill") or {}).get("groups")
    spec = autoscaling.AutoscalingSpec(
        min_groups=decode,
        max_groups=decode * SCALE_CEILING,
        signal=autoscaling.Signal.WAITING_REQUESTS,
        target=WAITING_PER_GROUP,
        prefill_per_decode=int(prefill) / decode if prefill else None,
        scale_down_stabilization_seconds=SCALE_DOWN_SECONDS,
        polling_seconds=POLLING_SECONDS,
    )
    return spec.model_dump(by_alias=True, exclude_none=True, mode="json")


def _wait_ready(api: client.ApiClient, options: Options, step: Say) -> list[dict[str, Any]]:
    """Until every serving is Ready with tokens/s and $/GPU-h in its status; progress when something changes."""
    deadline = time.monotonic() + options.timeout
    last = ""
    while True:
        try:
            servings = _servings(api, options)
        except ApiException as error:  # 429 "storage is (re)initializing" while a CRD is (re)installed: retry
            if error.status != 429 or time.monotonic() > deadline:
                raise
            time.sleep(2)
            continue
        ready = [s for s in servings if _is_ready(s)]
        reporting = [s for s in ready if _reports(s)]
        line = (
            f"{len(ready)}/{len(servings)} servings Ready, {len(reporting)}/{len(servings)} report tokens/s and $/GPU-h"
        )
        if line != last:
            step(f"waiting: {line}")
            last = line
        if servings and len(reporting) == len(servings):
            return servings
        if time.monotonic() > deadline:
            waiting = ", ".join(f"{s['metadata']['name']} ({_why(s)})" for s in servings if s not in reporting)
            raise DemoError(
                f"not every serving reports after {options.timeout:.0f}s: {waiting}; "
                f"see {_rel(options.root / 'operator.log')} and {_rel(options.root / 'agent.log')}"
            )
        time.sleep(2)


def _servings(api: client.ApiClient, options: Options) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        names.GROUP, names.VERSION, options.namespace, names.PLURAL
    )
    return sorted(listed["items"], key=lambda s: s["metadata"]["name"])


def _is_ready(serving: dict[str, Any]) -> bool:
    ready, _, desired = str((serving.get("status") or {}).get("ready") or "").partition("/")
    return bool(desired) and ready == desired and desired != "0"


def _reports(serving: dict[str, Any]) -> bool:
    status = serving.get("status") or {}
    return bool(status.get("tokensPerSecond")) and bool(status.get("revenuePerGpuHour"))


def _why(serving: dict[str, Any]) -> str:
    status = serving.get("status") or {}
    false = [c for c in status.get("conditions") or [] if c.get("status") != "True"]
    if false:
        return f"{false[0]['type']}: {false[0].get('message') or false[0].get('reason')}"
    return f"ready {status.get('ready') or '-'}, no telemetry yet"


# --- the report ------------------------------------------------------------------------------------------------


def _report(
    api: client.ApiClient, running: cluster.Cluster, options: Options, prometheus: str, nodes: list[dict[str, Any]]
) -> str:
    dss = _kubectl(running, "get", "dss", "-n", options.namespace).stdout.rstrip()
    servings = _servings(api, options)
    sample = _sample_query(prometheus, options, servings)
    autoscaled = [s["metadata"]["name"] for s in servings if s["metadata"]["name"] == AUTOSCALED]
    lines = [
        "",
        f"$ kubectl get dss -n {options.namespace}",
        dss,
        "",
        "Placement per NVL72 rack (NVLink domain = nvidia.com/gpu.clique; one vLLM pod per 4-GPU tray):",
        _placement_table(api, options, nodes),
        "",
        f"Prometheus  {prometheus}  (scrapes the operator and every simulated vLLM leader every 5 s)",
        f"  query:    {SAMPLE_QUERY}",
        *[f"            {line}" for line in sample],
        f"  graph:    {prometheus}/graph?g0.expr={urllib.parse.quote(SAMPLE_QUERY)}&g0.tab=0",
        f"Grafana     import {_rel(DASHBOARDS)}/*.json with a Prometheus data source at {prometheus}",
        f"kubectl     export KUBECONFIG={running.kubeconfig} PATH={binaries.path_dir()}:$PATH",
        f"            kubectl describe dss -n {options.namespace}",
        f"Logs        {_rel(options.root)}/operator.log, agent.log, routers/*.log, prometheus/prometheus.log",
        *[
            f"Autoscale   make keda-up, then make demo-load SERVING={name} WAITING={4 * WAITING_PER_GROUP} "
            "(docs/autoscaling.md)"
            for name in autoscaled
        ],
        "Stop        make demo-down   (then make cluster-down to stop the cluster too)",
    ]
    return "\n".join(lines)


def _requests_report(traffic: list[frontdoor.Traffic], servings: list[dict[str, Any]]) -> str:
    """The requests table and a curl that was just answered (empty without a router)."""
    if not traffic:
        return ""
    served = {s["metadata"]["name"]: models.served_name(models.DeepSeekServing.model_validate(s)) for s in servings}
    first = traffic[0]
    return "\n".join(
        [
            "",  # the report before this ends without a newline: this one and the next make the blank line
            "",
            "Requests through each serving's vllm-router (the real 0.1.17 binary, one per router pod; it finds the",
            "engines by Kubernetes discovery with a token of its own ServiceAccount):",
            _table(*frontdoor.table(traffic)),
            f"Try it      {frontdoor.curl(first, served[first.serving])}",
        ]
    )


def _placement_table(api: client.ApiClient, options: Options, nodes: list[dict[str, Any]]) -> str:
    """Per rack: its domain, trays in use, and which serving's groups sit there (from the live pods)."""
    racks: dict[str, tuple[str, str, int]] = {}  # domain -> (GPU, rack label, trays)
    domain_of: dict[str, str] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        domain = labels.get(fleet.LABEL_CLIQUE, "")
        gpu = labels.get(fleet.LABEL_PRODUCT, "").removeprefix("NVIDIA-")
        name, rack, trays = racks.get(domain, (gpu, labels.get(fleet.LABEL_RACK, "?"), 0))
        racks[domain] = (name, rack, trays + 1)
        domain_of[node["metadata"]["name"]] = domain
    busy: dict[str, int] = {}
    groups: dict[str, dict[tuple[str, str], set[str]]] = {}
    engines = f"{names.SERVING_LABEL},{names.NAME_LABEL}=vllm"  # engine pods hold trays; router pods hold none
    pods = client.CoreV1Api(api).list_namespaced_pod(options.namespace, label_selector=engines).items
    for pod in pods:
        domain = domain_of.get(pod.spec.node_name or "")
        if domain is None:
            continue
        labels = pod.metadata.labels
        busy[domain] = busy.get(domain, 0) + 1
        key = (labels[names.SERVING_LABEL], labels.get(names.ROLE_LABEL, "decode"))
        groups.setdefault(domain, {}).setdefault(key, set()).add(
            labels.get(names.LWS_GROUP_KEY_LABEL, pod.metadata.name)
        )
    rows = []
    for domain, (gpu, rack, trays) in sorted(racks.items(), key=lambda item: (item[1][0], int(item[1][1]))):
        placed = groups.get(domain, {})
        what = ", ".join(f"{serving} {role} x{len(keys)}" for (serving, role), keys in sorted(placed.items()))
        used = busy.get(domain, 0)
        rows.append(
            [f"{gpu} rack {rack}", inventory.short_domain(domain), f"{used}/{trays}", str(trays - used), what or "-"]
        )
    return _table(["RACK", "NVLINK DOMAIN", "TRAYS USED", "FREE", "GROUPS (serving role x groups)"], rows)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]
    )


def _sample_query(prometheus: str, options: Options, servings: list[dict[str, Any]]) -> list[str]:
    """The sample query's answer, once Prometheus has scraped every serving's whole revenue.

    Right after start-up a serving's gauges may cover only some of its (role, domain) series; waiting until
    Prometheus agrees with the status (within 10%) keeps the two printed views of the same number consistent.
    """
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": SAMPLE_QUERY})
    expected = {
        s["metadata"]["name"]: float(s["status"]["revenuePerHour"])
        for s in servings
        if (s.get("status") or {}).get("revenuePerHour")
    }
    deadline = time.monotonic() + 45
    found: dict[str, float] = {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=5) as answer:
            result = json.load(answer)["data"]["result"]
        found = {
            r["metric"].get("serving", ""): float(r["value"][1])
            for r in result
            if r["metric"].get("namespace") == options.namespace
        }
        if found and all(abs(found.get(name, 0.0) - value) <= 0.1 * value for name, value in expected.items()):
            break
        time.sleep(1)
    if not found:
        return ["(no samples yet: Prometheus scrapes every 5 s)"]
    return [f"{options.namespace}/{name}: ${value:,.2f} per hour" for name, value in sorted(found.items())]


# --- down ------------------------------------------------------------------------------------------------------


def down(options: Options | None = None, progress: Say = say) -> list[str]:
    """Remove the demo's servings (while the operator still runs to finalize them), stop its processes by their
    recorded PIDs, then remove its namespace, nodes and volumes. Returns what was stopped."""
    options = options or Options()
    state = _State.load(options.root)
    running, health = cluster.status()
    up = running is not None and bool(health) and all(health.values())
    api = config.new_client_from_config(config_file=str(running.kubeconfig)) if up and running else None
    try:
        if api is not None:
            _delete_servings(api, options, progress)
        stopped = []
        for name in ("operator", "agent"):
            process = state.process(name, state.processes.get(name) or [])
            if process.running():
                stopped.append(f"{name} (pid {process.pid()})")
                process.stop()
        stopped += routers.stop_recorded(options.root)  # the agent stops its routers; these outlived a crash
        prometheus_pid = processes.read_pid(options.root / "prometheus" / "prometheus.pid")
        if processes.alive(prometheus_pid, state.processes.get("prometheus") or []):
            stopped.append(f"prometheus (pid {prometheus_pid})")
            processes.stop(prometheus_pid, state.processes["prometheus"], timeout=20.0)
        for line in stopped:
            progress(f"stopped {line}")
        # A new demo gets new leaders: old series would linger in queries for Prometheus' 5-minute lookback.
        shutil.rmtree(options.root / "prometheus" / "data", ignore_errors=True)
        _targets_file(options).unlink(missing_ok=True)
        pressure.path(options.root).unlink(missing_ok=True)  # a new demo starts with no queue
        if api is not None:
            _remove_objects(api, options, progress)
    finally:
        if api is not None:
            api.close()
    (options.root / _State.FILE).unlink(missing_ok=True)
    return stopped


def _delete_servings(api: client.ApiClient, options: Options, progress: Say, timeout: float = 30.0) -> None:
    """Delete the servings and wait for the operator's finalizer; without an operator, drop the finalizer."""
    custom = client.CustomObjectsApi(api)
    where = (names.GROUP, names.VERSION, options.namespace, names.PLURAL)
    try:
        servings = [s["metadata"]["name"] for s in custom.list_namespaced_custom_object(*where)["items"]]
    except ApiException:
        return  # no namespace (or no CRD): nothing to delete
    if servings:
        progress(f"deleting {len(servings)} DeepSeekServing(s) in {options.namespace}")
    for name in servings:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(*where, name)
    deadline = time.monotonic() + timeout
    while servings and time.monotonic() < deadline:
        servings = [s["metadata"]["name"] for s in custom.list_namespaced_custom_object(*where)["items"]]
        time.sleep(0.5)
    for name in servings:  # the operator is not running: nobody else will remove its finalizer
        with contextlib.suppress(ApiException):
            custom.patch_namespaced_custom_object(*where, name, {"metadata": {"finalizers": None}})


def _remove_objects(api: client.ApiClient, options: Options, progress: Say) -> None:
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.delete_namespace(options.namespace, propagation_policy="Background")
        progress(f"deleting namespace {options.namespace}")
    selector = f"{fleet.LABEL_FLEET}={options.fleet}"
    node_names = [n.metadata.name for n in core.list_node(label_selector=selector).items]
    computedomains.withdraw_channels(api, node_names)
    removed = fleet.delete_fleet(api, options.fleet)
    for pv in core.list_persistent_volume(label_selector=selector).items:
        with contextlib.suppress(ApiException):
            core.delete_persistent_volume(pv.metadata.name)
    progress(f"removed fleet {options.fleet!r} ({removed} nodes); the cluster keeps running (make cluster-down)")


# --- what runs (for `python -m localdemo load`) -----------------------------------------------------------------


def operator_metrics_url(options: Options) -> str | None:
    """The /metrics URL of the demo's operator while it runs (None: not running)."""
    state = _State.load(options.root)
    port = state.ports.get("metrics")
    running = state.process("operator", state.processes.get("operator") or []).running()
    return f"http://127.0.0.1:{port}/metrics" if port and running else None


def agent_running(options: Options) -> bool:
    state = _State.load(options.root)
    return state.process("agent", state.processes.get("agent") or []).running()


# --- state and processes ---------------------------------------------------------------------------------------


class _State:
    """Ports and the command line of each background process, in <root>/state.json."""

    FILE = "state.json"

    def __init__(self, root: pathlib.Path, data: dict[str, Any]) -> None:
        self.root = root
        self.ports: dict[str, int] = dict(data.get("ports") or {})
        self.processes: dict[str, list[str]] = dict(data.get("processes") or {})

    @classmethod
    def load(cls, root: pathlib.Path) -> _State:
        try:
            return cls(root, json.loads((root / cls.FILE).read_text()))
        except (OSError, ValueError):
            return cls(root, {})

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / (self.FILE + ".tmp")
        tmp.write_text(json.dumps({"ports": self.ports, "processes": self.processes}, indent=2) + "\n")
        tmp.replace(self.root / self.FILE)

    def port(self, name: str, preferred: int = 0) -> int:
        """The port recorded for ``name``; a new free one (``preferred`` if free) the first time."""
        if name not in self.ports:
            self.ports[name] = preferred if preferred and _free(preferred) else localprometheus.free_port()
            self.save()
        return self.ports[name]

    def process(self, name: str, argv: list[str]) -> _Process:
        return _Process(self, name, argv)


@dataclasses.dataclass
class _Process:
    state: _State
    name: str
    argv: list[str]

    @property
    def log(self) -> pathlib.Path:
        return self.state.root / f"{self.name}.log"

    @property
    def pid_file(self) -> pathlib.Path:
        return self.state.root / f"{self.name}.pid"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def running(self) -> bool:
        """Our process runs with exactly this command line (a changed one is restarted by ``start``)."""
        return processes.alive(self.pid(), self.argv)

    def start(self, env: dict[str, str]) -> int:
        processes.stop(self.pid(), self.state.processes.get(self.name) or [], timeout=20.0)
        # Detached: outlives `make demo`; stopped by `make demo-down`.
        process = processes.start(self.argv, self.log, self.pid_file, cwd=REPO, env={**os.environ, **env})
        self.state.processes[self.name] = self.argv
        self.state.save()
        return process.pid

    def stop(self) -> None:
        processes.stop(self.pid(), self.argv, timeout=20.0)
        self.pid_file.unlink(missing_ok=True)


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_http(url: str, process: _Process, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise DemoError(f"{process.name} exited; see {_rel(process.log)}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2):
            return
        time.sleep(0.3)
    raise DemoError(f"{process.name} did not answer {url} within {timeout:.0f}s; see {_rel(process.log)}")


# --- small helpers ---------------------------------------------------------------------------------------------


def _targets_file(options: Options) -> pathlib.Path:
    return options.root / "prometheus" / "vllm-targets.json"


def _claims(paths: Sequence[pathlib.Path]) -> set[str]:
    claims = set()
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            weights = ((doc or {}).get("spec") or {}).get("model", {}).get("weights") or {}
            if weights.get("cache") == "pvc":
                claims.add(weights["pvc"]["claimName"])
    return claims


def _kubectl(running: cluster.Cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(binaries.kubectl()), "--kubeconfig", str(running.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip() or done.stdout.strip()}")
    return done


@contextlib.contextmanager
def _exists_ok() -> Any:
    try:
        yield
    except ApiException as error:
        if error.status != 409:
            raise


def _rel(path: pathlib.Path) -> str:
    try:
        return str(path.relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(path)
