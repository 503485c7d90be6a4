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
from collections.abc import Iterable, Iterator

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


@dataclasses.dataclass(frozen=True)
class Mark:
    """A place in the log: its file (by inode, which survives the rotation's rename) and the offset in it."""

    inode: int
    offset: int


def mark(path: pathlib.Path) -> Mark:
    """Where the log ends now: read `since` it, a test sees only its own time, not the hours of the log before."""
    stat = path.stat()
    return Mark(stat.st_ino, stat.st_size)


def _lines_since(path: pathlib.Path, since: Mark | None) -> Iterator[str]:
    """The log's lines after `since`; when the API server rotated the log since (it renames it to
    `audit-<time>.log` beside it and starts a new one), the rest of the old file first."""
    files = [(path, since.offset if since else 0)]
    if since is not None and path.stat().st_ino != since.inode:
        rotated = [p for p in path.parent.glob(f"{path.stem}-*{path.suffix}") if p.stat().st_ino == since.inode]
        files = [(p, since.offset) for p in rotated] + [(path, 0)]
    for file, offset in files:
        with file.open("rb") as log:
            log.seek(offset)
            for raw in log:
                yield raw.decode(errors="replace")


def requests(path: pathlib.Path, username: str, since: Mark | None = None) -> list[Request]:
    """Every request `username` made that the log holds (after `since`), once each (an event per stage, one
    request)."""
    seen: dict[str, Request] = {}
    for line in _lines_since(path, since):
        if username not in line or not line.endswith("\n"):  # the user's, and whole (not being written)
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
