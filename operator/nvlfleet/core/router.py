"""The serving's front door: vllm-router's Deployment, ServiceAccount, Role, RoleBinding and Service, as manifests.

Pure core, inside the render step (spec → validate → plan → **render** → apply → prune → status): ``render.render``
calls ``manifests`` with the names and the engine selector it owns, after the engines' own children; ``report``
writes ``endpoint`` into ``status.endpoint``. Every flag on the router's command line exists in the pinned
router's facts (``facts.vllm_router``; a unit test proves it, another parses the argv with the installed wheel).

What the router runs (facts: ``shared/reference/vllm-0.33.0/disaggregation.md`` §6, §7)
-------------------------------------------------------------------------------------
- ``vllm-router`` bound to all interfaces (``--host 0.0.0.0``; it binds loopback by default, which no Service can
  reach) on port 8000, vLLM's own port, so a client talks to the router as it would to one engine.
- Kubernetes service discovery in the serving's namespace only (``--service-discovery-namespace``: without it the
  router watches every namespace and needs cluster-wide rights) over **group leaders only**: each selector is the
  serving, the role and ``leaderworkerset.sigs.k8s.io/worker-index=0``, because headless LWS workers serve no
  HTTP. The engines' port is given (``--service-discovery-port``, one port for both roles): the launcher's
  default is 80.
- Without a prefill role: ``--selector`` over the decode leaders, which compute whole requests.
- With one (P/D, §7): ``--vllm-pd-disaggregation`` with ``--kv-connector`` (the router's name for the serving's
  vLLM connector, ``facts.disaggregation``), ``--prefill-selector`` over the prefill leaders and
  ``--decode-selector`` over the decode leaders: the router sends each request to a prefill engine with
  ``max_tokens=1`` and then to a decode engine with the prefill's ``kv_transfer_params``.
- Metrics on ``0.0.0.0:29000`` (the exporter is on by default but binds loopback).
- A short wait for a discovered engine to answer ``/health`` (``--worker-startup-timeout-secs``,
  ``--worker-startup-check-interval``): discovery admits only Ready leaders, which answer at once, and it handles
  pod events one at a time, so with the defaults (600 s, checked every 30 s) a leader deleted while the router
  waits for it (a LeaderWorkerSet recreating a group twice) stalls every later discovery event for ten minutes.
- The routing policy: ``spec.router.policy``, else the facts' choice (``round_robin``; ``explain`` says why).

Access: the router's own ServiceAccount, bound by a Role in the serving's namespace to ``get``, ``list`` and
``watch`` on pods and nothing else. The watcher calls list and watch (§7); ``get`` is granted as the design asks,
because §9 question 6 leaves kube-rs's exact calls open, and it reveals nothing list does not.

Readiness is the router's ``/readiness`` (200 once at least one engine is healthy), liveness its ``/liveness``.
The serving's Ready condition does not depend on the router in this slice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nvlfleet.api import models, names
from nvlfleet.api import router as router_api
from nvlfleet.core import disaggregation
from nvlfleet.facts import vllm_router

Manifest = dict[str, Any]
Engines = Mapping[models.RoleName, Mapping[str, str]]  # the leader labels of each role the router sends to

PORT = 8000  # where the router listens: vLLM's own port, so the endpoint looks like one engine
METRICS_PORT = 29000  # the router's own default, kept
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the pod's address must be reachable from its Service
# How long the router waits for a discovered (hence Ready) leader's /health, and how often it looks (see above).
WORKER_STARTUP_TIMEOUT_SECONDS = 30
WORKER_STARTUP_CHECK_SECONDS = 2
CONTAINER = "router"
HTTP_PORT_NAME = "http"
METRICS_PORT_NAME = "metrics"
RUN_AS_USER = 65532  # router.Dockerfile's user; any image that runs the router without root works
POD_VERBS = ("get", "list", "watch")  # see the module docstring


# ---------------------------------------------------------------------------------------------------------------
# What the router is told


def policy(spec: models.DeepSeekServingSpec) -> tuple[str, str]:
    """The routing policy rendered and why."""
    facts = vllm_router.load()
    if spec.router.policy is not None:
        return spec.router.policy, "spec.router.policy"
    return facts.default_policy, f"nvlfleet's default for vllm-router {facts.version}: {facts.default_policy_reason}"


def _pairs(labels: Mapping[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in labels.items()]


def discovery(serving: models.DeepSeekServing, engines: Engines) -> list[str]:
    """How the router finds its engines: one selector over the decode leaders, or P/D mode over both roles."""
    decode = engines[models.RoleName.DECODE]
    prefill = engines.get(models.RoleName.PREFILL)
    if prefill is None:
        return ["--selector", *_pairs(decode)]
    connector = disaggregation.settings(serving.spec).kv_connector
    routed = disaggregation.facts_of(serving.spec).router_connector(connector) or connector  # validation refuses
    return [
        "--vllm-pd-disaggregation",
        "--kv-connector",
        routed,
        "--prefill-selector",
        *_pairs(prefill),
        "--decode-selector",
        *_pairs(decode),
    ]


def argv(serving: models.DeepSeekServing, engines: Engines, engine_port: int) -> list[str]:
    """The router's arguments (after the binary): discovery of the leaders labelled ``engines`` on ``engine_port``."""
    chosen, _ = policy(serving.spec)
    return [
        "--host",
        ALL_INTERFACES,
        "--port",
        str(PORT),
        "--policy",
        chosen,
        "--service-discovery",
        "--service-discovery-namespace",
        serving.metadata.namespace,
        *discovery(serving, engines),
        "--service-discovery-port",
        str(engine_port),
        "--worker-startup-timeout-secs",
        str(WORKER_STARTUP_TIMEOUT_SECONDS),
        "--worker-startup-check-interval",
        str(WORKER_STARTUP_CHECK_SECONDS),
        "--prometheus-host",
        ALL_INTERFACES,
        "--prometheus-port",
        str(METRICS_PORT),
    ]


