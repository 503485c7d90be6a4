"""The demo's data plane: what the NVIDIA driver and the vLLM leaders would be on real racks, following the cluster.

One background process (``python -m localdemo agent``), one pass per second over the demo namespace:

    ComputeDomains ──► ResourceClaimTemplates (localcluster.computedomains: the pods' IMEX claims can schedule)
    leader pods (Running, with an IP) ──► one simulated vLLM 0.33 server on podIP:http at workload.load(...)
                                          (a P/D serving's prefill a KV producer, its decode a KV consumer)
                                      ──► Prometheus file_sd targets (labels namespace, serving, role, domain, pod)
    router pods (Running)             ──► the real vllm-router binary with the pod's args (``localdemo.routers``)
    <state dir>/load.json             ──► waiting requests spread over a serving's decode leaders
                                          (``localdemo.pressure``, written by ``python -m localdemo load``)

With ``--measured-traffic`` every simulated leader publishes no rates of its own (``vllmsim.Load()``): its /metrics
count exactly the requests it answered, so a test can hold the operator's tokens/s and revenue to the requests it
sent. The demo itself runs in published-rate mode (``workload.load``), for its throughput figures.

kwok gives every pod a loopback IP, so the simulated server listens exactly where the operator looks for the
leader's /metrics. A leader that goes away loses its server; a serving whose shape changes gets new rates. The
operator is not told anything: it finds the servers the way it finds real vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import signal
from typing import Any

import pydantic
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import computedomains

from localdemo import pressure, routers, workload
from nvlfleet.api import models, names
from nvlfleet.core import render
from nvlfleet.sim import kvtransfer, simulator, vllmsim

log = logging.getLogger("localdemo.agent")

LEADER_SELECTOR = f"{names.SERVING_LABEL},{names.LWS_WORKER_INDEX_LABEL}=0"
MEASURED = vllmsim.Load()  # no published rates: a leader's counters hold exactly the requests it answered


@dataclasses.dataclass(frozen=True)
class Leader:
    """One group leader as the cluster shows it, and the load its simulated server carries."""

    namespace: str
    serving: str
    role: models.RoleName
    pod: str
    domain: str
    load: vllmsim.Load
    engines: int
    model: str
    kv: kvtransfer.KvConfig | None = None

    def labels(self) -> dict[str, str]:
        return {"namespace": self.namespace, "serving": self.serving, "role": self.role.value}


class Agent:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        targets_file: pathlib.Path,
        front_doors: routers.Routers,
        *,
        measured_traffic: bool = False,
        load_dir: pathlib.Path | None = None,
    ) -> None:
        self.api = api
        self.measured_traffic = measured_traffic
        self.load_dir = load_dir  # where `python -m localdemo load` leaves the queue depths (None: no queues)
        self.namespace = namespace
        self.targets_file = targets_file
        self.routers = front_doors
        self.sim = simulator.Simulator()
        self.serving: dict[tuple[str, int], tuple[vllmsim.Endpoint, Leader]] = {}
        self._domains: dict[str, str] = {}  # node name -> NVLink domain (its clique label)
        self._targets = ""

    async def run(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        log.info("following namespace %s", self.namespace)
        while not stop.is_set():
            try:
                await self.sync()
            except (ApiException, OSError) as err:  # the API server restarting: try again next pass
                log.warning("pass failed: %s", err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
        await asyncio.to_thread(self.routers.close)
        await self.sim.close()

    async def sync(self) -> None:
        made = await asyncio.to_thread(computedomains.sync_templates, self.api, self.namespace)
        if made:
            log.info("created %d ResourceClaimTemplate(s) for new ComputeDomains", made)
        leaders = await asyncio.to_thread(self.leaders)
        for address in set(self.serving) - set(leaders):
            endpoint, gone = self.serving.pop(address)
            await self.sim.set_mode(endpoint, vllmsim.Mode.DOWN)
            log.info("leader %s/%s gone: stopped its server on %s:%d", gone.namespace, gone.pod, *address)
        for address, leader in leaders.items():
            await self.serve(address, leader)
        await asyncio.to_thread(self.routers.sync)
        self.write_targets()

    async def serve(self, address: tuple[str, int], leader: Leader) -> None:
        current = self.serving.get(address)
        if current is not None and current[1] == leader:
            return
        if current is not None and (current[1].engines, current[1].model, current[1].kv) == (
            leader.engines,
            leader.model,
            leader.kv,
        ):
            current[0].set_load(leader.load)
            self.serving[address] = (current[0], leader)
            log.info("leader %s/%s: new load %s", leader.namespace, leader.pod, leader.load)
            return
        if current is not None:
            await self.sim.set_mode(current[0], vllmsim.Mode.DOWN)
        try:
            endpoint = await self.sim.add(
                *address, load=leader.load, engines=leader.engines, model_name=leader.model, kv=leader.kv
            )
        except OSError as err:
            log.warning("cannot listen on %s:%d for %s/%s: %s", *address, leader.namespace, leader.pod, err)
            return
        self.serving[address] = (endpoint, leader)
        log.info(
            "leader %s/%s (%s %s, domain %s) on %s: %d engine(s), %.0f tokens/s",
            leader.namespace,
            leader.pod,
            leader.serving,
            leader.role.value,
            leader.domain,
            endpoint.url,
            leader.engines,
            leader.load.prompt + leader.load.generation,
        )

    def leaders(self) -> dict[tuple[str, int], Leader]:
        """Every Running leader pod with an IP, keyed by the address its vLLM server listens on."""
        custom = client.CustomObjectsApi(self.api)
        servings: dict[str, models.DeepSeekServing] = {}
        for obj in custom.list_namespaced_custom_object(names.GROUP, names.VERSION, self.namespace, names.PLURAL)[
            "items"
        ]:
            with contextlib.suppress(pydantic.ValidationError):
                servings[obj["metadata"]["name"]] = models.DeepSeekServing.model_validate(obj)
        pods = client.CoreV1Api(self.api).list_namespaced_pod(self.namespace, label_selector=LEADER_SELECTOR).items
        found: dict[tuple[str, int], Leader] = {}
        for pod in pods:
            labels = pod.metadata.labels or {}
            serving = servings.get(labels[names.SERVING_LABEL])
            if serving is None or pod.status.phase != "Running" or not pod.status.pod_ip:
                continue
            try:
                role = models.RoleName(labels.get(names.ROLE_LABEL, "decode"))
                load, engines = workload.load(serving, role)
                load = MEASURED if self.measured_traffic else load
            except (ValueError, KeyError) as err:
                log.warning("no load for %s/%s: %s", self.namespace, pod.metadata.name, err)
                continue
            address = (pod.status.pod_ip, _http_port(pod))
            found[address] = Leader(
                namespace=self.namespace,
                serving=serving.metadata.name,
                role=role,
                pod=pod.metadata.name,
                domain=self.domain(pod.spec.node_name, serving.spec.placement.domain_label),
                load=load,
                engines=engines,
                model=models.served_name(serving),
                kv=workload.kv_config(serving, role),
            )
        return pressed(found, pressure.read(self.load_dir) if self.load_dir else {})

    def domain(self, node: str | None, label: str) -> str:
        if node and node not in self._domains:
            labels = client.CoreV1Api(self.api).read_node(node).metadata.labels or {}
            self._domains[node] = labels.get(label, node)
        return self._domains.get(node or "", "unknown")

    def write_targets(self) -> None:
        """Prometheus file_sd: one target per leader, labelled like the dashboards' vllm: queries expect."""
        groups = [
            {"targets": [f"{host}:{port}"], "labels": {**leader.labels(), "domain": leader.domain, "pod": leader.pod}}
            for (host, port), (_, leader) in sorted(self.serving.items())
        ] + self.routers.targets()
        text = json.dumps(groups, indent=1) + "\n"
        if text == self._targets:
            return
        self.targets_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.targets_file.with_name(self.targets_file.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.targets_file)  # Prometheus never reads half a file
        self._targets = text


