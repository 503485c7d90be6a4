"""Why a re-check runs a pass: the parts of a serving's inputs that moved since its last settled pass, in words."""

from nvlfleet.adapters import passinputs


def test_the_reason_names_each_part_that_moved_with_both_values() -> None:
    settled = passinputs.Inputs("41", 0, (), 0, (("LeaderWorkerSet", "40"), ("Service", "39")))
    now = settled._replace(serving="57", children=(("LeaderWorkerSet", "58"), ("Service", "39")))

    said = passinputs.changes(settled, now)

    assert said == (
        "the serving's version '41' → '57'; "
        "its children's versions (('LeaderWorkerSet', '40'), ('Service', '39')) → "
        "(('LeaderWorkerSet', '58'), ('Service', '39'))"
    )


def test_every_part_has_words() -> None:
    settled = passinputs.Inputs("1", 1, (), 0, ())
    now = passinputs.Inputs("2", 2, (("Service", "x", "3"),), 1, (("Service", "3"),))

    assert passinputs.changes(settled, now).count("→") == len(passinputs.Inputs._fields)
