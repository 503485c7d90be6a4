"""Autoscaling for real: KEDA's operator and metrics API server on the local cluster, a real Prometheus scraping a
simulated decode engine, and the HPA KEDA creates driving the serving's scale subresource.

KEDA registers ``external.metrics.k8s.io`` through the API server's aggregation layer, which changes the cluster
for everyone on it (and an unanswered APIService makes discovery incomplete), so these tests run on a cluster of
their own: ``make integration`` runs them after the ``integration`` tests on its cluster (CI's is fresh and its
own), or by hand ``NVLFLEET_CLUSTER_DIR=<private dir> python -m localcluster up``, then ``pytest -m keda`` (they
carry the ``keda`` marker, not ``integration``, so ``pytest -m integration`` on a shared cluster leaves them out);
the ``keda`` fixture runs ``localcluster keda up`` on it and ``keda down`` after the module. The
queue depth of the simulated engine (``vllmsim.set_pressure``) is the load:

- it rises → decode 2 → 4 groups, prefill follows the ratio (1 → 2), no group spans two racks, and the HPA reports
  ScalingActive=True (KEDA's metrics server answers);
- it falls → back to 2 decode groups after the (short) scale-down stabilisation window;
- on a fleet with room for one prefill:decode unit only: InsufficientCapacity says the second unit is missing, and
  the HPA holds at ready < desired;
- with a Prometheus address where nothing listens: Autoscaling=False, SignalUnavailable, with KEDA's own reason
  (TriggerError), the HPA's, and the root cause from the KEDAScalerFailed Event KEDA records (the refused
  connection), a Warning Event on the serving, while the serving stays Ready at its spec's decode groups and
  the operator's gauges say so.

None of the autoscaled servings gets a Reverted event: the ScaledObject nvlfleet applies already holds what KEDA's
operator writes back into it (``spec.advanced.scalingModifiers: {}``), so there is no other manager's field to
remove.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pathlib
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import localprometheus
import pytest
from kubernetes import client
from localcluster import cluster as localcluster
from localcluster import fleet as localfleet
from localcluster import operatorprocess
from prometheus_client import parser

from nvlfleet.api import metric_names, reasons
from nvlfleet.facts import keda as keda_facts
from nvlfleet.sim import simulator, vllmsim
from support.servings import Cluster, groups_of, node_cliques, serving

# Not `integration`: `make integration` runs on the shared cluster, where registering KEDA's APIService would change
# API discovery for everyone. `pytest -m keda` on a private cluster runs these.
pytestmark = pytest.mark.keda

Wait = Callable[..., Any]
TARGET_WAITING = 8  # waiting requests per decode group the autoscaler holds
SCALE_DOWN_WINDOW = 20  # seconds; short, so the test sees the scale-down


@pytest.fixture(scope="module")
def keda_crds(local_cluster: Any) -> list[str]:
    return localcluster.keda_crds()


@pytest.fixture(scope="module")
def keda(keda_crds: list[str]) -> Iterator[dict[str, int]]:
    """KEDA up for this module's tests, and down after them: its processes stopped by their PIDs and the APIService
    removed, so whatever runs on the cluster next sees the discovery it saw before."""
    yield localcluster.keda_up()
    localcluster.keda_down()


class Engine:
    """One simulated decode engine in a thread of its own, whose queue depth the test turns."""

    def __init__(self, endpoint: vllmsim.Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self.endpoint, self.loop = endpoint, loop

    @property
    def target(self) -> str:
        return f"{self.endpoint.host}:{self.endpoint.port}"

    def waiting(self, requests: float) -> None:
        press = functools.partial(vllmsim.set_pressure, self.endpoint, waiting_requests=requests, kv_cache_usage=0.5)
        self.loop.call_soon_threadsafe(press)


@contextlib.contextmanager
def engine() -> Iterator[Engine]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sim = simulator.Simulator()
    load = vllmsim.Load(generation=1000, running_requests=16)
    added = asyncio.run_coroutine_threadsafe(sim.add("127.0.0.1", 0, load=load), loop).result(30)
    try:
        yield Engine(added, loop)
    finally:
        asyncio.run_coroutine_threadsafe(sim.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.contextmanager
def prometheus(tmp: pathlib.Path, target: str, namespace: str, name: str) -> Iterator[localprometheus.Server]:
    """A real Prometheus scraping the engine with the labels the serving's PodMonitor would give it."""
    labels = {"namespace": namespace, "serving": name, "role": "decode"}
    scrape = [{"job_name": "vllm", "static_configs": [{"targets": [target], "labels": labels}]}]
    with localprometheus.Server(tmp / "prometheus", scrape) as server:
        yield server


def decode_groups(cluster: Cluster, name: str) -> int:
    return int(cluster.get(name)["spec"]["roles"]["decode"]["groups"])


def placed(cluster: Cluster, name: str, role: str) -> int:
    placement = (cluster.get(name).get("status") or {}).get("placement") or {}
    return sum((placement.get(role) or {}).values())


def hpa(api_client: client.ApiClient, namespace: str, name: str) -> Any:
    return client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler(name, namespace)


