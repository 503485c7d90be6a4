"""The vLLM metrics nvlfleet reads, charts or simulates, by family name: the one home of each ``vllm:*`` name.

Facts layer, beside ``facts`` (whose pinned ``facts.json`` lists every family a vLLM version exposes, with its
type, labels and exposed sample names). The scraper's parser (``core.samples``), the dashboards and the
simulated vLLM (``sim.vllmsim``) name vLLM's metrics through these constants; every constant is checked against
the pinned facts at import, so a family renamed upstream fails here rather than as an empty chart.

A counter family ``vllm:x`` is exposed as ``vllm:x_total`` (and ``vllm:x_created``); a histogram as
``vllm:x_bucket`` / ``_sum`` / ``_count``; a gauge under its own name. ``exposed`` refuses a sample name the
pinned version does not expose.
"""

from __future__ import annotations

import functools
from typing import Any

from nvlfleet.facts import facts

# Read by the scraper (tokens, speculative decoding, batch size) and simulated.
PROMPT_TOKENS = "vllm:prompt_tokens"  # counter: every prompt token, cache hits included
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached"  # counter: the prefix-cache hits among them
GENERATION_TOKENS = "vllm:generation_tokens"  # counter
SPEC_DECODE_NUM_DRAFTS = "vllm:spec_decode_num_drafts"  # counter, only when speculating
SPEC_DECODE_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"  # counter, only when speculating
SPEC_DECODE_NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"  # counter, only when speculating
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"  # gauge
# Prompt tokens by where their KV came from: billing counts a token that arrived by KV transfer (P/D decode)
# where it was computed, not again where it was loaded.
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source"  # counter, label source
SOURCE_LOCAL_COMPUTE = "local_compute"
SOURCE_LOCAL_CACHE_HIT = "local_cache_hit"
SOURCE_EXTERNAL_KV_TRANSFER = "external_kv_transfer"
REQUEST_SUCCESS = "vllm:request_success"  # counter, label finished_reason: finished requests (errors included)
FINISHED_ERROR = "error"  # the finished_reason of a request that ended with an error (e.g. a failed KV load)

# Charted by the serving dashboard (straight from the vLLM pods) and simulated.
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"  # gauge
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"  # gauge, a fraction per engine
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"  # counter
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"  # counter
TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"  # noqa: S105 -- a metric name; histogram
INTER_TOKEN_LATENCY_SECONDS = "vllm:inter_token_latency_seconds"  # noqa: S105 -- a metric name; histogram

_NAMED = (
    PROMPT_TOKENS,
    PROMPT_TOKENS_CACHED,
    GENERATION_TOKENS,
    SPEC_DECODE_NUM_DRAFTS,
    SPEC_DECODE_NUM_DRAFT_TOKENS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    NUM_REQUESTS_RUNNING,
    PROMPT_TOKENS_BY_SOURCE,
    REQUEST_SUCCESS,
    NUM_REQUESTS_WAITING,
    KV_CACHE_USAGE_PERC,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    TIME_TO_FIRST_TOKEN_SECONDS,
    INTER_TOKEN_LATENCY_SECONDS,
)


@functools.cache
def _families(version: str) -> dict[str, dict[str, Any]]:
    return {m["family"]: m for m in facts.load(version).raw["metrics"]["vllm_metrics"]}


def fact(family: str, version: str = facts.DEFAULT_VERSION) -> dict[str, Any]:
    """The pinned facts' entry for ``family``: ``type``, ``labels``, ``exposed_as``, ``documentation``."""
    found = _families(version).get(family)
    if found is None:
        raise KeyError(f"vLLM {version} has no metric family {family!r}")
    return found


@functools.cache
def exposed_samples(version: str = facts.DEFAULT_VERSION) -> frozenset[str]:
    """Every sample name vLLM exposes in ``version`` (histograms with their _bucket/_sum/_count)."""
    names: set[str] = set()
    for metric in _families(version).values():
        if metric["type"] == "histogram":
            names.update(f"{metric['family']}_{suffix}" for suffix in ("bucket", "sum", "count"))
        else:
            names.add(metric["exposed_as"])
    return frozenset(names)


def exposed(sample: str, version: str = facts.DEFAULT_VERSION) -> str:
    """A vLLM sample name, refused unless ``version`` exposes it."""
    if sample not in exposed_samples(version):
        raise KeyError(f"vLLM {version} exposes no sample {sample!r}")
    return sample


def label_values(family: str, label: str, version: str = facts.DEFAULT_VERSION) -> list[str]:
    """The values the pinned vLLM gives ``label`` of ``family`` (``source`` of prompt_tokens_by_source, ...)."""
    values = facts.load(version).raw["metrics"]["label_values"]
    found = values.get(f"{family.removeprefix('vllm:')}.{label}", values.get(label))
    if not isinstance(found, list):
        raise KeyError(f"vLLM {version} lists no values for {family}{{{label}}}")
    return [str(v) for v in found]


for _family in _NAMED:
    fact(_family)  # at import: every name above is one the pinned vLLM defines
for _source in (SOURCE_LOCAL_COMPUTE, SOURCE_LOCAL_CACHE_HIT, SOURCE_EXTERNAL_KV_TRANSFER):
    if _source not in label_values(PROMPT_TOKENS_BY_SOURCE, "source"):
        raise KeyError(f"vLLM {facts.DEFAULT_VERSION} has no prompt token source {_source!r}")
if FINISHED_ERROR not in label_values(REQUEST_SUCCESS, "finished_reason"):
    raise KeyError(f"vLLM {facts.DEFAULT_VERSION} has no finished_reason {FINISHED_ERROR!r}")
