"""nvlfleet's Grafana dashboards, as code: the one source of charts/nvlfleet/dashboards/*.json.

Where it sits: the operator exports ``nvlfleet_*`` gauges (``adapters.exporter``) and the vLLM pods expose ``vllm:*``
metrics (scraped through the PodMonitors the operator renders) → Prometheus → **these dashboards**, shipped
by the Helm chart as ConfigMaps for the Grafana dashboard sidecar. ``make generated`` (``nvlfleet dashboards
--out charts/nvlfleet``) writes the JSON; a unit test fails when the committed files differ from this code.

Three dashboards:

- *nvlfleet / Fleet*: tokens/s, tokens/s per GPU, revenue per GPU-hour, parity, GPUs per NVLink domain, free
  nodes per rack — filtered by namespace and serving (multi-select).
- *nvlfleet / Serving*: one serving — prompt vs generation, cached share, speculative acceptance, streaming
  tokens/s per request, revenue, vLLM's own TTFT / inter-token latency / KV-cache use / queue, requests and KV
  transfer, and its P/D router's own requests, latency, errors and engines.
- *nvlfleet / Operator*: reconcile rate, errors and latency, planner latency, scrape health.

Conventions the queries keep:

- Every query filters with ``=~"$var"`` (Grafana renders a multi-value or "All" selection as a regex), reads
  the data source from ``${datasource}``, and rates over ``$__rate_interval``. ``promql_expressions`` lists every
  query with its variables, so tests substitute them and evaluate each query on a real Prometheus.
- Sums never mix currencies: anything in money is grouped by ``currency``.
- Totals over roles use *billed* tokens. With prefill/decode disaggregation, decode's ``prompt`` counter repeats
  the prompts prefill already computed, so ``nvlfleet_tokens_per_second{kind="prompt"}`` must not be summed
  across roles; ``tokens_per_second_per_gpu`` is billed per role, and × reporting GPUs (GPUs × coverage) it
  adds up correctly.
- Metric names come from one place each: ``nvlfleet_*`` from ``api.metric_names`` (the exporter registers them by
  the same constants; a unit test checks each one is really exported); ``vllm:*`` from ``facts.vllm_metrics``,
  checked against the pinned vLLM metric facts; ``vllm_router_*`` from ``facts.vllm_router``, checked against the
  pinned router's exposition (read from its binary).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterator

from nvlfleet.api import metric_names as names
from nvlfleet.artifacts.grafana import Dashboard, Panel, Query, Row, Variable, to_json
from nvlfleet.facts import vllm_metrics, vllm_router

# ---------------------------------------------------------------------------------------------------------------
# Metric names: nvlfleet_* from api.metric_names (tests/unit/test_dashboards.py proves each one is exported), vllm:*
# from facts.vllm_metrics, refused unless the pinned vLLM version exposes them.

_ON_GROUP = "on(" + ", ".join(names.GROUP_LABELS) + ")"

VLLM_VERSION = "0.33.0"


def _vllm(family: str, suffix: str = "") -> str:
    """A vLLM family's sample (``suffix``: ``_total``, ``_bucket``, ...), as the pinned vLLM version exposes it."""
    return vllm_metrics.exposed(family + suffix, VLLM_VERSION)


def _router(family: str, suffix: str = "", by: str = "") -> str:
    """A router family's sample, refused unless the pinned router exposes it with the labels grouped ``by``."""
    facts = vllm_router.load()
    missing = {label.strip() for label in by.split(",") if label.strip()} - set(facts.metric(family).labels)
    if missing:
        raise KeyError(f"vllm-router {facts.version} labels {family} with no {sorted(missing)}")
    return facts.exposed(family + suffix)


# ---------------------------------------------------------------------------------------------------------------
# PromQL building blocks

_FLEET = 'namespace=~"$namespace", serving=~"$serving"'
_SERVING = 'namespace=~"$namespace", serving=~"$serving", role=~"$role"'


def _sel(metric: str, matchers: str, extra: str = "") -> str:
    inner = ", ".join(m for m in (matchers, extra) if m)
    return f"{metric}{{{inner}}}" if inner else metric


