"""The DeepSeekServing API (group ``nvlfleet.io``, version ``v1alpha1``) as typed pydantic models: the spec.

This module and its neighbours are the single source of the API (``kubetypes``: the Kubernetes types the spec
embeds; ``router``: ``spec.router``, the front door; ``disaggregation``: ``spec.disaggregation``, the KV path
from prefill to decode; ``parity``: ``spec.parity``, the reference throughput; ``servingstatus``: the status;
``schema``: the base type and CEL rules; ``names``: the group, version and kind): the CRD in ``crds/`` is
generated from it (``nvlfleet.api.crd``), the validator and the renderer read it, and the operator parses every
object it sees with it. It sits at the very start of the data flow (spec → validate → plan → render → apply →
status) and is pure: no Kubernetes client, no kopf, no clock.

Field names are snake_case in Python and camelCase on the wire. Every field carries a description because those
descriptions become ``kubectl explain deepseekserving.spec...``. Shape and range checks live here (they become
the CRD's OpenAPI schema and CEL rules); cross-field and fact-based checks live in ``nvlfleet.core.validation``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Literal

import pydantic
from pydantic import alias_generators

from nvlfleet.api import autoscaling as autoscaling_api
from nvlfleet.api import disaggregation as disaggregation_api
from nvlfleet.api import kubetypes, names, schema, servingstatus
from nvlfleet.api import parity as parity_api
from nvlfleet.api import router as router_api
from nvlfleet.facts import hardware

DEFAULT_MAX_MODEL_LEN = 131072
DEFAULT_SPECULATIVE_TOKENS = 3
DEFAULT_MIN_BATCH = 8
DEFAULT_MAX_BATCH = 256

_HHMM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"

# ---------------------------------------------------------------------------------------------------------------
# Enumerations


class GpuGeneration(enum.StrEnum):
    """GPU generation of the nodes the serving runs on."""

    GB200 = "GB200"
    GB300 = "GB300"
    B200 = "B200"
    H200 = "H200"


class Goal(enum.StrEnum):
    """What the tuning profile optimises for."""

    THROUGHPUT = "throughput"
    LATENCY = "latency"
    BALANCED = "balanced"


class ModelFamily(enum.StrEnum):
    """DeepSeek model family; selects the tuning profile and the model-specific rules."""

    DEEPSEEK_V4_1 = "deepseek-v4.1"
    DEEPSEEK_V4 = "deepseek-v4"
    DEEPSEEK_V3 = "deepseek-v3"


class RoleName(enum.StrEnum):
    """Engine roles: decode always; prefill when prefill/decode are disaggregated."""

    DECODE = "decode"
    PREFILL = "prefill"


# ---------------------------------------------------------------------------------------------------------------
# Model and runtime


class SecretKeyRef(schema.Model):
    """A key in a Secret of the serving's namespace. The value is never copied into the serving."""

    name: Annotated[str, pydantic.Field(description="Name of the Secret.", pattern=schema.DNS_LABEL, max_length=253)]
    key: Annotated[str, pydantic.Field(description="Key inside the Secret.", min_length=1, max_length=253)] = "token"


class PvcCache(schema.Model):
    """Weights cached on a PersistentVolumeClaim shared by the serving's pods."""

    claim_name: Annotated[
        str,
        pydantic.Field(description="Name of the PersistentVolumeClaim.", pattern=schema.DNS_LABEL, max_length=253),
    ]
    sub_path: Annotated[str | None, pydantic.Field(description="Sub-path inside the volume.", max_length=1024)] = None


class HostPathCache(schema.Model):
    """Weights cached on a directory of every node (e.g. local NVMe)."""

    path: Annotated[str, pydantic.Field(description="Absolute directory on the node.", pattern=r"^/.*")]


