"""Fields another manager patched into a child are found by its managedFields, and removed from the update body."""

from __future__ import annotations

import copy
from typing import Any

from nvlfleet.core import fieldsets

OURS = {
    "manager": "nvlfleet",
    "operation": "Apply",
    "fieldsV1": {
        "f:spec": {
            "f:replicas": {},
            "f:leaderWorkerTemplate": {
                "f:size": {},
                "f:workerTemplate": {
                    "f:spec": {
                        "f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}, "f:name": {}}},
                        "f:volumes": {'k:{"name":"a"}': {".": {}, "f:emptyDir": {}, "f:name": {}}},
                    }
                },
            },
        }
    },
}
INTRUDER = {
    "manager": "intruder",
    "operation": "Update",
    "fieldsV1": {
        "f:spec": {
            "f:leaderWorkerTemplate": {
                "f:workerTemplate": {
                    "f:spec": {
                        "f:volumes": {
                            'k:{"name":"host"}': {".": {}, "f:hostPath": {".": {}, "f:path": {}}, "f:name": {}}
                        },
                        "f:hostNetwork": {},
                    }
                }
            }
        }
    },
}
STATUS = {"manager": "lws", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {"f:x": {}}}}


def lws(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "t", "resourceVersion": "7", "managedFields": [copy.deepcopy(e) for e in entries]},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",  # a default: nobody's field
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {
                    "spec": {
                        "containers": [{"name": "c", "image": "busybox"}],
                        "hostNetwork": True,
                        "volumes": [{"name": "a", "emptyDir": {}}, {"name": "host", "hostPath": {"path": "/"}}],
                    }
                },
            },
        },
        "status": {"x": 1},
    }


def test_fields_only_another_manager_owns_are_foreign_with_readable_paths() -> None:
    found = fieldsets.foreign(lws(OURS, INTRUDER, STATUS))
    assert found == fieldsets.Foreign(
        managers=("intruder",),
        paths=(
            "spec.leaderWorkerTemplate.workerTemplate.spec.volumes[name=host]",
            "spec.leaderWorkerTemplate.workerTemplate.spec.hostNetwork",
        ),
    )


def test_a_child_only_nvlfleet_and_controllers_status_wrote_has_nothing_foreign() -> None:
    assert fieldsets.foreign(lws(OURS, STATUS)) is None


def test_a_field_another_manager_shares_with_nvlfleet_is_not_foreign() -> None:
    shared = copy.deepcopy(OURS)
    shared["manager"] = "kubectl"
    assert fieldsets.foreign(lws(OURS, shared)) is None


def test_the_update_body_drops_foreign_fields_and_their_managers_and_keeps_the_rest() -> None:
    body = fieldsets.without_foreign(lws(OURS, INTRUDER, STATUS))
    pod = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert pod == {"containers": [{"name": "c", "image": "busybox"}], "volumes": [{"name": "a", "emptyDir": {}}]}
    assert body["spec"]["startupPolicy"] == "LeaderCreated"
    assert [e["manager"] for e in body["metadata"]["managedFields"]] == ["nvlfleet", "lws"]
    assert body["metadata"]["resourceVersion"] == "7"  # an update that fails if the child changed meanwhile
    assert "status" not in body


def test_the_update_body_leaves_the_observed_object_untouched() -> None:
    observed = lws(OURS, INTRUDER)
    before = copy.deepcopy(observed)
    fieldsets.without_foreign(observed)
    assert observed == before
