"""Every child object a DeepSeekServing becomes: LeaderWorkerSets, ComputeDomains, Services, the router, a PodMonitor.

Pure core, after planning in the data flow (spec → validate → plan → **render** → apply → prune → status).
``render(serving, placement)`` is a pure function: no API calls, no clock, no randomness; the same inputs give
byte-identical output, so the operator's server-side apply is idempotent and the golden files in
``tests/unit/golden/`` stay stable. The engine settings come from ``profiles.effective`` (which ``validation``
checked) and are spelled by the profile's vLLM dialect (``commandline`` builds the leader's and workers' argv,
and explains how a worker gets its start rank without a shell); every flag and env var rendered exists in the
pinned vLLM facts (a unit test proves it for every profile combination).

What one serving becomes
------------------------
- Per (role, NVLink domain) **one LeaderWorkerSet**: ``replicas`` = groups the planner put in that domain,
  ``leaderWorkerTemplate.size`` = nodes per group, one pod per node requesting all of the node's GPUs (so no
  other GPU pod shares the node; no pod anti-affinity is needed), ``RecreateGroupOnPodRestart`` (a vLLM DP/EP
  group cannot survive the loss of one rank), ``startupPolicy: LeaderCreated`` (the leader only turns ready
  once every worker has joined, so waiting for a ready leader would deadlock), rolling updates one group at a
  time without surge (a surge group would need a free slice of the same rack). Node affinity pins the pods to
  the domain (``spec.placement.domainLabel`` In [value]; ``kubernetes.io/hostname`` for GPUs whose NVLink stops
  at the node, as the planner keys those domains) and to the GPU product label.
- **Unpinned** (no placement given, e.g. ``nvlfleet render`` without ``--nodes``): one LeaderWorkerSet per role
  named ``<serving>-<role>-unpinned``, node affinity ``domainLabel Exists``, and a required pod affinity with
  ``matchLabelKeys: [leaderworkerset.sigs.k8s.io/group-key]`` on the domain label so the pods of one group still
  land in one NVLink domain (the integration tests show a group that fits no single rack staying pending
  rather than splitting). The scheduler, not nvlfleet, then chooses the domain: no packing, and a leader that
  lands in a rack without room for its workers leaves that group pending. Unpinned is for previews and for
  clusters whose nodes nvlfleet cannot see; the operator always renders pinned.
- Per NVLink domain the serving occupies **one ComputeDomain** (``resource.nvidia.com/v1beta1``, ``numNodes:
  0``) when the GPU has multi-node NVLink and ``spec.placement.computeDomain`` is on, shared by every
  LeaderWorkerSet of the serving in that domain, prefill and decode alike: the KV-cache hand-off between them goes
  through IMEX, and pods in different ComputeDomains get different IMEX channels that cannot reach each other.
  Pods claim its channel ResourceClaimTemplate (``<computedomain>-channel``) in ``spec.resourceClaims`` and in
  the container's ``resources.claims``. It is rendered for single-node groups too: MNNVL fabric handles (NCCL,
  the custom all-reduce buffers of the fused AR+mHC path) need an IMEX channel even inside one tray. It goes
  away (the reconciler prunes it) only once no group of the serving is left in its domain.
- Per role **one Service** ``<serving>-<role>`` on port ``http`` selecting the leader pods of that role
  (``leaderworkerset.sigs.k8s.io/worker-index: "0"``): the OpenAI endpoint. LeaderWorkerSet itself creates a
  headless Service named after each LeaderWorkerSet, which is why LeaderWorkerSet names always carry a suffix.
- Unless ``spec.router.enabled`` is false, **the router** (``nvlfleet.core.router``): a Deployment running
  vllm-router, its ServiceAccount, Role and RoleBinding, and the Service that is the serving's OpenAI endpoint,
  all named ``<serving>-router``; it discovers the group leaders (the per-role Services' selectors): the decode
  leaders, or in P/D mode the prefill and the decode leaders.
- Optionally **one PodMonitor** ``<serving>`` scraping ``/metrics`` on every leader, carrying the role and
  domain labels into the series.

Names, labels, budgets
----------------------
- LeaderWorkerSet ``<serving>-<role>-<hash8>`` and ComputeDomain ``<serving>-<hash8>``, where ``hash8`` is the
  first 8 hex digits of the SHA-256 of the domain value (clique values are 42+ characters and unreadable), or
  ``unpinned``. Budget 48 characters: LWS names a StatefulSet ``<lws>-<group>`` whose pods carry
  ``controller-revision-hash: <lws>-<group>-<10-char hash>``, a label value capped at 63; with up to 1,000 groups
  (3 digits) that leaves 48; the ComputeDomain keeps the same budget (its channel template adds ``-channel``).
  Longer serving names are cut and end with a 16-hex-digit hash of the full name, so no two servings share a
  child name (``_fit``); a serving name itself is a DNS-1035 label of at most 63 characters (checked at admission).
- Service ``<serving>-<role>``, the router's ``<serving>-router`` and PodMonitor ``<serving>``: 63 characters
  (DNS-1035 label).
- Labels on every object and pod: ``app.kubernetes.io/{name: vllm, instance: <serving>, component: <role>,
  managed-by: nvlfleet}``, ``nvlfleet.io/serving``, ``nvlfleet.io/role`` (not on a ComputeDomain, which every
  role shares), and on LWS/ComputeDomain/pods ``nvlfleet.io/domain`` (the hash). The full domain value is the
  annotation ``nvlfleet.io/domain-value``.
  Prune by ``app.kubernetes.io/managed-by=nvlfleet,nvlfleet.io/serving=<name>`` per kind.
- ``ownerReferences`` are left to the applier (it knows the serving's uid).

Pods
----
All GPUs of the node (``nvidia.com/gpu``), the user's cpu/memory, tolerations, node selector, priority class and
service account; ``/dev/shm`` as a memory-backed emptyDir of ``spec.pod.shmSize`` (vLLM workers exchange tensors
through it and co-located DP ranks share the Engram tables there, README §1); the weight cache (PVC, hostPath, or
an emptyDir when ``cache: none``) at ``weights.mountPath`` with ``HF_HOME`` pointing at it; ``HF_TOKEN`` from the
Secret via ``secretKeyRef``, never a literal. ``enableServiceLinks: false`` because Kubernetes would otherwise
inject ``<SERVICE>_PORT`` variables, and a Service named ``vllm`` in the namespace yields ``VLLM_PORT=tcp://...``,
which vLLM reads as its own setting. Probes run on the leader only (headless workers serve no HTTP, README §6):
startup on ``/health`` for ``VLLM_ENGINE_READY_TIMEOUT_S`` plus slack, readiness and liveness on ``/health``.

Least privilege
---------------
Every vLLM container (leader and workers) drops ALL capabilities and adds back exactly the GPU generation's
``capabilities`` from ``facts/data/hardware.yaml``: none for any generation today (the reference facts give no
GB200/GB300 need, not for MNNVL, which goes through the IMEX channel, nor for vLLM's NixlConnector; that file says
which sources were read). Not privileged, no privilege escalation, RuntimeDefault seccomp. vLLM images run as
root, so no ``runAsNonRoot`` or user is set; root without ``DAC_OVERRIDE``/``CHOWN``/``FOWNER`` writes only
what its uid or groups may. The weight cache is kept writable by the pod's ``fsGroup`` (``CACHE_GROUP``,
``fsGroupChangePolicy: OnRootMismatch``): the kubelet gives a PVC or emptyDir that supports ownership management
to that group, group-writable, once (when the volume's root does not already match), and the container runs with
it as a supplementary group. A hostPath volume is never changed by the kubelet: ``DirectoryOrCreate`` makes it
root's, which is fine, but a cache directory that already exists and belongs to another uid, or a volume whose
driver does not apply ``fsGroup`` (NFS, a CSI driver with ``fsGroupPolicy: None``), must be made writable for
the container by its owner: ``chgrp -R 65532 <dir> && chmod -R g+rwX <dir>`` (or ``chown -R 0`` it). Reading
alone needs no more than the files' read bits for others.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from nvlfleet.api import models, names, problems
from nvlfleet.core import commandline, disaggregation, profiles, router
from nvlfleet.facts import hardware

Placement = Mapping[str, Mapping[str, int]]  # {role: {domain value: groups}}, the shape of status.placement
Manifest = dict[str, Any]

APP_NAME = "vllm"  # the app.kubernetes.io/name of every child

UNPINNED = "unpinned"  # the domain part of an unpinned LeaderWorkerSet's name and nvlfleet.io/domain label
LWS_NAME_BUDGET = 48  # see the module docstring
DNS_LABEL_BUDGET = 63
CONTAINER = "vllm"
HTTP_PORT_NAME = "http"
CLAIM_NAME = "compute-domain-channel"
SHM_VOLUME = "dshm"
CACHE_VOLUME = "model-cache"
SHM_PATH = "/dev/shm"  # noqa: S108 - the pod's shared-memory mount point, not a temporary file
CACHE_GROUP = 65532  # the pods' fsGroup, which keeps the weight cache writable without capabilities (see above)


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# ---------------------------------------------------------------------------------------------------------------
# Names and labels


def short_hash(value: str, length: int = 8) -> str:
    """First ``length`` hex digits of SHA-256: stable across processes and Python versions (unlike ``hash``)."""
    return hashlib.sha256(value.encode()).hexdigest()[:length]


def domain_id(domain: str | None) -> str:
    """The ``nvlfleet.io/domain`` label value and name part of a domain (``unpinned`` without one)."""
    return UNPINNED if domain is None else short_hash(domain)


NAME_HASH_LENGTH = 16  # hex digits of the full serving name's hash in a cut name: 64 bits, not found by search


def _fit(serving: str, suffix: str, budget: int) -> str:
    """``<serving>-<suffix>`` when it fits; else ``<serving cut>-<suffix>-<hash of the whole serving name>``.

    Two servings never share a child name. Uncut names end with the suffix (a role, a role and the 8-hex-digit
    domain id, or the domain id alone), cut ones with the 16-hex-digit hash: a role is no hex number, and after a
    domain id comes nothing but in a cut name, so no uncut name is ever a cut one. Two cut names are equal only
    when the hashes of the full names are, which 64 bits make a matter of luck nobody can search for (with the 6
    hex digits before, a 32-character name could be chosen to take a 63-character serving's LeaderWorkerSets)."""
    name = f"{serving}-{suffix}" if suffix else serving
    if len(name) <= budget:
        return name
    tail = f"-{suffix}" if suffix else ""
    keep = budget - len(tail) - 1 - NAME_HASH_LENGTH
    return f"{serving[:keep].rstrip('-')}{tail}-{short_hash(serving, NAME_HASH_LENGTH)}"


def lws_name(serving: str, role: models.RoleName, domain: str | None) -> str:
    """Name of the LeaderWorkerSet of one role in one domain."""
    return _fit(serving, f"{role.value}-{domain_id(domain)}", LWS_NAME_BUDGET)


def compute_domain_name(serving: str, domain: str | None) -> str:
    """Name of the ComputeDomain every LeaderWorkerSet of the serving in one domain claims (both roles)."""
    return _fit(serving, domain_id(domain), LWS_NAME_BUDGET)


def service_name(serving: str, role: models.RoleName) -> str:
    """Name of the Service in front of one role's leaders."""
    return _fit(serving, role.value, DNS_LABEL_BUDGET)


def router_name(serving: str) -> str:
    """Name of the router's Deployment, Service, ServiceAccount, Role and RoleBinding."""
    return _fit(serving, names.ROUTER_COMPONENT, DNS_LABEL_BUDGET)


def channel_template_name(compute_domain: str) -> str:
    """The ResourceClaimTemplate the ComputeDomain controller creates for ComputeDomain ``compute_domain``."""
    return f"{compute_domain}-channel"


def selector_labels(serving: models.DeepSeekServing, role: models.RoleName | None = None) -> dict[str, str]:
    """Labels that identify a serving's objects (and one role's, when given)."""
    labels = {names.SERVING_LABEL: serving.metadata.name}
    if role is not None:
        labels[names.ROLE_LABEL] = role.value
    return labels


def leader_labels(serving: models.DeepSeekServing, role: models.RoleName | None = None) -> dict[str, str]:
    """Labels that select a serving's group leaders (one role's, when given): the pods that serve HTTP."""
    return {**selector_labels(serving, role), names.LWS_WORKER_INDEX_LABEL: "0"}


def _labels(serving: models.DeepSeekServing, role: models.RoleName | None, domain: str | None = "") -> dict[str, str]:
    labels = {
        names.NAME_LABEL: APP_NAME,
        names.INSTANCE_LABEL: serving.metadata.name,
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
    }
    if role is not None:
        labels[names.COMPONENT_LABEL] = role.value
    labels.update(selector_labels(serving, role))
    if domain != "":
        labels[names.DOMAIN_LABEL] = domain_id(domain)
    return labels


def _metadata(
    name: str, serving: models.DeepSeekServing, labels: dict[str, str], annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": serving.metadata.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# ---------------------------------------------------------------------------------------------------------------
# Pods


def _env(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> list[dict[str, Any]]:
    spec = serving.spec
    env: dict[str, dict[str, Any]] = {name: {"name": name, "value": value} for name, value in tuning.env}
    env["HF_HOME"] = {"name": "HF_HOME", "value": spec.model.weights.mount_path}
    ref = spec.model.hf_token_secret_ref
    if ref is not None:
        env["HF_TOKEN"] = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
    env.update({item["name"]: item for item in disaggregation.env(spec)})  # the NIXL side channel, leaders and workers
    out = list(env.values())
    for extra in spec.extra_env:  # the escape hatch wins over nvlfleet's own value, in place
        item: dict[str, Any] = {"name": extra.name}
        if extra.value is not None:
            item["value"] = extra.value
        if extra.value_from is not None:
            item["valueFrom"] = extra.value_from.to_wire()
        replaced = next((i for i, e in enumerate(out) if e["name"] == extra.name), None)
        if replaced is None:
            out.append(item)
        else:
            out[replaced] = item
    return out


def _volumes(serving: models.DeepSeekServing) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pod, weights = serving.spec.pod, serving.spec.model.weights
    volumes: list[dict[str, Any]] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": pod.shm_size}}]
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]
    cache_mount: dict[str, Any] = {"name": CACHE_VOLUME, "mountPath": weights.mount_path}
    if weights.cache == "pvc" and weights.pvc is not None:
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": weights.pvc.claim_name}})
        if weights.pvc.sub_path:
            cache_mount["subPath"] = weights.pvc.sub_path
    elif weights.cache == "hostPath" and weights.host_path is not None:
        volumes.append(
            {"name": CACHE_VOLUME, "hostPath": {"path": weights.host_path.path, "type": "DirectoryOrCreate"}}
        )
    else:
        volumes.append({"name": CACHE_VOLUME, "emptyDir": {}})
    mounts.append(cache_mount)
    return [*volumes, *(v.to_wire() for v in pod.volumes)], [*mounts, *(m.to_wire() for m in pod.volume_mounts)]


def _resources(serving: models.DeepSeekServing, tuning: profiles.Tuning, claim: bool) -> dict[str, Any]:
    user = serving.spec.pod.resources or {}
    limits = {names.GPU_RESOURCE: str(tuning.topology.gpus_per_node), **user.get("limits", {})}
    resources: dict[str, Any] = {"limits": limits}
    if user.get("requests"):
        resources["requests"] = dict(user["requests"])
    if claim:
        resources["claims"] = [{"name": CLAIM_NAME}]
    return resources


def _probe(tuning: profiles.Tuning, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": tuning.dialect.health_path, "port": HTTP_PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": tuning.probes.timeout_seconds,
        "failureThreshold": failures,
    }


def _container_security(serving: models.DeepSeekServing) -> dict[str, Any]:
    """No capability but the GPU generation's (facts), no privilege, no escalation (see "Least privilege")."""
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    needed = hardware.generation(serving.spec.gpu.value).capabilities
    if needed:
        capabilities["add"] = list(needed)
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities, "privileged": False}


def _affinity(
    serving: models.DeepSeekServing, role: models.RoleName, tuning: profiles.Tuning, domain: str | None
) -> dict[str, Any]:
    spec = serving.spec
    gen = hardware.generation(spec.gpu.value)
    domain_key = spec.placement.domain_label if gen.multi_node_nvlink else names.HOSTNAME_LABEL
    terms: list[dict[str, Any]] = []
    if domain is not None:
        terms.append({"key": domain_key, "operator": "In", "values": [domain]})
    elif gen.multi_node_nvlink:
        terms.append({"key": domain_key, "operator": "Exists"})
    terms.append({"key": names.PRODUCT_LABEL, "operator": "In", "values": [gen.product]})
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}
        }
    }
    if domain is None and tuning.topology.nodes_per_group > 1:
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": selector_labels(serving, role)},
                    "matchLabelKeys": [names.LWS_GROUP_KEY_LABEL],
                    "topologyKey": domain_key,
                }
            ]
        }
    return affinity


