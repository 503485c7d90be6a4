"""A simulated vLLM 0.33 OpenAI server: ``/metrics`` in vLLM's exposition, completions, ``/health``, ``/v1/models``.

Test and demo adapter, not part of the operator's data flow: it stands where a group leader's vLLM API server
stands, so the scraper (``adapters.scraper``) and a real Prometheus read it exactly as they would read vLLM, and every
gauge can be checked against ground truth (the ``Load`` it was given).

What makes it vLLM-shaped: every family, type, label set, label value and histogram bucket comes from the pinned
facts (``nvlfleet.facts``); the text is produced by prometheus-client like vLLM's own (counters as
``_total`` plus ``_created`` samples, single-process mode); series are per DP engine (``engine`` label) and
carry ``model_name``. Counters grow at the configured rates on an injectable clock, so tests drive time
(published-rate mode: the demo's throughput figures), plus what the server counted for the requests it really
answered (``traffic``): ``/v1/completions`` and ``/v1/chat/completions`` are served by ``protocol``, with the
``kv_transfer_params`` exchange of a prefill/decode pair played by ``kvtransfer`` when the endpoint has a
``KvConfig`` (its role, its ``kv_load_failure_policy``).

Faults, per endpoint: ``restart()`` (counters restart from 0 with a new ``_created``), and the modes ``stall``
(counters stop), ``garbage`` (invalid exposition), ``slow`` (answers after a delay, past any sane scrape timeout),
``down`` (the listening socket is closed: connection refused).

Many endpoints live in one process and one event loop (``nvlfleet.sim.simulator``: one aiohttp app, one socket
per endpoint), so a thousand leaders cost one process: ``simulator.start_many`` or ``nvlfleet simulate``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import metrics_core

from nvlfleet.facts import facts, vllm_metrics
from nvlfleet.sim import kvtransfer, protocol, traffic

VLLM_VERSION = "0.33.0"
DEFAULT_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
DEFAULT_MAX_MODEL_LEN = 131072
# Route prefix for the simulator's own controls (the demo flips modes over HTTP); vLLM has no such routes.
CONTROL_PREFIX = "/_sim"

Clock = Callable[[], float]


def metric_facts(version: str = VLLM_VERSION) -> Mapping[str, Any]:
    """The pinned vLLM metric facts (families, labels, label values, buckets): ``facts.json`` as packaged."""
    return facts.load(version).raw


class Mode(enum.StrEnum):
    """How an endpoint behaves; ``restart`` is an action (``Endpoint.restart``), not a mode."""

    NORMAL = "normal"
    STALL = "stall"
    GARBAGE = "garbage"
    SLOW = "slow"
    DOWN = "down"


@dataclasses.dataclass(frozen=True)
class Load:
    """Ground truth for one server (all its DP engines together): rates per second and in-flight gauges.

    ``prompt`` counts every prompt token, ``prompt_cached`` the prefix-cache hits among them and
    ``prompt_external`` those whose KV arrived by transfer from a prefill engine (a P/D decode). With
    ``speculative_tokens`` K > 0 the engine speculates: each draft proposes K tokens of which a fraction
    ``acceptance_rate`` is accepted, so generation = drafts × (1 + acceptance_rate × K).
    """

    prompt: float = 0.0
    prompt_cached: float = 0.0
    generation: float = 0.0
    running_requests: float = 0.0
    waiting_requests: float = 0.0
    kv_cache_usage: float = 0.0
    speculative_tokens: int = 0
    acceptance_rate: float = 0.0
    mean_output_tokens: float = 1024.0  # per request, to derive request counts and per-request histograms
    prompt_external: float = 0.0

    def __post_init__(self) -> None:
        if min(self.prompt, self.prompt_cached, self.generation, self.running_requests, self.waiting_requests) < 0:
            raise ValueError("rates and gauges must not be negative")
        if self.prompt_cached > self.prompt:
            raise ValueError("prompt_cached is a subset of prompt and cannot exceed it")
        if self.prompt_external < 0 or self.prompt_cached + self.prompt_external > self.prompt:
            raise ValueError("prompt_cached and prompt_external are disjoint subsets of prompt")
        if not 0 <= self.acceptance_rate <= 1 or self.speculative_tokens < 0:
            raise ValueError("acceptance_rate must lie in [0, 1] and speculative_tokens must be >= 0")
        if self.mean_output_tokens <= 0:
            raise ValueError("mean_output_tokens must be positive")

    @property
    def spec_drafts(self) -> float:
        k = self.speculative_tokens
        return self.generation / (1 + self.acceptance_rate * k) if k else 0.0

    @property
    def requests(self) -> float:
        return self.generation / self.mean_output_tokens

    def counter_rates(self) -> dict[str, float]:
        """Rate per counter family name (before the per-label split), tokens or events per second."""
        k = self.speculative_tokens
        rates = {
            vllm_metrics.PROMPT_TOKENS: self.prompt,
            vllm_metrics.PROMPT_TOKENS_CACHED: self.prompt_cached,
            vllm_metrics.GENERATION_TOKENS: self.generation,
            vllm_metrics.PREFIX_CACHE_QUERIES: self.prompt,
            vllm_metrics.PREFIX_CACHE_HITS: self.prompt_cached,
        }
        if k:
            rates[vllm_metrics.SPEC_DECODE_NUM_DRAFTS] = self.spec_drafts
            rates[vllm_metrics.SPEC_DECODE_NUM_DRAFT_TOKENS] = self.spec_drafts * k
            rates[vllm_metrics.SPEC_DECODE_NUM_ACCEPTED_TOKENS] = self.spec_drafts * k * self.acceptance_rate
        return rates


# Share of a family's rate that goes to each value of its extra label (the rest of the values get 0).
def _label_shares(load: Load) -> dict[str, dict[str, float]]:
    cached_share = load.prompt_cached / load.prompt if load.prompt else 0.0
    external_share = load.prompt_external / load.prompt if load.prompt else 0.0
    k = load.speculative_tokens
    # Acceptance falls with draft position; shares ∝ 0.8^position.
    weights = [0.8**p for p in range(k)]
    return {
        vllm_metrics.PROMPT_TOKENS_BY_SOURCE: {
            vllm_metrics.SOURCE_LOCAL_COMPUTE: (1 - cached_share - external_share) if load.prompt else 0.0,
            vllm_metrics.SOURCE_LOCAL_CACHE_HIT: cached_share,
            vllm_metrics.SOURCE_EXTERNAL_KV_TRANSFER: external_share,
        },
        "vllm:prompt_tokens_cached_by_source": {"device": 1.0},
        "vllm:request_success": {"stop": 0.9, "length": 0.1},
        "vllm:num_requests_waiting_by_reason": {"capacity": 1.0},
        "vllm:engine_sleep_state": {"awake": 1.0},
        "vllm:spec_decode_num_accepted_tokens_per_pos": {str(p): w / sum(weights) for p, w in enumerate(weights)},
    }


# Families whose base rate is another family's (the label split above then applies).
_RATE_OF = {
    "vllm:prompt_tokens_by_source": vllm_metrics.PROMPT_TOKENS,
    "vllm:prompt_tokens_cached_by_source": vllm_metrics.PROMPT_TOKENS_CACHED,
    "vllm:spec_decode_num_accepted_tokens_per_pos": vllm_metrics.SPEC_DECODE_NUM_ACCEPTED_TOKENS,
}

# Families only present with flags the simulated server does not use (see "conditional" in the facts).
_NOT_REGISTERED = ("vllm:kv_block_", "vllm:cache_config_info", "vllm:tool_call_parser")

# Histogram family -> (bucket family in the facts or explicit bounds, median observation, observations per
# request | None for per-token). Shapes are plausible for a DeepSeek decode engine, not measured.
_TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]
_ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
_HISTOGRAMS: dict[str, tuple[str | list[float], float]] = {
    vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS: ("time_to_first_token", 0.35),
    vllm_metrics.INTER_TOKEN_LATENCY_SECONDS: ("inter_token_latency", 0.02),
    "vllm:request_time_per_output_token_seconds": ("inter_token_latency", 0.022),
    "vllm:e2e_request_latency_seconds": ("request_latency", 25.0),
    "vllm:request_queue_time_seconds": ("request_latency", 0.05),
    "vllm:request_inference_time_seconds": ("request_latency", 24.0),
    "vllm:request_prefill_time_seconds": ("request_latency", 0.3),
    "vllm:request_decode_time_seconds": ("request_latency", 23.0),
    "vllm:request_prompt_tokens": ([float(b) for b in _TOKEN_BUCKETS], 4000.0),
    "vllm:request_generation_tokens": ([float(b) for b in _TOKEN_BUCKETS], 1024.0),
    "vllm:iteration_tokens_total": ([float(b) for b in _ITERATION_BUCKETS], 256.0),
}


_PER_TOKEN = (vllm_metrics.INTER_TOKEN_LATENCY_SECONDS, "vllm:iteration_tokens_total")

# A sample's value as a function of the endpoint and the time; engines with equal values share one function.
Value = Callable[["Endpoint", float], float]

# Compiled exposition templates, shared by endpoints that expose the same structure (see ``exposition``):
# (load, engines, model name, multiprocess, sample-name filter) -> (text before each value, value function).
_TEMPLATES: dict[tuple[Any, ...], tuple[list[str], list[Value]]] = {}


def _rated_family(name: str) -> str:
    """The ``Load`` rate a counter family's published-rate part grows at."""
    return "requests" if name == vllm_metrics.REQUEST_SUCCESS else _RATE_OF.get(name, name)


