"""Two samples of one server → rates over the real time between them; a restart is a reset, never a negative rate."""

from __future__ import annotations

import datetime

from nvlfleet.core import rates, samples

T = datetime.datetime(2026, 10, 20, 16, 30, tzinfo=datetime.UTC).timestamp()


def sample(at: float, generation: float, created: float | None = T, engines: int = 2) -> samples.Sample:
    def per_engine(total: float) -> dict[samples.Series, float]:
        return {(("engine", str(e)),): total / engines for e in range(engines)}

    counters = {"prompt": per_engine(0.0), "prompt_cached": per_engine(0.0), "generation": per_engine(generation)}
    return samples.Sample(time=at, counters=counters, running_requests=4.0, created=created)


def test_rate_is_increase_over_elapsed_time() -> None:
    m = rates.measure(sample(T + 10, 1_000), sample(T + 30, 5_000))

    assert m.rates is not None and m.rates.generation == 4_000 / 20
    assert (m.start, m.end, m.restarted) == (T + 10, T + 30, False)


def test_a_reset_with_created_time_rates_from_the_restart() -> None:
    m = rates.measure(sample(T + 10, 9_000), sample(T + 30, 600, created=T + 24))

    assert m.rates is not None and m.rates.generation == 600 / 6
    assert (m.start, m.restarted) == (T + 24, True)


def test_a_value_going_down_without_created_time_gives_no_rate() -> None:
    m = rates.measure(sample(T + 10, 9_000, created=None), sample(T + 30, 600, created=None))

    assert m.rates is None and m.restarted


def test_a_restart_that_outgrew_the_old_value_is_still_seen_by_its_created_time() -> None:
    m = rates.measure(sample(T + 10, 100), sample(T + 30, 900, created=T + 20))

    assert m.rates is not None and m.rates.generation == 900 / 10


def test_no_time_elapsed_gives_no_rate() -> None:
    assert rates.measure(sample(T, 1), sample(T, 2)).rates is None
