"""Everything that can be said about a DeepSeekServing before a GPU is touched, in sentences a person understands.

Pure core, the second step of the data flow (spec → **validate** → plan → render → apply → status). The CRD's
OpenAPI schema and CEL rules (generated from ``models``) catch shape errors at admission; this module repeats
them for offline use (``nvlfleet validate``) and adds what needs facts: the GPU generation's shape
(``hardware``), the pinned vLLM version's flags, env vars and DeepSeek rules (``facts``), and the EFFECTIVE
settings of every role (``profiles.effective``: the spec's choices merged over the tuning profile), so a user
override that clashes with a profile default is caught, and what is validated is what is rendered.

API::

    validate(obj) -> list[Problem]                   # a raw object (dict from YAML/JSON/the API): errors only
    validate_serving(serving) -> list[Problem]       # a parsed DeepSeekServing: errors only
    review(obj) -> Review                            # errors and warnings, plus the parsed serving if it parsed
    review_serving(serving) -> Review
    parse(obj) -> (DeepSeekServing | None, list[Problem])   # pydantic errors as Problems, never a traceback

Errors refuse the serving. Warnings accept it but say what will run badly (e.g. an all-to-all backend that
makes DeepSeek V4.1 fall back to slow MoE kernels: it works, so refusing it would block an A/B test; it is
slow, so staying silent would hide a 2× loss).

Decisions worth knowing:
- Flags with a typed spec field, and flags that shape the group (ports, data-parallel wiring, headless
  workers), are nvlfleet's own: in ``extraArgs`` they are refused with the field to use (``OWNED_FLAGS``).
  Profile-only flags (--performance-mode, --attention-config, --additional-config, parsers) are accepted as
  overrides; their values are validated as the effective ones, since the extra arguments come last on the
  command line and argparse keeps the last value.
- ``extraEnv`` names must be read by the pinned vLLM, or start with a library prefix listed in the facts
  (NCCL_, NVSHMEM_, UCX_, GLOO_, CUDA_, PYTORCH_, TORCH_, TORCHINDUCTOR_, TRITON_, FLASHINFER_, DG_, HF_, OMP_).
  A secret-looking literal is refused: secrets are referenced (valueFrom.secretKeyRef), never inlined.
- Arguments are an argv list, never a shell line, so shell metacharacters are harmless; NUL bytes and line
  breaks are refused (they cannot be intended and break the rendered command and the logs).
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

from nvlfleet.api import kubetypes, models, nesting, problems
from nvlfleet.core import economics, profiles
from nvlfleet.facts import facts, hardware

Problem = problems.Problem

# ---------------------------------------------------------------------------------------------------------------
# Policy tables

# Flags nvlfleet writes itself, by argparse dest (so -tp, --tensor-parallel-size and --no-x forms all count),
# with what to do instead. "{role}" is left for the reader: the field exists per role.
OWNED_FLAGS: Mapping[str, str] = {
    "model": "the model is spec.model.name",
    "revision": "use spec.model.revision",
    "served_model_name": "use spec.model.servedName",
    "download_dir": "use spec.model.weights (cache and mountPath)",
    "hf_token": "use spec.model.hfTokenSecretRef (a Secret reference; never put a token in the arguments)",
    "api_key": "set extraEnv VLLM_API_KEY with valueFrom.secretKeyRef (never put a key in the arguments)",
    "host": "nvlfleet serves on all interfaces for the Service and the probes",
    "port": "nvlfleet serves on the port the Service and the probes use",
    "tensor_parallel_size": "use spec.roles.<role>.parallelism.tensor",
    "data_parallel_size": "use spec.roles.<role>.parallelism.data",
    "data_parallel_size_local": "nvlfleet derives the ranks per node from spec.roles.<role>.parallelism",
    "data_parallel_start_rank": "nvlfleet gives each node of a group its first rank",
    "data_parallel_rank": "nvlfleet runs one engine per group (internal load balancing)",
    "data_parallel_address": "nvlfleet points every node at its group leader",
    "data_parallel_rpc_port": "nvlfleet sets one RPC port for every node of a group",
    "data_parallel_backend": "nvlfleet runs multi-node groups with the mp backend",
    "data_parallel_hybrid_lb": "nvlfleet uses internal load balancing behind one Service",
    "data_parallel_external_lb": "nvlfleet uses internal load balancing behind one Service",
    "data_parallel_multi_port_external_lb": "nvlfleet uses internal load balancing behind one Service",
    "headless": "nvlfleet runs the workers of a multi-node group headless itself",
    "api_server_count": "the tuning profile sets the API servers of each leader",
    "nnodes": "nvlfleet spans nodes with data parallelism (spec.roles.<role>.parallelism)",
    "node_rank": "nvlfleet spans nodes with data parallelism (spec.roles.<role>.parallelism)",
    "master_addr": "nvlfleet spans nodes with data parallelism (spec.roles.<role>.parallelism)",
    "master_port": "nvlfleet spans nodes with data parallelism (spec.roles.<role>.parallelism)",
    "enable_expert_parallel": "use spec.roles.<role>.parallelism.expert",
    "max_model_len": "use spec.maxModelLen",
    "max_num_seqs": "use spec.roles.<role>.maxNumSeqs",
    "max_num_batched_tokens": "use spec.roles.<role>.maxNumBatchedTokens",
    "speculative_config": "use spec.speculative",
    "spec_method": "use spec.speculative.method",
    "spec_tokens": "use spec.speculative.numSpeculativeTokens",
    "spec_model": "use spec.speculative (the DeepSeek draft weights sit in the target checkpoint)",
    "attention_backend": "use spec.kernels.attentionBackend",
    "moe_backend": "use spec.kernels.moeBackend",
    "all2all_backend": "use spec.kernels.all2allBackend",
    "kv_cache_dtype": "use spec.kernels.kvCacheDtype",
    "enable_dbo": "use spec.kernels.dualBatchOverlap.enabled",
    "dbo_decode_token_threshold": "use spec.kernels.dualBatchOverlap.decodeTokenThreshold",
    "dbo_prefill_token_threshold": "use spec.kernels.dualBatchOverlap.prefillTokenThreshold",
    "enable_eplb": "use spec.kernels.eplb.enabled",
    "eplb_config": "use spec.kernels.eplb",
    "compilation_config": "use spec.kernels.cudaGraph (mode, captureSizes, minBatch..maxBatch)",
    "cudagraph_capture_sizes": "use spec.kernels.cudaGraph.captureSizes",
    "max_cudagraph_capture_size": "use spec.kernels.cudaGraph.maxBatch",
}

# Env vars that carry the data-parallel wiring nvlfleet passes as flags; setting them would contradict the flags.
OWNED_ENV: Mapping[str, str] = {
    name: "nvlfleet wires data parallelism through flags (spec.roles.<role>.parallelism)"
    for name in ("VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "VLLM_DP_SIZE", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT")
}

# The Kubernetes EnvVarSource kinds and the keys each needs.
_ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")

# Name segments that mark a secret (matched on whole "_"-separated words: VLLM_MAX_BAD_WORDS_TOTAL_TOKENS is not).
_SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY"})
_SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY")})
# Values that are credentials whatever they are called: Hugging Face, OpenAI-style, AWS, GitHub tokens, JWTs.
_SECRET_VALUE = problems.CREDENTIAL
_HF_TOKEN_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})

# What the API's string patterns mean, for messages ("is not a DNS label" rather than a regex).
PATTERN_MEANINGS: Mapping[str, str] = {
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": "a DNS-1123 label (lowercase letters, digits and '-', "
    "starting and ending with a letter or digit)",
    r"^([01][0-9]|2[0-3]):[0-5][0-9]$": "a UTC time of day HH:MM between 00:00 and 23:59",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "an environment variable name (letters, digits and '_', not starting with a digit)",
    r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$": "a Kubernetes quantity such as 64Gi",
    r"^[0-9]+\.[0-9]+\.[0-9]+$": "a version MAJOR.MINOR.PATCH such as 0.33.0",
    r"^[A-Z0-9_]+$": "an upper-case backend name such as FLASHMLA_SPARSE_DSV41",
    r"^[a-z0-9_]+$": "a lower-case name such as flashinfer_nvlink_one_sided",
    r"^[A-Z]{3}$": "an ISO 4217 currency code such as USD",
    r"^/": "an absolute path (starting with /)",
    r"^[^/]": "a relative path (not starting with /)",
    r"^[A-Za-z0-9._-]+$": "a revision (commit or tag: letters, digits, '.', '_' and '-')",
    r"^[A-Za-z0-9][A-Za-z0-9._/-]*$": "a Hugging Face repository id or path such as deepseek-ai/DeepSeek-V4.1-Flash",
    r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$": "a container image reference such as vllm/vllm-openai:v0.33.0",
    r"^[A-Za-z0-9][A-Za-z0-9._:-]*$": "a served model name (letters, digits, '.', '_', ':' and '-')",
    r"^/.*": "an absolute path",
    r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$": "a Kubernetes label key such as "
    "nvidia.com/gpu.clique",
}

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONTEXT_SETTINGS = frozenset({"family", "gpu", "computeCapability", "multiNodeNvlink"})
_SHM = "/dev/shm"  # noqa: S108 - the pod's shared-memory mount, sized by spec.pod.shmSize; not a temp file


# ---------------------------------------------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True)
class Review:
    """What validation found. ``serving`` is the parsed object (None when it did not parse)."""

    serving: models.DeepSeekServing | None
    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors


class _Findings:
    def __init__(self) -> None:
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []

    def error(self, path: str, message: str) -> None:
        self.add("error", path, message)

    def warn(self, path: str, message: str) -> None:
        self.add("warning", path, message)

    def add(self, severity: facts.Severity, path: str, message: str) -> None:
        bucket = self.errors if severity == "error" else self.warnings
        problem = Problem(path, message)
        if problem not in bucket:
            bucket.append(problem)


# ---------------------------------------------------------------------------------------------------------------
# Entry points


def validate(obj: object) -> list[Problem]:
    """Errors of a raw object (a dict read from YAML or JSON, or sent by the API server)."""
    return list(review(obj).errors)


def validate_serving(serving: models.DeepSeekServing) -> list[Problem]:
    """Errors of a parsed serving: topology, facts of the pinned vLLM, effective settings, escape hatches."""
    return list(review_serving(serving).errors)


def review(obj: object) -> Review:
    """Errors and warnings of a raw object."""
    serving, found = parse(obj)
    if serving is None:
        return Review(serving=None, errors=tuple(found))
    semantic = review_serving(serving)
    return Review(serving=serving, errors=(*found, *semantic.errors), warnings=semantic.warnings)


def review_serving(serving: models.DeepSeekServing) -> Review:
    """Errors and warnings of a parsed serving."""
    out = _Findings()
    spec = serving.spec
    _check_shape_rules(spec, out)
    topology_ok = True
    for role, role_spec in spec.roles_present():
        topology_ok &= _check_topology(spec, role, role_spec, out)
        _check_role_limits(spec, role, role_spec, out)
    if spec.roles.prefill is not None and spec.roles.prefill.groups > 0 and spec.roles.decode.groups == 0:
        out.warn("spec.roles.decode.groups", "prefill groups without decode groups serve no request")
    if spec.pricing is not None:
        for problem in economics.schedule_problems(spec.pricing, "spec.pricing.schedule"):
            out.error(problem.path, problem.message)
    _check_pod(spec, out)
    try:
        version_facts = facts.load(spec.runtime.vllm_version)
    except facts.UnknownVersion as err:
        out.error("spec.runtime.vllmVersion", f"{err}; pin an image with a known vLLM version")
        return Review(serving=serving, errors=tuple(out.errors), warnings=tuple(out.warnings))
    _check_family(spec, version_facts, out)
    args = _check_extra_args(spec, version_facts, out)
    env = _check_extra_env(spec, version_facts, out)
    if topology_ok:
        _check_effective(spec, version_facts, args, env, out)
    return Review(serving=serving, errors=tuple(out.errors), warnings=tuple(out.warnings))


# ---------------------------------------------------------------------------------------------------------------
# Parsing (pydantic errors as Problems)


def parse(obj: object) -> tuple[models.DeepSeekServing | None, list[Problem]]:
    """Parse a raw object the way the API server would type-check it (strict: "4" is not an integer)."""
    if not isinstance(obj, Mapping):
        return None, [
            Problem("", f"a DeepSeekServing is a mapping with apiVersion, kind, metadata and spec, not {_a(obj)}")
        ]
    deep = nesting.too_deep(obj)
    if deep is not None:  # before anything walks it recursively: json.dumps and pydantic stop near 1,000 levels
        return None, [Problem(deep, f"nests more than {nesting.MAX_DEPTH} levels deep; no field of a serving does")]
    found = _metadata_problems(obj.get("metadata"))
    try:
        # JSON round trip: strict JSON mode accepts enum values and ISO strings but no "4" for 4, like the API.
        # Wire names only (by_name=False): the API server knows nodesPerGroup, not the Python nodes_per_group.
        text = json.dumps(obj, default=str)
    except (TypeError, ValueError) as err:
        return None, [*found, Problem("", f"the object cannot be read as JSON: {err}")]
    try:
        serving = models.DeepSeekServing.model_validate_json(text, strict=True, by_alias=True, by_name=False)
    except pydantic.ValidationError as err:
        converted = [_pydantic_problem(e) for e in err.errors(include_url=False)]
        return None, [*found, *dict.fromkeys(converted)]
    return serving, found


def _metadata_problems(metadata: object) -> list[Problem]:
    if metadata is None:
        return [Problem("metadata.name", "is required")]
    if not isinstance(metadata, Mapping):
        return []  # pydantic reports the type
    found: list[Problem] = []
    name = metadata.get("name")
    if not name:
        found.append(Problem("metadata.name", "is required"))
    elif not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        found.append(
            Problem(
                "metadata.name",
                f"{name!r} is not a valid name: use lowercase letters, digits, '-' and '.', at most 253 characters",
            )
        )
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _DNS_LABEL.match(namespace)):
        found.append(Problem("metadata.namespace", f"{namespace!r} is not {PATTERN_MEANINGS[_DNS_LABEL.pattern]}"))
    return found


def _pydantic_problem(error: Mapping[str, Any]) -> Problem:
    loc: tuple[str | int, ...] = tuple(error["loc"])
    kind: str = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    given = error.get("input")
    if kind == "extra_forbidden":
        field = str(loc[-1])
        known = _field_names_at(loc[:-1])
        close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else (f"; known fields: {', '.join(known)}" if known else "")
        return Problem(problems.pydantic_path(loc), f"unknown field{hint}")
    return Problem(problems.pydantic_path(loc), _type_message(kind, ctx, given, error["msg"], loc))


def _type_message(kind: str, ctx: Mapping[str, Any], given: object, fallback: str, loc: Sequence[str | int]) -> str:
    got = f", got {_a(given)}"
    if kind == "missing":
        return "is required"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number{got}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number{got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false{got}"
    if kind == "string_type":
        if loc and loc[-1] in ("start", "end") and isinstance(given, int):
            return (
                f'must be a quoted time such as "01:00"; YAML reads an unquoted 01:00 as the number {given}'
                if given < 24 * 60
                else f'must be a quoted time such as "01:00"{got}'
            )
        return f"must be a string{got}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return f"{given!r} is not {PATTERN_MEANINGS.get(pattern, f'matching {pattern}')}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must be at least {ctx.get('min_length')} long"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items, got {ctx.get('actual_length')}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}{got}"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')}{got}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}{got}"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')}{got}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}{got}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping{got}"
    if kind == "list_type":
        return f"must be a list{got}"
    if kind == "json_invalid":
        return f"is not valid JSON: {ctx.get('error', fallback)}"
    return fallback[0].lower() + fallback[1:] if fallback else kind


def _a(value: object) -> str:
    """A value as a YAML reader would name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    return repr(value)