def _with_traffic(name: str, label: str, engine: int, share: float) -> Value:
    """One engine's series of a family the server also counts for served requests: rate part + its own count."""
    family = _rated_family(name)
    return lambda ep, now: ep.rated(family, now) * share + ep.traffic.value(name, label, engine)


def _cdf(x: float, median: float) -> float:
    """Log-logistic CDF (shape 3): a right-skewed latency/size distribution with the given median."""
    return 1.0 / (1.0 + (median / x) ** 3) if x > 0 else 0.0


class Endpoint:
    """One simulated vLLM API server (a group leader) on ``host:port``.

    Counter values are ``base + rate × (now − since)`` while growing; every change of load, mode or a restart
    first folds the elapsed growth into ``base``, so counters stay continuous and ground truth stays exact.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        load: Load,
        engines: int = 1,
        model_name: str = DEFAULT_MODEL,
        clock: Clock = time.time,
        slow_seconds: float = 30.0,
        multiprocess: bool = False,
        kv: kvtransfer.KvConfig | None = None,
        kv_store: kvtransfer.KvStore | None = None,
        max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    ) -> None:
        if engines < 1:
            raise ValueError("engines must be >= 1")
        self.host, self.port = host, port
        self.engines, self.model_name = engines, model_name
        self.slow_seconds = slow_seconds
        # vLLM with --api-server-count > 1 uses prometheus-client's multiprocess mode: no ``_created`` samples.
        self.multiprocess = multiprocess
        self._clock = self.clock = clock
        self._load = load
        self.mode = Mode.NORMAL
        self.scrapes = 0
        # The OpenAI side (``protocol``): the KV connector, the leases it shares with its peers, what it served.
        self.kv, self.kv_store = kv, kv_store or kvtransfer.KvStore()
        self.max_model_len = max_model_len
        self.traffic = traffic.Traffic()
        self.engine_ids: list[str] = []
        self._turn = 0
        self._reset(clock())

    # -- ground truth and state ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def load(self) -> Load:
        return self._load

    @property
    def created(self) -> float:
        """When the (simulated) process started: the ``_created`` value of its counters."""
        return self._created

    def _reset(self, now: float) -> None:
        self._created = now
        self._since = now
        self._base: dict[str, float] = {}
        self.traffic.clear()
        for engine_id in self.engine_ids:  # a new process: the old engines' KV blocks are gone
            self.kv_store.forget_engine(engine_id)
        self.engine_ids = kvtransfer.new_engine_ids(self.engines)

    def next_engine(self) -> int:
        """The DP engine of a request that names none: engines take turns (vLLM's internal load balancer)."""
        self._turn = (self._turn + 1) % self.engines
        return self._turn

    def _fold(self, now: float) -> None:
        elapsed = now - self._since if self.mode != Mode.STALL else 0.0
        for family, rate in self._load.counter_rates().items():
            self._base[family] = self._base.get(family, 0.0) + rate * elapsed
        self._base["requests"] = self._base.get("requests", 0.0) + self._load.requests * elapsed
        self._since = now

    def counter(self, family: str, now: float | None = None) -> float:
        """Ground-truth value of a counter family summed over engines (before the label split), served requests
        included."""
        served = self.traffic.total(vllm_metrics.REQUEST_SUCCESS if family == "requests" else family)
        return self.rated(family, now) + served

    def rated(self, family: str, now: float | None = None) -> float:
        """The published-rate part of a counter family (``Load``), summed over engines."""
        now = self._clock() if now is None else now
        growing = self.mode != Mode.STALL
        rates = self._load.counter_rates()
        rates["requests"] = self._load.requests
        rate = rates.get(family, 0.0) if growing else 0.0
        return self._base.get(family, 0.0) + rate * (now - self._since)

    def set_load(self, load: Load) -> None:
        self._fold(self._clock())
        self._load = load

    def restart(self) -> None:
        """The server restarted: counters start again from zero, ``_created`` moves to now."""
        self._reset(self._clock())

    def set_mode(self, mode: Mode | str) -> None:
        """Switch behaviour; ``down`` closes the socket (the next ``up``-mode switch reopens it)."""
        self._fold(self._clock())
        self.mode = Mode(mode)

    # -- exposition ---------------------------------------------------------------------------------------

    def exposition(self, now: float | None = None, names: Iterable[str] = ()) -> bytes:
        """The ``/metrics`` body at ``now``, byte for byte what prometheus-client renders for ``families``.

        A leader with 8 engines exposes ~2,600 lines; rendering them through prometheus-client on every scrape
        would cost a thousand simulated leaders two cores. So the text is rendered once by prometheus-client
        with each sample's value replaced by its index, cut into a template, and refilled per scrape with the
        few hundred distinct values (engines share them). Endpoints with the same load and shape share the
        template, so a thousand of them compile it once. ``test_vllmsim`` checks the two texts are identical.

        ``names`` restricts the output to those sample names, like prometheus-client's ``?name[]=`` filter.
        """
        now = self._clock() if now is None else now
        wanted = frozenset(names)
        key = (self._load, self.engines, self.model_name, self.multiprocess, wanted)
        template = _TEMPLATES.get(key)
        if template is None:
            template = _TEMPLATES[key] = self._compile(wanted)
        statics, fns = template
        formatted: dict[Value, str] = {}
        parts: list[str] = []
        for static, fn in zip(statics, fns, strict=True):
            text = formatted.get(fn)
            if text is None:
                text = formatted[fn] = _float(fn(self, now))
            parts += (static, text, "\n")
        return "".join(parts).encode()

    def reference_exposition(self, now: float, names: Iterable[str] = ()) -> bytes:
        """``/metrics`` at ``now`` rendered by prometheus-client itself (slow; the yardstick for tests)."""
        return _render(self.families(lambda fn: fn(self, now)), frozenset(names))

    def _compile(self, names: frozenset[str]) -> tuple[list[str], list[Value]]:
        fns: list[Value] = []

        def index(fn: Value) -> float:
            fns.append(fn)
            return float(len(fns) - 1)

        statics: list[str] = []
        by_line: list[Value] = []
        pending: list[str] = []
        for line in _render(self.families(index), names).decode().splitlines():
            if line.startswith("#"):
                pending.append(line + "\n")
                continue
            static, _, marker = line.rpartition(" ")
            statics.append("".join(pending) + static + " ")
            by_line.append(fns[int(float(marker))])
            pending = []
        return statics, by_line

    def families(self, value: Callable[[Value], float]) -> list[metrics_core.Metric]:
        """The metric families of this server, each sample's value obtained as ``value(fn)`` (fn of time)."""
        facts = metric_facts()
        label_values = facts["metrics"]["label_values"]
        shares = _label_shares(self._load)
        engines = [str(e) for e in range(self.engines)]
        speculating = self._load.speculative_tokens > 0
        created: Value = lambda ep, now: ep.created  # noqa: E731 -- one shared fn: one formatted value
        out: list[metrics_core.Metric] = []
        for fact in facts["metrics"]["vllm_metrics"]:
            name: str = fact["family"]
            if name.startswith(_NOT_REGISTERED) or (name.startswith("vllm:spec_decode") and not speculating):
                continue
            labels: list[str] = fact["labels"]
            if fact["type"] == "histogram":
                if name in _HISTOGRAMS:
                    out.append(self._histogram(fact, engines, value))
                continue
            per_engine = "engine" in labels
            extra = [label for label in labels if label not in ("engine", "model_name")]
            family: metrics_core.Metric
            if fact["type"] == "counter":
                family = metrics_core.CounterMetricFamily(name, fact["documentation"], labels=labels)
            else:
                family = metrics_core.GaugeMetricFamily(name, fact["documentation"], labels=labels)
            for extra_value in self._extra_values(name, extra, label_values):
                share = shares.get(name, {}).get(extra_value, 0.0) if extra else 1.0
                if per_engine:
                    share /= self.engines
                fn = self._series_value(name, fact["type"], share)
                for engine in engines if per_engine else [""]:
                    if per_engine and name in traffic.COUNTED:
                        fn = _with_traffic(name, extra_value, int(engine), share)
                    by_name = {"engine": engine, "model_name": self.model_name}
                    if extra:
                        by_name[extra[0]] = extra_value
                    row = [by_name[label] for label in labels]
                    if isinstance(family, metrics_core.CounterMetricFamily):
                        family.add_metric(row, value(fn), created=None if self.multiprocess else value(created))
                    else:
                        family.add_metric(row, value(fn))
            out.append(family)
        return out

    def _series_value(self, name: str, kind: str, share: float) -> Value:
        if kind == "counter":
            family = _rated_family(name)
            return lambda ep, now: ep.rated(family, now) * share
        load = self._load
        gauge = {
            vllm_metrics.NUM_REQUESTS_RUNNING: load.running_requests,
            vllm_metrics.NUM_REQUESTS_WAITING: load.waiting_requests,
            "vllm:num_requests_waiting_by_reason": load.waiting_requests,
            # Fractions and states are per engine, not split across engines.
            vllm_metrics.KV_CACHE_USAGE_PERC: load.kv_cache_usage * self.engines,
            "vllm:engine_sleep_state": float(self.engines),  # awake = 1 on every engine
        }.get(name, 0.0)
        return lambda ep, now: gauge * share

    def _extra_values(self, name: str, extra: list[str], values: dict[str, Any]) -> list[str]:
        if not extra:
            return [""]
        (label,) = extra  # every vLLM family has at most one label besides engine and model_name
        if label == "position":
            return [str(p) for p in range(self._load.speculative_tokens)]
        found = values.get(f"{name.removeprefix('vllm:')}.{label}", values.get(label))
        if not isinstance(found, list):
            raise KeyError(f"no label values for {name}{{{label}}} in the vLLM facts")
        return [str(v) for v in found]

    def _histogram(
        self, fact: dict[str, Any], engines: list[str], value: Callable[[Value], float]
    ) -> metrics_core.Metric:
        name: str = fact["family"]
        bounds_or_family, median = _HISTOGRAMS[name]
        bounds = (
            [float(b) for b in metric_facts()["metrics"]["buckets_seconds"][bounds_or_family]]
            if isinstance(bounds_or_family, str)
            else bounds_or_family
        )
        # Observations per engine: one per request, per generated token (ITL), or per engine step.
        source = vllm_metrics.GENERATION_TOKENS if name in _PER_TOKEN else "requests"
        per_step = max(self._load.running_requests / len(engines), 1.0) if name == "vllm:iteration_tokens_total" else 1
        divisor = len(engines) * per_step

        def count(ep: Endpoint, now: float) -> float:
            return float(math.floor(ep.counter(source, now) / divisor))

        def bucket(bound: float) -> Value:
            fraction = _cdf(bound, median)
            return lambda ep, now: float(math.floor(count(ep, now) * fraction))

        buckets = [(_float(b), bucket(b)) for b in bounds]
        total: Value = lambda ep, now: count(ep, now) * median  # noqa: E731
        family = metrics_core.HistogramMetricFamily(name, fact["documentation"], labels=fact["labels"])
        for engine in engines:
            family.add_metric(
                [engine, self.model_name],
                [(le, value(fn)) for le, fn in [*buckets, ("+Inf", count)]],
                sum_value=value(total),
            )
        return family

    # -- HTTP ---------------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.scrapes += request.path == "/metrics"
        if self.mode == Mode.SLOW:
            await asyncio.sleep(self.slow_seconds)
        if request.path == "/metrics":
            if self.mode == Mode.GARBAGE:
                return web.Response(body=_GARBAGE, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})
            body = self.exposition(names=request.query.getall("name[]", []))
            return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})
        if request.path in ("/health", "/ping"):
            return web.Response(status=200)
        if request.path == "/version":
            return web.json_response({"version": VLLM_VERSION})
        if request.path == "/load":
            return web.json_response({"server_load": self._load.running_requests + self._load.waiting_requests})
        if request.path == "/v1/models":
            return web.json_response(self._models())
        if request.path in protocol.PATHS:
            if request.method != "POST":
                raise web.HTTPMethodNotAllowed(request.method, ["POST"])
            return await protocol.handle(self, request)
        raise web.HTTPNotFound()

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": int(self._created),
                    "owned_by": "vllm",
                    "root": self.model_name,
                    "parent": None,
                    "max_model_len": DEFAULT_MAX_MODEL_LEN,
                }
            ],
        }