def hpa_condition(api_client: client.ApiClient, namespace: str, name: str, ctype: str) -> Any:
    return next((c for c in (hpa(api_client, namespace, name).status.conditions or []) if c.type == ctype), None)


def reverted(cluster: Cluster, name: str) -> list[tuple[str, str, str]]:
    """The serving's Reverted events: fields of another manager nvlfleet removed from one of its children."""
    return [e for e in cluster.events(name) if e[1] == reasons.REVERTED]


def gauges(operator: Any, namespace: str, name: str) -> dict[tuple[str, str], float]:
    """The operator's serving gauges for ``name``, by (sample name, role or condition label)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, sample.labels.get("role") or sample.labels.get("condition") or ""): sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("namespace") == namespace and sample.labels.get("serving") == name
    }


def signal_unavailable(found: dict[str, Any] | None) -> dict[str, Any] | None:
    return found if found is not None and found["reason"] == reasons.SIGNAL_UNAVAILABLE else None


def scaler_said(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """The condition, once it quotes what KEDA's scaler said (its KEDAScalerFailed Event)."""
    said = signal_unavailable(found)
    return said if said is not None and f"({keda_facts.SCALER_FAILED}: " in said["message"] else None


def autoscaled(fleet: Any, name: str, address: str) -> dict[str, Any]:
    scaling = {
        "minGroups": 2,
        "maxGroups": 4,
        "signal": "waitingRequests",
        "target": TARGET_WAITING,
        "prefillPerDecode": 0.5,
        "scaleUpStabilizationSeconds": 0,
        "scaleDownStabilizationSeconds": SCALE_DOWN_WINDOW,
        "pollingSeconds": 5,
        "prometheus": {"address": address},
    }
    prefill = {"groups": 1, "parallelism": {"tensor": 1, "nodesPerGroup": 1}}
    obj = serving(name, fleet, groups=2, nodes=1, autoscaling=scaling)
    obj["spec"]["roles"]["prefill"] = prefill
    return obj


