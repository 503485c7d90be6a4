"""``nvlfleet economics`` on two saved scrapes: the stable JSON, the schedule, and clear errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvlfleet import cli
from nvlfleet.sim import vllmsim

MILLION = 1_000_000
# V4.1-Flash peak prices; off-peak is half (shared/reference/pricing.md).
PEAK = {"inputCacheHitPerMillion": 0.006, "inputCacheMissPerMillion": 0.30, "outputPerMillion": 1.20}
OFF_PEAK = {"name": "off-peak", "start": "16:30", "end": "00:30", "multiplier": 0.5}
CHECK_VALUE_LOAD = vllmsim.Load(prompt=986_900, prompt_cached=986_900, generation=13_100, running_requests=64)


def scrapes(tmp_path: Path, load: vllmsim.Load, seconds: float = 60, engines: int = 8) -> tuple[Path, Path]:
    ep = vllmsim.Endpoint("127.0.0.1", 8000, load=load, engines=engines, clock=lambda: 0.0)
    before, after = tmp_path / "A.prom", tmp_path / "B.prom"
    before.write_bytes(ep.exposition(3600))
    after.write_bytes(ep.exposition(3600 + seconds))
    return before, after


def pricing_file(tmp_path: Path, block: Any) -> Path:
    path = tmp_path / "pricing.yaml"
    path.write_text(yaml.safe_dump(block))
    return path


def economics(
    capsys: pytest.CaptureFixture[str], before: Path, after: Path, pricing: Path, *extra: str, gpus: int = 1
) -> tuple[int, Any, str]:
    argv = ["economics", "--before", str(before), "--after", str(after), "--interval", "60"]
    code = cli.main([*argv, "--pricing", str(pricing), "--gpus", str(gpus), "-o", "json", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def test_check_value_at_off_peak_prices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before, after = scrapes(tmp_path, CHECK_VALUE_LOAD)
    pricing = pricing_file(tmp_path, {**PEAK, "schedule": [OFF_PEAK]})

    code, out, _ = economics(capsys, before, after, pricing, "--at", "2026-10-20T20:00:00Z")

    off_peak_hit, off_peak_out = 0.006 * 0.5, 1.20 * 0.5
    by_formula = (986_900 * off_peak_hit + 13_100 * off_peak_out) / MILLION * 3600
    assert code == 0
    assert out["revenuePerGpuHour"] == pytest.approx(by_formula)
    assert round(out["revenuePerGpuHour"], 2) == 38.95
    assert out["tokensPerSecond"] == {
        "prompt": pytest.approx(986_900),
        "promptCached": pytest.approx(986_900),
        "promptUncached": pytest.approx(0, abs=1e-6),
        "generation": pytest.approx(13_100),
        "total": pytest.approx(1_000_000),
    }
    assert out["priceMultiplier"] == 0.5
    assert out["currency"] == "USD"


def test_json_keys_are_the_stable_interface_and_unknowns_are_null(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = scrapes(tmp_path, CHECK_VALUE_LOAD)  # no speculative decoding
    code, out, _ = economics(capsys, before, after, pricing_file(tmp_path, PEAK), gpus=4)

    assert code == 0
    assert {
        "tokensPerSecond",
        "tokensPerSecondPerGpu",
        "acceptanceRate",
        "meanAcceptedLength",
        "revenuePerHour",
        "revenuePerGpuHour",
        "currency",
    } <= set(out)
    assert {"prompt", "promptCached", "generation", "total"} <= set(out["tokensPerSecond"])
    assert out["acceptanceRate"] is None
    assert out["meanAcceptedLength"] is None
    assert out["costPerGpuHour"] is None
    assert out["tokensPerSecondPerGpu"] == pytest.approx(1_000_000 / 4)


def test_speculative_decoding_and_margin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load = vllmsim.Load(
        prompt=50_000, prompt_cached=20_000, generation=8_000, running_requests=100,
        speculative_tokens=3, acceptance_rate=0.65,
    )  # fmt: skip
    before, after = scrapes(tmp_path, load)
    pricing = pricing_file(tmp_path, {**PEAK, "gpuHourCost": 2.5})

    code, out, _ = economics(capsys, before, after, pricing, "--reference", "10000", gpus=4)

    revenue = (20_000 * 0.006 + 30_000 * 0.30 + 8_000 * 1.20) / MILLION * 3600
    assert code == 0
    assert out["acceptanceRate"] == pytest.approx(0.65)
    assert out["meanAcceptedLength"] == pytest.approx(1 + 0.65 * 3)
    assert out["streamingTokensPerSecondPerRequest"] == pytest.approx(8_000 / 100)
    assert out["revenuePerHour"] == pytest.approx(revenue)
    assert out["marginPerGpuHour"] == pytest.approx(revenue / 4 - 2.5)
    assert (out["parity"], out["parityBasis"]) == (pytest.approx(8_000 / 4 / 10_000), "output")


def test_a_total_reference_is_compared_with_total_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before, after = scrapes(tmp_path, vllmsim.Load(prompt=50_000, prompt_cached=20_000, generation=8_000))
    args = ("--reference", "10000", "--reference-basis", "total")

    code, out, _ = economics(capsys, before, after, pricing_file(tmp_path, PEAK), *args, gpus=4)

    assert (code, out["parityBasis"]) == (0, "total")
    assert out["parity"] == pytest.approx(58_000 / 4 / 10_000)


def test_an_interval_across_the_window_start_is_priced_piecewise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = scrapes(tmp_path, CHECK_VALUE_LOAD)
    pricing = pricing_file(tmp_path, {**PEAK, "schedule": [OFF_PEAK]})

    code, out, _ = economics(capsys, before, after, pricing, "--at", "16:30:20")

    assert code == 0
    assert out["priceMultiplier"] == pytest.approx((40 * 1.0 + 20 * 0.5) / 60)
    assert out["start"].endswith("T16:29:20Z") and out["end"].endswith("T16:30:20Z")


def test_a_disaggregated_prefill_role_bills_prompts_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load = vllmsim.Load(prompt=10_000, prompt_cached=4_000, generation=50)
    before, after = scrapes(tmp_path, load)

    code, out, _ = economics(
        capsys, before, after, pricing_file(tmp_path, PEAK), "--role", "prefill", "--disaggregated"
    )

    assert code == 0
    assert out["revenuePerHour"] == pytest.approx((4_000 * 0.006 + 6_000 * 0.30) / MILLION * 3600)
    assert out["tokensPerSecond"]["total"] == pytest.approx(10_000)


def test_table_output_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before, after = scrapes(tmp_path, CHECK_VALUE_LOAD)
    pricing = pricing_file(tmp_path, {**PEAK, "schedule": [OFF_PEAK]})
    argv = ["economics", "--before", str(before), "--after", str(after), "--interval", "60"]

    code = cli.main([*argv, "--pricing", str(pricing), "--gpus", "1", "--at", "20:00"])

    assert code == 0
    assert "revenue           38.95 USD/h, 38.95 USD/GPU-hour" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------------
# Bad input: a clear message and exit 1, never a traceback


def bad(tmp_path: Path, capsys: pytest.CaptureFixture[str], *, before: Path | None = None, after: Path | None = None,
        pricing: Any = PEAK, extra: tuple[str, ...] = (), gpus: int = 1) -> str:  # fmt: skip
    good_before, good_after = scrapes(tmp_path, CHECK_VALUE_LOAD)
    code, _, err = economics(
        capsys, before or good_before, after or good_after, pricing_file(tmp_path, pricing), *extra, gpus=gpus
    )
    assert code == 1
    assert "Traceback" not in err
    return err.strip()


def test_a_misspelt_price_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pricing = {**PEAK, "outputPerMilion": 1.2}
    del pricing["outputPerMillion"]

    err = bad(tmp_path, capsys, pricing=pricing)

    assert "spec.pricing.outputPerMillion: Field required" in err
    assert "spec.pricing.outputPerMilion: Extra inputs are not permitted" in err


def test_a_whole_serving_instead_of_its_pricing_block_is_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "give the spec.pricing block itself" in bad(tmp_path, capsys, pricing={"spec": {"pricing": PEAK}})


def test_overlapping_windows_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    peak = {"name": "peak", "start": "00:00", "end": "01:00", "multiplier": 2}

    err = bad(tmp_path, capsys, pricing={**PEAK, "schedule": [OFF_PEAK, peak]})

    assert "spec.pricing.schedule[1]: window 'peak' (00:00-01:00) overlaps window 'off-peak'" in err


def test_a_missing_scrape_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.prom"

    assert (
        bad(tmp_path, capsys, before=missing)
        == f"nvlfleet economics: {missing}: cannot read: No such file or directory"
    )


def test_a_file_that_is_not_a_vllm_scrape_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "error.html"
    html.write_text("<html><body>502 Bad Gateway</body></html>\n")

    err = bad(tmp_path, capsys, after=html)

    assert err.startswith(f"nvlfleet economics: {html}: not a usable vLLM /metrics text (missing_metrics)")


def test_a_counter_reset_between_the_scrapes_is_read_as_prometheus_rate_reads_it_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = scrapes(tmp_path, CHECK_VALUE_LOAD)

    code, answer, _ = economics(capsys, after, before, pricing_file(tmp_path, PEAK), gpus=1)

    assert code == 0
    assert answer["counterReset"].startswith("counters went down between the scrapes")
    # The reset counters' values after the reset count as the increase, over the whole interval.
    assert answer["tokensPerSecond"]["generation"] > 0


@pytest.mark.parametrize(
    ("extra", "gpus", "message"),
    [
        ((), 0, "--gpus must be at least 1, got 0"),
        (("--at", "half past four"), 1, "--at 'half past four': expected HH:MM[:SS] or an ISO 8601 time"),
        (("--role", "decode"), 1, "--role and --disaggregated go together"),
    ],
)
def test_bad_options_are_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], gpus: int, message: str
) -> None:
    assert message in bad(tmp_path, capsys, extra=extra, gpus=gpus)


def test_the_command_does_not_load_the_network_client() -> None:
    # Offline arithmetic on saved files: importing it must not pull in aiohttp (the scraper's), directly or not.
    code = "import sys; import nvlfleet.commands.economics; print('aiohttp' in sys.modules)"

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("reference", ["0", "-5", "inf", "nan"])
def test_a_reference_that_is_not_a_positive_throughput_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: str
) -> None:
    err = bad(tmp_path, capsys, extra=("--reference", reference))

    assert err.startswith("nvlfleet economics: --reference must be a positive number of tokens/s per GPU")
