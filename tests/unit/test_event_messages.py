"""An Event's message as the API server accepts it: at most 1,024 bytes of UTF-8, however long what it says
(a SignalUnavailable condition quoting KEDA's, the HPA's and the scaler's messages ran past 1,400 characters, and
the API server refused its Event with 422)."""

from __future__ import annotations

from nvlfleet.adapters import kube


def test_a_short_message_is_sent_as_it_is() -> None:
    assert kube.event_message("KEDA cannot read the signal — retrying") == "KEDA cannot read the signal — retrying"


def test_a_long_message_is_cut_to_the_byte_limit_with_an_ellipsis() -> None:
    cut = kube.event_message("—" * 1000)  # three bytes each: 1,000 characters, 3,000 bytes
    assert len(cut.encode()) <= kube.EVENT_MESSAGE_MAX_BYTES
    assert cut.endswith("…") and set(cut) == {"—", "…"}


def test_a_cut_never_splits_a_character() -> None:
    for pad in range(4):
        cut = kube.event_message("x" * pad + "é" * 1024)
        assert len(cut.encode()) <= kube.EVENT_MESSAGE_MAX_BYTES
        assert cut.encode().decode() == cut and "\ufffd" not in cut