def _reporting_gpus(matchers: str) -> str:
    """GPUs whose leader reported in the last round, per group."""
    return f"({_sel(names.GPUS, matchers)} * {_ON_GROUP} {_sel(names.COVERAGE, matchers)})"


def _billed_tps(matchers: str) -> str:
    """Billed tokens/s per group: billed per GPU × reporting GPUs (adds up across roles; see module doc)."""
    return f"({_sel(names.TOKENS_PER_SECOND_PER_GPU, matchers)} * {_ON_GROUP} {_reporting_gpus(matchers)})"


def _quantile(q: float, histogram_bucket: str, matchers: str, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({_sel(histogram_bucket, matchers)}[$__rate_interval])))"


# ---------------------------------------------------------------------------------------------------------------
# The dashboards

_NAMESPACE = Variable("namespace", "Namespace", f"label_values({names.GPUS}, namespace)")
_SERVING_OF_NAMESPACE = Variable(
    "serving", "Serving", f'label_values({names.GPUS}{{namespace=~"$namespace"}}, serving)'
)


def fleet() -> Dashboard:
    billed = _billed_tps(_FLEET)
    reporting = _reporting_gpus(_FLEET)
    money_per_gpu_hour = (
        f"sum by (currency) ({_sel(names.REVENUE_PER_HOUR, _FLEET)})"
        f" / on() group_left sum({_sel(names.GPUS, _FLEET)} and {_ON_GROUP} {_sel(names.REVENUE_PER_HOUR, _FLEET)})"
    )
    headline = Row(
        "Fleet",
        [
            Panel("Billed tokens/s", [Query(f"sum({billed})", "tokens/s")], kind="stat", unit="short", width=4,
                  height=5, description="Prompt + generated tokens per second, counted once across prefill and "
                  "decode, over the leaders that reported in the last round."),
            Panel("Tokens/s per GPU", [Query(f"sum({billed}) / sum({reporting})", "tokens/s/GPU")], kind="stat",
                  width=4, height=5, description="Billed tokens/s over the GPUs whose leaders reported."),
            Panel("Revenue per GPU-hour", [Query(money_per_gpu_hour, "{{currency}}")], kind="stat",
                  unit="short", decimals=2, width=4, height=5,
                  description="Revenue per hour at the scheduled price over the GPUs of fully reporting groups."),
            Panel("Revenue per hour", [Query(f"sum by (currency) ({_sel(names.REVENUE_PER_HOUR, _FLEET)})",
                  "{{currency}}")], kind="stat", unit="short", decimals=0, width=4, height=5),
            Panel("Parity", [Query(
                f"sum({_sel(names.PARITY_RATIO, _FLEET)} * {_ON_GROUP} {reporting}) / sum({reporting}"
                f" and {_ON_GROUP} {_sel(names.PARITY_RATIO, _FLEET)})", "parity")], kind="stat", unit="percentunit",
                decimals=1, width=4, height=5, thresholds=((None, "red"), (0.9, "orange"), (1.0, "green")),
                description="GPU-weighted tokens/s per GPU ÷ each serving's reference, on the reference's basis "
                "(spec.parity.basis: output tokens by default, or total)."),
            Panel("GPUs", [Query(f"sum({_sel(names.GPUS, _FLEET)})", "GPUs")], kind="stat", width=4, height=5,
                  description="GPUs of the ready groups the operator measures."),
        ],
    )  # fmt: skip
    by_serving = Row(
        "By serving",
        [
            Panel("Billed tokens/s by serving", [Query(f"sum by (namespace, serving) ({billed})",
                  "{{namespace}}/{{serving}}")], stacked=True, width=12),
            Panel("Tokens/s per GPU by serving", [Query(
                f"sum by (namespace, serving) ({billed}) / sum by (namespace, serving) ({reporting})",
                "{{namespace}}/{{serving}}")], width=12),
            Panel("Revenue per GPU-hour by serving", [Query(
                f"sum by (namespace, serving, currency) ({_sel(names.REVENUE_PER_HOUR, _FLEET)})"
                f" / on(namespace, serving) group_left sum by (namespace, serving)"
                f" ({_sel(names.GPUS, _FLEET)} and {_ON_GROUP} {_sel(names.REVENUE_PER_HOUR, _FLEET)})",
                "{{namespace}}/{{serving}} ({{currency}})")], unit="short", decimals=2, width=12),
            Panel("Parity by serving", [Query(
                f"sum by (namespace, serving) ({_sel(names.PARITY_RATIO, _FLEET)} * {_ON_GROUP} {reporting})"
                f" / sum by (namespace, serving) ({reporting} and {_ON_GROUP} {_sel(names.PARITY_RATIO, _FLEET)})",
                "{{namespace}}/{{serving}}")], unit="percentunit", width=12,
                thresholds=((None, "red"), (0.9, "orange"), (1.0, "green"))),
        ],
    )  # fmt: skip
    capacity = Row(
        "NVLink domains",
        [
            Panel("GPUs by NVLink domain", [Query(f"sum by (domain) ({_sel(names.GPUS, _FLEET)})", "{{domain}}")],
                  kind="bargauge", width=12, height=10,
                  description="GPUs of placed groups per NVLink domain (rack); one group never spans two."),
            Panel("Free nodes per rack", [Query(f"sum by (domain) ({names.DOMAIN_FREE_NODES})", "{{domain}}")],
                  kind="bargauge", width=12, height=10, min=0, max=18,
                  thresholds=((None, "red"), (1, "orange"), (4, "green")),
                  description="Schedulable nodes without a group, per NVLink domain: what the next group can use."),
        ],
    )  # fmt: skip
    return Dashboard(
        uid="nvlfleet-fleet",
        title="nvlfleet / Fleet",
        description="Throughput and revenue of every DeepSeekServing, and NVLink-domain capacity.",
        variables=[_NAMESPACE, _SERVING_OF_NAMESPACE],
        rows=[headline, by_serving, capacity],
        file_name="nvlfleet-fleet.json",
    )


