"""The reconcile decision, pass by pass: what the operator applies, prunes, reports and announces.

Each test builds a snapshot the way the operator reads the cluster (Node, Pod and child objects as dicts), lets
``reconciler.reconcile`` decide, and where the behaviour is about convergence, feeds the decision back as the
next observed state (``Cluster.carry_out``) the way the API server would store it.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import re
from typing import Any

import pytest

from nvlfleet.adapters import servingtelemetry
from nvlfleet.api import crd, names, reasons
from nvlfleet.core import demands, inventory, kubeobjects, leaderworkersets, planner, reconciler, render, validation
from support import fleetbuilder as fb
from support import servingbuilder as sb

T0 = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)
UID = "0b8e4c1a-5f5e-4c1e-9d7a-000000000001"


def serving(uid: str = UID, generation: int = 1, **kwargs: Any) -> dict[str, Any]:
    obj = sb.serving_dict(**kwargs)
    obj["metadata"].update(uid=uid, generation=generation)
    return obj


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    return condition(obj, reasons.READY)


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    assert obj is not None
    return next(c for c in obj["conditions"] if c["type"] == ctype)


# What the router of every serving (spec.router is on by default) applies, in order, after the engines' children.
ROUTER_KINDS = ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]


def kinds_and_names(objs: Any) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objs]


@dataclasses.dataclass
class Cluster:
    """A tiny stand-in for the API server: stores what a decision applies, deletes and patches."""

    serving: dict[str, Any]
    nodes: list[dict[str, Any]]
    children: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    pods: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    fleet_extra: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    served: frozenset[str] = frozenset({"LeaderWorkerSet", "ComputeDomain", "PodMonitor"})
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def snapshot(self, now: datetime.datetime = T0) -> reconciler.Snapshot:
        children = [copy.deepcopy(c) for c in self.children.values()]
        return reconciler.Snapshot(
            serving=copy.deepcopy(self.serving),
            now=now,
            children=children,
            nodes=self.nodes,
            pods=self.pods,
            fleet=[c for c in children if c["kind"] == "LeaderWorkerSet"] + self.fleet_extra,
            served=self.served,
            events=self.events,
        )

    def reconcile(self, now: datetime.datetime = T0) -> reconciler.Decision:
        return reconciler.reconcile(self.snapshot(now))

    def carry_out(self, decision: reconciler.Decision) -> None:
        for obj in decision.delete:
            del self.children[(obj["kind"], obj["metadata"]["name"])]
        for obj in decision.apply:
            stored = copy.deepcopy(obj)
            stored["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
            stored["metadata"]["resourceVersion"] = "1"
            if obj["kind"] == "Service":  # what the API server adds on its own
                stored["spec"]["clusterIP"] = "10.96.0.10"
            self.children[(obj["kind"], obj["metadata"]["name"])] = stored
        if decision.status is not None:
            self.serving["status"] = {**self.serving.get("status", {}), **decision.status}

    def converge(self, now: datetime.datetime = T0) -> reconciler.Decision:
        decision = self.reconcile(now)
        self.carry_out(decision)
        return decision

    def lws(self) -> list[dict[str, Any]]:
        return [c for c in self.children.values() if c["kind"] == "LeaderWorkerSet"]

    def run_groups(self, ready: bool = True) -> None:
        """What LeaderWorkerSet, kube-scheduler and the kubelet would do: one pod per group member, bound in
        the LeaderWorkerSet's domain on free nodes."""
        taken = {p["spec"].get("nodeName") for p in self.pods}
        self.pods = [p for p in self.pods if p["metadata"]["labels"].get(names.SERVING_LABEL) is None]
        for lws in self.lws():
            domain = leaderworkersets.domain(lws, fb.CLIQUE_LABEL)
            free = [
                n["metadata"]["name"]
                for n in self.nodes
                if n["metadata"]["labels"].get(fb.CLIQUE_LABEL) == domain and n["metadata"]["name"] not in taken
            ]
            size = lws["spec"]["leaderWorkerTemplate"]["size"]
            for group in range(lws["spec"]["replicas"]):
                for worker in range(size):
                    node = free.pop(0)
                    taken.add(node)
                    self.pods.append(group_pod(lws, group, worker, node, ready))


def group_pod(lws: dict[str, Any], group: int, worker: int, node: str | None, ready: bool) -> dict[str, Any]:
    labels = lws["metadata"]["labels"]
    name = lws["metadata"]["name"] + f"-{group}" + (f"-{worker}" if worker else "")
    pod = fb.pod(
        name,
        node,
        namespace=lws["metadata"]["namespace"],
        serving=labels[names.SERVING_LABEL],
        role=labels[names.ROLE_LABEL],
        lws=lws["metadata"]["name"],
        group=group,
    )
    pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = str(worker)
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return pod


