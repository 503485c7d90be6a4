"""The table of tuning settings: it covers the tuning part of the spec, and agrees with the facts and ``Tuning``."""

from __future__ import annotations

import types
import typing
from typing import Any

import pydantic
import pytest

from nvlfleet.api import models
from nvlfleet.core import profiles, settings
from nvlfleet.facts import facts
from support import servingbuilder as sb

ROLE = settings.ROLE
# A role's size and layout are topology, not tuning: validation and the planner read them directly.
TOPOLOGY = {
    (ROLE, "groups"),
    (ROLE, "parallelism", "tensor"),
    (ROLE, "parallelism", "data"),
    (ROLE, "parallelism", "nodes_per_group"),
}


def leaves(model: type[pydantic.BaseModel], prefix: tuple[str, ...]) -> set[settings.Field]:
    """Every leaf field below ``model``, as attribute paths starting with ``prefix``."""
    out: set[settings.Field] = set()
    for name, info in model.model_fields.items():
        inner = submodel(info.annotation)
        out |= leaves(inner, (*prefix, name)) if inner else {(*prefix, name)}
    return out


def submodel(annotation: Any) -> type[pydantic.BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next(filter(None, map(submodel, typing.get_args(annotation))), None)
    return None


def test_the_table_covers_every_tuning_field_of_the_spec() -> None:
    tuning_part = (
        leaves(models.KernelSpec, ("kernels",))
        | leaves(models.SpeculativeSpec, ("speculative",))
        | {("max_model_len",)}
        | (leaves(models.RoleSpec, (ROLE,)) - TOPOLOGY)
    )
    covered = {s.field for s in settings.TABLE if s.field is not None} | set(settings.WINDOW_FIELDS)

    assert covered == tuning_part, {"not in the table": tuning_part - covered, "not in the spec": covered - tuning_part}


def test_each_spec_field_and_rule_name_appears_once() -> None:
    fields = [s.field for s in settings.TABLE if s.field is not None]
    rules = [s.rule for s in settings.TABLE if s.rule is not None]

    assert len(set(fields)) == len(fields) and len(set(rules)) == len(rules)
    assert len(settings.BY_KEY) == len(settings.TABLE)


@pytest.mark.parametrize("setting", [s for s in settings.TABLE if s.rule is not None], ids=lambda s: s.key)
def test_the_vllm_rules_name_the_setting_at_its_spec_field(setting: settings.Setting) -> None:
    described = facts.load("0.33.0").settings[str(setting.rule)]

    assert setting.field is not None
    assert described.path == settings.wire_path(setting.field, "{role}")


def test_wire_paths_are_the_fields_as_the_user_writes_them() -> None:
    assert settings.wire_path(("kernels", "all2all_backend"), "decode") == "spec.kernels.all2allBackend"
    assert settings.wire_path((ROLE, "max_num_seqs"), "prefill") == "spec.roles.prefill.maxNumSeqs"
    assert (
        settings.wire_path(("kernels", "dual_batch_overlap", "decode_token_threshold"), "decode")
        == "spec.kernels.dualBatchOverlap.decodeTokenThreshold"
    )


def test_a_field_the_spec_leaves_out_is_not_stated_even_with_a_default() -> None:
    spec = sb.serving(speculative={"method": "dspark"}).spec
    role = spec.roles.decode

    assert settings.stated(spec, role, ("speculative", "method")) == "dspark"
    assert settings.stated(spec, role, ("speculative", "num_speculative_tokens")) is None
    assert settings.stated(spec, role, ("kernels", "eplb", "enabled")) is None  # no eplb block at all


@pytest.mark.parametrize("role", [models.RoleName.DECODE, models.RoleName.PREFILL])
def test_every_attribute_holds_the_effective_value(role: models.RoleName) -> None:
    t = profiles.effective(sb.serving(prefill=sb.role(tensor=1, nodes=1)).spec, role)

    for setting in settings.TABLE:
        if setting.attribute is None:
            with pytest.raises(KeyError):
                t.value(setting.key)
        else:
            t.value(setting.key)  # resolves on Tuning
    assert t.value("speculative.enabled") is (t.speculative is not None)
    assert t.value("speculative.method") == (t.speculative.method if t.speculative else None)
    assert t.value("probe.period_seconds") == t.probes.period_seconds