class WeightsSpec(schema.Model):
    """Where the weights come from and where they are cached."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            ("self.cache != 'pvc' || has(self.pvc)", "cache 'pvc' needs weights.pvc.claimName"),
            (
                "self.cache != 'hostPath' || has(self.hostPath)",
                "cache 'hostPath' needs weights.hostPath.path",
            ),
        )
    )

    cache: Annotated[
        Literal["none", "pvc", "hostPath"],
        pydantic.Field(
            description="Weight cache: none (download into the pod), pvc (shared claim) or hostPath (node disk)."
        ),
    ] = "none"
    pvc: Annotated[PvcCache | None, pydantic.Field(description="The claim, when cache is pvc.")] = None
    host_path: Annotated[
        HostPathCache | None, pydantic.Field(description="The node directory, when cache is hostPath.")
    ] = None
    mount_path: Annotated[
        str, pydantic.Field(description="Where the cache is mounted in the vLLM container.", pattern=r"^/.*")
    ] = "/models"


class ModelSpec(schema.Model):
    """The model to serve."""

    name: Annotated[
        str,
        pydantic.Field(
            description="Hugging Face repository id or path, e.g. deepseek-ai/DeepSeek-V4.1-Flash.",
            min_length=1,
            max_length=256,
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        ),
    ]
    revision: Annotated[
        str | None,
        pydantic.Field(
            description="Repository revision (commit or tag) to pin.",
            max_length=128,
            pattern=r"^[A-Za-z0-9._-]+$",
        ),
    ] = None
    served_name: Annotated[
        str | None,
        pydantic.Field(
            description="Model name clients send (--served-model-name); defaults to the serving's name.",
            max_length=128,
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$",
        ),
    ] = None
    family: Annotated[
        ModelFamily, pydantic.Field(description="Model family; selects the tuning profile and model rules.")
    ] = ModelFamily.DEEPSEEK_V4_1
    weights: Annotated[WeightsSpec, pydantic.Field(description="Weight source and cache.")] = pydantic.Field(
        default_factory=WeightsSpec
    )
    hf_token_secret_ref: Annotated[
        SecretKeyRef | None,
        pydantic.Field(description="Hugging Face token, by reference to a Secret key (never inline)."),
    ] = None


class RuntimeSpec(schema.Model):
    """The vLLM container."""

    image: Annotated[
        str,
        pydantic.Field(
            description="vLLM container image, ideally pinned by digest.",
            min_length=1,
            max_length=512,
            pattern=schema.IMAGE,
        ),
    ]
    vllm_version: Annotated[
        str,
        pydantic.Field(
            description="vLLM version inside the image; selects the flag dialect and its rules.",
            pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$",
        ),
    ] = "0.33.0"
    image_pull_policy: Annotated[
        Literal["Always", "IfNotPresent", "Never"], pydantic.Field(description="Image pull policy.")
    ] = "IfNotPresent"
    image_pull_secrets: Annotated[
        list[Annotated[str, pydantic.Field(pattern=schema.DNS_LABEL, max_length=253)]],
        pydantic.Field(description="Names of Secrets used to pull the image.", max_length=16),
    ] = pydantic.Field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# Roles and parallelism


class Parallelism(schema.Model):
    """How one engine group splits the model: tensor × data GPUs, spread over whole nodes."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            (
                "!has(self.data) || !has(self.nodesPerGroup) || self.data >= self.nodesPerGroup",
                "data must be at least nodesPerGroup: every node runs one or more data-parallel ranks",
            ),
        )
    )

    tensor: Annotated[
        int,
        pydantic.Field(
            description="Tensor-parallel size of each data-parallel rank (at most the GPUs of one node).",
            ge=1,
            le=64,
        ),
    ] = 1
    data: Annotated[
        int | None,
        pydantic.Field(
            description=(
                "Data-parallel size of the group (attention DP). tensor × data GPUs make one group; "
                "derived from nodesPerGroup when unset."
            ),
            ge=1,
            le=1024,
        ),
    ] = None
    expert: Annotated[
        bool,
        pydantic.Field(description="Expert parallelism: spread the MoE experts over all GPUs of the group."),
    ] = True
    nodes_per_group: Annotated[
        int | None,
        pydantic.Field(
            description="Nodes per group (one vLLM pod per node). Derived from tensor × data when unset.",
            ge=1,
            le=64,
        ),
    ] = None


