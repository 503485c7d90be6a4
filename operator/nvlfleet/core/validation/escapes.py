"""The escape hatches, extraArgs and extraEnv: what vLLM would refuse, what nvlfleet owns, inlined secrets.

Pure core, inside the validate step: the arguments and literal env values that pass are handed on to the rules of
the effective settings (``rules``), since they come last on the command line and win.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping

from nvlfleet.api import kubetypes, models, problems
from nvlfleet.core import settings
from nvlfleet.core.validation import findings
from nvlfleet.facts import disaggregation, facts

# Flags that are nvlfleet's to manage, by argparse dest (so -tp, --tensor-parallel-size and --no-x forms all
# count), with what to do instead: nvlfleet renders most of them, and keeps the rest at vLLM's default on purpose
# (the data-parallel load-balancing modes, the torch.distributed rendezvous). "<role>" is left for the reader: the
# field exists per role. The flags of the tuning settings a spec field chooses come from settings.TABLE.
OWNED_FLAGS: Mapping[str, str] = {
    **settings.owned_flags(),
    "model": "the model is spec.model.name",
    "revision": "use spec.model.revision",
    "served_model_name": "use spec.model.servedName",
    "download_dir": "use spec.model.weights (cache and mountPath)",
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
    "speculative_config": "use spec.speculative",
    "spec_model": "use spec.speculative (the DeepSeek draft weights sit in the target checkpoint)",
    "eplb_config": "use spec.kernels.eplb",
    "compilation_config": "use spec.kernels.cudaGraph (mode, captureSizes, minBatch..maxBatch)",
    "max_cudagraph_capture_size": "use spec.kernels.cudaGraph.maxBatch",
}

# Flags that carry a secret: nvlfleet never renders them, and refuses them in extraArgs because a pod's arguments
# are readable by anyone who may read the pod, and show up in its logs and events; with the reference to use.
SECRET_FLAGS: Mapping[str, str] = {
    "hf_token": "use spec.model.hfTokenSecretRef (a Secret reference)",
    "api_key": "set extraEnv VLLM_API_KEY with valueFrom.secretKeyRef",
}

# Env vars that carry the data-parallel wiring nvlfleet passes as flags; setting them would contradict the flags.
OWNED_ENV: Mapping[str, str] = {
    name: "nvlfleet wires data parallelism through flags (spec.roles.<role>.parallelism)"
    for name in ("VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "VLLM_DP_SIZE", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT")
} | {
    # The NIXL side channel: every P/D pod gets its own IP and spec.disaggregation.sideChannelPort.
    disaggregation.load(facts.DEFAULT_VERSION).side_channel_host_env: "nvlfleet sets it to each pod's own IP",
    disaggregation.load(facts.DEFAULT_VERSION).side_channel_port_env: "use spec.disaggregation.sideChannelPort",
}

# The Kubernetes EnvVarSource kinds and the keys each needs.
_ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")

# Name segments that mark a secret (matched on whole "_"-separated words: VLLM_MAX_BAD_WORDS_TOTAL_TOKENS is not).
_SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY"})
_SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY")})
_HF_TOKEN_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})


def check_extra_args(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: findings.Findings
) -> tuple[facts.Arg, ...]:
    """Report what vLLM would refuse or nvlfleet owns; return the arguments that are fine, for the rules."""
    clean: list[str] = []
    positions: list[int] = []
    for i, token in enumerate(spec.extra_args):
        where = problems.path("spec.extraArgs", i)
        if any(c in token for c in "\x00\n\r"):
            out.error(where, "contains a NUL byte or a line break; each extraArgs item is one argument")
            continue
        if problems.CREDENTIAL.search(token):
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
        if dest in SECRET_FLAGS:
            out.error(where, f"{arg.spelling} would put a secret in the pod's arguments; {SECRET_FLAGS[dest]}")
            continue
        if dest in OWNED_FLAGS:
            out.error(where, f"{arg.spelling} is managed by nvlfleet; {OWNED_FLAGS[dest]}")
            continue
        if dest in seen:
            out.error(
                where,
                f"{arg.spelling} repeats spec.extraArgs[{seen[dest]}] ({dest}); vLLM would silently keep the last",
            )
            continue
        seen[dest] = index
        json_flag = version_facts.json_flags.get(arg.flag.name)
        if json_flag is not None and not _check_json_keys(arg, json_flag, version_facts.version, where, out):
            continue
        kept.append(dataclasses.replace(arg, index=index))
    return tuple(kept)


def _check_json_keys(
    arg: facts.Arg, json_flag: facts.JsonFlag, version: str, where: str, out: findings.Findings
) -> bool:
    """Report the keys of a JSON-valued flag that vLLM would refuse; False when the argument is refused.

    The value must be a JSON object: vLLM builds its config from it, and nvlfleet's rules read keys out of it
    (decode_backend, indexer_kv_dtype). Only top-level keys are checked; nested objects belong to whoever reads
    them (a KV connector's kv_connector_extra_config, for one).
    """
    try:
        loaded = json.loads(arg.values[0]) if arg.values else None
    except ValueError:
        loaded = None
    if not isinstance(loaded, dict):
        out.error(where, f"{arg.spelling} must be a JSON object (vLLM {version} builds its config from one)")
        return False
    refused = False
    for key in loaded:
        problem = json_flag.key_problem(str(key), version)
        if problem is not None:
            severity, message = problem
            out.add(severity, where, f"{message} ({json_flag.source})")
            refused |= severity == "error"
    return not refused


def check_extra_env(
    spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: findings.Findings
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
            out.error(f"{where}.name", f"{name} is managed by nvlfleet; {OWNED_ENV[name]}")
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
    if not by_name and not problems.CREDENTIAL.search(value):
        return None
    if not value:
        return None
    instead = "spec.model.hfTokenSecretRef" if name in _HF_TOKEN_NAMES else "valueFrom.secretKeyRef"
    return f"{name} looks like a secret and must not be written into the serving; use {instead}" + (
        " (or valueFrom.secretKeyRef)" if instead != "valueFrom.secretKeyRef" else ""
    )


def _check_env_source(source: kubetypes.EnvVarSource, where: str, out: findings.Findings) -> None:
    """Exactly one source (the CRD's CEL rule says the same at admission; a file given to ``nvlfleet validate``
    meets it here)."""
    given = [name for name, value in source.to_wire().items() if value is not None]
    if len(given) != 1:
        out.error(where, f"must hold exactly one of {', '.join(_ENV_SOURCES)}")
