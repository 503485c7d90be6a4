"""Which LeaderWorkerSets hold capacity: only those a live DeepSeekServing owns, whatever labels others carry."""

from __future__ import annotations

from typing import Any

from nvlfleet.api import names, ownership
from nvlfleet.core import leaderworkersets

CLIQUE = "abc.1"


def lws(name: str, owner_uid: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.SERVING_LABEL: name, names.ROLE_LABEL: "decode"},
        "annotations": {names.DOMAIN_VALUE_ANNOTATION: CLIQUE},
    }
    if owner_uid is not None:
        meta["ownerReferences"] = [ownership.owner_reference(name, owner_uid)]
    return {"metadata": meta, "spec": {"replicas": 9, "leaderWorkerTemplate": {"size": 2}}}


def held_groups(*fleet: dict[str, Any], live: frozenset[str] | None = None) -> dict[str, int]:
    return {
        p.serving.name: sum(p.groups.values()) for p in leaderworkersets.held(fleet, names.DEFAULT_DOMAIN_LABEL, live)
    }


def test_a_serving_s_leader_worker_set_holds_its_groups() -> None:
    assert held_groups(lws("real", "uid-1"), live=frozenset({"uid-1"})) == {"real": 9}


def test_labels_and_a_domain_annotation_without_an_owner_hold_nothing() -> None:
    assert held_groups(lws("fake", None)) == {}


def test_an_owner_reference_to_a_serving_that_does_not_exist_holds_nothing() -> None:
    assert held_groups(lws("orphan", "uid-gone"), live=frozenset({"uid-1"})) == {}


def test_without_the_live_set_an_owner_reference_is_enough() -> None:
    assert held_groups(lws("real", "uid-1")) == {"real": 9}