def two_racks() -> list[dict[str, Any]]:
    return fb.rack(0) + fb.rack(1)


# ---------------------------------------------------------------------------------------------------------------
# A new serving


def test_a_new_serving_becomes_its_engines_and_its_router_all_owned_by_it() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    decision = cluster.reconcile()

    parsed = validation.parse(cluster.serving)[0]
    assert parsed is not None
    placement = decision.placement
    expected = render.render(parsed, placement)
    assert kinds_and_names(decision.apply) == kinds_and_names(expected)
    assert [kind for kind, _ in kinds_and_names(expected)][-len(ROUTER_KINDS) :] == ROUTER_KINDS
    for applied, rendered in zip(decision.apply, expected, strict=True):
        assert {k: v for k, v in applied.items() if k != "metadata"} == {
            k: v for k, v in rendered.items() if k != "metadata"
        }
        meta = applied["metadata"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "nvlfleet.io/v1alpha1",
                "kind": "DeepSeekServing",
                "name": "dsv41",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"][names.MANAGED_BY_LABEL] == "nvlfleet"
        assert meta["labels"][names.SERVING_LABEL] == "dsv41"
        assert names.APPLIED_HASH_ANNOTATION in meta["annotations"]
    assert decision.delete == ()
    assert decision.creates == tuple(kinds_and_names(expected))


def test_groups_are_packed_into_one_rack_and_the_status_says_where() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    decision = cluster.reconcile()

    rack0 = fb.clique(0)
    assert decision.placement == {"decode": {rack0: 2}}
    assert decision.status is not None
    status = decision.status
    assert (status["observedGeneration"], status["placement"], status["ready"]) == (1, {"decode": {rack0: 2}}, "0/2")
    assert (status["readyGroups"], status["desiredGroups"], status["gpus"]) == (0, 2, 2 * 2 * 4)
    placed = condition(status, reasons.PLACED)
    assert (placed["status"], placed["reason"]) == ("True", "AllGroupsPlaced")
    assert inventory.short_domain(rack0) in placed["message"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Ready", "False"),
        ("Placed", "True"),
        ("Progressing", "True"),
        ("Degraded", "False"),
        ("InsufficientCapacity", "False"),
        ("RouterReady", "False"),
    ]
    assert all(c["lastTransitionTime"] == "2026-11-30T12:00:00Z" for c in status["conditions"])
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    assert decision.events == ()  # a new serving's rollout is told by its status: no write beyond it


def test_the_serving_turns_ready_when_every_group_pod_is_ready() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups(ready=True)

    decision = cluster.converge(T1)

    assert decision.apply == () and decision.delete == ()
    ready = ready_condition(cluster.serving["status"])
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "True",
        "AllGroupsReady",
        "2026-11-30T12:05:00Z",
    )
    assert cluster.serving["status"]["ready"] == "2/2"
    progressing = condition(cluster.serving["status"], reasons.PROGRESSING)
    assert (progressing["status"], progressing["reason"]) == ("False", "Complete")
    assert decision.events == ()  # Ready is the status' to tell


def test_a_child_recreated_after_the_first_rollout_is_announced() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    (lws,) = cluster.lws()
    del cluster.children[("LeaderWorkerSet", lws["metadata"]["name"])]

    decision = cluster.converge()

    assert [(e.type, e.reason) for e in decision.events] == [("Normal", "Applied")]
    assert f"created LeaderWorkerSet {lws['metadata']['name']}" in decision.events[0].message


# ---------------------------------------------------------------------------------------------------------------
# Level-based and quiet


def test_a_second_pass_on_the_state_the_first_produced_changes_nothing() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups()
    cluster.converge(T1)

    quiet = cluster.reconcile(T1 + datetime.timedelta(hours=1))

    assert quiet.writes is False
    assert (quiet.apply, quiet.delete, quiet.status, quiet.events) == ((), (), None, ())


def test_a_pass_between_the_first_apply_and_ready_groups_writes_no_status() -> None:
    """A new serving's status is written twice, progressing then ready: a pass that finds the groups still
    starting (pods scheduled, not ready) says what the first pass said, so it writes nothing."""
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    first = cluster.converge()
    cluster.run_groups(ready=False)

    starting = cluster.reconcile(T1)

    assert first.status is not None
    progressing = condition(first.status, reasons.PROGRESSING)
    assert (progressing["status"], progressing["reason"]) == ("True", reasons.WAITING_FOR_GROUPS)
    assert (starting.apply, starting.delete, starting.status) == ((), (), None)