class RoleSpec(schema.Model):
    """One engine role: how many groups, and how each group is split."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            (
                "!has(self.maxNumSeqs) || !has(self.maxNumBatchedTokens) "
                "|| self.maxNumBatchedTokens >= self.maxNumSeqs",
                "maxNumBatchedTokens must be at least maxNumSeqs",
            ),
        )
    )

    groups: Annotated[
        int, pydantic.Field(description="Number of engine groups (replicas) of this role.", ge=0, le=1000)
    ] = 1
    parallelism: Annotated[Parallelism, pydantic.Field(description="Parallel layout of one group.")] = pydantic.Field(
        default_factory=Parallelism
    )
    max_num_seqs: Annotated[
        int | None,
        pydantic.Field(description="Requests per data-parallel rank (--max-num-seqs); profile default.", ge=1),
    ] = None
    max_num_batched_tokens: Annotated[
        int | None,
        pydantic.Field(description="Tokens per scheduler step (--max-num-batched-tokens); profile default.", ge=1),
    ] = None


class Roles(schema.Model):
    """Engine roles. Prefill is optional; with it, prefill and decode are disaggregated."""

    decode: Annotated[RoleSpec, pydantic.Field(description="Decode engines (or unified engines without prefill).")]
    prefill: Annotated[
        RoleSpec | None, pydantic.Field(description="Prefill engines, for prefill/decode disaggregation.")
    ] = None


# ---------------------------------------------------------------------------------------------------------------
# Decoding and kernels


class SpeculativeSpec(schema.Model):
    """Speculative decoding (DSpark for DeepSeek-V4.1, MTP for earlier families)."""

    enabled: Annotated[bool, pydantic.Field(description="Use speculative decoding.")] = True
    method: Annotated[
        str | None,
        pydantic.Field(
            description="Method (e.g. dspark, mtp); the profile's choice for the model family when unset.",
            max_length=64,
            pattern=r"^[a-z0-9_]+$",
        ),
    ] = None
    num_speculative_tokens: Annotated[int, pydantic.Field(description="Tokens drafted per step.", ge=1, le=16)] = (
        DEFAULT_SPECULATIVE_TOKENS
    )


class DualBatchOverlap(schema.Model):
    """Dual batch overlap: hide the expert all-to-all behind the other micro-batch's GEMMs."""

    enabled: Annotated[bool | None, pydantic.Field(description="Enable DBO (--enable-dbo).")] = None
    decode_token_threshold: Annotated[
        int | None, pydantic.Field(description="Decode tokens above which DBO runs (>= 2).", ge=2)
    ] = None
    prefill_token_threshold: Annotated[
        int | None, pydantic.Field(description="Prefill tokens above which DBO runs (>= 2).", ge=2)
    ] = None


class ExpertLoadBalancing(schema.Model):
    """Expert load balancing (EPLB) and redundant experts."""

    enabled: Annotated[bool | None, pydantic.Field(description="Enable EPLB (--enable-eplb).")] = None
    num_redundant_experts: Annotated[
        int | None,
        pydantic.Field(
            description="Redundant experts; (routed experts + redundant) must divide by the EP size.",
            ge=0,
            le=4096,
        ),
    ] = None
    window_size: Annotated[int | None, pydantic.Field(description="Load statistics window (steps).", ge=1)] = None
    step_interval: Annotated[int | None, pydantic.Field(description="Steps between rebalances.", ge=1)] = None


class CudaGraphSpec(schema.Model):
    """CUDA graphs: the mode and the batch sizes captured."""

    # The CRD does not default minBatch/maxBatch (the profile tells set from unset), so the rule supplies them.
    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            (
                f"(has(self.minBatch) ? self.minBatch : {DEFAULT_MIN_BATCH}) "
                f"<= (has(self.maxBatch) ? self.maxBatch : {DEFAULT_MAX_BATCH})",
                "minBatch must not exceed maxBatch",
            )
        )
    )

    mode: Annotated[
        Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"] | None,
        pydantic.Field(description="cudagraph_mode of --compilation-config; profile default."),
    ] = None
    capture_sizes: Annotated[
        list[Annotated[int, pydantic.Field(ge=1, le=8192)]] | None,
        pydantic.Field(
            description="Explicit capture sizes; derived from minBatch..maxBatch when unset.", max_length=256
        ),
    ] = None
    min_batch: Annotated[
        int, pydantic.Field(description="Smallest concurrency the graphs must cover.", ge=1, le=8192)
    ] = DEFAULT_MIN_BATCH
    max_batch: Annotated[
        int, pydantic.Field(description="Largest concurrency the graphs must cover.", ge=1, le=8192)
    ] = DEFAULT_MAX_BATCH