def serving() -> Dashboard:
    s = _SERVING
    # vLLM series carry the PodMonitor's target labels (namespace, serving, role) plus model_name and engine.
    v = s

    def tps(kind: str, by: str = "") -> str:
        matcher = 'kind="' + kind + '"'
        return f"sum{f' by ({by})' if by else ''}({_sel(names.TOKENS_PER_SECOND, s, matcher)})"

    throughput = Row(
        "Throughput",
        [
            Panel("Prompt vs generation tokens/s", [
                Query(f"{tps('prompt')} - {tps('prompt_cached')}", "prompt (computed)"),
                Query(tps("prompt_cached"), "prompt (prefix-cache hit)"),
                Query(tps("generation"), "generation")], stacked=True, width=12,
                description="As vLLM counted them per role; with prefill/decode disaggregation, pick one role to "
                "avoid counting prompts twice."),
            Panel("Cached share of prompt tokens", [Query(
                f"{tps('prompt_cached', 'role')} / {tps('prompt', 'role')}", "{{role}}")],
                unit="percentunit", min=0, max=1, width=6,
                description="Prompt tokens served from the prefix cache, billed at the cache-hit price."),
            Panel("Tokens/s per GPU", [Query(_sel(names.TOKENS_PER_SECOND_PER_GPU, s), "{{role}} {{domain}}")],
                  width=6),
            Panel("Speculative decoding acceptance", [
                Query(_sel(names.SPEC_ACCEPTANCE_RATE, s), "acceptance {{role}} {{domain}}")],
                unit="percentunit", min=0, max=1, width=8,
                description="Accepted ÷ proposed draft tokens."),
            Panel("Mean accepted length", [Query(_sel(names.SPEC_MEAN_ACCEPTED_LENGTH, s), "{{role}} {{domain}}")],
                  width=8, description="Tokens emitted per decoding step: 1 + accepted draft tokens per draft."),
            Panel("Streaming tokens/s per request", [
                Query(_sel(names.STREAMING_TPS_PER_REQUEST, s), "{{role}} {{domain}}")], width=8,
                description="Generated tokens/s ÷ running requests: the speed one user sees."),
        ],
    )  # fmt: skip
    money = Row(
        "Revenue",
        [
            Panel("Revenue per hour", [Query(f"sum by (currency) ({_sel(names.REVENUE_PER_HOUR, s)})", "{{currency}}")],
                  unit="short", width=8),
            Panel("Revenue, cost and margin per GPU-hour", [
                Query(_sel(names.REVENUE_PER_GPU_HOUR, s), "revenue {{role}} {{domain}}"),
                Query(_sel(names.COST_PER_GPU_HOUR, s), "cost {{role}} {{domain}}"),
                Query(_sel(names.MARGIN_PER_GPU_HOUR, s), "margin {{role}} {{domain}}")], unit="short", width=8),
            Panel("Price multiplier and parity", [
                Query(_sel(names.PRICE_MULTIPLIER, s), "price × {{role}} {{domain}}"),
                Query(_sel(names.PARITY_RATIO, s), "parity {{role}} {{domain}}")], width=8,
                description="The time-of-day price multiplier (1 outside every window) and the parity ratio."),
        ],
    )  # fmt: skip
    engine = Row(
        "vLLM (from the pods' own /metrics)",
        [
            Panel("Time to first token", [
                Query(_quantile(q, _vllm(vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS, "_bucket"), v), f"p{int(q * 100)}")
                for q in (0.5, 0.9, 0.99)], unit="s", width=8),
            Panel("Inter-token latency", [
                Query(_quantile(q, _vllm(vllm_metrics.INTER_TOKEN_LATENCY_SECONDS, "_bucket"), v), f"p{int(q * 100)}")
                for q in (0.5, 0.9, 0.99)], unit="s", width=8,
                description="vLLM's smallest default bucket is 10 ms; finer ITL needs --custom-histogram-buckets."),
            Panel("KV-cache use", [Query(f"max by (pod) ({_sel(_vllm(vllm_metrics.KV_CACHE_USAGE_PERC), v)})",
                  "{{pod}}")], unit="percentunit", min=0, max=1, width=8,
                  thresholds=((None, "green"), (0.9, "orange"), (0.97, "red"))),
            Panel("Requests running and waiting", [
                Query(f"sum by (role) ({_sel(_vllm(vllm_metrics.NUM_REQUESTS_RUNNING), v)})", "running {{role}}"),
                Query(f"sum by (role) ({_sel(_vllm(vllm_metrics.NUM_REQUESTS_WAITING), v)})", "waiting {{role}}")],
                width=12),
            Panel("Prefix-cache hit rate", [Query(
                f"sum by (role) (rate({_sel(_vllm(vllm_metrics.PREFIX_CACHE_HITS, '_total'), v)}[$__rate_interval]))"
                f" / sum by (role) (rate({_sel(_vllm(vllm_metrics.PREFIX_CACHE_QUERIES, '_total'), v)}"
                "[$__rate_interval]))",
                "{{role}}")], unit="percentunit", min=0, max=1, width=12),
        ],
    )  # fmt: skip
    groups = Row(
        "Groups and autoscaling",
        [
            Panel("Desired vs ready groups", [
                Query(f"sum by (role) ({_sel(names.GROUPS_DESIRED, s)})", "desired {{role}}"),
                Query(f"sum by (role) ({_sel(names.GROUPS_READY, s)})", "ready {{role}}"),
                Query(f"max({_sel(names.AUTOSCALING_MAX_GROUPS, s)})", "maxGroups (autoscaling)")], width=24,
                description="Desired: what the spec asks for (decode as the autoscaler sets it, prefill following "
                "by prefillPerDecode). Ready below desired for long: the fleet has no room (InsufficientCapacity)."),
        ],
    )  # fmt: skip
    return Dashboard(
        uid="nvlfleet-serving",
        title="nvlfleet / Serving",
        description="One DeepSeekServing: tokens by kind, speculative decoding, revenue, vLLM latency, and its groups.",
        variables=[
            dataclasses.replace(_NAMESPACE, multi=False),
            dataclasses.replace(_SERVING_OF_NAMESPACE, multi=False),
            Variable(
                "role", "Role", f'label_values({names.GPUS}{{namespace=~"$namespace", serving=~"$serving"}}, role)'
            ),
        ],
        rows=[throughput, money, engine, _requests_row(v), _router_row(), groups],
        file_name="nvlfleet-serving.json",
    )


