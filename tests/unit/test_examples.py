"""The examples are valid, say what they show, and show what the README promises."""

from __future__ import annotations

import datetime
import pathlib

import pytest
import yaml

from nvlfleet.api import models
from nvlfleet.core import economics, profiles, validation
from nvlfleet.facts import facts, hardware
from support.examples import NEEDS, needed_policy

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def load(name: str) -> models.DeepSeekServing:
    return models.DeepSeekServing.model_validate(yaml.safe_load((EXAMPLES[0].parent / name).read_text()))


def test_the_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "gb200-wide-ep-throughput.yaml",
        "gb300-throughput.yaml",
        "gb200-disaggregated.yaml",
        "gb300-low-latency.yaml",
    } <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid_without_warnings(example: pathlib.Path) -> None:
    review = validation.review(yaml.safe_load(example.read_text()), needed_policy(example))
    assert (list(review.errors), list(review.warnings)) == ([], [])


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_an_example_beyond_the_default_policy_says_which_policy_line_allows_it(name: str) -> None:
    flag, field = NEEDS[name]
    text = (EXAMPLES[0].parent / name).read_text()
    assert flag in text
    refused = validation.validate(yaml.safe_load(text))  # under the default policy
    assert [p.path for p in refused] == [field]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_opens_with_what_it_shows(example: pathlib.Path) -> None:
    lines = example.read_text().splitlines()
    assert lines[0].startswith("# ") and any(line.startswith("# What it shows") for line in lines[:5])


def test_example_names_are_unique() -> None:
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in EXAMPLES]
    assert len(names) == len(set(names))


def test_wide_ep_groups_span_several_trays_of_one_rack_with_divisible_experts() -> None:
    serving = load("gb200-wide-ep-throughput.yaml")
    gen = hardware.generation(serving.spec.gpu.value)
    topology = models.role_topology(serving.spec.gpu, serving.spec.roles.decode)
    assert 1 < topology.nodes_per_group <= gen.nodes_per_domain
    tuning = profiles.effective(serving.spec, models.RoleName.DECODE)
    experts = facts.load().family("deepseek-v4.1").experts_for(serving.spec.model.name)
    assert experts is not None and tuning.eplb.enabled and tuning.expert_parallel
    assert tuning.eplb.num_redundant_experts > 0
    assert (experts.experts + tuning.eplb.num_redundant_experts) % tuning.ep_size == 0


def test_wide_ep_prices_follow_the_v41_flash_schedule() -> None:
    """shared/reference/pricing.md: peak 01:00–04:00 and 06:00–10:00 UTC at 2× the off-peak prices."""
    pricing = load("gb200-wide-ep-throughput.yaml").spec.pricing
    assert pricing is not None
    assert (pricing.input_cache_hit_per_million, pricing.output_per_million) == (0.003, 0.60)

    def at(hhmm: str) -> float:
        hour, minute = map(int, hhmm.split(":"))
        return economics.multiplier_at(pricing, datetime.datetime(2026, 11, 1, hour, minute, tzinfo=datetime.UTC))

    expected = {"00:59": 1.0, "01:00": 2.0, "03:59": 2.0, "04:00": 1.0, "05:30": 1.0, "06:00": 2.0, "10:00": 1.0}
    assert {t: at(t) for t in expected} == expected


def test_disaggregated_example_runs_prefill_and_decode() -> None:
    serving = load("gb200-disaggregated.yaml")
    assert [role for role, _ in serving.spec.roles_present()] == [models.RoleName.PREFILL, models.RoleName.DECODE]


def test_low_latency_example_is_one_tray_with_specialized_decode() -> None:
    serving = load("gb300-low-latency.yaml")
    topology = models.role_topology(serving.spec.gpu, serving.spec.roles.decode)
    assert (topology.nodes_per_group, topology.tensor, topology.data) == (1, 4, 1)
    tuning = profiles.effective(serving.spec, models.RoleName.DECODE)
    assert tuning.additional_config.get("decode_backend") == "latency_specialized"


def test_the_wide_ep_parity_reference_is_the_output_figure_its_comment_cites() -> None:
    name = "gb200-wide-ep-throughput.yaml"
    parity = load(name).spec.parity
    assert parity is not None and parity.reference_tokens_per_second_per_gpu is not None
    comment = " ".join(line.lstrip("# ") for line in (EXAMPLES[0].parent / name).read_text().splitlines())

    assert parity.basis.value == "output"
    assert f"{parity.reference_tokens_per_second_per_gpu:,.0f} output tokens/s per GPU" in comment
