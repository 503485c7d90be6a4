"""``spec.autoscaling``: bounds that hold together, a ceiling the GPU type's NVLink domains can hold, a ratio with a
prefill role to follow.

Pure core, inside the validate step (spec → **validate** → plan → render → apply → status). The CRD refuses the
shape at admission (bounds, an unknown signal, ``minGroups <= maxGroups``); this repeats the CEL rule for offline
use and adds what needs the hardware facts or the rest of the spec.
"""

from __future__ import annotations

from nvlfleet.api import models
from nvlfleet.core.validation import findings
from nvlfleet.facts import hardware

BASE = "spec.autoscaling"


def check_autoscaling(spec: models.DeepSeekServingSpec, out: findings.Findings) -> None:
    scaling = spec.autoscaling
    if scaling is None:
        return
    if scaling.min_groups > scaling.max_groups:
        out.error(
            f"{BASE}.minGroups",
            f"minGroups {scaling.min_groups} exceeds maxGroups {scaling.max_groups}: no group count satisfies both",
        )
    gen = hardware.generation(spec.gpu.value)
    topology = models.role_topology(spec.gpu, spec.roles.decode)
    if topology.nodes_per_group > gen.nodes_per_domain:
        out.error(
            f"{BASE}.maxGroups",
            f"maxGroups {scaling.max_groups} can never be placed: one decode group needs "
            f"{topology.nodes_per_group} nodes and a {gen.name} NVLink domain has {gen.nodes_per_domain}, so not "
            "even one group fits; make the decode group fit one domain",
        )
    if scaling.prefill_per_decode is not None and spec.roles.prefill is None:
        out.error(
            f"{BASE}.prefillPerDecode",
            "there is no prefill role to follow decode; add spec.roles.prefill or drop prefillPerDecode",
        )
    decode = spec.roles.decode.groups
    if not scaling.min_groups <= decode <= scaling.max_groups:
        out.warn(
            "spec.roles.decode.groups",
            f"{decode} decode groups lie outside autoscaling's {scaling.min_groups}..{scaling.max_groups}; the "
            "autoscaler moves them inside at its first scale",
        )