def _field_names_at(loc: Sequence[str | int]) -> list[str]:
    """The wire names of the fields of the model found at ``loc`` (for "did you mean")."""
    model: Any = models.DeepSeekServing
    for part in loc:
        if isinstance(part, int):
            continue  # list items: the item type was already unwrapped
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            return []
        field = next(
            (f for name, f in model.model_fields.items() if part in (name, f.alias, f.serialization_alias)), None
        )
        if field is None:
            return []
        model = _model_in(field.annotation)
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
        return sorted(f.alias or name for name, f in model.model_fields.items())
    return []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside X | None, list[X], Annotated[X, ...]."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if isinstance(found, type) and issubclass(found, pydantic.BaseModel):
                return found
    return annotation


# ---------------------------------------------------------------------------------------------------------------
# What the CRD's CEL rules say, repeated for offline validation (same conditions, same words)


def _check_shape_rules(spec: models.DeepSeekServingSpec, out: _Findings) -> None:
    weights = spec.model.weights
    if weights.cache == "pvc" and weights.pvc is None:
        out.error("spec.model.weights.pvc", "cache 'pvc' needs weights.pvc.claimName")
    if weights.cache == "hostPath" and weights.host_path is None:
        out.error("spec.model.weights.hostPath", "cache 'hostPath' needs weights.hostPath.path")
    if weights.cache != "pvc" and weights.pvc is not None:
        out.warn("spec.model.weights.pvc", f"is ignored because cache is {weights.cache!r}; set cache: pvc to use it")
    if weights.cache != "hostPath" and weights.host_path is not None:
        out.warn(
            "spec.model.weights.hostPath",
            f"is ignored because cache is {weights.cache!r}; set cache: hostPath to use it",
        )
    graph = spec.kernels.cuda_graph
    if graph is not None and graph.min_batch > graph.max_batch:
        out.error(
            "spec.kernels.cudaGraph.minBatch",
            f"minBatch {graph.min_batch} must not exceed maxBatch {graph.max_batch}",
        )
    for i, env in enumerate(spec.extra_env):
        if (env.value is None) == (env.value_from is None):
            out.error(problems.path("spec.extraEnv", i), f"{env.name}: set exactly one of value and valueFrom")