def test_fields_the_api_server_or_another_controller_add_are_not_a_difference() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    for child in cluster.children.values():
        child["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
        if "spec" in child:  # a ServiceAccount, Role or RoleBinding has none
            child["spec"].setdefault("extraDefault", {"set": "by a webhook"})
        child["status"] = {"replicas": 1}

    assert cluster.reconcile().apply == ()


def test_a_field_nvlfleet_owns_that_someone_edited_is_applied_again() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    (lws,) = cluster.lws()
    lws["spec"]["replicas"] = 5  # kubectl scale behind the operator's back

    decision = cluster.reconcile()

    assert kinds_and_names(decision.apply) == [("LeaderWorkerSet", lws["metadata"]["name"])]
    assert decision.apply[0]["spec"]["replicas"] == 2


def test_the_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge(T0)
    cluster.run_groups(ready=False)  # pods exist, not ready: message changes, status stays False

    cluster.converge(T1)

    ready = ready_condition(cluster.serving["status"])
    assert (ready["status"], ready["lastTransitionTime"]) == ("False", "2026-11-30T12:00:00Z")


# ---------------------------------------------------------------------------------------------------------------
# Scaling, spec changes, pruning


def test_scaling_up_adds_replicas_in_the_same_rack_without_moving_running_groups() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups()
    cluster.serving["spec"]["roles"]["decode"]["groups"] = 4
    cluster.serving["metadata"]["generation"] = 2

    decision = cluster.converge()

    assert decision.placement == {"decode": {fb.clique(0): 4}}
    assert kinds_and_names(decision.apply) == [("LeaderWorkerSet", cluster.lws()[0]["metadata"]["name"])]
    assert decision.apply[0]["spec"]["replicas"] == 4
    assert cluster.serving["status"]["observedGeneration"] == 2


def test_nodes_and_pods_the_adapter_parsed_once_decide_exactly_as_the_objects_do() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    for node in cluster.nodes[:2]:
        node["spec"]["unschedulable"] = True  # rack 0 is the tighter fit, were it not for the pods below
    cluster.pods = [fb.pod(f"other-{i}", n["metadata"]["name"]) for i, n in enumerate(cluster.nodes[2:18])]
    raw = cluster.snapshot()
    parsed = dataclasses.replace(
        raw,
        nodes=[kubeobjects.parse_node(n, "node", []) for n in raw.nodes],
        bound=[p for o in raw.pods if (p := kubeobjects.parse_pod(o, "pod", [])) is not None],
    )

    decision = reconciler.reconcile(parsed)

    assert decision.placement == {"decode": {fb.clique(1): 2}}  # rack 0 is busy with another serving's pods
    assert decision == reconciler.reconcile(raw)
    assert reconciler.reconcile(dataclasses.replace(parsed, bound=[])).placement != decision.placement


def test_a_fleet_view_computed_once_decides_every_servings_pass_as_the_objects_do() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.pods = [fb.pod(f"other-{i}", n["metadata"]["name"]) for i, n in enumerate(cluster.nodes[:18])]
    raw = cluster.snapshot()
    view = reconciler.fleet_view(raw, fb.CLIQUE_LABEL)

    decision = reconciler.reconcile(dataclasses.replace(raw, view=view))

    assert decision.placement == {"decode": {fb.clique(1): 2}}
    assert decision == reconciler.reconcile(raw)
    empty = reconciler.fleet_view(dataclasses.replace(raw, pods=[]), fb.CLIQUE_LABEL)
    assert reconciler.reconcile(dataclasses.replace(raw, view=empty)).placement != decision.placement  # it is used
    elsewhere = reconciler.fleet_view(dataclasses.replace(raw, pods=[]), "example.com/other-domain")
    assert reconciler.reconcile(dataclasses.replace(raw, view=elsewhere)) == decision  # another label's: ignored


def test_a_fleet_view_holds_a_servings_own_groups_only_once_in_its_pass() -> None:
    cluster = Cluster(serving(groups=2, nodes=6), two_racks())
    assert cluster.converge().placement == {"decode": {fb.clique(0): 2}}  # 12 of rack 0's 18 nodes, pods unbound
    cluster.serving["spec"]["roles"]["decode"]["groups"] = 3
    cluster.serving["metadata"]["generation"] = 2
    raw = cluster.snapshot()
    view = reconciler.fleet_view(raw, fb.CLIQUE_LABEL)
    assert view.held  # the view holds this serving's own groups too: its pass must take them out

    decision = reconciler.reconcile(dataclasses.replace(raw, view=view))

    assert decision.placement == {"decode": {fb.clique(0): 3}}  # counted twice, rack 0 would look full


def test_only_a_pass_that_places_new_groups_or_cannot_place_some_is_a_choice_against_the_whole_fleet() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    assert cluster.converge().places_groups  # a new serving: its groups go where none ran

    cluster.run_groups()
    assert not cluster.converge().places_groups  # the same groups, now running and ready
    assert not cluster.reconcile().places_groups  # a re-check

    cluster.serving["spec"]["roles"]["decode"]["groups"] = 1
    cluster.serving["metadata"]["generation"] = 2
    assert not cluster.converge().places_groups  # scaling down only removes

    cluster.serving["spec"]["roles"]["decode"]["groups"] = 3
    cluster.serving["metadata"]["generation"] = 3
    assert cluster.converge().places_groups  # scaling up places a group

    cluster.serving["spec"]["roles"]["decode"]["groups"] = 20  # 40 nodes: more than two racks hold
    cluster.serving["metadata"]["generation"] = 4
    decision = cluster.converge()
    assert decision.unplaced and decision.places_groups
    assert cluster.reconcile().unplaced and cluster.reconcile().places_groups  # still short: asked every pass


def test_groups_that_spill_into_a_second_rack_get_their_own_leader_worker_set_and_scale_down_prunes_it() -> None:
    cluster = Cluster(serving(groups=8, nodes=2), two_racks())  # 16 nodes in rack 0, then 2 more
    cluster.converge()
    cluster.serving["spec"]["roles"]["decode"]["groups"] = 10
    grown = cluster.converge()
    assert grown.placement == {"decode": {fb.clique(0): 9, fb.clique(1): 1}}
    assert len(cluster.lws()) == 2

    cluster.serving["spec"]["roles"]["decode"]["groups"] = 9
    shrunk = cluster.converge()

    assert shrunk.placement == {"decode": {fb.clique(0): 9}}
    pruned = render.lws_name("dsv41", render.models.RoleName.DECODE, fb.clique(1))
    pruned_domain = render.compute_domain_name("dsv41", fb.clique(1))
    assert kinds_and_names(shrunk.delete) == [("ComputeDomain", pruned_domain), ("LeaderWorkerSet", pruned)]
    assert ("Normal", "Pruned") in [(e.type, e.reason) for e in shrunk.events]


def pd_serving(prefill_groups: int = 1, decode_groups: int = 1) -> dict[str, Any]:
    return serving(groups=decode_groups, nodes=2, prefill=sb.role(groups=prefill_groups, tensor=1, nodes=1))


def test_prefill_and_decode_in_one_rack_share_a_compute_domain_pruned_only_with_the_last_group_there() -> None:
    cluster = Cluster(pd_serving(), two_racks())
    cluster.converge()
    shared = ("ComputeDomain", render.compute_domain_name("dsv41", fb.clique(0)))
    assert [k for k in cluster.children if k[0] == "ComputeDomain"] == [shared]

    cluster.serving["spec"]["roles"]["prefill"]["groups"] = 0
    without_prefill = cluster.converge()
    assert kinds_and_names(without_prefill.delete) == [
        ("LeaderWorkerSet", render.lws_name("dsv41", render.models.RoleName.PREFILL, fb.clique(0)))
    ]

    cluster.serving["spec"]["roles"]["decode"]["groups"] = 0
    empty = cluster.converge()
    assert kinds_and_names(empty.delete) == [
        shared,
        ("LeaderWorkerSet", render.lws_name("dsv41", render.models.RoleName.DECODE, fb.clique(0))),
    ]


def test_a_refused_child_deletes_only_the_compute_domains_no_leader_worker_set_claims() -> None:
    cluster = Cluster(pd_serving(), two_racks())
    cluster.converge()
    decode = ("LeaderWorkerSet", render.lws_name("dsv41", render.models.RoleName.DECODE, fb.clique(0)))
    del cluster.children[decode]  # the prefill group still claims the rack's ComputeDomain
    kept = reconciler.refused(cluster.snapshot(), *decode, "exceeded quota")
    del cluster.children[("LeaderWorkerSet", render.lws_name("dsv41", render.models.RoleName.PREFILL, fb.clique(0)))]
    orphaned = reconciler.refused(cluster.snapshot(), *decode, "exceeded quota")

    assert (kinds_and_names(kept.delete), kinds_and_names(orphaned.delete)) == (
        [],
        [("ComputeDomain", render.compute_domain_name("dsv41", fb.clique(0)))],
    )


def test_only_children_with_the_labels_and_an_owner_reference_to_this_serving_are_ever_deleted() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    labels = {names.MANAGED_BY_LABEL: "nvlfleet", names.SERVING_LABEL: "dsv41"}
    someone_elses = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "look-alike", "labels": labels}}
    previous_owner = copy.deepcopy(someone_elses)
    previous_owner["metadata"]["name"] = "from-an-older-dsv41"
    previous_owner["metadata"]["ownerReferences"] = [
        {"kind": "DeepSeekServing", "name": "dsv41", "uid": "an-older-uid", "controller": True}
    ]
    ours_but_stale = copy.deepcopy(previous_owner)
    ours_but_stale["metadata"]["name"] = "stale"
    ours_but_stale["metadata"]["ownerReferences"][0]["uid"] = UID
    for obj in (someone_elses, previous_owner, ours_but_stale):
        cluster.children[("Service", obj["metadata"]["name"])] = obj

    decision = cluster.reconcile()

    assert kinds_and_names(decision.delete) == [("Service", "stale")]


