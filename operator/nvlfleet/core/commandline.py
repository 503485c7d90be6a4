"""The vLLM command lines of a group: the leader's ``vllm serve`` and the workers' headless one.

Pure core, part of render (spec → validate → plan → **render**): ``nvlfleet.core.render`` puts ``leader`` and
``worker`` into the pod templates. The engine settings come from ``profiles.effective`` and are spelled by the
profile's vLLM dialect; extraArgs are appended as argv items no interpreter parses, and a profile flag they set
again is not rendered, so every flag appears once.

The worker start rank, without a shell
--------------------------------------
A headless worker must pass ``--data-parallel-start-rank = worker index × DP ranks per node`` (README §4). The
index arrives as ``LWS_WORKER_INDEX`` in the pod's env, and LeaderWorkerSet has a single worker template, so the
product has to be computed inside the pod. Kubernetes ``$(VAR)`` expansion substitutes but cannot multiply, and
nothing in vLLM reads the start rank from the environment (``VLLM_DP_RANK`` only applies when
``--data-parallel-size`` is 1). The options were:

- a shell (``sh -c "... $((LWS_WORKER_INDEX * 4))"``): rejected — every user string (model name, extraArgs)
  would pass through shell parsing;
- external load balancing (``--data-parallel-rank``, one process per rank): needs ``dpl == 1``, i.e. one pod
  per GPU, which breaks one-pod-per-node and the Engram shared-memory tables of co-located ranks (README §1);
- an init container writing a ``--config`` file: still arithmetic in some interpreter, plus a shared volume;
- **a fixed two-line Python launcher** run by the image's own interpreter (chosen). ``WORKER_LAUNCHER`` is a
  constant of this module, not built from any input; it reads ``LWS_WORKER_INDEX``, multiplies it by the DP
  ranks per node passed as its first argument, appends ``<start-rank flag> <rank>`` to the vLLM argv it was
  given and ``execvp``s it, so vLLM replaces the launcher as the container's process and receives signals
  directly. User strings stay argv items that no interpreter parses (and ``$(`` in extraArgs is escaped to
  ``$$(`` so not even the kubelet's variable expansion touches them). The unit tests run the launcher.

The leader needs no launcher: it owns ranks ``0..dpl-1`` and must not pass a start rank (with a start rank and
without ``--headless`` vLLM switches to hybrid load balancing). Leader and workers otherwise get the same engine
arguments; only ``dialect.frontendFlags`` (API-server flags, leader only) and ``--headless`` + the start rank
(workers only) differ. Both point ``--data-parallel-address`` at ``$(LWS_LEADER_ADDRESS)``, which LWS injects
and Kubernetes expands in ``command`` without a shell.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from nvlfleet.api import models
from nvlfleet.core import disaggregation, profiles
from nvlfleet.facts import facts

LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"  # injected by LeaderWorkerSet, expanded by the kubelet (no shell)

# The whole worker launcher. Constant: never formatted with input. argv: <ranks per node> <start-rank flag> <vllm argv>.
WORKER_LAUNCHER = (
    "import os,sys;"
    "rank=int(os.environ['LWS_WORKER_INDEX'])*int(sys.argv[1]);"
    "os.execvp(sys.argv[3],sys.argv[3:]+[sys.argv[2],str(rank)])"
)


def _json(value: object) -> str:
    """Compact, key-sorted JSON: flag values are byte-stable."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


Options = list[tuple[str, list[str]]]  # (flag, values) in rendering order