def pressed(leaders: dict[tuple[str, int], Leader], wanted: dict[pressure.Key, float]) -> dict[tuple[str, int], Leader]:
    """``leaders`` with each serving's waiting requests (``wanted``) spread evenly over its decode leaders."""
    decode: dict[pressure.Key, list[tuple[str, int]]] = {}
    for address, leader in leaders.items():
        if leader.role == models.RoleName.DECODE:
            decode.setdefault((leader.namespace, leader.serving), []).append(address)
    out = dict(leaders)
    for key, addresses in decode.items():
        share = pressure.shares(wanted.get(key, 0.0), len(addresses))
        for address in addresses:
            load = out[address].load
            queued = vllmsim.with_pressure(load, waiting_requests=share, kv_cache_usage=load.kv_cache_usage)
            out[address] = dataclasses.replace(out[address], load=queued)
    return out


def _http_port(pod: Any) -> int:
    ports = [p for c in pod.spec.containers for p in c.ports or []]
    named = [p.container_port for p in ports if p.name == render.HTTP_PORT_NAME]
    return int(named[0] if named else ports[0].container_port if ports else 8000)


def main(
    kubeconfig: pathlib.Path,
    namespace: str,
    targets_file: pathlib.Path,
    state_dir: pathlib.Path,
    *,
    measured_traffic: bool = False,
) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            front_doors = routers.Routers(api, kubeconfig, namespace, state_dir)
            agent = Agent(
                api, namespace, targets_file, front_doors, measured_traffic=measured_traffic, load_dir=state_dir
            )
            await agent.run(stop)
        finally:
            api.close()

    asyncio.run(run())
    return 0