# ---------------------------------------------------------------------------------------------------------------
# Topology: groups made of whole nodes, inside one NVLink domain


def _check_topology(
    spec: models.DeepSeekServingSpec, role: models.RoleName, role_spec: models.RoleSpec, out: _Findings
) -> bool:
    """Report layouts that cannot be placed; False when the layout is too broken to reason about further."""
    gen = hardware.generation(spec.gpu.value)
    par = role_spec.parallelism
    base = f"spec.roles.{role.value}.parallelism"
    gpn = gen.gpus_per_node
    if par.tensor > gpn:
        out.error(
            f"{base}.tensor",
            f"{role.value}: tensor-parallel size {par.tensor} is larger than the {gpn} GPUs of one {gen.name} node; "
            f"use data parallelism across nodes (e.g. tensor: 1, data: {par.tensor * (par.data or 1)}) "
            "with expert parallelism instead",
        )
        return False
    if gpn % par.tensor:
        fits = _or([str(t) for t in range(1, gpn + 1) if gpn % t == 0])
        out.error(
            f"{base}.tensor",
            f"{role.value}: tensor-parallel size {par.tensor} does not divide the {gpn} GPUs of a {gen.name} node, "
            f"so {gpn % par.tensor} GPU(s) of every node would sit idle; use tensor {fits}",
        )
        return False
    ok = True
    if par.data is not None and par.nodes_per_group is not None:
        want = par.nodes_per_group * gpn // par.tensor
        if par.data != want:
            out.error(
                f"{base}.data",
                f"{role.value}: data-parallel size {par.data} does not match nodesPerGroup {par.nodes_per_group}: "
                f"{par.nodes_per_group} {gen.name} nodes hold {par.nodes_per_group * gpn} GPUs, i.e. data {want} "
                f"at tensor {par.tensor}; set data: {want} or leave data unset",
            )
            ok = False
    elif par.data is not None and (par.tensor * par.data) % gpn:
        gpus = par.tensor * par.data
        per_node = gpn // par.tensor
        lower, upper = (gpus // gpn) * per_node, (gpus // gpn + 1) * per_node
        choices = f"data: {lower} or {upper}" if lower else f"data: {upper}"
        out.error(
            f"{base}.data",
            f"{role.value}: tensor × data = {par.tensor} × {par.data} = {gpus} GPUs does not fill whole "
            f"{gpn}-GPU {gen.name} nodes (each node runs one vLLM pod on all its GPUs); use {choices}",
        )
        ok = False
    topology = models.role_topology(spec.gpu, role_spec)
    if topology.nodes_per_group > gen.nodes_per_domain:
        where = f"{base}.nodesPerGroup" if par.nodes_per_group is not None else f"{base}.data"
        if gen.multi_node_nvlink:
            out.error(
                where,
                f"{role.value}: a group of {topology.nodes_per_group} nodes ({topology.nodes_per_group * gpn} GPUs) "
                f"does not fit in one {gen.name} NVLink domain of {gen.nodes_per_domain} nodes "
                f"({gen.gpus_per_domain} GPUs); a group never spans domains, so use smaller groups "
                f"(at most data: {gen.gpus_per_domain // par.tensor} at tensor {par.tensor}) and more of them",
            )
        else:
            out.error(
                where,
                f"{role.value}: a group spanning {topology.nodes_per_group} {gen.name} nodes is refused: NVLink "
                f"stops at the node on {gen.name}, so tensor × data must fit the {gpn} GPUs of one node; "
                "run more groups instead",
            )
        ok = False
    return ok


def _check_role_limits(
    spec: models.DeepSeekServingSpec, role: models.RoleName, role_spec: models.RoleSpec, out: _Findings
) -> None:
    base = f"spec.roles.{role.value}"
    seqs, tokens = role_spec.max_num_seqs, role_spec.max_num_batched_tokens
    if seqs is not None and tokens is not None and tokens < seqs:
        out.error(
            f"{base}.maxNumBatchedTokens",
            f"{role.value}: maxNumBatchedTokens {tokens} is smaller than maxNumSeqs {seqs}; a scheduler step "
            "must fit at least one token per running request",
        )
    graph = spec.kernels.cuda_graph
    if seqs is not None and graph is not None and "min_batch" in graph.model_fields_set and seqs < graph.min_batch:
        out.error(
            "spec.kernels.cudaGraph.minBatch",
            f"{role.value}: the CUDA-graph window starts at {graph.min_batch} requests, but maxNumSeqs is {seqs}: "
            f"a rank never runs {graph.min_batch} requests at once; lower minBatch or raise maxNumSeqs",
        )


# ---------------------------------------------------------------------------------------------------------------
# Pod overrides


def _check_pod(spec: models.DeepSeekServingSpec, out: _Findings) -> None:
    pod = spec.pod
    for section, amounts in (pod.resources or {}).items():
        if section not in ("limits", "requests"):
            out.error(f"spec.pod.resources.{section}", "only limits and requests may be set")
            continue
        for resource, amount in amounts.items():
            if resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/"):
                out.error(
                    f"spec.pod.resources.{section}",
                    f"{resource} is nvlfleet's to request: every pod takes all GPUs of its node",
                )
            elif isinstance(amount, str) and not _QUANTITY.fullmatch(amount):
                out.error(
                    f'spec.pod.resources.{section}["{resource}"]',
                    f"{amount!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)",
                )
            elif str(amount).startswith("-"):
                out.error(f'spec.pod.resources.{section}["{resource}"]', f"{amount} is negative")
    # Kubernetes refuses these only when LeaderWorkerSet makes the pods, which then never appear: say so now.
    for field, mapping, values_are_labels in (
        ("labels", pod.labels, True),
        ("nodeSelector", pod.node_selector, True),
        ("annotations", pod.annotations, False),
    ):
        for key, value in mapping.items():
            where = f'spec.pod.{field}["{key}"]'
            if not _qualified_name(key):
                out.error(
                    where,
                    f"{key!r} is not a label key (an optional DNS prefix and '/', then at most 63 "
                    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
                )
            elif values_are_labels and not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
                out.error(
                    where,
                    f"{value!r} is not a label value (at most 63 letters, digits, '-', '_' or '.', "
                    "starting and ending with a letter or digit)",
                )
    reserved = {spec.model.weights.mount_path: "the weight cache (spec.model.weights.mountPath)", _SHM: "shm"}
    for i, mount in enumerate(pod.volume_mounts):
        target = mount.mount_path
        if target in reserved:
            what = reserved[target]
            out.error(
                problems.path("spec.pod.volumeMounts", i, "mountPath"),
                f"{target} is already mounted for {what}"
                + ("; size it with spec.pod.shmSize" if what == "shm" else ""),
            )


# resource.Quantity's syntax: a signed decimal, then a decimal exponent, an SI suffix or a binary suffix.
_QUANTITY = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _qualified_name(key: str) -> bool:
    """A Kubernetes label or annotation key: ``[prefix/]name``."""
    prefix, _, name = key.rpartition("/")
    if prefix and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


# ---------------------------------------------------------------------------------------------------------------
# Model family


def _check_family(spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: _Findings) -> None:
    declared = spec.model.family.value
    for family in version_facts.families.values():
        if family.name != declared and family.matches(spec.model.name):
            out.error(
                "spec.model.family",
                f"model {spec.model.name} is a {family.title} model, but family is {declared}; set family: "
                f"{family.name} (the family selects the tuning profile and the model's rules)",
            )
            return


# ---------------------------------------------------------------------------------------------------------------
# Escape hatches: extraArgs and extraEnv


def _check_extra_args(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: _Findings
) -> tuple[facts.Arg, ...]:
    """Report what vLLM would refuse or nvlfleet owns; return the arguments that are fine, for the rules."""
    clean: list[str] = []
    positions: list[int] = []
    for i, token in enumerate(spec.extra_args):
        where = problems.path("spec.extraArgs", i)
        if any(c in token for c in "\x00\n\r"):
            out.error(where, "contains a NUL byte or a line break; each extraArgs item is one argument")
            continue
        if _SECRET_VALUE.search(token):
            out.error(where, "looks like a credential; secrets are referenced from a Secret, never put in arguments")
            continue
        clean.append(token)
        positions.append(i)
    parsed = version_facts.parse_args(clean)
    for err in parsed.errors:
        out.error(problems.path("spec.extraArgs", positions[err.index]), err.message)
    kept: list[facts.Arg] = []
    seen: dict[str, int] = {}
    for arg in parsed.args:
        index = positions[arg.index]
        where = problems.path("spec.extraArgs", index)
        dest = arg.flag.dest
        if dest in OWNED_FLAGS:
            out.error(where, f"{arg.spelling} is set by nvlfleet; {OWNED_FLAGS[dest]}")
            continue
        if dest in seen:
            out.error(
                where,
                f"{arg.spelling} repeats spec.extraArgs[{seen[dest]}] ({dest}); vLLM would silently keep the last",
            )
            continue
        seen[dest] = index
        if arg.flag.name in ("--additional-config", "--attention-config") and arg.values:
            try:
                loaded = json.loads(arg.values[0])
            except ValueError:
                loaded = None
            if not isinstance(loaded, dict):
                out.error(where, f"{arg.spelling} must be a JSON object here (nvlfleet reads it for its rules)")
                continue
        kept.append(dataclasses.replace(arg, index=index))
    return tuple(kept)


def _check_extra_env(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: _Findings
) -> dict[str, tuple[str, str]]:
    """Report env vars vLLM does not read, removed names and inlined secrets; return literal values by name."""
    literals: dict[str, tuple[str, str]] = {}
    seen: dict[str, int] = {}
    prefixes = ", ".join(p.prefix for p in version_facts.env_prefixes)
    for i, env in enumerate(spec.extra_env):
        where = problems.path("spec.extraEnv", i)
        name = env.name
        if name in seen:
            out.error(f"{where}.name", f"{name} is already set by spec.extraEnv[{seen[name]}]")
            continue
        seen[name] = i
        if name in version_facts.removed_env_vars:
            instead = version_facts.removed_env_vars[name]
            flag = version_facts.find_flag(instead.split()[0])
            owned = OWNED_FLAGS.get(flag.dest) if flag else None
            out.error(
                f"{where}.name",
                f"{name} no longer exists in vLLM {version_facts.version}; it is the flag {instead} now"
                + (f" ({owned})" if owned else ""),
            )
            continue
        if name in OWNED_ENV:
            out.error(f"{where}.name", f"{name} is set by nvlfleet; {OWNED_ENV[name]}")
            continue
        if not version_facts.env_allowed(name):
            out.error(
                f"{where}.name",
                f"{name} is not an env var vLLM {version_facts.version} reads{version_facts.suggest_env(name)} "
                f"(other names must belong to a library vLLM loads: {prefixes})",
            )
            continue
        if env.value is not None:
            secret = _looks_secret(name, env.value)
            if secret:
                out.error(f"{where}.value", secret)
                continue
            literals[name] = (env.value, f"{where}.value")
        if env.value_from is not None:
            _check_env_source(env.value_from, f"{where}.valueFrom", out)
    return literals


def _looks_secret(name: str, value: str) -> str | None:
    words = name.upper().split("_")
    by_name = bool(_SECRET_WORDS & set(words)) or any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))
    if not by_name and not _SECRET_VALUE.search(value):
        return None
    if not value:
        return None
    instead = "spec.model.hfTokenSecretRef" if name in _HF_TOKEN_NAMES else "valueFrom.secretKeyRef"
    return f"{name} looks like a secret and must not be written into the serving; use {instead}" + (
        " (or valueFrom.secretKeyRef)" if instead != "valueFrom.secretKeyRef" else ""
    )