def pod_template(
    serving: models.DeepSeekServing,
    role: models.RoleName,
    tuning: profiles.Tuning,
    domain: str | None,
    *,
    leader: bool,
    compute_domain: str | None,
) -> dict[str, Any]:
    """The pod template of a group's leader (``leader=True``) or of its workers."""
    spec, pod = serving.spec, serving.spec.pod
    volumes, mounts = _volumes(serving)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.runtime.image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": commandline.leader(serving, tuning) if leader else commandline.worker(serving, tuning),
        "env": _env(serving, tuning),
    }
    if leader:
        container["ports"] = [{"name": HTTP_PORT_NAME, "containerPort": tuning.dialect.port, "protocol": "TCP"}]
        probes = tuning.probes
        container["startupProbe"] = _probe(tuning, probes.period_seconds, probes.startup_failure_threshold)
        container["readinessProbe"] = _probe(tuning, probes.period_seconds, probes.readiness_failure_threshold)
        container["livenessProbe"] = _probe(tuning, probes.liveness_period_seconds, probes.liveness_failure_threshold)
    container["resources"] = _resources(serving, tuning, claim=compute_domain is not None)
    container["volumeMounts"] = mounts
    container["securityContext"] = _container_security(serving)

    pod_spec: dict[str, Any] = {
        "affinity": _affinity(serving, role, tuning, domain),
        "containers": [container],
        "enableServiceLinks": False,
        "securityContext": {
            "fsGroup": CACHE_GROUP,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": volumes,
    }
    if spec.runtime.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in spec.runtime.image_pull_secrets]
    if pod.node_selector:
        pod_spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        pod_spec["tolerations"] = [t.to_wire() for t in pod.tolerations]
    if pod.priority_class_name:
        pod_spec["priorityClassName"] = pod.priority_class_name
    if pod.service_account_name:
        pod_spec["serviceAccountName"] = pod.service_account_name
    if compute_domain is not None:
        pod_spec["resourceClaims"] = [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": channel_template_name(compute_domain)}
        ]
    metadata: dict[str, Any] = {"labels": {**pod.labels, **_labels(serving, role, domain)}}
    if pod.annotations:
        metadata["annotations"] = dict(pod.annotations)
    return {"metadata": metadata, "spec": dict(sorted(pod_spec.items()))}


