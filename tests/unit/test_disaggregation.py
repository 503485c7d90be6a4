"""Prefill/decode disaggregation: what a P/D serving renders (the KV connector on every engine, the NIXL side
channel on every pod), and every P/D serving the facts rule out, refused at its field offline and by the
webhook handler."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest

from nvlfleet.adapters import webhook
from nvlfleet.core import render, validation
from nvlfleet.facts import disaggregation, facts
from support import badinput
from support import servingbuilder as sb

KV = disaggregation.load(facts.DEFAULT_VERSION)
PD = {"prefill": sb.role(groups=2, tensor=1, nodes=2)}


def engine_containers(manifests: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    """The vLLM container of the leader and of the worker template of every LeaderWorkerSet of ``role``."""
    out = []
    for lws in (m for m in manifests if m["kind"] == "LeaderWorkerSet"):
        if lws["metadata"]["labels"]["nvlfleet.io/role"] == role:
            template = lws["spec"]["leaderWorkerTemplate"]
            for pod in (template.get("leaderTemplate"), template["workerTemplate"]):
                if pod is not None:
                    out.append(pod["spec"]["containers"][0])
    return out


def kv_config(container: dict[str, Any]) -> dict[str, Any]:
    argv = container["command"]
    loaded: dict[str, Any] = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    return loaded


# --- render ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("role", "kv_role"), [("prefill", "kv_producer"), ("decode", "kv_consumer")])
def test_every_engine_of_a_role_runs_the_connector_with_its_kv_role(role: str, kv_role: str) -> None:
    containers = engine_containers(render.render(sb.serving(**PD)), role)

    assert len(containers) == 2  # leader and headless workers
    assert all(
        kv_config(c) == {"kv_connector": KV.default_connector, "kv_role": kv_role, "kv_load_failure_policy": "fail"}
        for c in containers
    )


def test_typed_settings_reach_the_kv_transfer_config() -> None:
    serving = sb.serving(**PD, disaggregation={"kvLoadFailurePolicy": "recompute", "decode": {"kvRole": "kv_both"}})
    (decode, *_) = engine_containers(render.render(serving), "decode")
    assert kv_config(decode)["kv_role"] == "kv_both" and kv_config(decode)["kv_load_failure_policy"] == "recompute"


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_every_p_d_pod_advertises_its_own_ip_and_the_side_channel_port(role: str) -> None:
    serving = sb.serving(**PD, disaggregation={"sideChannelPort": 6100})
    for container in engine_containers(render.render(serving), role):
        env = {e["name"]: e for e in container["env"]}
        assert env[KV.side_channel_host_env]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env[KV.side_channel_port_env]["value"] == "6100"


def test_p_d_pods_gain_no_capability_and_no_ucx_env() -> None:
    for container in engine_containers(render.render(sb.serving(**PD)), "decode"):
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert not [e for e in container["env"] if e["name"].startswith("UCX_")]


def test_a_serving_without_prefill_renders_no_kv_path() -> None:
    for container in engine_containers(render.render(sb.serving()), "decode"):
        assert "--kv-transfer-config" not in container["command"]
        assert not [e for e in container["env"] if e["name"].startswith("VLLM_NIXL_")]


def test_a_p_d_serving_as_written_is_valid() -> None:
    assert validation.validate(sb.serving_dict(**PD)) == []


def test_kv_both_is_accepted_with_the_deprecation_warning() -> None:
    review = validation.review(sb.serving_dict(**PD, disaggregation={"prefill": {"kvRole": "kv_both"}}))
    assert review.ok
    assert [w.path for w in review.warnings] == ["spec.disaggregation.prefill.kvRole"]


# --- refusals ----------------------------------------------------------------------------------------------------

CASES = [pytest.param(changes, field, words, id=case) for case, changes, field, words in badinput.PD_REFUSALS]


def bad(changes: dict[str, Any]) -> dict[str, Any]:
    return sb.serving_dict(**changes)


@pytest.mark.parametrize(("changes", "field", "words"), CASES)
def test_a_p_d_serving_the_facts_rule_out_is_refused_at_its_field(
    changes: dict[str, Any], field: str, words: str
) -> None:
    messages = [p.message for p in validation.validate(bad(changes)) if p.path == field]
    assert any(words in m for m in messages), messages


@pytest.mark.parametrize(("changes", "field", "words"), CASES)
def test_the_webhook_refuses_it_naming_the_field(changes: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(kopf.AdmissionError) as refused:
        webhook.admit_serving(kopf.Body(bad(changes)), operation="CREATE")
    assert field in str(refused.value) and words in str(refused.value)


def test_choosing_the_hashed_kernels_in_the_spec_makes_both_roles_agree() -> None:
    # GB300 latency: the profile picks FlashInfer sparse MLA and FP8 KV for the one-tray TP4 decode only.
    (_, changes, _, _) = next(c for c in badinput.PD_REFUSALS if c[0] == "prefill and decode attention backends differ")
    agreed = {**changes, "kernels": {"attentionBackend": "FLASHINFER_MLA_SPARSE_DSV41", "kvCacheDtype": "fp8"}}
    assert validation.validate(bad(agreed)) == []
