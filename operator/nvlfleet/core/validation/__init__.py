"""Everything that can be said about a DeepSeekServing before a GPU is touched, in sentences a person understands.

Pure core, the second step of the data flow (spec → **validate** → plan → render → apply → status). The CRD's
OpenAPI schema and CEL rules (generated from ``models``) catch shape errors at admission; this module repeats
them for offline use (``nvlfleet validate``) and adds what needs facts: the GPU generation's shape
(``hardware``), the pinned vLLM version's flags, env vars and DeepSeek rules (``facts``), and the EFFECTIVE
settings of every role (``profiles.effective``: the spec's choices merged over the tuning profile), so a user
override that clashes with a profile default is caught, and what is validated is what is rendered.

API::

    validate(obj, allowed=policy.DEFAULT) -> list[Problem]   # a raw object (dict from YAML/JSON/the API): errors
    validate_serving(serving) -> list[Problem]       # a parsed DeepSeekServing: errors only
    review(obj) -> Review                            # errors and warnings, plus the parsed serving if it parsed
    review_serving(serving) -> Review
    parse(obj) -> (DeepSeekServing | None, list[Problem])   # pydantic errors as Problems, never a traceback

Errors refuse the serving, including what the facts say to avoid (e.g. an all-to-all backend that makes
DeepSeek V4.1 fall back to slow MoE kernels). Warnings accept it but say what will run badly or differently
than asked (e.g. an explicit MoE backend auto would not pick: it works, so refusing it would block an A/B test;
staying silent would hide the loss).

Decisions worth knowing:
- Flags with a typed spec field, and flags that shape the group (ports, data-parallel wiring, headless
  workers), are nvlfleet's own: in ``extraArgs`` they are refused with the field to use (``OWNED_FLAGS``).
  Profile-only flags (--performance-mode, --attention-config, --additional-config, parsers) are accepted as
  overrides; their values are validated as the effective ones, since the extra arguments come last on the
  command line and argparse keeps the last value.
- ``extraEnv`` names must be read by the pinned vLLM, or start with a library prefix listed in the facts
  (NCCL_, NVSHMEM_, UCX_, GLOO_, CUDA_, PYTORCH_, TORCH_, TORCHINDUCTOR_, TRITON_, FLASHINFER_, DG_, HF_, OMP_).
  A secret-looking literal is refused: secrets are referenced (valueFrom.secretKeyRef), never inlined.
- Arguments are an argv list, never a shell line, so shell metacharacters are harmless; NUL bytes and line
  breaks are refused (they cannot be intended and break the rendered command and the logs).

This package is that API; its modules are the checks, in the order ``review_serving`` runs them: ``parsing``
(pydantic errors as Problems), ``shape`` (the CEL rules repeated, topology), ``pod``, ``router`` (the front door's
policy and resources), ``autoscaling``, ``family``, ``escapes`` (extraArgs and extraEnv), ``disaggregation`` (the
KV connector of a prefill/decode serving) and ``rules`` (the effective settings against the pinned vLLM's rules);
``findings`` holds what they report into.
"""

from __future__ import annotations

from nvlfleet.api import models, policy, problems
from nvlfleet.core import economics, privileges, render
from nvlfleet.core.validation import autoscaling, disaggregation, escapes, family, findings, pod, router, rules, shape
from nvlfleet.core.validation.findings import Review
from nvlfleet.core.validation.parsing import PATTERN_MEANINGS, parse
from nvlfleet.facts import facts

__all__ = ["PATTERN_MEANINGS", "Review", "parse", "review", "review_serving", "validate", "validate_serving"]


def validate(obj: object, allowed: policy.Policy = policy.DEFAULT) -> list[problems.Problem]:
    """Errors of a raw object (a dict read from YAML or JSON, or sent by the API server), under the cluster admin's
    policy ``allowed`` (``api.policy``: what a serving may ask for beyond what vLLM needs)."""
    return list(review(obj, allowed).errors)


def validate_serving(
    serving: models.DeepSeekServing, allowed: policy.Policy = policy.DEFAULT
) -> list[problems.Problem]:
    """Errors of a parsed serving: topology, facts of the pinned vLLM, effective settings, escape hatches, policy."""
    return list(review_serving(serving, allowed).errors)


def review(obj: object, allowed: policy.Policy = policy.DEFAULT) -> Review:
    """Errors and warnings of a raw object."""
    serving, found = parse(obj)
    if serving is None:
        return Review(serving=None, errors=tuple(found))
    semantic = review_serving(serving, allowed)
    said = {p.path for p in found}  # metadata checked while parsing is not refused twice
    errors = (*found, *(p for p in semantic.errors if p.path not in said))
    return Review(serving=serving, errors=errors, warnings=semantic.warnings)


def review_serving(serving: models.DeepSeekServing, allowed: policy.Policy = policy.DEFAULT) -> Review:
    """Errors and warnings of a parsed serving."""
    out = findings.Findings()
    spec = serving.spec
    for problem in privileges.problems_of(spec, allowed):
        out.error(problem.path, problem.message)
    # What render cannot honour (names, reserved labels, volumes and mounts): its rule, checked here too, so that
    # whatever validate accepts renders. A field already refused above is not refused twice.
    refused = {p.path for p in out.errors}
    for problem in render.problems_for(serving, None):
        if problem.path not in refused:
            out.error(problem.path, problem.message)
    shape.check_shape_rules(spec, out)
    topology_ok = True
    for role, role_spec in spec.roles_present():
        topology_ok &= shape.check_topology(spec, role, role_spec, out)
        shape.check_role_limits(spec, role, role_spec, out)
    if spec.roles.prefill is not None and spec.roles.prefill.groups > 0 and spec.roles.decode.groups == 0:
        out.warn("spec.roles.decode.groups", "prefill groups without decode groups serve no request")
    if spec.pricing is not None:
        for problem in economics.schedule_problems(spec.pricing, "spec.pricing.schedule"):
            out.error(problem.path, problem.message)
    pod.check_pod(spec, out)
    router.check_router(spec, out)
    autoscaling.check_autoscaling(spec, out)
    try:
        version_facts = facts.load(spec.runtime.vllm_version)
    except facts.UnknownVersion as err:
        out.error("spec.runtime.vllmVersion", f"{err}; pin an image with a known vLLM version")
        return Review(serving=serving, errors=tuple(out.errors), warnings=tuple(out.warnings))
    family.check_family(spec, version_facts, out)
    args = escapes.check_extra_args(spec, version_facts, out)
    env = escapes.check_extra_env(spec, version_facts, out)
    disaggregation.check_disaggregation(spec, version_facts, args, out)
    if topology_ok:
        rules.check_effective(spec, version_facts, args, env, out)
        disaggregation.check_both_sides_agree(spec, version_facts, out)
    return Review(serving=serving, errors=tuple(out.errors), warnings=tuple(out.warnings))