# ---------------------------------------------------------------------------------------------------------------
# Objects


def leader_worker_set(
    serving: models.DeepSeekServing, role: models.RoleName, tuning: profiles.Tuning, domain: str | None, groups: int
) -> Manifest:
    """The LeaderWorkerSet of one role in one domain (``domain=None``: unpinned)."""
    name = lws_name(serving.metadata.name, role, domain)
    compute_domain = compute_domain_name(serving.metadata.name, domain) if tuning.fabric else None
    size = tuning.topology.nodes_per_group
    template: dict[str, Any] = {"size": size, "restartPolicy": "RecreateGroupOnPodRestart"}
    if size > 1:
        template["leaderTemplate"] = pod_template(
            serving, role, tuning, domain, leader=True, compute_domain=compute_domain
        )
    # A group of one node is all leader: LWS runs the worker template for it, so that template is the leader's.
    template["workerTemplate"] = pod_template(
        serving, role, tuning, domain, leader=size == 1, compute_domain=compute_domain
    )
    annotations = {names.PROFILE_ANNOTATION: f"{tuning.dialect.name}/{tuning.family.value} goal={tuning.goal.value}"}
    if domain is not None:
        annotations[names.DOMAIN_VALUE_ANNOTATION] = domain
    return {
        "apiVersion": names.LEADER_WORKER_SET.api_version,
        "kind": names.LEADER_WORKER_SET.kind,
        "metadata": _metadata(name, serving, _labels(serving, role, domain), annotations),
        "spec": {
            "replicas": groups,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": template,
        },
    }