def test_a_compute_domain_whose_spec_changes_is_deleted_and_created_again_never_patched() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    (cd_key,) = [k for k in cluster.children if k[0] == "ComputeDomain"]
    old = cluster.children[cd_key]
    old["spec"]["numNodes"] = 2  # as if an older nvlfleet had rendered another spec
    old["metadata"]["annotations"][names.SPEC_HASH_ANNOTATION] = "0000000000000000"

    first = cluster.reconcile()
    assert kinds_and_names(first.delete) == [cd_key]
    assert cd_key not in kinds_and_names(first.apply)
    assert first.requeue_after == reconciler.REQUEUE_SECONDS
    assert ("Normal", "Recreating") in [(e.type, e.reason) for e in first.events]

    old["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:01Z"  # the API server is finishing the delete
    waiting = cluster.reconcile()
    assert (waiting.apply, waiting.delete, waiting.requeue_after) == ((), (), reconciler.REQUEUE_SECONDS)

    del cluster.children[cd_key]
    recreated = cluster.reconcile()
    assert kinds_and_names(recreated.apply) == [cd_key]
    assert recreated.apply[0]["spec"]["numNodes"] == 0


def test_a_restart_mid_rollout_reads_the_placement_from_the_leader_worker_sets_not_the_status() -> None:
    # Two empty racks: a fresh plan puts the group in rack 0 (ties go to the smaller key). The group runs in
    # rack 1 (an earlier plan put it there), and the status that said so was never written.
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    (lws,) = cluster.lws()
    del cluster.serving["status"]  # the status write was lost when the operator died
    moved = render.lws_name("dsv41", render.models.RoleName.DECODE, fb.clique(1))
    lws["metadata"]["name"] = moved
    lws["metadata"]["annotations"][names.DOMAIN_VALUE_ANNOTATION] = fb.clique(1)
    cluster.children = {(k, n if k != "LeaderWorkerSet" else moved): v for (k, n), v in cluster.children.items()}

    decision = cluster.reconcile()

    assert decision.placement == {"decode": {fb.clique(1): 1}}  # kept where it runs, no second group elsewhere
    assert ("LeaderWorkerSet", moved) not in kinds_and_names(decision.delete)


# ---------------------------------------------------------------------------------------------------------------
# Capacity


def test_a_group_that_fits_no_rack_is_reported_with_the_planners_sentence() -> None:
    nodes = [n for n in fb.rack(0) if n["metadata"]["name"] in ("rack-0-00", "rack-0-01")]
    nodes += [n for n in fb.rack(1) if n["metadata"]["name"] == "rack-1-00"]
    cluster = Cluster(serving(groups=1, tensor=1, nodes=3), nodes)
    decision = cluster.reconcile()

    parsed = validation.parse(cluster.serving)[0]
    assert parsed is not None
    expected = planner.plan(kubeobjects.from_objects(nodes), demands.of(parsed))
    (role_plan,) = expected.roles
    capacity = condition(decision.status, reasons.INSUFFICIENT_CAPACITY)
    assert (capacity["status"], capacity["reason"]) == ("True", "NotEnoughFreeNodes")
    assert capacity["message"].startswith(role_plan.reasons[0])
    assert "needs 3 free nodes" in capacity["message"] and "largest free block is 2 nodes" in capacity["message"]
    assert condition(decision.status, reasons.PLACED)["status"] == "False"
    assert (ready_condition(decision.status)["reason"]) == "InsufficientCapacity"
    assert [o["kind"] for o in decision.apply] == ["Service", *ROUTER_KINDS]  # nothing placed: no LeaderWorkerSet
    assert ("Warning", "InsufficientCapacity") in [(e.type, e.reason) for e in decision.events]
    cluster.carry_out(decision)
    settled = cluster.converge(T1)  # the Service exists now: Progressing turns False
    assert [e.reason for e in settled.events] == []  # the warning is said once, not on every pass
    assert cluster.reconcile(T1).writes is False


def test_another_servings_leader_worker_sets_hold_their_rack_even_before_their_pods_are_scheduled() -> None:
    nodes = fb.rack(0, nodes=4)
    winner = Cluster(serving(name="winner", uid="uid-winner", groups=2, nodes=2), nodes)
    winner.converge()
    loser = Cluster(serving(name="loser", uid="uid-loser", groups=1, nodes=2), nodes, fleet_extra=winner.lws())

    decision = loser.reconcile()

    assert decision.placement == {"decode": {}}
    assert condition(decision.status, reasons.INSUFFICIENT_CAPACITY)["status"] == "True"

    winner.serving["spec"]["roles"]["decode"]["groups"] = 1
    winner.converge()
    loser.fleet_extra = winner.lws()
    assert loser.reconcile().placement == {"decode": {fb.clique(0): 1}}


# ---------------------------------------------------------------------------------------------------------------
# Health


def test_a_group_whose_node_is_gone_is_degraded_and_named() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups()
    cluster.converge()
    lost = next(p for p in cluster.pods if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] == "1")
    lost_node = lost["spec"]["nodeName"]
    cluster.nodes = [n for n in cluster.nodes if n["metadata"]["name"] != lost_node]

    decision = cluster.converge(T1)

    degraded = condition(cluster.serving["status"], reasons.DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "GroupsUnhealthy")
    assert "decode group 1" in degraded["message"] and f"node {lost_node}, which is gone" in degraded["message"]
    assert "decode group 0" not in degraded["message"]
    assert cluster.serving["status"]["ready"] == "1/2"
    assert ready_condition(cluster.serving["status"])["reason"] == "Degraded"
    assert ("Warning", "Degraded") in [(e.type, e.reason) for e in decision.events]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"spec": {"unschedulable": True}}, "which is cordoned"),
        (
            {"metadata": {"labels": {"nvidia.com/gpu.clique": None}}},
            "which left the group's NVLink domain (its nvidia.com/gpu.clique label is gone)",
        ),
        (
            {"metadata": {"labels": {"nvidia.com/gpu.clique": "elsewhere.9"}}},
            "which left the group's NVLink domain (nvidia.com/gpu.clique is now elsewhere.9)",
        ),
    ],
    ids=["cordoned", "clique label gone", "clique label changed"],
)
def test_a_running_groups_node_that_is_cordoned_or_leaves_its_domain_degrades_it_by_name(
    change: dict[str, Any], said: str
) -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups()
    cluster.converge()
    victim = cluster.pods[0]["spec"]["nodeName"]
    node = next(n for n in cluster.nodes if n["metadata"]["name"] == victim)
    node.setdefault("spec", {}).update(change.get("spec", {}))
    for key, value in change.get("metadata", {}).get("labels", {}).items():
        if value is None:
            node["metadata"]["labels"].pop(key)
        else:
            node["metadata"]["labels"][key] = value

    cluster.converge(T1)

    degraded = condition(cluster.serving["status"], reasons.DEGRADED)
    assert degraded["status"] == "True"
    assert f"node {victim}, {said}" in degraded["message"]


