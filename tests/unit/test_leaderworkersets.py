"""Which LeaderWorkerSets hold capacity: only those a live DeepSeekServing owns, whatever labels others carry."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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


def versioned(name: str, uid: str, version: str, replicas: int = 9) -> dict[str, Any]:
    obj = lws(name, f"owner-{name}")
    obj["metadata"].update(uid=uid, resourceVersion=version)
    obj["spec"]["replicas"] = replicas
    return obj


def held_through(holds: leaderworkersets.Holds, *fleet: dict[str, Any]) -> dict[str, int]:
    found = leaderworkersets.held(fleet, names.DEFAULT_DOMAIN_LABEL, holds=holds)
    return {p.serving.name: sum(p.groups.values()) for p in found}


def test_read_through_the_memo_a_fleet_holds_what_it_holds_read_directly() -> None:
    fleet = (versioned("a", "u1", "10"), versioned("b", "u2", "11", replicas=3), lws("fake", None))
    holds = leaderworkersets.Holds()

    assert held_through(holds, *fleet) == held_groups(*fleet) == {"a": 9, "b": 3}
    assert held_through(holds, *fleet) == {"a": 9, "b": 3}  # the second read is answered from the memo


def test_a_new_version_of_a_set_is_read_again_and_the_memo_keeps_only_the_latest_fleet() -> None:
    holds = leaderworkersets.Holds()
    held_through(holds, versioned("a", "u1", "10"), versioned("b", "u2", "11"))

    assert held_through(holds, versioned("a", "u1", "12", replicas=4)) == {"a": 4}
    assert held_through(holds, versioned("a", "u1", "12", replicas=4)) == {"a": 4}
    assert len(holds) == 1  # b left the fleet; a's old version is gone


def test_a_set_without_a_resource_version_is_read_each_time() -> None:
    holds = leaderworkersets.Holds()
    first, second = lws("a", "uid-1"), lws("a", "uid-1")
    second["spec"]["replicas"] = 2

    assert held_through(holds, first) == {"a": 9}
    assert held_through(holds, second) == {"a": 2}


def test_a_role_whose_sets_hold_the_same_keeps_its_placement_and_one_that_changed_gets_a_new_one() -> None:
    holds = leaderworkersets.Holds()
    label = names.DEFAULT_DOMAIN_LABEL
    first = leaderworkersets.held([versioned("a", "u1", "10"), versioned("b", "u2", "11")], label, holds=holds)
    then = leaderworkersets.held(
        [versioned("a", "u1", "10"), versioned("b", "u2", "12", replicas=4)], label, holds=holds
    )

    assert then[0] is first[0]
    assert then[1] is not first[1]
    assert then == leaderworkersets.held([versioned("a", "u1", "10"), versioned("b", "u2", "12", replicas=4)], label)


def test_only_the_sets_that_are_new_objects_are_read_again_and_the_rest_keep_their_placements() -> None:
    holds = leaderworkersets.Holds()
    label = names.DEFAULT_DOMAIN_LABEL
    a, b = versioned("a", "u1", "10"), versioned("b", "u2", "11")
    first = leaderworkersets.held([a, b], label, holds=holds)
    then = leaderworkersets.held([a, versioned("b", "u2", "12", replicas=4)], label, holds=holds)

    assert (holds.whole, holds.partial) == (1, 1)
    assert then[0] is first[0]
    assert then == leaderworkersets.held([a, versioned("b", "u2", "12", replicas=4)], label)


SETS = st.lists(
    st.tuples(
        st.sampled_from(["new", "rewrite", "drop", "same", "live"]),
        st.integers(0, 1000),
        st.integers(0, 3),
        st.sampled_from(["abc.1", "abc.2", "abc.3"]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(SETS)
def test_a_fleet_read_from_the_last_book_holds_what_it_holds_read_anew(steps: list[tuple[str, int, int, str]]) -> None:
    holds = leaderworkersets.Holds()
    label = names.DEFAULT_DOMAIN_LABEL
    fleet: list[dict[str, Any]] = []
    live = frozenset({"owner-s0", "owner-s1", "owner-s2"})
    for version, (what, i, j, where) in enumerate(steps):
        if what == "new" or not fleet:  # a serving's set in one more domain; several per role, of any size
            obj = versioned(f"s{j % 3}", f"u{version}", str(version), replicas=i % 4)
            obj["metadata"]["labels"][names.ROLE_LABEL] = ("decode", "prefill")[i % 2]
            obj["metadata"]["annotations"][names.DOMAIN_VALUE_ANNOTATION] = where
            obj["spec"]["leaderWorkerTemplate"]["size"] = 1 + j % 2
            fleet.append(obj)
        elif what == "rewrite":  # a new version of one set
            at = i % len(fleet)
            fleet[at] = copy.deepcopy(fleet[at])
            fleet[at]["metadata"]["resourceVersion"] = f"{version}"
            fleet[at]["spec"]["replicas"] = j
        elif what == "drop":
            fleet.pop(i % len(fleet))
        elif what == "same":  # the watch cache's order moved
            fleet.append(fleet.pop(i % len(fleet)))
        elif what == "live":
            live = live ^ {f"owner-s{j % 3}"}
        assert leaderworkersets.held(fleet, label, live, holds) == leaderworkersets.held(fleet, label, live)


def test_a_role_whose_sets_differ_in_size_takes_the_first_set_s_as_the_fleet_lists_them_now() -> None:
    holds = leaderworkersets.Holds()
    label = names.DEFAULT_DOMAIN_LABEL
    small, large = versioned("a", "u1", "10"), versioned("a", "u2", "11")
    large["spec"]["leaderWorkerTemplate"]["size"] = 4
    leaderworkersets.held([small, large], label, holds=holds)

    assert [p.nodes_per_group for p in leaderworkersets.held([large, small], label, holds=holds)] == [4]
    assert holds.partial == 1


def test_a_serving_that_comes_or_goes_counts_its_sets_or_no_longer_without_reading_the_fleet_again() -> None:
    holds = leaderworkersets.Holds()
    label = names.DEFAULT_DOMAIN_LABEL
    fleet = [versioned("a", "u1", "10"), versioned("b", "u2", "11", replicas=3)]
    both, only_a = frozenset({"owner-a", "owner-b"}), frozenset({"owner-a"})

    assert [p.serving.name for p in leaderworkersets.held(fleet, label, only_a, holds)] == ["a"]
    assert [p.serving.name for p in leaderworkersets.held(fleet, label, both, holds)] == ["a", "b"]
    assert [p.serving.name for p in leaderworkersets.held(fleet, label, only_a, holds)] == ["a"]
    assert (holds.whole, holds.partial) == (1, 2)
