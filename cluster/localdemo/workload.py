"""How busy each simulated vLLM leader of the demo is: per-GPU token rates with the public figure behind each.

Part of the demo's simulated data plane (cluster → **workload** → agent → vLLM /metrics → operator → status).
The demo has no GPUs, so the tokens/s and $/GPU-hour it shows are only as believable as these rates. Each one
comes from a published figure (shared/reference/gb200-gb300.md, pricing.md); where the demo has to assume
something, the constant says so.

One workload mix for every aggregated serving, so that servings differ by hardware and engine shape only:
the announced GB300 figure for DeepSeek-V4.1-Flash (vLLM, 2026-10-21) split as in pricing.md's check value,
986,900 cache-hit input and 13,100 output tokens/s per GPU, i.e. 75.3 cache-hit input tokens per output token
(an agentic, prefix-cached mix). At V4.1-Flash off-peak prices that GPU earns $38.95 per GPU-hour, the order of
the $38.96 announced.
"""

from __future__ import annotations

import dataclasses

from nvlfleet.api import models
from nvlfleet.core import profiles
from nvlfleet.sim import kvtransfer, vllmsim

# Announced GB300 figure (vLLM, 2026-10-21), split as pricing.md's check value.
ANNOUNCED_GB300_CACHED_INPUT = 986_900.0
ANNOUNCED_GB300_OUTPUT = 13_100.0
CACHED_INPUT_PER_OUTPUT = ANNOUNCED_GB300_CACHED_INPUT / ANNOUNCED_GB300_OUTPUT

# vLLM blog 2026-02-03, GB200 with P/D disaggregation and wide EP (DeepSeek-R1, NVFP4, 2K in / 2K out):
# 26.2K prefill and 10.1K decode tokens/s per GPU. vLLM's own GB200 figure, so the demo uses it for GB200 decode
# whether or not prefill is split off; the benchmark's random prompts never hit the prefix cache.
GB200_PREFILL_INPUT = 26_200.0
GB200_DECODE_OUTPUT = 10_100.0
PREFILL_PROMPT_TOKENS = 2048.0  # the benchmark's input length: one generated token per prompt on a prefill engine

# Announced single-user speed of V4.1-Flash on GB300 (vLLM, 2026-10-21): 826 tokens/s. The latency profile keeps
# the batch small (maxNumSeqs 8 on one tray), where decoding is memory-bound, so the demo assumes every one of
# the running requests streams at that speed.
SINGLE_USER_OUTPUT = 826.0

# Assumed, not published for V4.1: 60% of drafted tokens accepted (3 drafted → 2.8 tokens per step).
ACCEPTANCE_RATE = 0.6
# Assumed: KV-cache fill of a busy throughput engine and of a small-batch latency engine.
KV_USAGE = {models.Goal.THROUGHPUT: 0.8, models.Goal.BALANCED: 0.6, models.Goal.LATENCY: 0.3}


@dataclasses.dataclass(frozen=True)
class PerGpu:
    """Token rates of one GPU and where they come from."""

    prompt: float
    prompt_cached: float
    generation: float
    source: str


def per_gpu(serving: models.DeepSeekServing, role: models.RoleName) -> PerGpu:
    """The per-GPU rates a leader of ``role`` serves; GPUs other than GB300 get GB200's figures."""
    spec = serving.spec
    tuning = profiles.effective(spec, role)
    if spec.roles.prefill is not None:  # disaggregated: prefill engines bill prompts, decode engines output
        if role == models.RoleName.PREFILL:
            tokens = GB200_PREFILL_INPUT
            return PerGpu(tokens, 0.0, tokens / PREFILL_PROMPT_TOKENS, "vLLM blog 2026-02-03, GB200 P/D prefill")
        return PerGpu(0.0, 0.0, GB200_DECODE_OUTPUT, "vLLM blog 2026-02-03, GB200 P/D decode")
    if spec.goal == models.Goal.LATENCY:
        batch = (tuning.max_num_seqs or 8) * tuning.topology.data
        output = SINGLE_USER_OUTPUT * batch / tuning.topology.gpus_per_group
        source = f"826 tokens/s per user (vLLM 2026-10-21) x {batch} running requests"
    elif spec.gpu == models.GpuGeneration.GB300:
        output, source = ANNOUNCED_GB300_OUTPUT, "vLLM 2026-10-21 announcement, GB300 (pricing.md check value)"
    else:
        output, source = GB200_DECODE_OUTPUT, "vLLM blog 2026-02-03, GB200 decode"
    cached = output * CACHED_INPUT_PER_OUTPUT
    return PerGpu(cached, cached, output, source)


def load(serving: models.DeepSeekServing, role: models.RoleName) -> tuple[vllmsim.Load, int]:
    """The whole group's load, as its leader's /metrics reports it, and the number of DP engines behind it."""
    tuning = profiles.effective(serving.spec, role)
    gpus = tuning.topology.gpus_per_group
    rates = per_gpu(serving, role)
    engines = tuning.topology.data
    running = float((tuning.max_num_seqs or 64) * engines)
    prefill = role == models.RoleName.PREFILL
    drafted = tuning.speculative.num_speculative_tokens if tuning.speculative and not prefill else 0
    group = vllmsim.Load(
        prompt=rates.prompt * gpus,
        prompt_cached=rates.prompt_cached * gpus,
        generation=rates.generation * gpus,
        running_requests=running,
        kv_cache_usage=KV_USAGE[serving.spec.goal],
        speculative_tokens=drafted,
        acceptance_rate=ACCEPTANCE_RATE if drafted else 0.0,
        mean_output_tokens=1.0 if prefill else 1024.0,
    )
    return group, engines


def kv_config(serving: models.DeepSeekServing, role: models.RoleName) -> kvtransfer.KvConfig | None:
    """A P/D serving's engines carry NixlConnector: prefill produces KV, decode consumes it; otherwise none."""
    if serving.spec.roles.prefill is None:
        return None
    kv_role = kvtransfer.KvRole.PRODUCER if role == models.RoleName.PREFILL else kvtransfer.KvRole.CONSUMER
    return kvtransfer.KvConfig(role=kv_role)