def _check_env_source(source: kubetypes.EnvVarSource, where: str, out: _Findings) -> None:
    """Exactly one source (the CRD's CEL rule says the same at admission; a file given to ``nvlfleet validate``
    meets it here)."""
    given = [name for name, value in source.to_wire().items() if value is not None]
    if len(given) != 1:
        out.error(where, f"must hold exactly one of {', '.join(_ENV_SOURCES)}")


# ---------------------------------------------------------------------------------------------------------------
# Effective settings: the rules of the pinned vLLM version


@dataclasses.dataclass(frozen=True)
class _Setting:
    value: facts.Scalar
    path: str | None  # where the user chose it; None: the tuning profile (or vLLM's default) decides


_SETTING_OF_TUNING = {
    "attentionBackend": "attention_backend",
    "moeBackend": "moe_backend",
    "all2allBackend": "all2all_backend",
    "kvCacheDtype": "kv_cache_dtype",
    "dbo": "dbo.enabled",
    "dboDecodeTokenThreshold": "dbo.decode_token_threshold",
    "dboPrefillTokenThreshold": "dbo.prefill_token_threshold",
    "eplb": "eplb.enabled",
    "redundantExperts": "eplb.num_redundant_experts",
    "cudagraphMode": "cuda_graph.mode",
    "speculative": "speculative.enabled",
    "speculativeMethod": "speculative.method",
    "speculativeTokens": "speculative.num_speculative_tokens",
    "expert": "expert_parallel",
    "maxNumSeqs": "max_num_seqs",
}