# Looks like the start of an exposition, then breaks it: a parser must reject it, not half-read it.
_GARBAGE = (
    b"# HELP vllm:prompt_tokens Number of prefill tokens processed.\n"
    b"# TYPE vllm:prompt_tokens counter\n"
    b'vllm:prompt_tokens_total{engine="0",model_name="x"} 12O4.0\n'
    b"<html><body>502 Bad Gateway</body></html>\n"
)


def _float(value: float) -> str:
    return str(prometheus_client.utils.floatToGoString(value))  # type: ignore[no-untyped-call]


class _Families:
    """A one-shot collector over a fixed list of families."""

    def __init__(self, families: list[metrics_core.Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[metrics_core.Metric]:
        return self._families


def _render(families: list[metrics_core.Metric], names: frozenset[str] = frozenset()) -> bytes:
    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    registry.register(_Families(families))
    if names:  # what prometheus-client's exposition apps do with ``?name[]=``
        return prometheus_client.generate_latest(registry.restricted_registry(names))
    return prometheus_client.generate_latest(registry)


# ---------------------------------------------------------------------------------------------------------------
# The autoscaling knob: queue depth and KV-cache pressure, apart from the request protocol


def set_pressure(endpoint: Endpoint, *, waiting_requests: float, kv_cache_usage: float) -> Load:
    """Set the requests waiting (``vllm:num_requests_waiting``, over all the endpoint's engines) and the KV-cache
    usage of each engine (``vllm:kv_cache_usage_perc``, 0..1) of ``endpoint``, keeping the rest of its load: what an
    autoscaling test or demo raises and lowers. Returns the new load."""
    load = with_pressure(endpoint.load, waiting_requests=waiting_requests, kv_cache_usage=kv_cache_usage)
    endpoint.set_load(load)
    return load


def with_pressure(load: Load, *, waiting_requests: float, kv_cache_usage: float) -> Load:
    """``load`` with that queue depth and KV-cache usage, the rest kept (for a caller that sets loads itself, like
    the demo's agent)."""
    if not 0.0 <= kv_cache_usage <= 1.0:
        raise ValueError(f"kv_cache_usage {kv_cache_usage} is not a fraction between 0 and 1")
    return dataclasses.replace(load, waiting_requests=waiting_requests, kv_cache_usage=kv_cache_usage)
