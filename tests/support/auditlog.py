"""The local API server's audit log (cluster/localcluster: `Layout.audit_log`), read as what one identity did.

Used to prove a grant minimal (tests/integration/test_rbac_audit.py): every request of a user, each as the RBAC
permissions it needed, and which were refused. One request can need two permissions: a server-side apply that
creates its object is a PATCH (the audit log says `patch`), and the API server authorizes `create` too before it
creates (its answer is then 201 Created), so such a request uses both.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterable

# Stages at which an event carries the response code; a watch still open when the log is read has only the first.
_ANSWERED = ("ResponseStarted", "ResponseComplete")
CREATED = 201
FORBIDDEN = 403


@dataclasses.dataclass(frozen=True)
class Request:
    """One request, as the audit log has it."""

    verb: str  # get, list, watch, create, update, patch, delete (RBAC's verbs); a plain HTTP verb for URLs
    resource: str  # "<apiGroup>/<resource>[/<subresource>]" ("/pods" for the core group); "" for a URL
    namespace: str | None
    name: str | None
    code: int
    uri: str

    @property
    def permissions(self) -> set[tuple[str, str]]:
        """The (verb, resource) permissions RBAC checked for this request (see the module's docstring)."""
        if not self.resource:
            return set()
        used = {(self.verb, self.resource)}
        if self.verb == "patch" and self.code == CREATED:
            used.add(("create", self.resource))
        return used


def requests(path: pathlib.Path, username: str) -> list[Request]:
    """Every request `username` made that the log holds, once each (an event per stage, one request)."""
    seen: dict[str, Request] = {}
    for line in path.read_text(errors="replace").splitlines():
        if username not in line:  # cheap filter first: the log holds every identity's requests
            continue
        event = json.loads(line)
        if event.get("user", {}).get("username") != username or event.get("stage") not in _ANSWERED:
            continue
        ref = event.get("objectRef") or {}
        resource = ""
        if ref.get("resource"):
            resource = f"{ref.get('apiGroup', '')}/{ref['resource']}"
            resource += f"/{ref['subresource']}" if ref.get("subresource") else ""
        seen[event["auditID"]] = Request(
            verb=event["verb"],
            resource=resource,
            namespace=ref.get("namespace"),
            name=ref.get("name"),
            code=int((event.get("responseStatus") or {}).get("code") or 0),
            uri=event["requestURI"],
        )
    return list(seen.values())


def used(made: Iterable[Request]) -> set[tuple[str, str]]:
    return {permission for request in made for permission in request.permissions}


def refused(made: Iterable[Request]) -> list[Request]:
    return [r for r in made if r.code == FORBIDDEN]