def _settings(
    spec: models.DeepSeekServingSpec,
    role: models.RoleName,
    tuning: profiles.Tuning,
    args: Sequence[facts.Arg],
    env: Mapping[str, tuple[str, str]],
) -> dict[str, _Setting]:
    gen = hardware.generation(spec.gpu.value)
    topology = tuning.topology
    par_path = f"spec.roles.{role.value}.parallelism"
    par = profiles.role_spec(spec, role).parallelism
    # Only what the user wrote is theirs to be blamed for; derived sizes point elsewhere.
    written = {
        "tensor": "tensor" in par.model_fields_set,
        "data": par.data is not None,
        "nodesPerGroup": par.nodes_per_group is not None,
    }
    values: dict[str, facts.Scalar] = {
        "attentionBackend": tuning.attention_backend,
        "moeBackend": tuning.moe_backend,
        "all2allBackend": tuning.all2all_backend,
        "kvCacheDtype": tuning.kv_cache_dtype,
        "dbo": tuning.dbo.enabled,
        "dboDecodeTokenThreshold": tuning.dbo.decode_token_threshold,
        "dboPrefillTokenThreshold": tuning.dbo.prefill_token_threshold,
        "eplb": tuning.eplb.enabled,
        "redundantExperts": tuning.eplb.num_redundant_experts if tuning.eplb.enabled else None,
        "cudagraphMode": tuning.cuda_graph.mode,
        "speculative": tuning.speculative is not None,
        "speculativeMethod": tuning.speculative.method if tuning.speculative else None,
        "speculativeTokens": tuning.speculative.num_speculative_tokens if tuning.speculative else None,
        "expert": tuning.expert_parallel,
        "maxNumSeqs": tuning.max_num_seqs,
    }
    out: dict[str, _Setting] = {}
    for key, value in values.items():
        reason = tuning.reasons.get(_SETTING_OF_TUNING[key])
        chosen = _SETTING_OF_TUNING[key] in tuning.user_set and reason is not None
        out[key] = _Setting(value, reason.source if chosen and reason else None)
    if spec.kernels.eplb is not None and spec.kernels.eplb.num_redundant_experts is not None:
        out["redundantExperts"] = _Setting(
            spec.kernels.eplb.num_redundant_experts, "spec.kernels.eplb.numRedundantExperts"
        )
    out |= {
        "family": _Setting(spec.model.family.value, "spec.model.family"),
        "gpu": _Setting(gen.name, "spec.gpu"),
        "computeCapability": _Setting(gen.compute_capability, "spec.gpu"),
        "multiNodeNvlink": _Setting(gen.multi_node_nvlink, "spec.gpu"),
        "tensor": _Setting(topology.tensor, f"{par_path}.tensor" if written["tensor"] else None),
        "data": _Setting(topology.data, f"{par_path}.data" if written["data"] else None),
        "gpusPerGroup": _Setting(topology.gpus_per_group, par_path if any(written.values()) else None),
        "nodesPerGroup": _Setting(
            topology.nodes_per_group, f"{par_path}.nodesPerGroup" if written["nodesPerGroup"] else None
        ),
        "decodeBackend": _Setting(_scalar(tuning.additional_config.get("decode_backend")), None),
        "indexerKvDtype": _Setting(_scalar(tuning.attention_config.get("indexer_kv_dtype")), None),
        "indexerSparseLogits": _Setting(_scalar(tuning.attention_config.get("indexer_sparse_logits")), None),
        "ubatchSize": _Setting(None, None),
    }
    for name, value in tuning.env:
        out[f"env.{name}"] = _Setting(value, None)
    for name, (value, path) in env.items():
        out[f"env.{name}"] = _Setting(value, path)
    for arg in args:
        where = problems.path("spec.extraArgs", arg.index)
        out[f"arg.{arg.flag.dest}"] = _Setting(_typed(arg), where)
        # The extra arguments come after nvlfleet's on the command line: their JSON replaces the profile's.
        if arg.flag.name == "--additional-config":
            config = json.loads(arg.values[0])
            out["decodeBackend"] = _Setting(_scalar(config.get("decode_backend")), where)
        elif arg.flag.name == "--attention-config":
            config = json.loads(arg.values[0])
            out["indexerKvDtype"] = _Setting(_scalar(config.get("indexer_kv_dtype")), where)
            out["indexerSparseLogits"] = _Setting(_scalar(config.get("indexer_sparse_logits")), where)
        elif arg.flag.name == "--ubatch-size":
            out["ubatchSize"] = _Setting(_typed(arg), where)
    return out