def test_a_crash_looping_pod_degrades_its_group_and_recovery_is_announced() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups()
    cluster.converge()
    pod = cluster.pods[-1]
    pod["status"]["containerStatuses"] = [{"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    cluster.converge()
    assert condition(cluster.serving["status"], reasons.DEGRADED)["status"] == "True"

    del pod["status"]["containerStatuses"]
    decision = cluster.converge(T1)

    assert condition(cluster.serving["status"], reasons.DEGRADED)["status"] == "False"
    assert ("Normal", "Recovered") in [(e.type, e.reason) for e in decision.events]


REFUSED = (
    'pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container '
    '"vllm" must set securityContext.runAsNonRoot=true)'
)


def statefulset_event(statefulset: str, reason: str, at: datetime.datetime, namespace: str = "llm") -> dict[str, Any]:
    """An Event as the StatefulSet controller records it for a pod it created or failed to create."""
    pod = f"{statefulset}-0"
    outcome = f"failed error: {REFUSED.format(pod=pod)}" if reason == "FailedCreate" else "successful"
    return {
        "metadata": {"name": f"{statefulset}.{reason}", "namespace": namespace},
        "involvedObject": {"kind": "StatefulSet", "name": statefulset, "namespace": namespace},
        "reason": reason,
        "type": "Warning" if reason == "FailedCreate" else "Normal",
        "message": f"create Pod {pod} in StatefulSet {statefulset} {outcome}",
        "lastTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def test_pods_the_api_server_refuses_degrade_the_serving_with_its_reason() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    (lws,) = cluster.lws()
    cluster.events = [statefulset_event(lws["metadata"]["name"], "FailedCreate", T0)]

    decision = cluster.converge()

    degraded = condition(cluster.serving["status"], reasons.DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", reasons.GROUPS_UNHEALTHY)
    assert "the API server refuses its pods" in degraded["message"]
    assert 'violates PodSecurity "restricted:latest": runAsNonRoot != true' in degraded["message"]
    ready = condition(cluster.serving["status"], reasons.READY)
    assert (ready["status"], ready["reason"]) == ("False", reasons.DEGRADED)
    assert ("Warning", reasons.DEGRADED) in [(e.type, e.reason) for e in decision.events]


def test_a_refusal_the_statefulset_later_got_past_is_not_reported() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    (lws,) = cluster.lws()
    name = lws["metadata"]["name"]
    cluster.events = [statefulset_event(name, "FailedCreate", T0), statefulset_event(name, "SuccessfulCreate", T1)]

    cluster.converge(T1)

    assert condition(cluster.serving["status"], reasons.DEGRADED)["status"] == "False"


def test_only_refusals_of_this_servings_statefulsets_in_its_namespace_count() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    (lws,) = cluster.lws()
    name = lws["metadata"]["name"]
    cluster.events = [
        statefulset_event(name, "FailedCreate", T0, namespace="elsewhere"),
        statefulset_event("another-serving-decode-12345678", "FailedCreate", T0),
        {**statefulset_event(name, "FailedCreate", T0), "involvedObject": {"kind": "ReplicaSet", "name": name}},
    ]

    cluster.converge()

    assert condition(cluster.serving["status"], reasons.DEGRADED)["status"] == "False"


# ---------------------------------------------------------------------------------------------------------------
# Refusing to act


def test_an_invalid_spec_leaves_the_running_fleet_alone_and_says_which_field() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    before = copy.deepcopy(cluster.children)
    cluster.serving["spec"]["extraArgs"] = ["--no-such-flag"]
    cluster.serving["metadata"]["generation"] = 2

    decision = cluster.converge(T1)

    assert (decision.apply, decision.delete) == ((), ())
    assert cluster.children == before
    ready = ready_condition(cluster.serving["status"])
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    problems = validation.validate(cluster.serving)
    assert problems and all(str(p) in ready["message"] for p in problems)
    assert "spec.extraArgs[0]" in ready["message"]
    assert cluster.serving["status"]["observedGeneration"] == 2
    assert cluster.serving["status"]["placement"] == {"decode": {fb.clique(0): 1}}  # what still runs
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "InvalidSpec")]
    assert cluster.reconcile(T1).writes is False  # said once, not on every re-check


def test_a_missing_leader_worker_set_api_is_a_condition_not_a_crash() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks(), served=frozenset({"ComputeDomain"}))

    decision = cluster.reconcile()

    assert (decision.apply, decision.delete) == ((), ())
    ready = ready_condition(decision.status)
    assert (ready["status"], ready["reason"]) == ("False", "MissingPrerequisite")
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in ready["message"]
    assert condition(decision.status, reasons.PLACED)["status"] == "Unknown"


def test_a_missing_compute_domain_api_matters_only_when_compute_domains_are_asked_for() -> None:
    without_cd = frozenset({"LeaderWorkerSet"})
    asked = Cluster(serving(groups=1, nodes=2), two_racks(), served=without_cd)
    assert "computedomains.resource.nvidia.com" in ready_condition(asked.reconcile().status)["message"]

    not_asked = Cluster(serving(groups=1, nodes=2, placement={"computeDomain": False}), two_racks(), served=without_cd)
    assert [o["kind"] for o in not_asked.reconcile().apply] == ["LeaderWorkerSet", "Service", *ROUTER_KINDS]


def test_an_object_in_the_way_that_nvlfleet_did_not_create_is_never_overwritten() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    first = cluster.reconcile()
    service = next(o for o in first.apply if o["kind"] == "Service")
    foreign = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service["metadata"]["name"]}}

    decision = reconciler.reconcile(dataclasses.replace(cluster.snapshot(), foreign=[foreign]))

    assert (decision.apply, decision.delete) == ((), ())
    ready = ready_condition(decision.status)
    assert ready["reason"] == "NameConflict"
    assert ready["message"].startswith("Service dsv41-decode already exists and was not created by nvlfleet")


