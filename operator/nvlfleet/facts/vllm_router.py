"""What the pinned vllm-router (the vLLM project's router, PyPI ``vllm-router``) accepts and how it behaves, as data.

Pure facts, read by ``api.router`` (the default image's tag), ``core.validation`` (a routing policy must be one the
router knows and not one the facts say cannot work) and ``core.router`` (every flag rendered onto the router's
command line exists in these facts; a unit test proves it, and another runs the argv through the installed
wheel's own parser). The folder ``data/vllm-router/<version>/`` holds ``cli-flags.json``, read from the wheel's
argparse definition (``tests/support/routerflags.py`` writes it; a test keeps it equal to the installed wheel), and
``rules.yaml``, nvlfleet's reading of ``shared/reference/vllm-0.33.0/disaggregation.md``: the defaults it states,
the policy nvlfleet chooses and why, the policies it refuses and why, discovery and health endpoints; and
``metrics.yaml``, the router's Prometheus exposition in P/D mode, read from the real binary
(``tests/support/routermetrics.py`` prints it; a test keeps it equal to what the wheel exposes, another keeps it
consistent with disaggregation.md §6). The constants below are the one home of the ``vllm_router_*`` names
nvlfleet reads (``artifacts.dashboards`` charts them), each checked against ``metrics.yaml`` at import.

API::

    vllm_router.load() -> RouterFacts     # the pinned version, VERSION
    f.flag("--policy") -> RouterFlag      # KeyError if the router has no such flag
    f.knows(spelling) -> bool
    f.policies                            # the --policy choices
    f.default_policy, f.default_policy_reason
    f.refused_policies -> {policy: why}
    f.defaults -> {flag: value}           # as disaggregation.md states them
    f.metric(family) -> RouterMetric      # KeyError if the router does not expose it
    f.exposed(sample) -> sample           # a family's sample name (histogram: _bucket/_sum/_count), else KeyError
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

VERSION = "0.1.17"  # the one vllm-router release nvlfleet renders for (PyPI vllm-router==0.1.17)

_DATA = "data/vllm-router"

# The router's metric families nvlfleet charts (P/D mode), as the exposition names them.
PD_REQUESTS = "vllm_router_pd_requests_total"  # counter {route}: requests a prefill/decode pair was chosen for
PD_REQUEST_DURATION_SECONDS = "vllm_router_pd_request_duration_seconds"  # histogram {route}: the same requests
PD_PREFILL_ERRORS = "vllm_router_pd_prefill_errors_total"  # counter {worker}: a prefill answered an error
PD_DECODE_ERRORS = "vllm_router_pd_decode_errors_total"  # counter {worker}: a decode answered an error
PD_ERRORS = "vllm_router_pd_errors_total"  # counter {error_type}: failures of the router's own (no P/D pair)
WORKER_HEALTH = "vllm_router_worker_health"  # gauge {worker}: one series per engine DP rank (url@rank), 1 healthy


@dataclasses.dataclass(frozen=True)
class RouterFlag:
    """One ``vllm-router`` option as the launcher's argparse defines it."""

    name: str
    dest: str
    takes_value: bool
    nargs: str | None  # None: exactly one value; "0": none; "+": one or more; "*": any number
    choices: tuple[str, ...] | None
    default: Any


@dataclasses.dataclass(frozen=True)
class RouterMetric:
    """One metric family of the router's exposition: its type and its own labels (not the scrape's)."""

    family: str
    type: str  # counter | gauge | histogram | summary
    labels: tuple[str, ...]

    @property
    def samples(self) -> tuple[str, ...]:
        """The sample names the exposition writes for this family."""
        if self.type == "histogram":
            return tuple(f"{self.family}_{suffix}" for suffix in ("bucket", "sum", "count"))
        if self.type == "summary":
            return (self.family, f"{self.family}_sum", f"{self.family}_count")
        return (self.family,)


@dataclasses.dataclass(frozen=True)
class RouterFacts:
    version: str
    binary: str
    flags: Mapping[str, RouterFlag]
    defaults: Mapping[str, Any]
    default_policy: str
    default_policy_reason: str
    refused_policies: Mapping[str, str]
    discovery_pod_verbs: tuple[str, ...]
    liveness_path: str
    readiness_path: str
    metrics: Mapping[str, RouterMetric]
    unseen_metrics: Mapping[str, str]  # families disaggregation.md names that the router does not expose, and why

    def metric(self, family: str) -> RouterMetric:
        found = self.metrics.get(family)
        if found is None:
            raise KeyError(f"vllm-router {self.version} exposes no metric family {family!r}")
        return found

    def exposed(self, sample: str) -> str:
        """``sample``, refused unless the router's exposition writes a sample of that name."""
        if not any(sample in m.samples for m in self.metrics.values()):
            raise KeyError(f"vllm-router {self.version} exposes no sample {sample!r}")
        return sample

    def flag(self, name: str) -> RouterFlag:
        return self.flags[name]

    def knows(self, name: str) -> bool:
        return name in self.flags

    @property
    def policies(self) -> tuple[str, ...]:
        return self.flags["--policy"].choices or ()


def _read(version: str, name: str) -> str:
    return resources.files("nvlfleet.facts").joinpath(f"{_DATA}/{version}/{name}").read_text()


@functools.cache
def load(version: str = VERSION) -> RouterFacts:
    """The facts of one packaged vllm-router version (FileNotFoundError for a version nvlfleet does not package)."""
    raw_flags: dict[str, dict[str, Any]] = json.loads(_read(version, "cli-flags.json"))["flags"]
    rules: dict[str, Any] = yaml.safe_load(_read(version, "rules.yaml"))
    metrics: dict[str, Any] = yaml.safe_load(_read(version, "metrics.yaml"))
    flags = {
        name: RouterFlag(
            name=name,
            dest=str(spec["dest"]),
            takes_value=bool(spec["takes_value"]),
            nargs=spec["nargs"],
            choices=tuple(spec["choices"]) if spec["choices"] is not None else None,
            default=spec["default"],
        )
        for name, spec in raw_flags.items()
    }
    return RouterFacts(
        version=str(rules["version"]),
        binary=str(rules["binary"]),
        flags=flags,
        defaults=dict(rules["defaults"]),
        default_policy=str(rules["default_policy"]["policy"]),
        default_policy_reason=" ".join(str(rules["default_policy"]["reason"]).split()),
        refused_policies={str(k): " ".join(str(v).split()) for k, v in rules["refused_policies"].items()},
        discovery_pod_verbs=tuple(rules["discovery"]["pod_verbs"]),
        liveness_path=str(rules["health"]["liveness"]),
        readiness_path=str(rules["health"]["readiness"]),
        metrics={
            str(name): RouterMetric(family=str(name), type=str(spec["type"]), labels=tuple(spec["labels"]))
            for name, spec in metrics["families"].items()
        },
        unseen_metrics={str(k): " ".join(str(v).split()) for k, v in metrics["unseen"].items()},
    )


CHARTED = (PD_REQUESTS, PD_REQUEST_DURATION_SECONDS, PD_PREFILL_ERRORS, PD_DECODE_ERRORS, PD_ERRORS, WORKER_HEALTH)
for _family in CHARTED:
    load().metric(_family)  # at import: every name above is one the pinned router exposes