class KernelSpec(schema.Model):
    """Kernel choices. Every field left unset is chosen by the tuning profile for the GPU and vLLM version."""

    attention_backend: Annotated[
        str | None,
        pydantic.Field(description="MLA attention backend (--attention-backend).", pattern=r"^[A-Z0-9_]+$"),
    ] = None
    moe_backend: Annotated[
        str | None, pydantic.Field(description="MoE GEMM backend (--moe-backend).", pattern=r"^[a-z0-9_]+$")
    ] = None
    all2all_backend: Annotated[
        str | None,
        pydantic.Field(
            # to_camel would spell it all2AllBackend; the API follows vLLM's --all2all-backend.
            alias="all2allBackend",
            description="Expert all-to-all backend (--all2all-backend).",
            pattern=r"^[a-z0-9_]+$",
        ),
    ] = None
    kv_cache_dtype: Annotated[
        str | None, pydantic.Field(description="KV-cache dtype (--kv-cache-dtype).", pattern=r"^[a-z0-9_]+$")
    ] = None
    dual_batch_overlap: Annotated[DualBatchOverlap | None, pydantic.Field(description="Dual batch overlap.")] = None
    eplb: Annotated[ExpertLoadBalancing | None, pydantic.Field(description="Expert load balancing.")] = None
    cuda_graph: Annotated[CudaGraphSpec | None, pydantic.Field(description="CUDA graph capture.")] = None


# ---------------------------------------------------------------------------------------------------------------
# Placement, pricing, pod


class PlacementSpec(schema.Model):
    """Where groups go: which label names the NVLink domain, and how groups share domains."""

    domain_label: Annotated[
        str,
        pydantic.Field(
            description="Node label whose value names the NVLink domain.",
            max_length=317,
            pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        ),
    ] = names.DEFAULT_DOMAIN_LABEL
    strategy: Annotated[
        Literal["pack", "spread"],
        pydantic.Field(
            description="pack: fill the fullest domain that fits; spread: one serving's groups in different domains."
        ),
    ] = "pack"
    compute_domain: Annotated[
        bool,
        pydantic.Field(
            description=(
                "Create a ComputeDomain (multi-node NVLink / IMEX) per NVLink domain the serving occupies, "
                "shared by its prefill and decode groups there."
            )
        ),
    ] = True


