"""The Hugging Face token, and credentials in general, offline: referenced from a Secret, never repeated.

- Rendered pods get ``HF_TOKEN`` only as ``valueFrom.secretKeyRef`` — in every pod template of every role, leader
  and workers — and nothing else names the Secret; no command line carries a token flag.
- A credential pasted into the spec where it would reach an argument or an env literal is refused.
- No problem message repeats a credential, wherever in the spec it was pasted: messages reach Events, the
  operator's log and ``kubectl apply`` output (webhook), which the object itself does not.
- The reconciler's decision for such a serving (admitted while the webhook was down) carries no credential in its
  status or its events.

tests/integration/test_security.py proves the same on the real cluster with a Secret holding a unique marker.
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvlfleet.api import models, problems
from nvlfleet.core import reconciler, render, validation
from support import badinput
from support import fleetbuilder as fb
from support import servingbuilder as sb

# Shaped like real credentials (these are not real ones): a Hugging Face token, an OpenAI-style key, a GitHub
# token, an AWS access key id, a JWT.
CREDENTIALS = [
    "hf_" + "Zq9Xw2Lk7Pm4Rt6Vb8Nc" + "Ab3De5Fg7Hj9Kl2Mn4",
    "sk-" + "proj-4fQ7xT9kLm2Rw8Zb6Vn3Yc5Pd",
    "ghp_" + "8yT3kLq9Zx2Wm5Rv7Bn4Pc6Dh1Fs0Gj3Kt8",
    "AKIA" + "Q3ZX7RT4LM2WK9PB",
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJkZWVwc2VlayJ9" + ".c2lnbmF0dXJl",
]
SECRET_REF = {"name": "hf-credentials", "key": "token"}


def disaggregated() -> models.DeepSeekServing:
    """Prefill and decode, multi-tray groups: leader and worker templates in both roles."""
    return sb.serving(
        name="secretive",
        tensor=1,
        nodes=2,
        prefill=sb.role(groups=1, tensor=1, nodes=2),
        model={"name": sb.MODELS["deepseek-v4.1"], "hfTokenSecretRef": SECRET_REF},
    )


def pod_templates(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in manifests:
        if obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            out += [t for t in (template.get("leaderTemplate"), template["workerTemplate"]) if t]
    return out


def test_the_hf_token_is_only_ever_a_reference_to_its_secret_in_every_pod_template() -> None:
    manifests = render.render(disaggregated(), {"prefill": {sb.CLIQUE_A: 1}, "decode": {sb.CLIQUE_B: 1}})
    templates = pod_templates(manifests)

    assert len(templates) == 4  # prefill and decode, leader and workers
    for template in templates:
        (container,) = template["spec"]["containers"]
        tokens = [e for e in container["env"] if e["name"] in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
        assert tokens == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": SECRET_REF}}]
        assert not any(arg.startswith("--hf-token") for arg in container["command"])
    # The Secret's name appears in the secretKeyRefs and nowhere else (no volume, no annotation, no argument).
    text = json.dumps(manifests)
    assert text.count('"hf-credentials"') == len(templates)


@pytest.mark.parametrize("credential", CREDENTIALS, ids=["hf", "openai", "github", "aws", "jwt"])
@pytest.mark.parametrize(
    "place",
    [
        {"extraArgs": ["{c}"]},
        {"extraArgs": ["--root-path", "{c}"]},
        {"extraArgs": ["--chat-template={c}"]},
        {"extraArgs": ["--model-loader-extra-config", '{{"token": "{c}"}}']},
        {"extraEnv": [{"name": "HF_TOKEN", "value": "{c}"}]},
        {"extraEnv": [{"name": "NCCL_DEBUG_FILE", "value": "{c}"}]},
    ],
    ids=["positional", "flag value", "flag=value", "inside JSON", "HF_TOKEN literal", "another env var"],
)
def test_a_pasted_credential_that_would_reach_an_argument_or_env_literal_is_refused(
    credential: str, place: dict[str, Any]
) -> None:
    obj = badinput.base_serving()
    obj["spec"].update(json.loads(json.dumps(place).replace("{c}", credential.replace('"', '\\"'))))

    found = validation.validate(obj)

    assert found
    assert credential not in problems.summary(found)


def _string_fields() -> list[tuple[str, ...]]:
    return [path for path, sub in badinput._leaves(badinput.spec_schema()) if sub.get("type") == "string"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_string_fields()),
    st.sampled_from(CREDENTIALS),
    st.sampled_from(["{c}", "{c} trailing", "--{c}", "'{c}'", "token={c}", "Bearer {c}", '{{"t":"{c}"}}']),
)
def test_no_problem_message_repeats_a_credential_wherever_it_was_pasted(
    field: tuple[str, ...], credential: str, shape: str
) -> None:
    obj = badinput.Violation(field, "credential", shape.format(c=credential)).apply(badinput.base_serving())

    found = validation.validate(obj)

    assert credential not in problems.summary(found)


def test_a_problem_never_carries_a_credential_whoever_makes_it() -> None:
    made = [problems.Problem("spec.x", f"{credential!r} is not a backend name") for credential in CREDENTIALS]

    assert [p.message for p in made] == ["'<redacted>' is not a backend name"] * len(CREDENTIALS)


@pytest.mark.parametrize("credential", CREDENTIALS[:2], ids=["hf", "openai"])
def test_the_reconciler_reports_a_pasted_credential_without_repeating_it(credential: str) -> None:
    # Admitted by the CRD (it cannot know a credential), e.g. while the webhook was down.
    obj = sb.serving_dict(name="leaky", extraArgs=[credential], extraEnv=[{"name": "HF_TOKEN", "value": credential}])
    obj["metadata"].update(uid="0b8e4c1a-5f5e-4c1e-9d7a-000000000002", generation=1)
    snap = reconciler.Snapshot(
        serving=copy.deepcopy(obj),
        now=datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC),
        children=[],
        nodes=fb.rack(0),
        pods=[],
        fleet=[],
        served=frozenset({"LeaderWorkerSet", "ComputeDomain", "PodMonitor"}),
    )

    decision = reconciler.reconcile(snap)

    assert not decision.apply and not decision.delete
    ready = next(c for c in decision.status["conditions"] if c["type"] == "Ready")  # type: ignore[index]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.extraArgs[0]" in ready["message"] and "spec.extraEnv[0].value" in ready["message"]
    said = json.dumps([decision.status, [(e.type, e.reason, e.message) for e in decision.events]])
    assert credential not in said
