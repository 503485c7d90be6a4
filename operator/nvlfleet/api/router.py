"""``spec.router``: the serving's front door, the vLLM project's router (vllm-router), as a typed part of the API.

Pure API, beside ``models`` (which embeds ``RouterSpec`` as ``DeepSeekServingSpec.router``) at the start of the
data flow (spec → validate → plan → render → apply → status). ``nvlfleet.core.router`` renders it (a Deployment
running the ``vllm-router`` binary, its ServiceAccount, Role and RoleBinding, and the Service that is the
serving's OpenAI endpoint); ``nvlfleet.core.validation`` checks the policy against the pinned router's facts
(``nvlfleet.facts.vllm_router``): the CRD cannot list the choices without copying those facts, so the schema only
bounds the spelling.

On by default: every serving gets one URL a client can send requests to (``status.endpoint``). ``enabled: false``
keeps only the per-role Services, for users who bring their own gateway.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic

from nvlfleet.api import schema
from nvlfleet.facts import vllm_router

# The router image nvlfleet renders unless spec.router.image says otherwise: vllm-router from PyPI (pinned to the
# facts' version) on a slim Python base, built from router.Dockerfile at the repository's root.
DEFAULT_IMAGE = f"ghcr.io/nvlfleet/vllm-router:{vllm_router.VERSION}"
DEFAULT_REPLICAS = 1


class ResourceList(schema.Model):
    """CPU and memory as Kubernetes quantities (2, 500m, 1Gi)."""

    cpu: Annotated[str | None, pydantic.Field(description="CPU, e.g. 1 or 500m.", pattern=schema.WHOLE_QUANTITY)] = None
    memory: Annotated[
        str | None, pydantic.Field(description="Memory, e.g. 1Gi or 512Mi.", pattern=schema.WHOLE_QUANTITY)
    ] = None


class RouterResources(schema.Model):
    """The router container's requests and limits (it needs no GPU)."""

    requests: Annotated[ResourceList, pydantic.Field(description="What the scheduler reserves.")] = pydantic.Field(
        default_factory=lambda: ResourceList(cpu="1", memory="1Gi")
    )
    limits: Annotated[ResourceList | None, pydantic.Field(description="Caps; none by default.")] = None


class RouterSpec(schema.Model):
    """The serving's OpenAI endpoint: vllm-router in front of the decode group leaders."""

    enabled: Annotated[
        bool,
        pydantic.Field(
            description="Run the router and its Service (status.endpoint). false: only the per-role Services, for "
            "your own gateway."
        ),
    ] = True
    image: Annotated[
        str,
        pydantic.Field(
            description=f"Router image; it must run vllm-router {vllm_router.VERSION} (the flags nvlfleet renders "
            f"are that release's). Default {DEFAULT_IMAGE}.",
            min_length=1,
            max_length=512,
            pattern=schema.IMAGE,
        ),
    ] = DEFAULT_IMAGE
    image_pull_policy: Annotated[
        Literal["Always", "IfNotPresent", "Never"], pydantic.Field(description="Image pull policy.")
    ] = "IfNotPresent"
    policy: Annotated[
        str | None,
        pydantic.Field(
            description=f"Routing policy (vllm-router --policy), checked against vllm-router {vllm_router.VERSION}'s "
            f"choices; unset: {vllm_router.load().default_policy} (nvlfleet render --explain says why).",
            pattern=r"^[a-z0-9_]+$",
            max_length=63,
        ),
    ] = None
    replicas: Annotated[int, pydantic.Field(description="Router pods.", ge=1, le=64)] = DEFAULT_REPLICAS
    resources: Annotated[RouterResources, pydantic.Field(description="Router container resources.")] = pydantic.Field(
        default_factory=RouterResources
    )
