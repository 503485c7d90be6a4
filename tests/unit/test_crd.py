"""The generated CRD: equal to crds/, a valid structural schema, and faithful to the models and the profiles."""

from __future__ import annotations

import copy
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nvlfleet.api import crd, models
from nvlfleet.core import profiles

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "nvlfleet.io_deepseekservings.yaml"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def definition() -> dict[str, Any]:
    return crd.definition()


@pytest.fixture(scope="module")
def schema(definition: dict[str, Any]) -> dict[str, Any]:
    return definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its dotted path."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def test_crds_folder_is_what_nvlfleet_crd_prints() -> None:
    assert CRD_FILE.read_text() == crd.render(), f"{CRD_FILE.relative_to(REPO)} is stale: run `make crd`"


def test_the_definition_is_a_valid_apiextensions_object(definition: dict[str, Any]) -> None:
    kubernetes_validate.validate(definition, kubernetes_validate.utils.latest_version(), strict=True)


def test_names_scope_and_subresources(definition: dict[str, Any]) -> None:
    spec = definition["spec"]
    assert definition["metadata"]["name"] == "deepseekservings.nvlfleet.io"
    assert (spec["group"], spec["scope"]) == ("nvlfleet.io", "Namespaced")
    assert spec["names"]["shortNames"] == ["dss"] and spec["names"]["categories"] == ["nvlfleet"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.roles.decode.groups",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_the_schema_is_structural(schema: dict[str, Any]) -> None:
    for path, node in nodes(schema):
        where = path or "<root>"
        assert not {"$ref", "$defs", "title", "const", "nullable", "oneOf", "allOf", "not"} & set(node), where
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, where
            continue
        assert "type" in node, f"{where} has no type"
        assert node.get("additionalProperties") is not False, where
        assert not ("properties" in node and "additionalProperties" in node), where
        if node["type"] == "object" and "properties" not in node and "additionalProperties" not in node:
            assert path == ".metadata" or node.get("x-kubernetes-preserve-unknown-fields") is True, where


def test_no_field_keeps_unknown_fields(schema: dict[str, Any]) -> None:
    """A field that keeps unknown fields lets a user store anything, nested as deep as the API server allows (a
    serving nested 3,000 levels deep once stopped the operator): every Kubernetes sub-object is a typed subset."""
    found = {path for path, node in nodes(schema) if node.get("x-kubernetes-preserve-unknown-fields")}
    assert found == set()


def test_every_spec_field_is_described_for_kubectl_explain(schema: dict[str, Any]) -> None:
    undescribed = [p for p, node in nodes(schema["properties"]["spec"], ".spec") if not node.get("description")]
    # Items of plain lists and maps are described by their list or map.
    assert [p for p in undescribed if not p.endswith(("[]", "{}"))] == []


def test_every_string_and_list_cel_reads_is_bounded(schema: dict[str, Any]) -> None:
    """The API server estimates CEL cost from maxLength/maxItems; unbounded inputs make it refuse the CRD."""
    for path, node in nodes(schema):
        for rule in node.get("x-kubernetes-validations", []):
            text = rule["rule"] + rule.get("messageExpression", "")
            for dotted in re.findall(r"self((?:\.\w+)+)", text):
                target = node
                for name in dotted.strip(".").split("."):
                    target = target.get("properties", {}).get(name, {})
                if target.get("type") == "string":
                    assert "maxLength" in target, f"{path}: {dotted} has no maxLength"
                if target.get("type") == "array":
                    assert "maxItems" in target, f"{path}: {dotted} has no maxItems"


def test_lists_have_a_list_type_and_map_keys_are_required(schema: dict[str, Any]) -> None:
    for path, node in nodes(schema):
        if node.get("type") != "array":
            continue
        assert node.get("x-kubernetes-list-type") in ("atomic", "set", "map"), path
        if node["x-kubernetes-list-type"] == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), path
    lists = {p: n["x-kubernetes-list-type"] for p, n in nodes(schema) if n.get("type") == "array"}
    assert lists[".status.conditions"] == "map" and lists[".spec.extraEnv"] == "map"
    assert lists[".spec.extraArgs"] == "atomic"


