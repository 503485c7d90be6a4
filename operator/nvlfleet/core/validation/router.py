"""The router (spec.router): a routing policy the pinned vllm-router has and the facts do not rule out, and limits
that do not undercut requests.

Pure core, inside the validate step (spec → **validate** → plan → render → apply → status). The CRD bounds only
the policy's spelling (listing the choices would copy ``facts.vllm_router`` into the schema), so the choices are
checked here, at admission through the webhook and offline by ``nvlfleet validate``.
"""

from __future__ import annotations

from nvlfleet.api import models
from nvlfleet.core import router
from nvlfleet.core.validation import findings
from nvlfleet.facts import vllm_router


def check_router(spec: models.DeepSeekServingSpec, out: findings.Findings) -> None:
    facts = vllm_router.load()
    chosen = spec.router.policy
    if chosen is not None and chosen not in facts.policies:
        out.error(
            "spec.router.policy",
            f"vllm-router {facts.version} has no routing policy {chosen!r}; its choices: {', '.join(facts.policies)}",
        )
    elif chosen is not None and chosen in facts.refused_policies:
        out.error(
            "spec.router.policy",
            f"{chosen} cannot work behind Kubernetes service discovery, which nvlfleet's router uses: "
            f"{facts.refused_policies[chosen]}",
        )
    resources = spec.router.resources
    if resources.limits is None:
        return
    for name in ("cpu", "memory"):
        request, limit = getattr(resources.requests, name), getattr(resources.limits, name)
        if request is not None and limit is not None and router.quantity_value(limit) < router.quantity_value(request):
            out.error(
                f"spec.router.resources.limits.{name}",
                f"the limit {limit} is below the request {request} (Kubernetes refuses such a pod)",
            )