def _scalar(value: object) -> facts.Scalar:
    return value if value is None or isinstance(value, str | int | float | bool) else json.dumps(value)


def _typed(arg: facts.Arg) -> facts.Scalar:
    value = arg.value
    if isinstance(value, str) and arg.flag.type == "int":
        return int(value)
    if isinstance(value, str) and arg.flag.type == "float":
        return float(value)
    return value


def _check_effective(
    spec: models.DeepSeekServingSpec,
    version_facts: facts.Facts,
    args: Sequence[facts.Arg],
    env: Mapping[str, tuple[str, str]],
    out: _Findings,
) -> None:
    roles = spec.roles_present()
    per_role: dict[tuple[facts.Severity, str, str], list[models.RoleName]] = {}
    for role, _ in roles:
        try:
            tuning = profiles.effective(spec, role)
        except problems.InvalidSpec as err:
            for problem in err.problems:
                out.error(problem.path, problem.message)
            return
        except profiles.ProfileError as err:
            out.error("spec", f"the tuning profile for this spec is broken (an nvlfleet bug, please report): {err}")
            return
        settings = _settings(spec, role, tuning, args, env)
        for severity, path, message in _setting_problems(spec, version_facts, role, tuning, settings):
            per_role.setdefault((severity, path, message), []).append(role)
    everyone = [role for role, _ in roles]
    for (severity, path, message), hit in per_role.items():
        # Said once when every role of a disaggregated serving breaks the rule the same way.
        text = message if len(everyone) > 1 and hit == everyone else f"{' and '.join(r.value for r in hit)}: {message}"
        out.add(severity, path, text)