def explain(serving: models.DeepSeekServing, name: str, engines: Engines, engine_port: int) -> list[str]:
    """What ``nvlfleet render --explain`` says about the router ``name``."""
    spec = serving.spec
    if not spec.router.enabled:
        return ["disabled (spec.router.enabled: false): only the per-role Services are rendered"]
    chosen, why = policy(spec)
    lines = [
        f"endpoint = {url(name, serving.metadata.namespace)}  (Service {name}, {spec.router.replicas} router pod(s))",
        f"policy = {chosen}  ({why})",
    ]
    for role, labels in engines.items():
        lines.append(
            f"{role.value} engines = the {role.value} group leaders ({','.join(_pairs(labels))}) in namespace "
            f"{serving.metadata.namespace}, port {engine_port}  (Kubernetes service discovery; headless workers "
            "serve no HTTP)"
        )
    if models.RoleName.PREFILL in engines:
        routed = discovery(serving, engines)[2]
        lines.append(
            f"mode = --vllm-pd-disaggregation --kv-connector {routed}  (the serving has a prefill role; "
            f"{disaggregation.settings(spec).kv_connector} is the router's {routed}, disaggregation.md §7)"
        )
    return lines


def url(name: str, namespace: str) -> str:
    """The in-cluster URL of the router Service ``name``."""
    return f"http://{name}.{namespace}.svc:{PORT}"


# ---------------------------------------------------------------------------------------------------------------
# Quantities as the API server stores them

_DECIMAL = {"m": 1, "": 1000, "k": 1000**2, "M": 1000**3, "G": 1000**4, "T": 1000**5}  # in thousandths
_BINARY = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def quantity_value(quantity: str) -> int:
    """A quantity of ``schema.WHOLE_QUANTITY`` in its smallest unit (thousandths of a cpu, or bytes)."""
    digits = quantity.rstrip("kmMGTi")
    suffix = quantity[len(digits) :]
    table = _BINARY if suffix.endswith("i") else _DECIMAL
    return int(digits) * table[suffix]


def canonical_quantity(quantity: str) -> str:
    """``quantity`` in the spelling the API server stores (``2000m`` → ``2``, ``1024Mi`` → ``1Gi``), so that the
    applied Deployment reads back equal to the rendered one and no pass re-applies it."""
    value = quantity_value(quantity)
    table = _BINARY if quantity.endswith("i") else _DECIMAL
    unit, size = next((u, n) for u, n in sorted(table.items(), key=lambda item: -item[1]) if value % n == 0)
    return f"{value // size}{unit}"


def _resource_list(resources: router_api.ResourceList) -> dict[str, str]:
    given = {"cpu": resources.cpu, "memory": resources.memory}
    return {key: canonical_quantity(value) for key, value in given.items() if value is not None}


