"""`python -m localdemo load <serving> --waiting N`: queue requests at one serving's decode engines, watch it scale.

The demo's autoscaling loop, end to end (issue #19): this command → ``<root>/load.json`` (``localdemo.pressure``) →
the agent spreads N waiting requests over the serving's simulated decode leaders → their ``/metrics`` → the demo's
Prometheus → the ScaledObject's query, which KEDA's metrics server answers → the HorizontalPodAutoscaler KEDA made →
the serving's scale subresource (``spec.roles.decode.groups``) → the operator plans, places and reports the groups.

The watch prints, on every change, what each step of that loop says: the queue as the ScaledObject's own query
reads it from Prometheus, the decode groups the HPA wants, and per role the groups desired and ready as the operator
exports them (``nvlfleet_groups_desired`` / ``nvlfleet_groups_ready``, the serving dashboard's "Desired vs ready
groups" panel). It ends when the loop has settled where the HPA's arithmetic says it must (``expected_decode``),
or at the timeout, with one line saying which.

It refuses, with one line saying what to do and exit code 2, what cannot scale: a demo that is not running, a
serving without ``spec.autoscaling`` (the demo autoscales ``demo.AUTOSCALED``), a signal other than
waitingRequests, and a cluster without KEDA (``python -m localcluster keda up``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster import cluster, keda
from prometheus_client import parser as exposition

from localdemo import demo, pressure
from nvlfleet.api import autoscaling, metric_names, models, names, reasons
from nvlfleet.core import autoscaling as scaling_core

# kube-controller-manager's --horizontal-pod-autoscaler-tolerance (the local cluster keeps the default): the HPA
# leaves the replicas alone while the metric is within 10% of the target.
HPA_TOLERANCE = 0.1
HPA_SYNC_SECONDS = 15  # --horizontal-pod-autoscaler-sync-period, default
GROUPS_UP_SECONDS = 240  # new groups scheduled, started and Ready on a loaded 2-core machine, with margin
POLL_SECONDS = 2.0
EXIT_REFUSED = 2
EXIT_NOT_SETTLED = 1
EXIT_INTERRUPTED = 130

Say = Callable[[str], None]


class Refused(Exception):
    """The serving cannot be scaled by queue depth here; the message is one line saying what to do."""


def say(message: str) -> None:
    print(f"load: {message}", flush=True)


# --- pure parts -------------------------------------------------------------------------------------------------


def refusal(
    serving: models.DeepSeekServing, status: Mapping[str, Any], keda_api: Mapping[str, Any] | None
) -> str | None:
    """Why ``serving`` (its ``status`` as stored) cannot be scaled by ``load``; None: it can. ``keda_api`` is the
    external metrics APIService KEDA registers, as the API server returns it (None: absent)."""
    name = serving.metadata.name
    scaling = serving.spec.autoscaling
    if scaling is None:
        return (
            f"{name} has no spec.autoscaling, so nothing scales it: the demo autoscales {demo.AUTOSCALED} "
            f"(python -m localdemo load {demo.AUTOSCALED} --waiting 32), or give {name} spec.autoscaling "
            "(docs/autoscaling.md)"
        )
    if scaling.signal is not autoscaling.Signal.WAITING_REQUESTS:
        return (
            f"{name} scales on {scaling.signal.value}, and this command queues requests (the "
            f"{autoscaling.Signal.WAITING_REQUESTS.value} signal): set spec.autoscaling.signal to "
            f"{autoscaling.Signal.WAITING_REQUESTS.value} to drive it from here"
        )
    if not keda_available(keda_api):
        return (
            f"KEDA is not running on this cluster (APIService {keda.APISERVICE} is not Available), so nothing turns "
            "the queue into groups: run python -m localcluster keda up (the first time it builds KEDA, about "
            "20 min), then this command again"
        )
    for cond in status.get("conditions") or []:
        if cond.get("type") == reasons.AUTOSCALING and cond.get("reason") == reasons.NO_PROMETHEUS_ADDRESS:
            return f"{name}: {cond.get('message')}"
    return None


def keda_available(apiservice: Mapping[str, Any] | None) -> bool:
    conditions = ((apiservice or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


def expected_decode(scaling: autoscaling.AutoscalingSpec, ready: int, waiting: float) -> int:
    """The decode groups the HPA settles at for ``waiting`` requests, from ``ready`` decode groups (the scale
    subresource's status.replicas, which the HPA divides by): within the tolerance it keeps them, else it asks for
    ceil(waiting / target), between minGroups and maxGroups (its AverageValue arithmetic for an external metric)."""
    if ready > 0 and abs(waiting / (scaling.target * ready) - 1.0) <= HPA_TOLERANCE:
        wanted = ready
    else:
        wanted = math.ceil(waiting / scaling.target)
    return min(max(wanted, scaling.min_groups), scaling.max_groups)


def expected_prefill(serving: models.DeepSeekServing, decode: int) -> int | None:
    """The prefill groups that follow ``decode`` decode groups (None: no prefill role)."""
    prefill = serving.spec.roles.prefill
    if prefill is None:
        return None
    roles = serving.spec.roles.model_copy(
        update={"decode": serving.spec.roles.decode.model_copy(update={"groups": decode})}
    )
    followed = scaling_core.prefill_groups(serving.spec.model_copy(update={"roles": roles}))
    return prefill.groups if followed is None else followed


def default_timeout(scaling: autoscaling.AutoscalingSpec, scaling_down: bool) -> float:
    """Seconds to watch: the HPA's stabilisation window of that direction, a KEDA poll and an HPA sync, and the
    time new groups take to be Ready."""
    window = scaling.scale_down_stabilization_seconds if scaling_down else scaling.scale_up_stabilization_seconds
    return float(window + scaling.polling_seconds + HPA_SYNC_SECONDS + GROUPS_UP_SECONDS)


@dataclasses.dataclass(frozen=True)
class Target:
    waiting: float
    decode: int
    prefill: int | None


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at the loop: each field None when that step has nothing to say yet."""

    queue: float | None = None  # the ScaledObject's query, as Prometheus answers it
    hpa_desired: int | None = None
    hpa_problem: str | None = None  # the HPA's ScalingActive/AbleToScale when not True
    groups: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # role -> (desired, ready)
    capacity: str | None = None  # InsufficientCapacity's message while True
    waiting_for: str | None = None  # what is missing before there is anything to watch


def settled(seen: Observation, target: Target) -> bool:
    """Prometheus reads the new queue, the HPA wants what its arithmetic says, every role's groups are all ready."""
    if seen.queue is None or abs(seen.queue - target.waiting) > 0.5 or seen.hpa_desired != target.decode:
        return False
    wanted = {models.RoleName.DECODE.value: target.decode}
    if target.prefill is not None:
        wanted[models.RoleName.PREFILL.value] = target.prefill
    return all(seen.groups.get(role) == (groups, groups) for role, groups in wanted.items()) and all(
        desired == ready for desired, ready in seen.groups.values()
    )


def progress(seen: Observation) -> str:
    """The state of the loop in one line (printed when it changes)."""
    if seen.waiting_for:
        return f"waiting for {seen.waiting_for}"
    queue = "queue -" if seen.queue is None else f"queue {seen.queue:g}"
    hpa = "HPA -" if seen.hpa_desired is None else f"HPA wants {seen.hpa_desired}"
    roles = _roles(seen.groups) or "no group gauges yet"
    parts = [queue, hpa, roles]
    if seen.hpa_problem:
        parts.append(seen.hpa_problem)
    if seen.capacity:
        parts.append(f"InsufficientCapacity: {seen.capacity}")
    return " · ".join(parts)


def _roles(groups: Mapping[str, tuple[int, int]]) -> str:
    # decode first: it is what the HPA scales; the roles following it after.
    order = sorted(groups, key=lambda role: (role != models.RoleName.DECODE.value, role))
    return ", ".join(f"{role} {groups[role][1]}/{groups[role][0]} ready" for role in order)


def ending(seen: Observation, target: Target, elapsed: float, done: bool) -> str:
    groups = _roles(seen.groups) or "no group gauges"
    if done:
        return f"settled after {elapsed:.0f}s: {groups} at {target.waiting:g} waiting requests"
    return f"not settled after {elapsed:.0f}s (expected decode {target.decode}): {progress(seen)}"


def groups_from_exposition(text: str, namespace: str, serving: str) -> dict[str, tuple[int, int]]:
    """Per role, (desired, ready) groups of the serving from the operator's /metrics text."""
    desired: dict[str, int] = {}
    ready: dict[str, int] = {}
    for family in exposition.text_string_to_metric_families(text):
        into = {metric_names.GROUPS_DESIRED: desired, metric_names.GROUPS_READY: ready}.get(family.name)
        if into is None:
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("namespace") == namespace and labels.get("serving") == serving:
                into[labels["role"]] = int(sample.value)
    return {role: (desired[role], ready.get(role, 0)) for role in desired}


# --- the command ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    serving: str
    waiting: int
    timeout: float | None = None  # None: default_timeout
    watch: bool = True
    options: demo.Options = dataclasses.field(default_factory=demo.Options)


def run(request: Request, out: Say = say, clock: Callable[[], float] = time.monotonic) -> int:
    """Queue the requests and watch; the exit code (0 settled, 1 not settled, 2 refused, 130 interrupted)."""
    options = request.options
    metrics = demo.operator_metrics_url(options)
    if metrics is None or not demo.agent_running(options):
        out(f"the demo is not running here (no operator or agent recorded in {options.root}): start it with make demo")
        return EXIT_REFUSED
    running, health = cluster.status()
    if running is None or not health or not all(health.values()):
        out("the local cluster is not running: start the demo with make demo")
        return EXIT_REFUSED
    api = config.new_client_from_config(config_file=str(running.kubeconfig))
    try:
        try:
            serving, status = _serving(api, options.namespace, request.serving)
            why = refusal(serving, status, _apiservice(api))
            if why is not None:
                raise Refused(why)
        except Refused as refused:
            out(str(refused))
            return EXIT_REFUSED
        scaling = serving.spec.autoscaling
        assert scaling is not None
        # The HPA divides by the ready decode groups (the scale subresource's status.replicas).
        replicas = status.get("replicas")
        ready = int(replicas) if replicas is not None else serving.spec.roles.decode.groups
        before = pressure.read(options.root).get((options.namespace, request.serving), 0.0)
        pressure.write(options.root, options.namespace, request.serving, request.waiting)
        decode = expected_decode(scaling, ready, request.waiting)
        target = Target(request.waiting, decode, expected_prefill(serving, decode))
        follows = "" if target.prefill is None else f", prefill {target.prefill}"
        out(
            f"{options.namespace}/{request.serving}: {before:g} → {request.waiting} requests waiting at its decode "
            f"engines (target {scaling.target:g} per group, {scaling.min_groups}..{scaling.max_groups} groups): "
            f"the HPA should settle at decode {decode}{follows}"
        )
        if not request.watch:
            return 0
        timeout = request.timeout if request.timeout is not None else default_timeout(scaling, decode < ready)
        return _watch(api, metrics, options.namespace, request.serving, target, timeout, out, clock)
    finally:
        api.close()


def _watch(
    api: client.ApiClient,
    metrics: str,
    namespace: str,
    name: str,
    target: Target,
    timeout: float,
    out: Say,
    clock: Callable[[], float],
) -> int:
    started = clock()
    last = ""
    try:
        while True:
            seen = observe(api, metrics, namespace, name)
            elapsed = clock() - started
            done = settled(seen, target)
            line = progress(seen)
            if line != last:
                out(f"{_stamp()} [{elapsed:5.1f}s] {line}")
                last = line
            if done or elapsed > timeout:
                out(f"{_stamp()} [{elapsed:5.1f}s] {ending(seen, target, elapsed, done)}")
                return 0 if done else EXIT_NOT_SETTLED
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        out(
            f"{_stamp()} stopped watching; the queue stays at {target.waiting:g} "
            f"(python -m localdemo load {name} --waiting 0 lowers it)"
        )
        return EXIT_INTERRUPTED


def observe(api: client.ApiClient, metrics: str, namespace: str, name: str) -> Observation:
    """What Prometheus, the HPA and the operator say about the serving right now."""
    try:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, name
        )
        scaled = _scaled_object(api, namespace, name)
        hpa_name = ((scaled or {}).get("status") or {}).get("hpaName")  # KEDA's, once it made the HPA
        hpa = _hpa(api, namespace, hpa_name) if hpa_name else None
    except ApiException as error:  # the API server restarting, or the serving deleted: say so and look again
        return Observation(waiting_for=f"the API server ({error.status} {error.reason})")
    groups = _groups(metrics, namespace, name)
    capacity = _condition(obj, reasons.INSUFFICIENT_CAPACITY)
    if scaled is None:
        scaling = _condition(obj, reasons.AUTOSCALING, status="False")
        what = f"the operator's ScaledObject ({scaling})" if scaling else "the operator's ScaledObject"
        return Observation(groups=groups, waiting_for=what)
    return Observation(
        queue=_queue(scaled),
        hpa_desired=None if hpa is None else hpa.status.desired_replicas,
        hpa_problem=None if hpa is None else _hpa_problem(hpa),
        groups=groups,
        capacity=capacity,
    )