def _requests_row(v: str) -> Row:
    """Requests through the engines and the prompt tokens prefill handed to decode (vLLM's own counters)."""

    def per_role(family: str, extra: str = "") -> str:
        return f"sum by (role) (rate({_sel(_vllm(family, '_total'), v, extra)}[$__rate_interval]))"

    transferred = f'source="{vllm_metrics.SOURCE_EXTERNAL_KV_TRANSFER}"'
    failed = f'finished_reason="{vllm_metrics.FINISHED_ERROR}"'
    return Row(
        "Requests and KV transfer",
        [
            Panel("Requests/s", [Query(per_role(vllm_metrics.REQUEST_SUCCESS), "{{role}}")], unit="reqps", width=8,
                  description="Requests each role finished, whatever the reason; with prefill/decode "
                  "disaggregation every request is finished once by prefill (one token) and once by decode."),
            Panel("KV-transfer tokens/s", [Query(per_role(vllm_metrics.PROMPT_TOKENS_BY_SOURCE, transferred),
                  "{{role}}")], width=8,
                  description="Prompt tokens whose KV cache a decode engine loaded from a prefill engine "
                  "(source external_kv_transfer): computed and billed at prefill, not again at decode."),
            Panel("Failed requests/s", [Query(per_role(vllm_metrics.REQUEST_SUCCESS, failed), "{{role}}")],
                  unit="reqps", width=8,
                  description="Requests vLLM finished with an error, e.g. a KV load that failed under "
                  "kv_load_failure_policy fail (recompute computes the prompt again instead)."),
        ],
    )  # fmt: skip