def _setting_problems(
    spec: models.DeepSeekServingSpec,
    version_facts: facts.Facts,
    role: models.RoleName,
    tuning: profiles.Tuning,
    settings: Mapping[str, _Setting],
) -> Iterable[tuple[facts.Severity, str, str]]:
    yield from _speculative_problems(spec, version_facts, settings)
    yield from _value_problems(version_facts, settings)
    seqs, tokens = tuning.max_num_seqs, tuning.max_num_batched_tokens
    if seqs is not None and tokens is not None and tokens < seqs:
        path = _blame(settings, ["maxNumSeqs"]) or f"spec.roles.{role.value}.maxNumBatchedTokens"
        yield "error", path, f"max-num-batched-tokens {tokens} is smaller than max-num-seqs {seqs}"
    values = {key: s.value for key, s in settings.items()}
    for rule in version_facts.rules:
        if not rule.applies(values):
            continue
        if rule.check is not None:
            yield from _named_check(rule, spec, version_facts, role, tuning, settings)
            continue
        failing = rule.failures(values) if rule.require else [None]
        for key in failing:
            path, note = _rule_path(rule, key, settings, version_facts, role)
            requirement = "" if key is None else _requirement(key, rule.require[key], settings, version_facts)
            message = rule.message.format_map(_Words(values, requirement=requirement))
            yield rule.severity, path, f"{message}; {rule.reason}{note}"


