"""The packaged P/D facts (facts/data/vllm/<version>/disaggregation.yaml) against kv-connectors.json, the router's
facts and the words of shared/reference/vllm-0.33.0/disaggregation.md."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from nvlfleet.facts import disaggregation, facts, vllm_router

REPO = pathlib.Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference"
PACKAGED = REPO / "operator" / "nvlfleet" / "facts" / "data" / "vllm"

KV = disaggregation.load(facts.DEFAULT_VERSION)


def reading() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PACKAGED / KV.version / "disaggregation.yaml").read_text())
    return data


def document() -> str:
    path = REFERENCE / f"vllm-{KV.version}" / "disaggregation.md"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the drift check needs shared/ beside the clone")
    return " ".join(path.read_text().split())


def _quotes(node: object) -> list[str]:
    if isinstance(node, dict):
        return [q for key, value in node.items() for q in ([value] if str(key).endswith("ays") else _quotes(value))]
    if isinstance(node, list):
        return [q for item in node for q in _quotes(item)]
    return []


def test_every_version_with_kv_connectors_has_a_reading() -> None:
    for version in facts.versions():
        assert (PACKAGED / version / "disaggregation.yaml").is_file() == (
            PACKAGED / version / "kv-connectors.json"
        ).is_file()


@pytest.mark.parametrize("quote", _quotes(reading()))
def test_each_quote_of_the_reading_is_in_disaggregation_md(quote: str) -> None:
    assert " ".join(quote.split()) in document()


def test_named_connectors_are_registered_ones() -> None:
    named = {KV.default_connector, *KV.nixl_connectors, *KV.router_connectors}
    assert named <= set(KV.connectors)


def test_kv_roles_come_from_the_kv_transfer_config_field() -> None:
    assert set(KV.kv_roles) == set(KV.fields["kv_role"]["choices"])
    assert {r for allowed in KV.role_kv_roles.values() for r in allowed} <= set(KV.kv_roles)
    assert set(KV.deprecated_roles) <= set(KV.kv_roles)
    assert KV.default_kv_role("prefill") == "kv_producer" and KV.default_kv_role("decode") == "kv_consumer"


def test_side_channel_env_vars_are_vllms_own_with_their_defaults() -> None:
    version_facts = facts.load(KV.version)
    for name in (KV.side_channel_host_env, KV.side_channel_port_env):
        assert version_facts.knows_env(name)
    assert f"**`{KV.side_channel_port_env}`** (default `{KV.default_side_channel_port}`)" in document()


def test_router_connector_names_are_the_routers_choices() -> None:
    choices = vllm_router.load().flag("--kv-connector").choices or ()
    assert set(KV.router_connectors.values()) <= set(choices)


def test_settings_that_must_match_are_rule_settings() -> None:
    assert set(KV.must_match) <= set(facts.load(KV.version).settings)


def test_the_facts_name_no_capability_or_env_for_nixl() -> None:
    # disaggregation.md §3: vLLM reads no UCX_* variable but the one it sets itself; no capability is named.
    assert KV.nixl_capabilities == () and dict(KV.nixl_env) == {}
    assert "vLLM does not read other `UCX_*` variables." in document()