def _serving(api: client.ApiClient, namespace: str, name: str) -> tuple[models.DeepSeekServing, dict[str, Any]]:
    """The serving and its stored status."""
    try:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, name
        )
    except ApiException as error:
        if error.status == 404:
            raise Refused(
                f"no DeepSeekServing {name} in namespace {namespace} (kubectl get dss -n {namespace})"
            ) from None
        raise
    try:
        return models.DeepSeekServing.model_validate(obj), dict(obj.get("status") or {})
    except pydantic.ValidationError as error:
        raise Refused(f"{namespace}/{name} does not read as a DeepSeekServing: {error.errors()[0]['msg']}") from None


def _apiservice(api: client.ApiClient) -> dict[str, Any] | None:
    try:
        found = client.ApiregistrationV1Api(api).read_api_service(keda.APISERVICE)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(api.sanitize_for_serialization(found))


def _scaled_object(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    kind = names.SCALED_OBJECT
    group, version = kind.api_version.split("/")
    try:
        # Named like the serving (nvlfleet.core.autoscaling.scaled_object).
        return dict(
            client.CustomObjectsApi(api).get_namespaced_custom_object(group, version, namespace, kind.plural, name)
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _hpa(api: client.ApiClient, namespace: str, name: str) -> Any:
    try:
        return client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _hpa_problem(hpa: Any) -> str | None:
    for cond in hpa.status.conditions or []:
        if cond.type in ("AbleToScale", "ScalingActive") and cond.status != "True":
            return f"HPA {cond.type}={cond.status} ({cond.reason})"
    return None


def _queue(scaled: Mapping[str, Any]) -> float | None:
    """The ScaledObject's own query, asked of its own Prometheus: the number KEDA hands the HPA."""
    triggers = (scaled.get("spec") or {}).get("triggers") or []
    meta = (triggers[0].get("metadata") or {}) if triggers else {}
    if not meta.get("serverAddress") or not meta.get("query"):
        return None
    url = f"{meta['serverAddress']}/api/v1/query?" + urllib.parse.urlencode({"query": meta["query"]})
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            result = json.load(answer)["data"]["result"]
    except (OSError, ValueError, KeyError):
        return None
    return float(result[0]["value"][1]) if result else 0.0


def _groups(metrics: str, namespace: str, name: str) -> dict[str, tuple[int, int]]:
    try:
        with urllib.request.urlopen(metrics, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return groups_from_exposition(text, namespace, name)


def _condition(obj: Mapping[str, Any], ctype: str, status: str = "True") -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == status:
            return str(cond.get("message") or cond.get("reason") or "")
    return None


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
