"""Which objects are a serving's children: the one rule the reconciler decides by and the adapter deletes by.

Pure API rule for the apply and prune steps of the data flow (… → render → **apply → prune** → status). A child
counts as a serving's only with nvlfleet's managed-by and serving labels *and* a controller owner reference to
the serving's uid: labels alone can be copied by anyone, and a uid tells a serving from a same-named successor.
The reconciler marks what it renders with ``owner_reference`` and touches only what ``is_child_of`` accepts;
``nvlfleet.adapters.kube`` checks the same rule again before it deletes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nvlfleet.api import names, objects


def is_child_of(obj: Mapping[str, Any], serving_name: str, serving_uid: str) -> bool:
    """nvlfleet's managed-by and serving labels *and* a controller owner reference to the serving's uid."""
    meta = objects.as_mapping(obj.get("metadata"))
    labels = objects.as_mapping(meta.get("labels"))
    if labels.get(names.MANAGED_BY_LABEL) != names.MANAGED_BY or labels.get(names.SERVING_LABEL) != serving_name:
        return False
    return bool(serving_uid) and any(
        ref.get("uid") == serving_uid and ref.get("kind") == names.KIND and ref.get("controller") is True
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, Mapping)
    )


def owning_serving_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the serving whose child ``obj`` says it is: nvlfleet's labels and a controller owner reference to
    a DeepSeekServing of the labelled name. None when it is not a serving's child at all (a hand-made object with
    nvlfleet's labels, which must not count for anything)."""
    meta = objects.as_mapping(obj.get("metadata"))
    labels = objects.as_mapping(meta.get("labels"))
    name = labels.get(names.SERVING_LABEL)
    if labels.get(names.MANAGED_BY_LABEL) != names.MANAGED_BY or not isinstance(name, str):
        return None
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == names.KIND
            and ref.get("name") == name
            and ref.get("controller") is True
            and isinstance(ref.get("uid"), str)
            and ref["uid"]
        ):
            return str(ref["uid"])
    return None


def owner_reference(serving_name: str, serving_uid: str) -> dict[str, Any]:
    """The controller owner reference that makes an object the serving's (and garbage-collects it with it)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": serving_name,
        "uid": serving_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