class PriceWindow(schema.Model):
    """A UTC time-of-day window during which prices are multiplied (e.g. off-peak 0.5, peak 2)."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(("self.start != self.end", "a price window must not be empty (start == end)"))
    )

    name: Annotated[str, pydantic.Field(description="Label for the window, e.g. off-peak.", max_length=63)]
    # maxLength bounds the CEL cost estimate of the rule above (a pattern does not).
    start: Annotated[str, pydantic.Field(description="Start, HH:MM UTC (inclusive).", pattern=_HHMM, max_length=5)]
    end: Annotated[
        str,
        pydantic.Field(
            description="End, HH:MM UTC (exclusive); before start means it crosses midnight.",
            pattern=_HHMM,
            max_length=5,
        ),
    ]
    multiplier: Annotated[float, pydantic.Field(description="Price multiplier inside the window.", gt=0, le=100)]


class PricingSpec(schema.Model):
    """Prices per 1M tokens, the currency, and an optional time-of-day schedule (UTC)."""

    currency: Annotated[str, pydantic.Field(description="ISO 4217 currency code.", pattern=r"^[A-Z]{3}$")] = "USD"
    input_cache_hit_per_million: Annotated[
        float, pydantic.Field(description="Price per 1M prompt tokens served from the prefix cache.", ge=0)
    ]
    input_cache_miss_per_million: Annotated[
        float, pydantic.Field(description="Price per 1M prompt tokens computed.", ge=0)
    ]
    output_per_million: Annotated[float, pydantic.Field(description="Price per 1M generated tokens.", ge=0)]
    schedule: Annotated[
        list[PriceWindow],
        pydantic.Field(description="Windows with price multipliers; 1.0 outside every window.", max_length=48),
    ] = pydantic.Field(default_factory=list)
    gpu_hour_cost: Annotated[
        float | None, pydantic.Field(description="What one GPU-hour costs you, for the margin gauge.", ge=0)
    ] = None


class PodOverrides(schema.Model):
    """Pod-level settings applied to every vLLM pod."""

    resources: Annotated[
        dict[str, dict[str, str | int]] | None,
        pydantic.Field(
            description="Container requests/limits besides the GPUs (cpu, memory, ephemeral-storage), as Kubernetes "
            'quantities: 8, "500m", "64Gi".'
        ),
    ] = None
    tolerations: Annotated[
        list[kubetypes.Toleration],
        pydantic.Field(description="Tolerations (e.g. for arm64 or GPU taints).", max_length=64),
    ] = pydantic.Field(default_factory=list)
    node_selector: Annotated[dict[str, str], pydantic.Field(description="Extra node selector labels.")] = (
        pydantic.Field(default_factory=dict)
    )
    volumes: Annotated[list[kubetypes.Volume], pydantic.Field(description="Extra pod volumes.", max_length=64)] = (
        pydantic.Field(default_factory=list)
    )
    volume_mounts: Annotated[
        list[kubetypes.VolumeMount], pydantic.Field(description="Extra mounts in the vLLM container.", max_length=64)
    ] = pydantic.Field(default_factory=list)
    shm_size: Annotated[
        str,
        pydantic.Field(
            description="Size of /dev/shm (memory-backed); DP ranks share Engram tables through it.",
            pattern=schema.UNSIGNED_QUANTITY,
        ),
    ] = "64Gi"
    labels: Annotated[dict[str, str], pydantic.Field(description="Extra pod labels.")] = pydantic.Field(
        default_factory=dict
    )
    annotations: Annotated[dict[str, str], pydantic.Field(description="Extra pod annotations.")] = pydantic.Field(
        default_factory=dict
    )
    priority_class_name: Annotated[
        str | None, pydantic.Field(description="PriorityClass of the pods.", max_length=253)
    ] = None
    service_account_name: Annotated[
        str | None,
        pydantic.Field(description="ServiceAccount of the pods.", pattern=schema.DNS_LABEL, max_length=253),
    ] = None


class MonitoringSpec(schema.Model):
    """How vLLM's own metrics are collected."""

    pod_monitor: Annotated[
        bool, pydantic.Field(description="Also create a PodMonitor (Prometheus Operator) for the leaders.")
    ] = False
    scrape: Annotated[
        bool, pydantic.Field(description="Let the operator scrape the leaders for tokens/s and revenue.")
    ] = True


class DeepSeekServingSpec(schema.Model):
    """Desired state: one DeepSeek model served by vLLM on GB200/GB300 (or single-node B200/H200)."""

    model_config = pydantic.ConfigDict(json_schema_extra=lambda node: node.update(schema.topology_rules()))

    model: Annotated[ModelSpec, pydantic.Field(description="The model to serve.")]
    runtime: Annotated[RuntimeSpec, pydantic.Field(description="The vLLM image and version.")]
    gpu: Annotated[GpuGeneration, pydantic.Field(description="GPU generation of the nodes.")]
    goal: Annotated[Goal, pydantic.Field(description="What the tuning profile optimises for.")] = Goal.THROUGHPUT
    roles: Annotated[Roles, pydantic.Field(description="Engine roles and their parallel layout.")]
    max_model_len: Annotated[
        int, pydantic.Field(description="Context length (--max-model-len).", ge=1024, le=1048576)
    ] = DEFAULT_MAX_MODEL_LEN
    speculative: Annotated[SpeculativeSpec, pydantic.Field(description="Speculative decoding.")] = pydantic.Field(
        default_factory=SpeculativeSpec
    )
    kernels: Annotated[
        KernelSpec, pydantic.Field(description="Kernel overrides; the profile decides what is unset.")
    ] = pydantic.Field(default_factory=KernelSpec)
    placement: Annotated[PlacementSpec, pydantic.Field(description="NVLink-domain placement.")] = pydantic.Field(
        default_factory=PlacementSpec
    )
    pricing: Annotated[PricingSpec | None, pydantic.Field(description="Token prices, for the revenue gauges.")] = None
    parity: Annotated[parity_api.ParitySpec | None, pydantic.Field(description="Reference throughput for parity.")] = (
        None
    )
    pod: Annotated[PodOverrides, pydantic.Field(description="Pod-level overrides.")] = pydantic.Field(
        default_factory=PodOverrides
    )
    extra_args: Annotated[
        list[Annotated[str, pydantic.Field(max_length=4096)]],
        pydantic.Field(
            description="Extra vllm serve arguments, checked against the pinned vLLM version's flags.",
            max_length=128,
        ),
    ] = pydantic.Field(default_factory=list)
    extra_env: Annotated[
        list[kubetypes.EnvVar],
        pydantic.Field(
            description="Extra env vars, checked against the pinned vLLM version's env vars.", max_length=128
        ),
    ] = pydantic.Field(default_factory=list)
    monitoring: Annotated[MonitoringSpec, pydantic.Field(description="Metrics collection.")] = pydantic.Field(
        default_factory=MonitoringSpec
    )
    router: Annotated[
        router_api.RouterSpec, pydantic.Field(description="The OpenAI endpoint: vllm-router in front of the engines.")
    ] = pydantic.Field(default_factory=router_api.RouterSpec)
    disaggregation: Annotated[
        disaggregation_api.DisaggregationSpec | None,
        pydantic.Field(description="The KV connector of a serving with a prefill role; the facts' defaults if unset."),
    ] = None
    autoscaling: Annotated[
        autoscaling_api.AutoscalingSpec | None, pydantic.Field(description="Decode groups sized by a signal (KEDA).")
    ] = None

    def roles_present(self) -> list[tuple[RoleName, RoleSpec]]:
        """The roles this serving runs, prefill first (it feeds decode)."""
        present = [(RoleName.PREFILL, self.roles.prefill)] if self.roles.prefill is not None else []
        return [*present, (RoleName.DECODE, self.roles.decode)]