def compute_domain(serving: models.DeepSeekServing, domain: str | None) -> Manifest:
    """The ComputeDomain (IMEX channel) of the serving's groups in one domain, every role's: no role label. Its
    spec is immutable: recreate, never patch."""
    name = compute_domain_name(serving.metadata.name, domain)
    annotations = {names.DOMAIN_VALUE_ANNOTATION: domain} if domain is not None else None
    return {
        "apiVersion": names.COMPUTE_DOMAIN.api_version,
        "kind": names.COMPUTE_DOMAIN.kind,
        "metadata": _metadata(name, serving, _labels(serving, None, domain), annotations),
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": channel_template_name(name)}}},
    }


def service(serving: models.DeepSeekServing, role: models.RoleName, tuning: profiles.Tuning) -> Manifest:
    """The OpenAI endpoint of one role: its group leaders."""
    return {
        "apiVersion": names.SERVICE.api_version,
        "kind": names.SERVICE.kind,
        "metadata": _metadata(service_name(serving.metadata.name, role), serving, _labels(serving, role, "")),
        "spec": {
            "type": "ClusterIP",
            "selector": leader_labels(serving, role),
            "ports": [
                {"name": HTTP_PORT_NAME, "port": tuning.dialect.port, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def pod_monitor(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> Manifest:
    """A Prometheus Operator PodMonitor for every leader of the serving."""
    return {
        "apiVersion": names.POD_MONITOR.api_version,
        "kind": names.POD_MONITOR.kind,
        "metadata": _metadata(_fit(serving.metadata.name, "", DNS_LABEL_BUDGET), serving, _labels(serving, None, "")),
        "spec": {
            "selector": {"matchLabels": leader_labels(serving)},
            # vLLM's series get the label names nvlfleet's own gauges carry, so one dashboard selector matches both.
            "podMetricsEndpoints": [
                {
                    "port": HTTP_PORT_NAME,
                    "path": tuning.dialect.metrics_path,
                    "relabelings": [
                        {
                            "action": "replace",
                            "sourceLabels": [names.prometheus_pod_label(label)],
                            "targetLabel": target,
                        }
                        for label, target in (
                            (names.SERVING_LABEL, "serving"),
                            (names.ROLE_LABEL, "role"),
                            (names.DOMAIN_LABEL, "domain"),
                        )
                    ],
                }
            ],
        },
    }


def router_engines(serving: models.DeepSeekServing) -> dict[models.RoleName, dict[str, str]]:
    """The pods the router sends requests to: the group leaders of every role (decode only without prefill)."""
    return {role: leader_labels(serving, role) for role, _ in serving.spec.roles_present()}


def endpoint(serving: models.DeepSeekServing) -> str | None:
    """The serving's OpenAI endpoint (the router Service's in-cluster URL); None without a router."""
    if not serving.spec.router.enabled:
        return None
    return router.url(router_name(serving.metadata.name), serving.metadata.namespace)


def explain_router(serving: models.DeepSeekServing) -> list[str]:
    """What ``nvlfleet render --explain`` says about the serving's router."""
    tuning = profiles.effective(serving.spec, models.RoleName.DECODE)
    name = router_name(serving.metadata.name)
    return router.explain(serving, name, router_engines(serving), tuning.dialect.port)


# ---------------------------------------------------------------------------------------------------------------
# Checks render needs beyond validation


def problems_for(serving: models.DeepSeekServing, placement: Placement | None) -> list[problems.Problem]:
    """What ``render`` cannot honour (names, reserved labels/volumes, GPU limits, the placement's shape)."""
    found: list[problems.Problem] = []
    name = serving.metadata.name
    if not _DNS_1035.match(name) or len(name) > DNS_LABEL_BUDGET:
        found.append(
            problems.Problem(
                "metadata.name",
                f"{name!r} must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, "
                f"at most {DNS_LABEL_BUDGET} characters): it names the serving's Services and LeaderWorkerSets and "
                "is the value of their nvlfleet.io/serving label",
            )
        )
    pod = serving.spec.pod
    for key in pod.labels:
        if key.startswith(names.RESERVED_LABEL_PREFIXES):
            found.append(
                problems.Problem(
                    f'spec.pod.labels["{key}"]',
                    f"labels under {', '.join(names.RESERVED_LABEL_PREFIXES)} are reserved for the ones nvlfleet "
                    "and LeaderWorkerSet put on the pods",
                )
            )
    for i, volume in enumerate(pod.volumes):
        if volume.name in (SHM_VOLUME, CACHE_VOLUME):
            found.append(problems.Problem(f"spec.pod.volumes[{i}].name", f"{volume.name!r} is nvlfleet's own volume"))
    taken = {SHM_PATH, serving.spec.model.weights.mount_path}
    for i, mount in enumerate(pod.volume_mounts):
        if mount.mount_path in taken:
            found.append(
                problems.Problem(f"spec.pod.volumeMounts[{i}].mountPath", f"{mount.mount_path} is mounted by nvlfleet")
            )
    for section, values in (pod.resources or {}).items():
        if section not in ("limits", "requests"):
            found.append(problems.Problem(f"spec.pod.resources.{section}", "only limits and requests may be set"))
        elif names.GPU_RESOURCE in values:
            found.append(
                problems.Problem(
                    f'spec.pod.resources.{section}["{names.GPU_RESOURCE}"]',
                    "every pod takes all GPUs of its node; nvlfleet sets this from the GPU generation",
                )
            )
    if placement is not None:
        present = {role.value for role, _ in serving.spec.roles_present()}
        for role, domains in placement.items():
            if role not in present:
                found.append(problems.Problem(f"placement.{role}", "the serving has no such role"))
                continue
            for domain, groups in domains.items():
                if not domain or len(domain) > DNS_LABEL_BUDGET or not _LABEL_VALUE.match(domain):
                    found.append(problems.Problem(f"placement.{role}", f"{domain!r} is not a node label value"))
                if groups < 0:
                    found.append(problems.Problem(f"placement.{role}.{domain}", "groups cannot be negative"))
    return found


# ---------------------------------------------------------------------------------------------------------------
# The entry point


def render(serving: models.DeepSeekServing, placement: Placement | None = None) -> list[Manifest]:
    """Every child manifest of ``serving``, in a stable order: its ComputeDomains by domain value (before the
    LeaderWorkerSets whose pods claim them), then per role (prefill first) its LeaderWorkerSets by domain value and
    its Service; then the router's objects; the PodMonitors last (engines', then the router's).

    ``placement`` is ``{role: {domain value: groups}}`` from the planner; ``None`` renders every role unpinned.
    A role missing from a given placement has no LeaderWorkerSet (nothing placed). Raises
    ``problems.InvalidSpec`` for anything it cannot honour; a spec that passed ``nvlfleet.core.validation`` and a
    planner placement never make it raise otherwise.
    """
    found = problems_for(serving, placement)
    if found:
        raise problems.InvalidSpec(found)
    sets: list[Manifest] = []
    tunings: list[profiles.Tuning] = []
    shared: set[str | None] = set()  # the domains whose ComputeDomain some LeaderWorkerSet claims
    for role, role_spec in serving.spec.roles_present():
        tuning = profiles.effective(serving.spec, role)
        tunings.append(tuning)
        if placement is None:
            where: list[tuple[str | None, int]] = [(None, role_spec.groups)]
        else:
            where = [(domain, groups) for domain, groups in sorted(placement.get(role.value, {}).items()) if groups > 0]
        for domain, groups in where:
            if tuning.fabric:
                shared.add(domain)
            sets.append(leader_worker_set(serving, role, tuning, domain, groups))
        sets.append(service(serving, role, tuning))
    out = [compute_domain(serving, domain) for domain in sorted(shared, key=lambda d: d or "")]
    out += sets
    if serving.spec.router.enabled:
        decode = tunings[-1]  # roles_present ends with decode
        out += router.manifests(
            serving, router_name(serving.metadata.name), router_engines(serving), decode.dialect.port
        )
    if serving.spec.monitoring.pod_monitor:
        out.append(pod_monitor(serving, tunings[-1]))
        if serving.spec.router.enabled:
            out.append(router.pod_monitor(serving, router_name(serving.metadata.name)))
    return out