def _router_row() -> Row:
    """The serving's P/D router, from its own exporter (vllm-router's P/D families, ``facts.vllm_router``).

    Its PodMonitor gives the router's series the serving's namespace and serving labels, and no role (the router
    sits in front of both), so these queries select by namespace and serving only: the role selection does not
    hide them."""
    r = _FLEET

    def rate(family: str, by: str, extra: str = "") -> str:
        sample = _sel(_router(family, by=by), r, extra)
        return f"sum{f' by ({by})' if by else ''} (rate({sample}[$__rate_interval]))"

    duration = _router(vllm_router.PD_REQUEST_DURATION_SECONDS, "_bucket", by="route")
    health = _sel(_router(vllm_router.WORKER_HEALTH), r)
    return Row(
        "Router (prefill/decode)",
        [
            Panel("Router requests/s by route", [Query(rate(vllm_router.PD_REQUESTS, "route"), "{{route}}")],
                  unit="reqps", stacked=True, width=8,
                  description="Requests the router chose a prefill/decode pair for, by OpenAI route, whether the "
                  "engines answered or refused them; those it found no pair for count under router errors only."),
            Panel("Router request duration", [
                Query(_quantile(q, duration, r), f"p{int(q * 100)}") for q in (0.5, 0.99)], unit="s", width=8,
                description="From a request's arrival until the decode engine's response begins (a streamed "
                "answer's tokens follow), prefill and the KV hand-off included; refused requests included."),
            Panel("Router errors/s", [
                Query(rate(vllm_router.PD_PREFILL_ERRORS, ""), "prefill answered an error"),
                Query(rate(vllm_router.PD_DECODE_ERRORS, ""), "decode answered an error"),
                Query(rate(vllm_router.PD_ERRORS, "error_type"), "router: {{error_type}}")],
                unit="reqps", width=8, thresholds=((None, "green"), (0.001, "red")),
                description="Engine errors by stage (a refused request counts where it was refused: an unknown "
                "model at prefill, a max_tokens past the context at decode), and the router's own failures by "
                "type (server_selection: no healthy prefill/decode pair, answered 503)."),
            Panel("Router's engines", [
                Query(f"sum({health})", "healthy"),
                Query(f"count({health})", "known")], width=24, height=6,
                description="Engine DP ranks the router knows (one url@rank per data-parallel engine it found on "
                "each discovered leader) and how many of them pass its health check."),
        ],
    )  # fmt: skip