def test_a_serving_being_deleted_is_left_to_garbage_collection() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    cluster.serving["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"

    assert cluster.reconcile() == reconciler.Decision()


def test_contains_compares_what_nvlfleet_says_not_what_others_add() -> None:
    assert reconciler.contains({"a": 1, "b": [{"c": "x"}]}, {"a": 1.0, "b": [{"c": "x", "d": 2}], "e": 3})
    assert not reconciler.contains({"b": [{"c": "x"}]}, {"b": [{"c": "x"}, {"c": "y"}]})
    assert not reconciler.contains({"a": True}, {"a": 1})
    assert not reconciler.contains({"a": {"b": 1}}, {"a": {}})


def test_warnings_about_an_accepted_spec_are_announced_once_per_generation() -> None:
    weights = {"cache": "none", "pvc": {"claimName": "weights"}}  # accepted, but the claim is ignored
    cluster = Cluster(
        serving(groups=1, nodes=2, model={**sb.serving_dict()["spec"]["model"], "weights": weights}), two_racks()
    )
    review = validation.review(cluster.serving)
    assert review.warnings and not review.errors

    first = cluster.converge()

    warnings = [e for e in first.events if e.reason == "SpecWarning"]
    assert [(e.type, e.message) for e in warnings] == [("Warning", "; ".join(str(w) for w in sorted(review.warnings)))]
    assert [e.reason for e in cluster.converge().events if e.reason == "SpecWarning"] == []


# ---------------------------------------------------------------------------------------------------------------
# The scale subresource and the columns read what is written


def written_statuses() -> list[dict[str, Any]]:
    """The statuses the reconciler writes for a ready serving, an unplaceable one and an invalid one."""
    ready = Cluster(serving(groups=2, nodes=2), two_racks())
    ready.converge()
    ready.run_groups(ready=True)
    ready.converge(T1)
    rack = [n for n in fb.rack(0) if n["metadata"]["name"] in ("rack-0-00", "rack-0-01")]
    unplaced = Cluster(serving(groups=1, tensor=1, nodes=3), rack)
    unplaced.converge()
    invalid = Cluster(serving(groups=1, nodes=2, extraArgs=["--no-such-flag"]), two_racks())
    invalid.converge()
    return [c.serving["status"] for c in (ready, unplaced, invalid)]


def test_every_status_field_the_crd_reads_is_one_the_operator_writes() -> None:
    version = crd.definition()["spec"]["versions"][0]
    scale = version["subresources"]["scale"]
    paths = [c["jsonPath"] for c in version["additionalPrinterColumns"]]
    paths += [scale["statusReplicasPath"], scale["labelSelectorPath"]]
    statuses = written_statuses()
    telemetry = servingtelemetry.status_fields(None)  # every telemetry field, null until measured

    for path in (p for p in paths if p.startswith(".status.")):
        parsed = re.fullmatch(r'\.status\.(\w+)(?:\[\?\(@\.type=="(\w+)"\)\]\.(\w+))?', path)
        assert parsed is not None, f"{path}: a path this test cannot read"
        field, ctype, attr = parsed.groups()
        if field in telemetry:
            continue
        if ctype is None:
            assert any(s.get(field) is not None for s in statuses), f"{path}: nothing writes it"
        else:
            conditions = [c for s in statuses for c in s.get(field) or [] if c["type"] == ctype]
            assert any(c.get(attr) is not None for c in conditions), f"{path}: nothing writes it"


def test_the_status_holds_the_routers_endpoint_and_none_once_the_router_is_turned_off() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    assert cluster.serving["status"]["endpoint"] == "http://dsv41-router.llm.svc:8000"

    cluster.serving["spec"]["router"] = {"enabled": False}
    cluster.serving["metadata"]["generation"] = 2
    decision = cluster.converge(T1)

    assert decision.status is not None and decision.status["endpoint"] is None
    assert sorted(kinds_and_names(decision.delete)) == sorted((kind, "dsv41-router") for kind in ROUTER_KINDS)
    assert ("Normal", "Pruned") in [(e.type, e.reason) for e in decision.events]
    assert [kind for kind, _ in cluster.children] == ["ComputeDomain", "LeaderWorkerSet", "Service"]


def test_a_router_object_nvlfleet_did_not_create_is_never_taken_over() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    foreign = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "dsv41-router"}}

    decision = reconciler.reconcile(dataclasses.replace(cluster.snapshot(), foreign=[foreign]))

    assert (decision.apply, decision.delete) == ((), ())
    assert ready_condition(decision.status)["message"].startswith("ServiceAccount dsv41-router already exists")


def test_the_scale_subresource_counts_ready_decode_groups_and_selects_their_leaders() -> None:
    cluster = Cluster(serving(groups=2, nodes=2), two_racks())
    cluster.converge()
    cluster.run_groups(ready=True)
    cluster.converge(T1)

    status = cluster.serving["status"]
    assert status["replicas"] == 2
    assert status["selector"] == (
        "nvlfleet.io/serving=dsv41,nvlfleet.io/role=decode,leaderworkerset.sigs.k8s.io/worker-index=0"
    )
    wanted = dict(term.split("=") for term in status["selector"].split(","))
    selected = [p for p in cluster.pods if wanted.items() <= p["metadata"]["labels"].items()]
    assert len(selected) == 2 and {p["metadata"]["labels"][names.LWS_WORKER_INDEX_LABEL] for p in selected} == {"0"}


def test_a_status_field_an_older_crd_prunes_does_not_make_every_pass_write() -> None:
    cluster = Cluster(serving(groups=1, nodes=2), two_racks())
    cluster.converge()
    cluster.converge()  # settled: a third pass would write nothing
    for field in ("replicas", "selector", "endpoint"):  # what the API server keeps of a write under an older CRD
        del cluster.serving["status"][field]

    assert cluster.reconcile().status is None