# ---------------------------------------------------------------------------------------------------------------
# The object


class DeepSeekServing(schema.Model):
    """DeepSeekServing: one DeepSeek model served by a tuned vLLM fleet, packed into NVLink domains."""

    model_config = pydantic.ConfigDict(extra="ignore", alias_generator=alias_generators.to_camel, populate_by_name=True)

    # A Literal takes no constant: these spell names.API_VERSION and names.KIND (mypy checks the defaults match).
    api_version: Annotated[Literal["nvlfleet.io/v1alpha1"], pydantic.Field(alias="apiVersion")] = names.API_VERSION
    kind: Literal["DeepSeekServing"] = names.KIND
    metadata: kubetypes.ObjectMeta = pydantic.Field(default_factory=kubetypes.ObjectMeta)
    spec: DeepSeekServingSpec
    status: servingstatus.DeepSeekServingStatus | None = None


# ---------------------------------------------------------------------------------------------------------------
# Topology arithmetic shared by validation, planning and rendering


@dataclasses.dataclass(frozen=True)
class Topology:
    """The resolved layout of one role's group. Only meaningful for a spec that passed validation."""

    tensor: int
    data: int
    data_local: int  # DP ranks per node
    nodes_per_group: int
    gpus_per_node: int
    expert: bool

    @property
    def gpus_per_group(self) -> int:
        return self.tensor * self.data


def role_topology(gpu: GpuGeneration, role: RoleSpec) -> Topology:
    """Resolve data size and nodes per group from what the user gave.

    Unset ``data`` fills ``nodesPerGroup`` nodes (one node when both are unset); unset ``nodesPerGroup`` is
    the whole nodes that tensor × data GPUs need. ``validation`` reports every combination that does not come
    out whole; this function never raises, so callers can use it on any parsed spec.
    """
    gpus_per_node = hardware.generation(gpu.value).gpus_per_node
    par = role.parallelism
    tensor = max(1, par.tensor)
    if par.data is not None:
        data = par.data
    else:
        nodes = par.nodes_per_group or 1
        data = max(1, nodes * gpus_per_node // tensor)
    nodes_per_group = par.nodes_per_group or max(1, -(-tensor * data // gpus_per_node))
    data_local = max(1, data // nodes_per_group)
    return Topology(
        tensor=tensor,
        data=data,
        data_local=data_local,
        nodes_per_group=nodes_per_group,
        gpus_per_node=gpus_per_node,
        expert=par.expert,
    )


def served_name(serving: DeepSeekServing) -> str:
    """The model name clients send: spec.model.servedName, else the serving's own name."""
    return serving.spec.model.served_name or serving.metadata.name