def test_cel_rules_and_their_messages_are_carried(schema: dict[str, Any]) -> None:
    spec_rules = schema["properties"]["spec"]["x-kubernetes-validations"]
    tensor = next(r for r in spec_rules if r["fieldPath"] == ".roles.decode.parallelism.tensor")
    assert set(tensor) == {"rule", "messageExpression", "fieldPath", "reason"}
    window = schema["properties"]["spec"]["properties"]["pricing"]["properties"]["schedule"]["items"]
    assert window["x-kubernetes-validations"] == [
        {"rule": "self.start != self.end", "message": "a price window must not be empty (start == end)"}
    ]


def test_cel_messages_avoid_string_of_int(schema: dict[str, Any]) -> None:
    """kube-apiserver estimates string(int) as unbounded and refuses the whole CRD (seen on 1.37)."""
    for _, node in nodes(schema):
        for rule in node.get("x-kubernetes-validations", []):
            assert "string(" not in rule.get("messageExpression", ""), rule


def test_printer_columns_read_fields_that_exist(definition: dict[str, Any], schema: dict[str, Any]) -> None:
    columns = definition["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "Ready",
        "GPUs",
        "Tokens/s",
        "$/GPU-h",
        "Endpoint",
        "Age",
    ]
    paths = {path for path, _ in nodes(schema)}
    for column in columns:
        json_path = column["jsonPath"].split("[?", 1)[0]
        assert json_path == ".metadata.creationTimestamp" or json_path in paths, column


def test_profile_decided_fields_have_no_server_default(schema: dict[str, Any]) -> None:
    by_path = dict(nodes(schema))
    for role in ("decode", "prefill"):
        assert "default" not in by_path[f".spec.roles.{role}.parallelism.expert"]
    for path in (".spec.maxModelLen", ".spec.speculative.enabled", ".spec.speculative.numSpeculativeTokens"):
        assert "default" not in by_path[path], path
        assert "the tuning profile decides" in by_path[path]["description"]
    assert by_path[".spec.roles.decode.parallelism"]["default"] == {"tensor": 1}


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """What the API server stores: structural defaults applied, recursively (including inside defaults)."""
    obj = copy.deepcopy(obj)
    if schema.get("type") == "object" and isinstance(obj, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in obj and "default" in child:
                obj[name] = copy.deepcopy(child["default"])
            if name in obj:
                obj[name] = apply_defaults(child, obj[name])
        if isinstance(schema.get("additionalProperties"), dict):
            obj = {k: apply_defaults(schema["additionalProperties"], v) for k, v in obj.items()}
    elif schema.get("type") == "array" and isinstance(obj, list):
        obj = [apply_defaults(schema["items"], item) for item in obj]
    return obj


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_server_defaults_do_not_change_what_the_profile_chooses(schema: dict[str, Any], example: pathlib.Path) -> None:
    written = yaml.safe_load(example.read_text())
    stored = apply_defaults(schema, written)
    as_written = models.DeepSeekServing.model_validate(written).spec
    as_stored = models.DeepSeekServing.model_validate(stored).spec
    assert as_stored == as_written
    for role, _ in as_written.roles_present():
        assert profiles.effective(as_stored, role) == profiles.effective(as_written, role)


def test_defaults_are_valid_objects_of_their_model(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]["properties"]
    assert models.WeightsSpec.model_validate(spec["model"]["properties"]["weights"]["default"]) == models.WeightsSpec()
    assert models.PodOverrides.model_validate(spec["pod"]["default"]) == models.PodOverrides()
    assert models.PlacementSpec.model_validate(spec["placement"]["default"]) == models.PlacementSpec()


def test_the_rendered_file_says_it_is_generated() -> None:
    assert crd.render().startswith("# Generated by `nvlfleet crd`")
    assert yaml.safe_load(crd.render()) == crd.definition()
