"""How nvlfleet's API types become the CRD's schema: the base of every type, and the CEL rules they carry.

Pure API, under ``models``, ``kubetypes`` and ``servingstatus`` (the spec and status that enter and leave the data
flow); ``nvlfleet.api.crd`` turns the JSON schema pydantic derives from them into the CRD. Everything that shapes
that schema beyond a field's own type lives here: the wire spelling (camelCase), the refusal of unknown fields,
the patterns several types share, and the CEL rules the API server checks at admission, including the topology
arithmetic built from the hardware data so the CRD and ``nvlfleet.core.validation`` cannot disagree.
"""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import alias_generators

from nvlfleet.facts import hardware

# A DNS-1123 label: what a Secret, PVC, volume or container name must be.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A container image reference: registry/repository[:tag][@digest].
IMAGE = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"
# A Kubernetes quantity, exactly as k8s.io/apimachinery's resource.ParseQuantity reads one: an optionally signed
# decimal (1, 1.5, 1., .5), then a binary suffix (Ki … Ei), a decimal one (n, u, m, k, M, G, T, P, E) or an
# integer exponent (e3, E-2). The one home of the grammar: the CRD's patterns and nvlfleet.core.validation use it.
_QUANTITY_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
QUANTITY = rf"^[+-]?{_QUANTITY_NUMBER}$"
# Narrower, for an amount (a size limit, a resource request): the same grammar without a minus sign, because
# Kubernetes refuses a negative one only when LeaderWorkerSet creates the pods, which then never appear.
UNSIGNED_QUANTITY = rf"^\+?{_QUANTITY_NUMBER}$"
# Narrower, for the router's cpu and memory: a positive whole number of one unit (2, 500m, 1Gi), the spellings
# nvlfleet.core.router.canonical_quantity rewrites with integer arithmetic into the API server's own, so that the
# applied Deployment reads back equal to the rendered one.
WHOLE_QUANTITY = r"^[1-9][0-9]*(m|Ki|Mi|Gi|Ti)?$"


class Model(pydantic.BaseModel):
    """Base of every API type: camelCase on the wire, unknown fields refused (typos are errors)."""

    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        extra="forbid",
        # A price, a multiplier or a reference throughput of inf or nan (YAML's .inf, .nan) is never meant, and
        # every figure computed from it would be one.
        allow_inf_nan=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as it is written to the API server: camelCase, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` carrying CEL rules (rule, message) into the generated CRD."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def topology_rules() -> dict[str, Any]:
    """CEL rules for the topology arithmetic that fits in CEL, built from the hardware data (one source).

    Messages name numbers through string-valued map lookups: the API server's cost estimator takes ``string(int)``
    as unbounded and refuses the CRD, while a lookup of constant strings is cheap.
    """
    gens = list(hardware.generations().values())

    def lookup(value: Any) -> str:
        return "{" + ", ".join(f"'{g.name}': {value(g)}" for g in gens) + "}[self.gpu]"

    gpn = lookup(lambda g: g.gpus_per_node)
    domain_nodes = lookup(lambda g: g.nodes_per_domain)
    gpn_text = lookup(lambda g: f"'{g.gpus_per_node}'")
    domain_text = lookup(
        lambda g: f"'{g.nodes_per_domain} node{'s' if g.nodes_per_domain > 1 else ''} ({g.gpus_per_domain} GPUs)'"
    )
    rules: list[dict[str, str]] = []
    for role in ("decode", "prefill"):
        guard = f"!has(self.roles.{role}) || " if role == "prefill" else ""
        par = f"self.roles.{role}.parallelism"
        node = "' GPUs of one ' + self.gpu + ' node"
        domain = f"'{role}: a group must fit in one ' + self.gpu + ' NVLink domain of ' + {domain_text}"
        checks = [
            (
                f"{par}.tensor <= {gpn}",
                f"'{role}: tensor-parallel size must not exceed the ' + {gpn_text} + {node}; use data parallelism "
                "across nodes instead'",
                "tensor",
            ),
            (
                f"{par}.tensor > {gpn} || {gpn} % {par}.tensor == 0",
                f"'{role}: tensor-parallel size must divide the ' + {gpn_text} + {node}'",
                "tensor",
            ),
            (
                f"!has({par}.data) || ({par}.tensor * {par}.data) % {gpn} == 0",
                f"'{role}: tensor × data must fill whole nodes of ' + {gpn_text} + ' GPUs (one vLLM pod per ' + "
                "self.gpu + ' node)'",
                "data",
            ),
            (
                f"!has({par}.data) || !has({par}.nodesPerGroup) || {par}.tensor * {par}.data == "
                f"{par}.nodesPerGroup * {gpn}",
                f"'{role}: tensor × data must equal nodesPerGroup × ' + {gpn_text} + {node}'",
                "data",
            ),
            # Nodes per group as role_topology resolves them: given, or ceil(tensor × data / GPUs per node).
            (f"!has({par}.nodesPerGroup) || {par}.nodesPerGroup <= {domain_nodes}", domain, "nodesPerGroup"),
            (
                f"has({par}.nodesPerGroup) || !has({par}.data) || "
                f"({par}.tensor * {par}.data + {gpn} - 1) / {gpn} <= {domain_nodes}",
                domain,
                "data",
            ),
        ]
        for rule, message, field in checks:
            rules.append(
                {
                    "rule": guard + rule,
                    "messageExpression": message,
                    "fieldPath": f".roles.{role}.parallelism.{field}",
                    "reason": "FieldValueInvalid",
                }
            )
    return {"x-kubernetes-validations": rules}