def _resources(spec: router_api.RouterSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    requests = _resource_list(spec.resources.requests)
    if requests:
        out["requests"] = requests
    if spec.resources.limits is not None and (limits := _resource_list(spec.resources.limits)):
        out["limits"] = limits
    return out


# ---------------------------------------------------------------------------------------------------------------
# The objects


def labels(serving: models.DeepSeekServing) -> dict[str, str]:
    """Labels of the router's objects and pods."""
    return {
        names.NAME_LABEL: names.ROUTER_APP_NAME,
        names.INSTANCE_LABEL: serving.metadata.name,
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
        names.COMPONENT_LABEL: names.ROUTER_COMPONENT,
        names.SERVING_LABEL: serving.metadata.name,
    }


def selector(serving: models.DeepSeekServing) -> dict[str, str]:
    """The labels that select a serving's router pods (never an engine's: those carry their role as component)."""
    return {names.SERVING_LABEL: serving.metadata.name, names.COMPONENT_LABEL: names.ROUTER_COMPONENT}


def _metadata(name: str, serving: models.DeepSeekServing) -> dict[str, Any]:
    return {"name": name, "namespace": serving.metadata.namespace, "labels": labels(serving)}


def _probe(path: str, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": HTTP_PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


def deployment(serving: models.DeepSeekServing, name: str, engines: Engines, engine_port: int) -> Manifest:
    """The router pods, running as the ServiceAccount ``name``."""
    spec, facts = serving.spec.router, vllm_router.load()
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": [facts.binary],
        "args": argv(serving, engines, engine_port),
        "ports": [
            {"name": HTTP_PORT_NAME, "containerPort": PORT, "protocol": "TCP"},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": _probe(facts.readiness_path, 5),
        "livenessProbe": _probe(facts.liveness_path, 10),
        "resources": _resources(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
        },
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "enableServiceLinks": False,  # as for the engines: no <SERVICE>_PORT variables in the environment
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "serviceAccountName": name,
    }
    if serving.spec.runtime.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in serving.spec.runtime.image_pull_secrets]
    return {
        "apiVersion": names.DEPLOYMENT.api_version,
        "kind": names.DEPLOYMENT.kind,
        "metadata": _metadata(name, serving),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector(serving)},
            "template": {"metadata": {"labels": labels(serving)}, "spec": dict(sorted(pod_spec.items()))},
        },
    }


def service_account(serving: models.DeepSeekServing, name: str) -> Manifest:
    return {
        "apiVersion": names.SERVICE_ACCOUNT.api_version,
        "kind": names.SERVICE_ACCOUNT.kind,
        "metadata": _metadata(name, serving),
    }


def role(serving: models.DeepSeekServing, name: str) -> Manifest:
    """Pods in the serving's namespace, read-only: what Kubernetes service discovery needs, and nothing else."""
    return {
        "apiVersion": names.ROLE.api_version,
        "kind": names.ROLE.kind,
        "metadata": _metadata(name, serving),
        "rules": [{"apiGroups": [names.POD.group], "resources": [names.POD.plural], "verbs": list(POD_VERBS)}],
    }


def role_binding(serving: models.DeepSeekServing, name: str) -> Manifest:
    return {
        "apiVersion": names.ROLE_BINDING.api_version,
        "kind": names.ROLE_BINDING.kind,
        "metadata": _metadata(name, serving),
        "roleRef": {"apiGroup": names.ROLE.group, "kind": names.ROLE.kind, "name": name},
        "subjects": [{"kind": names.SERVICE_ACCOUNT.kind, "name": name, "namespace": serving.metadata.namespace}],
    }


def service(serving: models.DeepSeekServing, name: str) -> Manifest:
    """The serving's OpenAI endpoint: the router pods."""
    return {
        "apiVersion": names.SERVICE.api_version,
        "kind": names.SERVICE.kind,
        "metadata": _metadata(name, serving),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(serving),
            "ports": [{"name": HTTP_PORT_NAME, "port": PORT, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}],
        },
    }


def pod_monitor(serving: models.DeepSeekServing, name: str) -> Manifest:
    """A Prometheus Operator PodMonitor for the router pods' exporter (``vllm_router_*``), rendered beside the
    engines' one when ``spec.monitoring.podMonitor`` is on; the serving label matches the dashboards' selector."""
    serving_label = names.prometheus_pod_label(names.SERVING_LABEL)
    return {
        "apiVersion": names.POD_MONITOR.api_version,
        "kind": names.POD_MONITOR.kind,
        "metadata": _metadata(name, serving),
        "spec": {
            "selector": {"matchLabels": selector(serving)},
            "podMetricsEndpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "relabelings": [{"action": "replace", "sourceLabels": [serving_label], "targetLabel": "serving"}],
                }
            ],
        },
    }


def manifests(serving: models.DeepSeekServing, name: str, engines: Engines, engine_port: int) -> list[Manifest]:
    """The router's children, all named ``name``, in the order they are applied (``names.CHILD_KINDS``)."""
    return [
        service_account(serving, name),
        role(serving, name),
        role_binding(serving, name),
        deployment(serving, name, engines, engine_port),
        service(serving, name),
    ]