def operator_health() -> Dashboard:
    o = 'namespace=~"$namespace"'
    reconcile = Row(
        "Reconcile",
        [
            Panel("Reconciles/s", [Query(
                f"sum by (namespace, serving) (rate({_sel(names.RECONCILE_TOTAL, o)}[$__rate_interval]))",
                "{{namespace}}/{{serving}}")], unit="ops", width=8),
            Panel("Reconcile errors/s", [Query(
                f"sum by (reason) (rate({_sel(names.RECONCILE_ERRORS_TOTAL, o)}[$__rate_interval]))", "{{reason}}")],
                unit="ops", width=8, thresholds=((None, "green"), (0.001, "red"))),
            Panel("Reconcile latency", [Query(_quantile(q, f"{names.RECONCILE_DURATION}_bucket", ""),
                                              f"p{int(q * 100)}") for q in (0.5, 0.99)], unit="s", width=8),
            Panel("Planner latency", [Query(_quantile(q, f"{names.PLANNER_DURATION}_bucket", ""), f"p{int(q * 100)}")
                                      for q in (0.5, 0.99)], unit="s", width=8,
                  description="Time to place every group into NVLink domains."),
        ],
    )  # fmt: skip
    scraping = Row(
        "Scraping vLLM leaders",
        [
            Panel("Scrape targets", [Query(f"sum by (state) ({names.SCRAPE_TARGETS})", "{{state}}")], stacked=True,
                  width=8, description="Leaders that answered (up), have no rate yet (pending) or failed (down)."),
            Panel("Scrape errors/s", [Query(
                f"sum by (namespace, serving, reason) (rate({_sel(names.SCRAPE_ERRORS_TOTAL, o)}[$__rate_interval]))",
                "{{namespace}}/{{serving}} {{reason}}")], unit="ops", width=8),
            Panel("Scrape latency", [Query(_quantile(q, f"{names.SCRAPE_DURATION}_bucket", ""), f"p{int(q * 100)}")
                                     for q in (0.5, 0.99)], unit="s", width=8),
            Panel("Telemetry coverage",
                  [Query(_sel(names.COVERAGE, o), "{{namespace}}/{{serving}} {{role}} {{domain}}")],
                  unit="percentunit", min=0, max=1, width=24,
                  description="Share of each group's GPUs whose leader reported in the last round."),
        ],
    )  # fmt: skip
    return Dashboard(
        uid="nvlfleet-operator",
        title="nvlfleet / Operator",
        description="Health of the nvlfleet operator: reconciliation, placement and telemetry scraping.",
        variables=[Variable("namespace", "Namespace", f"label_values({names.RECONCILE_TOTAL}, namespace)")],
        rows=[reconcile, scraping],
        file_name="nvlfleet-operator.json",
    )


def all_dashboards() -> list[Dashboard]:
    return [fleet(), serving(), operator_health()]


# ---------------------------------------------------------------------------------------------------------------
# Output and introspection


def render(dashboard: Dashboard) -> str:
    return json.dumps(to_json(dashboard), indent=2, ensure_ascii=False) + "\n"


def write(chart_dir: pathlib.Path) -> list[pathlib.Path]:
    """Write every dashboard to ``<chart_dir>/dashboards/``; returns the paths written."""
    out = chart_dir / "dashboards"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for dashboard in all_dashboards():
        path = out / dashboard.file_name
        path.write_text(render(dashboard), encoding="utf-8")
        written.append(path)
    return written


@dataclasses.dataclass(frozen=True)
class Expression:
    """One query of one panel, with the template variables it uses (for tests that evaluate it)."""

    dashboard: str
    panel: str
    expr: str
    variables: tuple[str, ...]


def promql_expressions() -> Iterator[Expression]:
    """Every PromQL query in every dashboard, including the variables' label_values() metrics."""
    for dashboard in all_dashboards():
        names = tuple(v.name for v in dashboard.variables)
        for row in dashboard.rows:
            for panel in row.panels:
                for query in panel.queries:
                    yield Expression(dashboard.title, panel.title, query.expr, names)
        for variable in dashboard.variables:
            inner = variable.query.removeprefix("label_values(").rsplit(",", 1)[0]
            yield Expression(dashboard.title, f"variable {variable.name}", inner, names)


def substitute(expr: str, values: dict[str, str], rate_interval: str = "1m") -> str:
    """``expr`` with Grafana's variables replaced, as Grafana would send it to Prometheus."""
    out = expr.replace("$__rate_interval", rate_interval)
    for name in sorted(values, key=len, reverse=True):
        out = out.replace(f"${name}", values[name])
    return out