def test_with_kedas_api_the_operator_applies_a_scaled_object_kedas_crd_accepts_owned_by_the_serving(
    keda_crds: list[str],
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    assert "customresourcedefinition.apiextensions.k8s.io/scaledobjects.keda.sh" in keda_crds
    fleet = gb200_fleet(racks=1)
    start_operator()
    cluster.create(autoscaled(fleet, "so", "http://127.0.0.1:9090"))
    # KEDA's CRDs only: its operator is not started yet (the `keda` fixture starts it for the tests below), so
    # nothing reports on the ScaledObject and the condition says so rather than claiming it scales.
    wait_for(
        lambda: (cluster.condition("so", reasons.AUTOSCALING) or {}).get("reason") == reasons.WAITING_FOR_KEDA,
        120,
        "Autoscaling=False, WaitingForKeda (with KEDA already running by hand, KEDA itself reports instead)",
    )
    assert not cluster.is_("so", reasons.AUTOSCALING)
    custom = client.CustomObjectsApi(api_client)
    scaled = custom.get_namespaced_custom_object("keda.sh", "v1alpha1", cluster.namespace, "scaledobjects", "so")
    assert scaled["spec"]["scaleTargetRef"]["kind"] == "DeepSeekServing"
    assert [r["uid"] for r in scaled["metadata"]["ownerReferences"]] == [cluster.get("so")["metadata"]["uid"]]
    cluster.patch_spec("so", {"autoscaling": None})
    wait_for(
        lambda: (
            not custom.list_namespaced_custom_object("keda.sh", "v1alpha1", cluster.namespace, "scaledobjects")["items"]
        ),
        120,
        "the ScaledObject to be pruned once autoscaling is off",
    )


def test_queue_depth_scales_decode_up_and_back_down_and_prefill_follows_the_ratio(
    keda: dict[str, int],
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
    tmp_path: pathlib.Path,
) -> None:
    fleet = gb200_fleet(racks=2)
    with engine() as sim, prometheus(tmp_path, sim.target, cluster.namespace, "auto") as prom:
        start_operator()
        sim.waiting(0)
        cluster.create(autoscaled(fleet, "auto", prom.url))
        wait_for(lambda: cluster.ready("auto"), 180, "the serving to report Ready at 2 decode groups")
        wait_for(lambda: hpa(api_client, cluster.namespace, "auto"), 60, "KEDA to create the HPA")
        active = wait_for(
            lambda: (c := hpa_condition(api_client, cluster.namespace, "auto", "ScalingActive")) and c.status == "True",
            120,
            "the HPA to read the external metric through KEDA's metrics server",
        )
        assert active

        sim.waiting(4 * TARGET_WAITING)  # 4 groups' worth of waiting requests
        wait_for(lambda: decode_groups(cluster, "auto") == 4, 180, "the HPA to scale decode to 4 groups")
        wait_for(
            lambda: placed(cluster, "auto", "decode") == 4 and placed(cluster, "auto", "prefill") == 2,
            120,
            "4 decode and 2 prefill groups (ratio 0.5) to be placed",
        )
        wait_for(lambda: cluster.ready("auto"), 180, "the 6 groups to be Ready")
        cliques = node_cliques(api_client, fleet)
        for (lws, index), pods in groups_of(cluster.pods("auto")).items():
            assert len({cliques[p.spec.node_name] for p in pods}) == 1, f"group {lws}/{index} spans racks"

        sim.waiting(0)
        wait_for(lambda: decode_groups(cluster, "auto") == 2, 60 + SCALE_DOWN_WINDOW * 4, "decode back to 2")
        wait_for(lambda: placed(cluster, "auto", "prefill") == 1, 120, "prefill to follow back to 1 group")
        assert cluster.is_("auto", reasons.AUTOSCALING), cluster.condition("auto", reasons.AUTOSCALING)
        assert reverted(cluster, "auto") == []


def test_on_a_full_fleet_the_scale_up_places_what_fits_and_the_hpa_holds(
    keda: dict[str, int],
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
    tmp_path: pathlib.Path,
) -> None:
    # 14 of the rack's 18 trays are cordoned: 4 free, room for one unit (2 decode + 1 prefill), never two. Cordoned, not
    # occupied: the operator runs with --namespace and so never sees another namespace's pods, only the nodes.
    fleet = gb200_fleet(racks=1, oddities=localfleet.Oddities(rack=0, cordoned=14))
    with engine() as sim, prometheus(tmp_path, sim.target, cluster.namespace, "full") as prom:
        start_operator()
        sim.waiting(0)
        cluster.create(autoscaled(fleet, "full", prom.url))
        wait_for(lambda: cluster.ready("full"), 180, "the serving to report Ready at 2 decode groups")

        sim.waiting(4 * TARGET_WAITING)
        wait_for(lambda: decode_groups(cluster, "full") == 4, 180, "the HPA to ask for 4 decode groups")
        wait_for(lambda: cluster.is_("full", reasons.INSUFFICIENT_CAPACITY), 120, "InsufficientCapacity to say so")
        message = (cluster.condition("full", reasons.INSUFFICIENT_CAPACITY) or {}).get("message", "")
        # Prefill and decode are placed together in units of 1 prefill + 2 decode groups (3 trays): 3 of the 4 free
        # trays hold the first unit, so the second unit (the scale-up's 2 decode + 1 prefill) is what is missing.
        assert "1 more unit" in message and "3 free nodes" in message, message
        status = hpa(api_client, cluster.namespace, "full").status
        assert status.desired_replicas == 4 and status.current_replicas < 4, status


def test_an_unreachable_prometheus_says_signal_unavailable_with_kedas_reason_and_decode_keeps_its_spec_groups(
    keda: dict[str, int],
    cluster: Cluster,
    gb200_fleet: Callable[..., Any],
    start_operator: Callable[..., Any],
    wait_for: Wait,
    api_client: client.ApiClient,
) -> None:
    fleet = gb200_fleet(racks=1)
    operator = start_operator()
    nothing_listens = f"http://127.0.0.1:{operatorprocess.free_port()}"  # bound, read, closed: nobody answers
    cluster.create(autoscaled(fleet, "blind", nothing_listens))
    wait_for(lambda: cluster.ready("blind"), 180, "the serving to report Ready at 2 decode groups")
    # KEDA polls every pollingSeconds (5) and the HPA controller syncs every 15 s; minutes are plenty.
    found = wait_for(
        lambda: signal_unavailable(cluster.condition("blind", reasons.AUTOSCALING)), 300, "SignalUnavailable"
    )
    assert found["status"] == "False"
    assert f"Ready=False ({keda_facts.TRIGGER_ERROR}: " in found["message"], found["message"]
    assert nothing_listens in found["message"], found["message"]
    # The root cause is in the Event KEDA's scale loop records about the ScaledObject, read at the next pass.
    said = wait_for(
        lambda: scaler_said(cluster.condition("blind", reasons.AUTOSCALING)),
        120,
        "KEDA's scaler error in the condition",
    )
    assert "connection refused" in said["message"], said["message"]
    warned = [e for e in cluster.events("blind") if e[:2] == ("Warning", reasons.AUTOSCALING)]
    assert any(m.startswith("KEDA cannot read the waitingRequests signal") for _, _, m in warned), warned

    assert operator.running(), operator.tail()
    assert decode_groups(cluster, "blind") == 2 and placed(cluster, "blind", "decode") == 2
    assert cluster.ready("blind")
    seen = gauges(operator, cluster.namespace, "blind")
    assert seen[(metric_names.SERVING_CONDITION, reasons.AUTOSCALING)] == 0
    assert seen[(metric_names.GROUPS_DESIRED, "decode")] == 2
    assert seen[(metric_names.GROUPS_READY, "decode")] == 2
    # Nothing measured (the kwok pods run no engine): no throughput gauge at all, rather than a 0 that reads as idle.
    assert not [key for key in seen if key[0] == metric_names.TOKENS_PER_SECOND], seen
    assert reverted(cluster, "blind") == []
