"""The pure text-format parser reads every exposition exactly as prometheus-client's parser does.

nvlfleet's core parses vLLM's /metrics without prometheus-client (``core.exposition``); what the scraper reads
must not change by it. Texts are built from lines that exercise the format's corners: families typed with and
without ``_total``, samples outside any family, quoting and escapes, timestamps, exemplars, and broken lines.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import parser

from nvlfleet.core import exposition

LINES = [
    "# HELP a_total Counts.",
    "# TYPE a_total counter",
    'a_total{engine="0",model_name="x"} 1',
    "a_created 1.7e9",
    "# TYPE a counter",
    "# HELP a",
    "# TYPE a gauge",
    "a 3",
    'a{l="a\\"b"} 4 123',
    "a_total 5",
    "# TYPE g gauge",
    "g 1.5",
    "g NaN",
    "g +Inf",
    "g -0",
    "g 1e3",
    'x{__name__="y"} 1',
    '{__name__="z"} 2',
    '{__name__=""} 2',
    "# a comment",
    "#",
    "# TYPE",
    "# HELP",
    "# TYPE a foo",
    "# TYPE a untyped",
    'b{l="1",} 1',
    'b{,l="1"} 1',
    "b{l=1} 1",
    "c 1 2 3",
    "c\t5",
    "<html><body>502 Bad Gateway</body></html>",
    'd{l="1"}x 1',
    "e 1_0",
    "f 12O4.0",
    "# TYPE h histogram",
    'h_bucket{le="1"} 1',
    "h_sum 1",
    "h 2",
    "# TYPE q summary",
    "q 1",
    'k{__x="1"} 1',
    'k{a="1",a="2"} 1',
    'k{"quoted"="v"} 1',
    "m:colon 1",
    'p{a="}"} 3',
    'p{a="\\\\"} 3',
    'p{a="\\n"} 1',
    'a_total{l="x y"} 1 # {t="1"} 2',
    'a{l="é"} 1',
    "a{",
    "a{} 1",
    "",
    "  ",
    "\r",
]


def read_by_prometheus_client(text: str) -> Any:
    try:
        return [
            (s.name, s.labels, repr(s.value), type(s.value))
            for family in parser.text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError:
        return ValueError


def read_by_nvlfleet(text: str) -> Any:
    try:
        return [(s.name, dict(s.labels), repr(s.value), type(s.value)) for s in exposition.sample_lines(text)]
    except ValueError:
        return ValueError


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=8), st.booleans())
def test_every_text_reads_as_prometheus_client_reads_it(lines: list[str], newline_at_end: bool) -> None:
    text = "\n".join(lines) + ("\n" if newline_at_end else "")

    assert read_by_nvlfleet(text) == read_by_prometheus_client(text)


def test_a_counter_typed_without_total_gets_it_on_its_samples() -> None:
    text = '# TYPE vllm:generation_tokens counter\nvllm:generation_tokens{engine="0"} 7\n'

    assert [(s.name, s.value) for s in exposition.sample_lines(text)] == [("vllm:generation_tokens_total", 7)]