def _speculative_problems(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, settings: Mapping[str, _Setting]
) -> Iterable[tuple[facts.Severity, str, str]]:
    method = settings["speculativeMethod"].value
    if not isinstance(method, str):
        return
    path = settings["speculativeMethod"].path or "spec.speculative.method"
    family = version_facts.families.get(spec.model.family.value)
    accepted = ", ".join(family.speculative_methods) if family else ""
    if method not in version_facts.speculative_methods:
        close = difflib.get_close_matches(method, sorted(version_facts.speculative_methods), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        yield (
            "error",
            path,
            f"vLLM {version_facts.version} has no speculative method {method!r}{hint}"
            + (f" ({family.title} accepts {accepted})" if family else ""),
        )
        return
    canonical = version_facts.canonical_speculative_method(method)
    if family is not None and canonical not in family.speculative_methods:
        alias = f" (an alias of {canonical})" if canonical != method else ""
        yield (
            "error",
            path,
            f"{family.title} accepts only speculative method {accepted}, not {method!r}{alias}; "
            f"{family.speculative_source}",
        )


def _value_problems(
    version_facts: facts.Facts, settings: Mapping[str, _Setting]
) -> Iterable[tuple[facts.Severity, str, str]]:
    choices = {
        "all2allBackend": version_facts.all2all_backends,
        "moeBackend": version_facts.moe_backends,
        "kvCacheDtype": version_facts.kv_cache_dtypes,
    }
    for key, allowed in choices.items():
        value = settings[key].value
        if isinstance(value, str) and value not in allowed:
            label = version_facts.settings[key].label
            close = difflib.get_close_matches(value, sorted(allowed), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            yield (
                "error",
                settings[key].path or version_facts.settings[key].path,
                f"vLLM {version_facts.version} has no {label} {value!r}; {hint}it has {', '.join(sorted(allowed))}",
            )


def _named_check(
    rule: facts.Rule,
    spec: models.DeepSeekServingSpec,
    version_facts: facts.Facts,
    role: models.RoleName,
    tuning: profiles.Tuning,
    settings: Mapping[str, _Setting],
) -> Iterable[tuple[facts.Severity, str, str]]:
    if rule.check != "expertsDivideExpertParallel":
        raise ValueError(f"rule {rule.id} names an unknown check {rule.check}")
    family = version_facts.families.get(spec.model.family.value)
    count = family.experts_for(spec.model.name) if family else None
    if count is None:
        return  # the facts know no expert count for this model; the profile turns EPLB off rather than guess
    ep = tuning.ep_size
    redundant = settings["redundantExperts"].value
    r = redundant if isinstance(redundant, int) else 0
    if (count.experts + r) % ep == 0:
        return
    fit = (-count.experts) % ep
    options = sorted({fit, fit + ep} - {r})
    path = _blame(settings, ["redundantExperts", "eplb", "data"]) or f"spec.roles.{role.value}.parallelism.data"
    yield (
        rule.severity,
        path,
        f"{count.experts} routed experts + {r} redundant = {count.experts + r} do not divide evenly over the "
        f"expert-parallel size {ep} (tensor × data); use numRedundantExperts "
        f"{' or '.join(str(o) for o in options)} (or leave it unset for the profile to choose); {rule.reason}",
    )


def _blame(settings: Mapping[str, _Setting], keys: Sequence[str]) -> str | None:
    return next((settings[k].path for k in keys if k in settings and settings[k].path), None)


def _rule_path(
    rule: facts.Rule,
    failing: str | None,
    settings: Mapping[str, _Setting],
    version_facts: facts.Facts,
    role: models.RoleName,
) -> tuple[str, str]:
    """The spec field to point at, and a note when only the tuning profile chose the settings involved.

    Prefer what the user chose over the context it meets: for "mega attention on an H200", the attention backend
    the user set, not the GPU; for "latency_specialized needs tensor 4", the tensor size.
    """
    keys = [k for k in ([failing] if failing else []) + [*rule.when, *rule.require] if k]
    chosen = [k for k in keys if settings.get(k) is not None and settings[k].path]
    for k in chosen:
        if k not in _CONTEXT_SETTINGS:
            return str(settings[k].path), ""
    if chosen:
        return str(settings[chosen[0]].path), ""
    first = next((k for k in keys if k not in _CONTEXT_SETTINGS), keys[0])
    info = version_facts.settings.get(first)
    path = info.path.format(role=role.value) if info else "spec"
    return path, " (this comes from the tuning profile, not the spec: please report it; override it here)"


class _Words(dict[str, str]):
    """Setting values as message words; unknown placeholders stay visible rather than raising."""

    def __init__(self, values: Mapping[str, facts.Scalar], *, requirement: str) -> None:
        super().__init__({k: _word(v) for k, v in values.items()}, requirement=requirement)

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _word(value: facts.Scalar) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _label(key: str, version_facts: facts.Facts) -> str:
    if key in version_facts.settings:
        return version_facts.settings[key].label
    if key.startswith("arg."):
        return "--" + key.removeprefix("arg.").replace("_", "-")
    return key.removeprefix("env.")


def _requirement(key: str, matcher: facts.Matcher, settings: Mapping[str, _Setting], version_facts: facts.Facts) -> str:
    """``<what is needed>, but <what it is>`` for one failed requirement."""
    actual = settings[key].value if key in settings else None
    gpu = settings["gpu"].value
    if key == "computeCapability":
        ccs = [str(v) for v in matcher.values]
        gens = [g.name for g in hardware.generations().values() if g.compute_capability in ccs]
        return f"a {_or(gens)} GPU (compute capability {_or(ccs)}), but {gpu} has compute capability {_word(actual)}"
    if key == "multiNodeNvlink":
        gens = [g.name for g in hardware.generations().values() if g.multi_node_nvlink]
        return f"NVLink across nodes ({_or(gens)}), but NVLink stops at the node on {gpu}"
    label = _label(key, version_facts)
    return f"{_expected(label, matcher)}, but it is {_word(actual)}"


def _expected(label: str, matcher: facts.Matcher) -> str:
    values = [v for v in matcher.values if v is not None]
    if matcher.kind == "min":
        return f"{label} of at least {matcher.values[0]}"
    if matcher.kind == "max":
        return f"{label} of at most {matcher.values[0]}"
    if matcher.kind == "not_in":
        return f"{label} other than {_or([_word(v) for v in values])}"
    if matcher.kind == "set":
        return f"{label} {'set' if matcher.values[0] else 'left unset'}"
    if not values:
        return f"{label} left unset"
    words = _or([_word(v) for v in values])
    return f"{label} {words}" + (" or left unset" if None in matcher.values else "")


def _or(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
