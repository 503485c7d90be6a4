"""tests/support/auditlog.py: the audit log read as the permissions one identity used and the requests refused."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from support import auditlog

ME = "system:serviceaccount:ops:nvlfleet"


def event(
    verb: str, code: int, *, user: str = ME, stage: str = "ResponseComplete", audit_id: str = "", **ref: str
) -> str:
    body: dict[str, Any] = {
        "auditID": audit_id or f"{verb}-{code}-{sorted(ref.items())}",
        "stage": stage,
        "verb": verb,
        "user": {"username": user},
        "requestURI": "/x",
        "responseStatus": {"code": code},
    }
    if ref:
        body["objectRef"] = ref
    return json.dumps(body) + "\n"


def test_a_request_is_its_verb_on_group_resource_and_subresource(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        "".join(
            [
                event("list", 200, resource="pods", namespace="a"),
                event("patch", 200, apiGroup="nvlfleet.io", resource="deepseekservings", subresource="status"),
            ]
        )
    )
    assert auditlog.used(auditlog.requests(log, ME)) == {
        ("list", "/pods"),
        ("patch", "nvlfleet.io/deepseekservings/status"),
    }


def test_an_apply_that_created_its_object_used_create_too(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(event("patch", 201, apiGroup="apps", resource="deployments", namespace="a", name="r"))
    assert auditlog.used(auditlog.requests(log, ME)) == {("patch", "apps/deployments"), ("create", "apps/deployments")}


def test_only_the_users_requests_count_once_each_and_refusals_are_found(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        "".join(
            [
                event("watch", 200, stage="ResponseStarted", audit_id="w", resource="nodes"),
                event("watch", 200, stage="ResponseComplete", audit_id="w", resource="nodes"),
                event("get", 403, resource="secrets", namespace="a", name="s"),
                event("delete", 200, user="system:serviceaccount:ops:other", resource="pods"),
            ]
        )
    )
    made = auditlog.requests(log, ME)
    assert len(made) == 2
    assert [(r.verb, r.resource, r.name) for r in auditlog.refused(made)] == [("get", "/secrets", "s")]


def test_since_a_mark_only_later_requests_count(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(event("get", 200, resource="nodes", name="before"))
    since = auditlog.mark(log)
    with log.open("a") as more:
        more.write(event("get", 200, resource="nodes", name="after"))
    assert [r.name for r in auditlog.requests(log, ME, since)] == ["after"]


def test_a_log_rotated_since_the_mark_is_read_on_from_the_old_file_then_the_new(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(event("get", 200, resource="nodes", name="before"))
    since = auditlog.mark(log)
    with log.open("a") as more:
        more.write(event("get", 200, resource="nodes", name="last-in-old"))
    log.rename(tmp_path / "audit-2026-12-02T00-53-06.123.log")  # as the API server rotates it
    log.write_text(event("get", 200, resource="nodes", name="first-in-new"))
    assert [r.name for r in auditlog.requests(log, ME, since)] == ["last-in-old", "first-in-new"]


def test_a_line_still_being_written_is_left_for_the_next_read(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(event("get", 200, resource="nodes", name="whole") + event("get", 200, resource="nodes")[:40])
    assert [r.name for r in auditlog.requests(log, ME)] == ["whole"]
