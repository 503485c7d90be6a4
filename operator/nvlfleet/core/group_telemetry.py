"""What one serving's leaders measured, per (role, NVLink domain) and for the whole serving: ``GroupTelemetry``.

Pure core, between the rates and the gauges: ``rates`` (one ``Measurement`` per leader) → **group_telemetry**
(leaders summed per group, priced by ``economics``) → the exporter's ``nvlfleet_*`` gauges and the serving's
status. The scraper (``adapters.scraper``) keeps each leader's latest ``Reading`` and calls ``aggregate``.

- Per-GPU and ratio figures use the leaders that reported and their GPUs; whole-group figures (tokens/s,
  revenue/h) hold only when every leader reported (``complete``), since a sum with a missing leader would be a
  wrong number. ``coverage`` shows how much reported.
- A leader that gives no number says why (``TargetProblem``), so the operator can raise a condition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from nvlfleet.api import models
from nvlfleet.api import parity as parity_api
from nvlfleet.core import economics, rates


@dataclasses.dataclass(frozen=True)
class Target:
    """A group leader's vLLM API server: ``url`` is ``http://host:port``; ``gpus`` are the whole group's."""

    role: str
    domain: str
    url: str
    gpus: int


@dataclasses.dataclass(frozen=True)
class TargetProblem:
    """Why a leader gives no number right now (``reason`` is a ``ScrapeError`` reason or ``pending``)."""

    url: str
    role: str
    domain: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.url} ({self.role}, {self.domain}): {self.reason}: {self.message}"


def pending(target: Target, message: str) -> TargetProblem:
    """A leader that answered but has no rate yet (first sample, restart)."""
    return TargetProblem(target.url, target.role, target.domain, "pending", message)


@dataclasses.dataclass(frozen=True)
class Reading:
    """A leader's latest state: the measurement of its last scrape if that yielded rates, else its problem."""

    target: Target
    measurement: rates.Measurement | None
    problem: TargetProblem | None


@dataclasses.dataclass(frozen=True)
class GroupTelemetry:
    """Telemetry of one serving's leaders in one (role, NVLink domain), or of the whole serving (both None).

    ``figures`` cover the leaders that reported; ``complete`` says all did, so whole-group figures hold.
    """

    namespace: str
    serving: str
    role: str | None
    domain: str | None
    gpus: int
    reporting_gpus: int
    targets: int
    reporting_targets: int
    figures: economics.Economics | None
    revenue_accrued: float
    measured_at: float | None
    problems: tuple[TargetProblem, ...] = ()

    @property
    def complete(self) -> bool:
        return self.targets > 0 and self.reporting_targets == self.targets

    @property
    def coverage(self) -> float | None:
        return self.reporting_gpus / self.gpus if self.gpus else None

    # Whole-group figures: None unless every leader reported.
    @property
    def tokens_per_second(self) -> economics.TokenRates | None:
        return self.figures.tokens_per_second if self.figures and self.complete else None

    @property
    def revenue_per_hour(self) -> float | None:
        return self.figures.revenue_per_hour if self.figures and self.complete else None


def aggregate(
    namespace: str,
    serving: str,
    readings: Sequence[Reading],
    *,
    role: str | None,
    domain: str | None,
    pricing: models.PricingSpec | None,
    disaggregated: bool,
    parity_reference: parity_api.ParitySpec | None,
    accrued: Mapping[tuple[str, str], float],
) -> GroupTelemetry:
    """Sum the leaders of one group; ``role`` None means the whole serving (each role's billed share, summed).

    ``accrued`` is the revenue accrued so far per (role, domain); the group's share of it is reported.
    """
    reporting = [
        (r.target, r.measurement) for r in readings if r.measurement is not None and r.measurement.rates is not None
    ]
    intervals = [
        economics.Interval(target.role, m.rates, m.start, m.end) for target, m in reporting if m.rates is not None
    ]
    figures = None
    if intervals:
        figures = economics.evaluate_group(
            intervals,
            gpus=sum(target.gpus for target, _ in reporting),
            pricing=pricing,
            disaggregated=disaggregated,
            parity_reference=parity_reference,
            whole_serving=role is None,
        )
    return GroupTelemetry(
        namespace=namespace,
        serving=serving,
        role=role,
        domain=domain,
        gpus=sum(r.target.gpus for r in readings),
        reporting_gpus=sum(target.gpus for target, _ in reporting),
        targets=len(readings),
        reporting_targets=len(reporting),
        figures=figures,
        revenue_accrued=sum(v for (r, d), v in accrued.items() if role in (None, r) and domain in (None, d)),
        measured_at=max((m.end for _, m in reporting), default=None),
        problems=tuple(r.problem for r in readings if r.problem is not None),
    )
