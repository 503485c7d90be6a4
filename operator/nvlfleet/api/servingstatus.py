"""The observed state of a DeepSeekServing: its conditions, placement, readiness and measured economics.

Pure API at the end of the data flow (… → apply → prune → **status**): ``nvlfleet.core.reconciler`` fills a
``DeepSeekServingStatus`` and writes the fields it owns as a merge patch (``merge_patch``); the telemetry fields
(tokensPerSecond, …) are written separately by the adapters, so neither write erases the other. The CRD's status
schema, printer columns and scale subresource are generated from these types (``nvlfleet.api.crd``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

import pydantic
from pydantic import alias_generators

from nvlfleet.api import schema


class Condition(schema.Model):
    """A standard Kubernetes condition."""

    model_config = pydantic.ConfigDict(extra="ignore", alias_generator=alias_generators.to_camel, populate_by_name=True)

    type: Annotated[str, pydantic.Field(description="Ready, Placed, Progressing, Degraded, InsufficientCapacity, ...")]
    status: Annotated[Literal["True", "False", "Unknown"], pydantic.Field(description="True, False or Unknown.")]
    reason: Annotated[str, pydantic.Field(description="One CamelCase word.")] = ""
    message: Annotated[str, pydantic.Field(description="What happened, in a sentence.")] = ""
    last_transition_time: Annotated[
        str | None, pydantic.Field(description="When the status last changed (RFC 3339).")
    ] = None
    observed_generation: Annotated[
        int | None, pydantic.Field(description="The generation this condition describes.")
    ] = None


class DeepSeekServingStatus(schema.Model):
    """Observed state, written by the operator."""

    model_config = pydantic.ConfigDict(extra="ignore", alias_generator=alias_generators.to_camel, populate_by_name=True)

    observed_generation: Annotated[int | None, pydantic.Field(description="The spec generation last reconciled.")] = (
        None
    )
    conditions: Annotated[list[Condition], pydantic.Field(description="Ready, Placed, Progressing, ...")] = (
        pydantic.Field(default_factory=list)
    )
    placement: Annotated[
        dict[str, dict[str, int]] | None,
        pydantic.Field(description="Groups per NVLink domain, per role: {role: {domain: groups}}."),
    ] = None
    ready: Annotated[str | None, pydantic.Field(description="Ready groups / desired groups, e.g. 3/4.")] = None
    ready_groups: Annotated[int | None, pydantic.Field(description="Groups whose pods are all Ready.")] = None
    replicas: Annotated[
        int | None,
        pydantic.Field(description="Decode groups whose pods are all Ready (the replicas of the scale subresource)."),
    ] = None
    selector: Annotated[
        str | None,
        pydantic.Field(
            description="Label selector of the decode groups' leader pods (the selector of the scale subresource, "
            "which a HorizontalPodAutoscaler needs)."
        ),
    ] = None
    endpoint: Annotated[
        str | None,
        pydantic.Field(
            description="The serving's OpenAI endpoint, the router Service's in-cluster URL "
            "(http://<serving>-router.<namespace>.svc:8000); unset when spec.router.enabled is false."
        ),
    ] = None
    desired_groups: Annotated[int | None, pydantic.Field(description="Groups asked for, all roles.")] = None
    gpus: Annotated[int | None, pydantic.Field(description="GPUs allocated to placed groups.")] = None
    tokens_per_second: Annotated[
        float | None, pydantic.Field(description="Measured total tokens/s (prompt + generation).")
    ] = None
    tokens_per_second_per_gpu: Annotated[float | None, pydantic.Field(description="Tokens/s per GPU.")] = None
    revenue_per_hour: Annotated[float | None, pydantic.Field(description="Revenue per hour at current prices.")] = None
    revenue_per_gpu_hour: Annotated[float | None, pydantic.Field(description="Revenue per GPU-hour.")] = None
    parity: Annotated[
        float | None, pydantic.Field(description="Tokens/s per GPU on spec.parity.basis ÷ the reference.")
    ] = None
    currency: Annotated[str | None, pydantic.Field(description="Currency of the revenue fields.")] = None
    metrics_time: Annotated[
        str | None, pydantic.Field(description="When the throughput and revenue fields were measured.")
    ] = None

    def merge_patch(self, fields: Iterable[str]) -> dict[str, Any]:
        """``fields`` (Python names) as a merge patch of the status subresource: camelCase, and a field that is None
        written as null, which removes it, rather than left out, which would keep what the status said before."""
        return self.model_dump(by_alias=True, mode="json", include=set(fields))


# The fields the reconciler writes on every pass; the telemetry fields (tokensPerSecond, ...) are written apart.
RECONCILED: tuple[str, ...] = (
    "observed_generation",
    "conditions",
    "placement",
    "ready",
    "ready_groups",
    "desired_groups",
    "gpus",
    "replicas",
    "selector",
    "endpoint",
)

# Fields, by wire name, that the CRD of an earlier nvlfleet release does not have. Its API server prunes them from
# every write (``helm upgrade`` does not upgrade CRDs), so their absence from a stored status proves nothing.
NEWER_THAN_SOME_CRDS: tuple[str, ...] = ("replicas", "selector", "endpoint")
