"""A vLLM /metrics text → one Sample of the families nvlfleet reads, or a ScrapeError saying why there is none."""

from __future__ import annotations

import dataclasses
import datetime

import prometheus_client
import pytest

from nvlfleet.core import samples
from nvlfleet.facts import vllm_metrics
from nvlfleet.sim import vllmsim

T = datetime.datetime(2026, 10, 20, 16, 30, tzinfo=datetime.UTC).timestamp()
DECODE = vllmsim.Load(
    prompt=90_000,
    prompt_cached=60_000,
    generation=12_000,
    running_requests=96,
    speculative_tokens=3,
    acceptance_rate=0.6,
)


@dataclasses.dataclass
class FakeClock:
    now: float = T

    def __call__(self) -> float:
        return self.now


def test_a_server_that_is_not_vllm_is_reported_not_guessed() -> None:
    other = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("http_requests", "Requests.", registry=other).inc(5)
    body = prometheus_client.generate_latest(other)

    with pytest.raises(samples.ScrapeError) as err:
        samples.parse_sample(body, T)

    assert err.value.reason == "missing_metrics"


def test_text_that_is_not_an_exposition_is_a_parse_error() -> None:
    body = b"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total 12O4.0\n<html>502 Bad Gateway</html>\n"

    with pytest.raises(samples.ScrapeError) as err:
        samples.parse_sample(body, T)

    assert err.value.reason == "parse"


def test_negative_or_nan_counters_are_invalid() -> None:
    body = b'# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine="0"} NaN\n'

    with pytest.raises(samples.ScrapeError) as err:
        samples.parse_sample(body, T)

    assert err.value.reason == "invalid_value"


def test_counters_are_kept_per_engine_and_the_sample_time_is_the_one_given() -> None:
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=DECODE, engines=8, clock=FakeClock())

    sample = samples.parse_sample(ep.exposition(T + 9), T)

    assert sample.time == T
    assert len(sample.counters["generation"]) == 8
    assert sum(sample.counters["generation"].values()) == pytest.approx(
        ep.counter(vllm_metrics.GENERATION_TOKENS, T + 9)
    )
    assert sample.running_requests == DECODE.running_requests


def test_an_unfiltered_exposition_reads_the_same_as_a_filtered_one() -> None:
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=DECODE, engines=8, clock=FakeClock())
    names = [name for _, name in samples.METRICS_QUERY]

    assert samples.parse_sample(ep.exposition(T + 9), T) == samples.parse_sample(ep.exposition(T + 9, names), T)


def test_the_scraper_reads_names_the_facts_define() -> None:
    exposed = {
        name
        for fact in vllmsim.metric_facts()["metrics"]["vllm_metrics"]
        for name in ([fact["exposed_as"]] if isinstance(fact["exposed_as"], str) else fact["exposed_as"])
    }
    read = {name for _, name in samples.METRICS_QUERY}

    assert read - exposed == {vllm_metrics.GENERATION_TOKENS + "_created"}  # a counter's _created twin
