"""P/D units: which role anchors, how the fed groups are shared out, what a growing serving still owes."""

from __future__ import annotations

from nvlfleet.core import pairing


def test_the_role_with_fewer_groups_anchors_and_the_other_is_shared_out_as_evenly_as_whole_groups_allow() -> None:
    assert pairing.ratio(3, 2) == pairing.Ratio("decode", "prefill", 2, 3)
    assert pairing.ratio(1, 3) == pairing.Ratio("prefill", "decode", 1, 3)
    assert (pairing.ratio(3, 2).per, pairing.ratio(3, 2).extra) == (1, 1)  # type: ignore[union-attr]
    assert pairing.ratio(0, 2) is None and pairing.ratio(2, 0) is None


def test_fresh_units_are_the_larger_first() -> None:
    r = pairing.Ratio("decode", "prefill", 3, 5)
    assert pairing.new_units(r, 3, pairing.shares(r, {}, {})) == [(2, 2), (1, 1)]


def test_placed_anchors_are_owed_their_share_where_they_run_and_extras_go_where_fed_groups_already_are() -> None:
    r = pairing.Ratio("decode", "prefill", 2, 3)
    shares = pairing.shares(r, {"a": 1, "b": 1}, {"b": 2})
    assert (shares.deficit, shares.fed_for_new) == ({"a": 1}, 0)


def test_fed_groups_running_without_their_anchor_are_kept_and_leave_the_new_units_short() -> None:
    r = pairing.Ratio("decode", "prefill", 2, 4)
    shares = pairing.shares(r, {"a": 1}, {"a": 2, "z": 1})  # z: a prefill group with no decode group there
    assert (shares.deficit, shares.fed_for_new) == ({}, 1)
    assert pairing.new_units(r, 1, shares) == [(1, 1)]
