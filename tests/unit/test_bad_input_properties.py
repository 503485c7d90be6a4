"""Generated bad input, offline: validation refuses it at the field, and no user string ever reaches a shell.

The examples come from ``badinput`` (the CRD schema itself and the GB200 NVL72 facts), not from a list somebody
wrote; tests/integration/test_bad_input.py sends the same kinds of examples to the real API server and to a
running operator.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvlfleet.api import models
from nvlfleet.core import render, validation
from support import badinput, golden_cases
from support import servingbuilder as sb

FREE_TEXT_FLAGS = ["--root-path", "--chat-template", "--response-role", "--middleware", "--generation-config"]


def _field_blamed(problem_path: str, field: str) -> bool:
    """The problem names the broken field, a field inside it, or the object holding it."""
    return problem_path == field or problem_path.startswith(field + ".") or field.startswith(problem_path + ".")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(badinput.schema_violations())
def test_every_schema_violation_is_refused_offline_at_its_field(violation: badinput.Violation) -> None:
    found = validation.validate(violation.apply(badinput.base_serving()))

    assert any(_field_blamed(p.path, violation.field) for p in found), (violation, found)


@settings(max_examples=400, deadline=None)
@given(badinput.gb200_shapes())
def test_validation_refuses_exactly_the_shapes_gb200_cannot_run(shape: badinput.Shape) -> None:
    found = validation.validate(shape.apply(badinput.base_serving()))
    broken = badinput.breaks_gb200_rules(shape)

    if broken is None:
        assert found == []
    else:
        assert any(p.path.startswith("spec.roles.decode") for p in found), (broken, found)


# ---------------------------------------------------------------------------------------------------------------
# No shell


def _commands(manifests: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for obj in manifests:
        if obj["kind"] != "LeaderWorkerSet":
            continue
        template = obj["spec"]["leaderWorkerTemplate"]
        for pod in (template.get("leaderTemplate"), template["workerTemplate"]):
            for container in (pod or {}).get("spec", {}).get("containers", []):
                out.append([*container.get("command", []), *container.get("args", [])])
    return out


def rendered(obj: dict[str, Any]) -> list[dict[str, Any]]:
    serving = models.DeepSeekServing.model_validate(obj)
    return render.render(serving, {"decode": {sb.CLIQUE_A: 1}})


def three_trays(extra_args: list[str], extra_env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj = badinput.base_serving()
    obj["spec"]["roles"]["decode"]["parallelism"] = {"tensor": 1, "nodesPerGroup": 3}  # a leader and workers
    obj["spec"]["extraArgs"] = extra_args
    obj["spec"]["extraEnv"] = extra_env or []
    return obj


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(FREE_TEXT_FLAGS),
    st.text(alphabet=st.sampled_from(list(badinput.NASTY) + list("abcXYZ/019-=")), min_size=1, max_size=40).filter(
        lambda v: not v.startswith("-")  # argparse would read it as the next flag; refused as such
    ),
)
def test_a_value_full_of_shell_metacharacters_is_one_argv_item_that_no_shell_sees(flag: str, value: str) -> None:
    obj = three_trays([flag, value])
    assert validation.validate(copy.deepcopy(obj)) == []

    commands = _commands(rendered(obj))

    leader, _worker = commands
    assert flag in leader  # workers drop the API server's own flags
    for command in commands:
        badinput.assert_no_shell(command)
        if flag in command:
            assert command[command.index(flag) + 1] == value.replace("$(", "$$(")  # one item, only $( escaped


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(badinput.NASTY) + list("abc")), min_size=1, max_size=40))
def test_an_extra_env_value_stays_an_env_value_and_never_enters_a_command(value: str) -> None:
    obj = three_trays([], [{"name": "NCCL_DEBUG_SUBSYS", "value": value}])
    assert validation.validate(copy.deepcopy(obj)) == []

    manifests = rendered(obj)

    for command in _commands(manifests):
        badinput.assert_no_shell(command)
        assert value not in command
    for obj_ in manifests:
        if obj_["kind"] == "LeaderWorkerSet":
            template = obj_["spec"]["leaderWorkerTemplate"]["workerTemplate"]
            env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
            assert env["NCCL_DEBUG_SUBSYS"] == {"name": "NCCL_DEBUG_SUBSYS", "value": value}


@pytest.mark.parametrize(
    "arguments",
    [
        ["; rm -rf /"],
        ["bash", "-c", "id"],
        ["--root-path", "/a\nb"],
        ["--served-model-name", "x; rm -rf /"],
        ["--api-server-count", "$(reboot)"],
    ],
    ids=["positional", "a shell", "line break", "owned flag", "number flag"],
)
def test_arguments_that_are_not_flags_of_the_pinned_vllm_are_refused_at_their_index(arguments: list[str]) -> None:
    found = validation.validate(three_trays(arguments))

    assert found and all(p.path.startswith("spec.extraArgs[") for p in found), found


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_every_golden_serving_renders_without_a_shell(name: str) -> None:
    serving, placement = golden_cases.cases()[name]

    commands = _commands(render.render(serving, placement))

    assert commands
    for command in commands:
        badinput.assert_no_shell(command)


@pytest.mark.parametrize(
    ("pod", "path"),
    [
        ({"labels": {"team": "ünïcode"}}, 'spec.pod.labels["team"]'),
        ({"labels": {"team": "t" * 64}}, 'spec.pod.labels["team"]'),
        ({"labels": {"-team": "a"}}, 'spec.pod.labels["-team"]'),
        ({"nodeSelector": {"rack": "r" * 64}}, 'spec.pod.nodeSelector["rack"]'),
        ({"nodeSelector": {"rack": "a b"}}, 'spec.pod.nodeSelector["rack"]'),
        ({"annotations": {"my note": "x"}}, 'spec.pod.annotations["my note"]'),
        ({"annotations": {"Example.com/x": "y"}}, 'spec.pod.annotations["Example.com/x"]'),
    ],
)
def test_labels_and_annotations_kubernetes_would_refuse_on_the_pods_are_refused_on_the_serving(
    pod: dict[str, Any], path: str
) -> None:
    obj = badinput.base_serving()
    obj["spec"]["pod"] = pod

    assert [p.path for p in validation.validate(obj)] == [path]


def test_any_annotation_value_and_prefixed_label_keys_are_fine() -> None:
    obj = badinput.base_serving()
    obj["spec"]["pod"] = {
        "labels": {"example.com/team": "a-b_c.d", "tier": ""},
        "annotations": {"example.com/note": "anything, ünïcode included; $(x) `y`"},
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
    }

    assert validation.validate(obj) == []