def engine_options(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> Options:
    """The leader's options as (flag, values) in rendering order; frontend flags included, extraArgs not.

    A profile flag that extraArgs set again is left out: the extraArgs carry the value that wins, and a flag
    given twice would make the argv say two things (``profiles.Tuning.overridden_flags``).
    """
    options = [*_layout_options(serving, tuning), *_engine_settings(tuning), *_kv_transfer(serving, tuning)]
    return [(flag, values) for flag, values in options if flag not in tuning.overridden_flags]


def _adder(tuning: profiles.Tuning, opts: Options) -> Callable[..., None]:
    """``add(setting, *values)``: append the dialect's flag for ``setting`` with its values to ``opts``."""

    def add(setting: str, *values: str) -> None:
        opts.append((tuning.dialect.flag(setting), list(values)))

    return add


def _layout_options(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> Options:
    """The model, the endpoint, and how the group is laid out: parallelism, experts, load balancing, DBO."""
    d = tuning.dialect
    spec, topo = serving.spec, tuning.topology
    opts: Options = []
    add = _adder(tuning, opts)
    if spec.model.revision is not None:
        add("model_revision", spec.model.revision)
    add("served_model_name", models.served_name(serving))
    add("host", d.host)
    add("port", str(d.port))
    add("tensor_parallel_size", str(topo.tensor))
    if topo.data > 1:
        add("data_parallel_size", str(topo.data))
        if topo.nodes_per_group > 1:
            add("data_parallel_size_local", str(topo.data_local))
            add("data_parallel_address", LEADER_ADDRESS)
            add("data_parallel_rpc_port", str(d.data_parallel_rpc_port))
    if tuning.api_server_count is not None:
        add("api_server_count", str(tuning.api_server_count))
    if tuning.expert_parallel:
        add("enable_expert_parallel")
    if tuning.all2all_backend is not None:
        add("all2all_backend", tuning.all2all_backend)
    if tuning.eplb.enabled:
        add("enable_eplb")
        eplb = tuning.eplb
        add(
            "eplb_config",
            _json(
                {
                    d.key("eplb", "window_size"): eplb.window_size,
                    d.key("eplb", "step_interval"): eplb.step_interval,
                    d.key("eplb", "num_redundant_experts"): eplb.num_redundant_experts,
                    d.key("eplb", "use_async"): eplb.use_async,
                }
            ),
        )
    if tuning.dbo.enabled:
        add("enable_dbo")
        add("dbo_decode_token_threshold", str(tuning.dbo.decode_token_threshold))
        add("dbo_prefill_token_threshold", str(tuning.dbo.prefill_token_threshold))
    return opts


def _engine_settings(tuning: profiles.Tuning) -> Options:
    """Batching, kernels, speculative decoding, compilation and the parsers."""
    d = tuning.dialect
    opts: Options = []
    add = _adder(tuning, opts)
    add("max_model_len", str(tuning.max_model_len))
    if tuning.max_num_seqs is not None:
        add("max_num_seqs", str(tuning.max_num_seqs))
    if tuning.max_num_batched_tokens is not None:
        add("max_num_batched_tokens", str(tuning.max_num_batched_tokens))
    for setting, value in (
        ("attention_backend", tuning.attention_backend),
        ("moe_backend", tuning.moe_backend),
        ("kv_cache_dtype", tuning.kv_cache_dtype),
    ):
        if value is not None:
            add(setting, value)
    if tuning.speculative is not None:
        add(
            "speculative_config",
            _json(
                {
                    d.key("speculative", "method"): tuning.speculative.method,
                    d.key("speculative", "num_speculative_tokens"): tuning.speculative.num_speculative_tokens,
                }
            ),
        )
    compilation: dict[str, object] = {}
    if tuning.cuda_graph.mode is not None:
        compilation[d.key("compilation", "cudagraph_mode")] = tuning.cuda_graph.mode
    if tuning.cuda_graph.capture_sizes is not None:
        compilation[d.key("compilation", "cudagraph_capture_sizes")] = list(tuning.cuda_graph.capture_sizes)
    if compilation:
        add("compilation_config", _json(compilation))
    if tuning.attention_config:
        add("attention_config", _json(dict(tuning.attention_config)))
    if tuning.additional_config:
        add("additional_config", _json(dict(tuning.additional_config)))
    if tuning.performance_mode is not None:
        add("performance_mode", tuning.performance_mode)
    if tuning.reasoning_parser is not None:
        add("reasoning_parser", tuning.reasoning_parser)
    if tuning.tool_call_parser is not None:
        add("tool_call_parser", tuning.tool_call_parser)
        if tuning.enable_auto_tool_choice:
            add("enable_auto_tool_choice")
    return opts


def _kv_transfer(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> Options:
    """The KV connector of a disaggregated serving's role (``nvlfleet.core.disaggregation``)."""
    value = disaggregation.options(serving.spec, tuning.role)
    return [(tuning.dialect.flag(disaggregation.KV_TRANSFER_SETTING), value)] if value else []


def _flatten(opts: Sequence[tuple[str, list[str]]]) -> list[str]:
    return [token for flag, values in opts for token in (flag, *values)]


def literal(arg: str) -> str:
    """``arg`` as Kubernetes must pass it: ``$(`` doubled so the kubelet expands no variable inside user strings
    (``$(HF_TOKEN)`` in extraArgs would otherwise put the Secret's value into the process's argv)."""
    return arg.replace("$(", "$$(")


def split_extra_args(
    extra_args: Sequence[str], version: str, frontend_flags: frozenset[str]
) -> tuple[list[str], list[str]]:
    """extraArgs as (for the leader, for the workers): workers drop the front-end flags and their values.

    Validation has already refused extraArgs that ``vllm serve`` would not parse; an argument the facts cannot
    read is kept for both (vLLM, not nvlfleet, will then say what is wrong with it).
    """
    try:
        parsed = facts.load(version).parse_args(extra_args)
    except facts.UnknownVersion:
        return list(extra_args), list(extra_args)
    starts = sorted({a.index for a in parsed.args} | {e.index for e in parsed.errors})
    frontend = {a.index for a in parsed.args if a.flag.name in frontend_flags}
    worker: list[str] = list(extra_args[: starts[0]]) if starts else list(extra_args)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(extra_args)
        if start not in frontend:
            worker.extend(extra_args[start:end])
    return list(extra_args), worker


def leader(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> list[str]:
    """argv of the leader (node 0): the API server and DP ranks 0..dpl-1 (README §4 leader shape, Example A)."""
    d = tuning.dialect
    leader_extra, _ = split_extra_args(serving.spec.extra_args, serving.spec.runtime.vllm_version, d.frontend_flags)
    return [
        *d.command,
        serving.spec.model.name,
        *_flatten(engine_options(serving, tuning)),
        *(literal(arg) for arg in leader_extra),
    ]


def worker(serving: models.DeepSeekServing, tuning: profiles.Tuning) -> list[str]:
    """argv of a headless worker: the launcher, then ``vllm serve`` with the leader's engine args + ``--headless``.

    The launcher appends ``--data-parallel-start-rank LWS_WORKER_INDEX × dpl`` (README §4 worker shape,
    Example B); see the module docstring for why it exists.
    """
    d = tuning.dialect
    _, worker_extra = split_extra_args(serving.spec.extra_args, serving.spec.runtime.vllm_version, d.frontend_flags)
    engine = [(flag, values) for flag, values in engine_options(serving, tuning) if flag not in d.frontend_flags]
    vllm_argv = [
        *d.command,
        serving.spec.model.name,
        d.flag("headless"),
        *_flatten(engine),
        *(literal(arg) for arg in worker_extra),
    ]
    return [
        d.python,
        "-c",
        WORKER_LAUNCHER,
        str(tuning.topology.data_local),
        d.flag("data_parallel_start_rank"),
        *vllm_argv,
    ]
