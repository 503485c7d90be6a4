"""Crash safety: SIGKILL the operator at random moments while servings roll out; the end state is a clean run's.

One fleet, one namespace, two runs of the same servings:

1. **Clean run.** The servings are created with their final specs and one ``nvlfleet run`` carries them to Ready
   undisturbed. Their children (LeaderWorkerSets, ComputeDomains, Services: names, labels, annotations, specs,
   owner references), each serving's placement and its conditions, and the pods per rack are the reference.
2. **Crash run.** The servings are deleted (garbage collection removes everything they owned) and created again
   in batches while the operator is started and SIGKILLed by its PID at seeded random moments — during start-up
   (30 %) or 0.2–8 s into reconciling, which lands some kills between the writes of one pass — and some specs
   are changed while no operator runs. After the last kill one operator runs undisturbed until every serving
   has converged.

The crash run must end exactly where the clean run ended: the same children with the same content, the same
placement, the same pods per rack, no object left over or twice, no child without its serving. Objects a user
made that look like nvlfleet's (its labels without its owner reference, a serving label on someone else's
object, a name nvlfleet wants, an owner reference without nvlfleet's labels) are never modified or deleted: no
``nvlfleet`` field manager on them, their content and uid as created.

Every serving is pinned to one rack by ``spec.pod.nodeSelector``: the planner packs groups into the fullest rack
that fits, so *which* serving lands in *which* rack depends on the order servings happen to be reconciled in,
and that order differs from run to run (kills or not). With each serving confined to one rack the placement is
a function of the specs alone, so the two runs can be compared object for object.

Sizes (docs/reliability.md says what they cost here): ``NVLFLEET_CRASH_SERVINGS`` (default 100, the issue's size),
``NVLFLEET_CRASH_KILLS`` (default 20) and ``NVLFLEET_CRASH_SEED`` pick the run. Figures go to figures.py's file.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pathlib
import random
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster import fleet as fleets
from localcluster.operatorprocess import OperatorProcess

from nvlfleet.api import metric_names
from support import figures, servings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

SERVINGS = int(os.environ.get("NVLFLEET_CRASH_SERVINGS", "100"))
KILLS = int(os.environ.get("NVLFLEET_CRASH_KILLS", "20"))
SEED = int(os.environ.get("NVLFLEET_CRASH_SEED", "20261130"))
TRAYS_PER_RACK = 18
STARTUP_KILLS = 0.3  # share of kills during start-up (imports, login, first listings); the rest land in passes
RECHECK_SECONDS = 30.0  # a 3 s re-check of every serving would be most of this machine's CPU


# ---------------------------------------------------------------------------------------------------------------
# The servings: sizes, racks and spec changes drawn from the seed


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    rack: int
    groups: int  # what it is created with in the crash run
    final_groups: int  # what the clean run creates, and what the crash run changes it to while no operator runs


def draw(count: int, seed: int) -> list[Plan]:
    """Single-node groups (1–3 per serving); a quarter of the servings change size during the crash run. Racks
    are filled in order so that each rack can hold every serving pinned to it at its larger size."""
    rng = random.Random(seed)
    plans, rack, used = [], 0, 0
    for i in range(count):
        groups = rng.randint(1, 3)
        final = rng.choice([g for g in (1, 2, 3) if g != groups]) if rng.random() < 0.25 else groups
        need = max(groups, final)
        if used + need > TRAYS_PER_RACK:
            rack, used = rack + 1, 0
        used += need
        plans.append(Plan(f"s{i:03d}", rack, groups, final))
    return plans


def spec_of(plan: Plan, fleet: Any, groups: int) -> dict[str, Any]:
    body = servings.serving(plan.name, fleet, groups=groups, nodes=1)
    body["spec"]["pod"]["nodeSelector"][fleets.LABEL_RACK] = str(plan.rack)
    return body


# ---------------------------------------------------------------------------------------------------------------
# Objects a user made that look like nvlfleet's


class Decoys:
    """User objects that carry part of nvlfleet's identity; each must end exactly as it was created."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.created: dict[str, dict[str, Any]] = {}

    def _read(self, key: str) -> dict[str, Any] | None:
        kind, name = key.split("/")
        try:
            if kind == "Service":
                obj = self.core.read_namespaced_service(name, self.namespace)
            elif kind == "ConfigMap":
                obj = self.core.read_namespaced_config_map(name, self.namespace)
            elif kind == "LeaderWorkerSet":
                return dict(
                    self.custom.get_namespaced_custom_object(*servings.LWS[:2], self.namespace, servings.LWS[2], name)
                )
            else:
                return dict(
                    self.custom.get_namespaced_custom_object(*servings.CD[:2], self.namespace, servings.CD[2], name)
                )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(client.ApiClient().sanitize_for_serialization(obj))

    def _remember(self, key: str) -> None:
        obj = self._read(key)
        assert obj is not None
        self.created[key] = obj

    def make(self, plans: list[Plan]) -> None:
        """Decoys that outlive both runs (they own nothing a serving owns)."""
        s = [p.name for p in plans]
        nvl = {"app.kubernetes.io/managed-by": "nvlfleet"}
        owner = self.core.create_namespaced_config_map(
            self.namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="user-notes", labels={**nvl, "nvlfleet.io/serving": s[3 % len(s)]}),
                data={"note": "a ConfigMap with nvlfleet's labels; nvlfleet never owns ConfigMaps"},
            ),
        )
        self._remember("ConfigMap/user-notes")
        # nvlfleet's labels, no owner reference: a copy-pasted Service.
        self.core.create_namespaced_service(
            self.namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(
                    name=f"{s[0]}-decode-canary",
                    labels={**nvl, "nvlfleet.io/serving": s[0], "nvlfleet.io/role": "decode"},
                ),
                spec=client.V1ServiceSpec(
                    selector={"nvlfleet.io/serving": s[0]}, ports=[client.V1ServicePort(port=8000)]
                ),
            ),
        )
        self._remember(f"Service/{s[0]}-decode-canary")
        # nvlfleet's labels, owned by someone else.
        self.custom.create_namespaced_custom_object(
            *servings.CD[:2],
            self.namespace,
            servings.CD[2],
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {
                    "name": f"{s[1 % len(s)]}-decode-manual",
                    "labels": {**nvl, "nvlfleet.io/serving": s[1 % len(s)]},
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "user-notes", "uid": owner.metadata.uid}
                    ],
                },
                "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "manual-channel"}}},
            },
        )
        self._remember(f"ComputeDomain/{s[1 % len(s)]}-decode-manual")
        # A serving label, another manager: a hand-made LeaderWorkerSet with no replicas.
        self.custom.create_namespaced_custom_object(
            *servings.LWS[:2],
            self.namespace,
            servings.LWS[2],
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {
                    "name": f"{s[2 % len(s)]}-decode-byhand",
                    "labels": {"app.kubernetes.io/managed-by": "helm", "nvlfleet.io/serving": s[2 % len(s)]},
                },
                "spec": {
                    "replicas": 0,
                    "leaderWorkerTemplate": {
                        "size": 1,
                        "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                    },
                },
            },
        )
        self._remember(f"LeaderWorkerSet/{s[2 % len(s)]}-decode-byhand")
        # The very name nvlfleet would give a serving's Service: that serving must report NameConflict.
        self.core.create_namespaced_service(
            self.namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(name=f"{conflicted(plans)}-decode", labels={"team": "search"}),
                spec=client.V1ServiceSpec(selector={"app": "search"}, ports=[client.V1ServicePort(port=80)]),
            ),
        )
        self._remember(f"Service/{conflicted(plans)}-decode")

    def attach(self, serving: dict[str, Any]) -> None:
        """An owner reference to a serving (for garbage collection) without nvlfleet's labels."""
        meta = serving["metadata"]
        name = f"{meta['name']}-user-owned"
        self.core.create_namespaced_service(
            self.namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(
                    name=name,
                    labels={"nvlfleet.io/serving": meta["name"]},
                    owner_references=[
                        client.V1OwnerReference(
                            api_version=serving["apiVersion"],
                            kind="DeepSeekServing",
                            name=meta["name"],
                            uid=meta["uid"],
                        )
                    ],
                ),
                spec=client.V1ServiceSpec(selector={"app": "mine"}, ports=[client.V1ServicePort(port=81)]),
            ),
        )
        self._remember(f"Service/{name}")

    def changes(self) -> dict[str, str]:
        """What happened to each decoy that should not have: {key: what}."""
        found = {}
        for key, before in self.created.items():
            now = self._read(key)
            if now is None:
                found[key] = "deleted"
                continue
            managers = {m.get("manager") for m in now["metadata"].get("managedFields") or []}
            if "nvlfleet" in managers:
                found[key] = f"written by nvlfleet (managers {sorted(managers)})"
            for field in ("uid", "labels", "annotations", "ownerReferences", "finalizers"):
                if now["metadata"].get(field) != before["metadata"].get(field):
                    found[key] = f"metadata.{field} changed"
            if now.get("spec") != before.get("spec") or now.get("data") != before.get("data"):
                found[key] = "content changed"
        return found


def conflicted(plans: list[Plan]) -> str:
    return plans[4 % len(plans)].name


# ---------------------------------------------------------------------------------------------------------------
# The state two runs are compared on


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ, as ``path: got != want`` lines (empty when equal)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return [line for k in sorted({*got, *want}) for line in differences(got.get(k), want.get(k), f"{path}/{k}")]
    return [] if got == want else [f"{path}: {json.dumps(got)[:300]} != {json.dumps(want)[:300]}"]


def _plain(obj: Any) -> dict[str, Any]:
    return dict(client.ApiClient().sanitize_for_serialization(obj)) if not isinstance(obj, dict) else obj


def state(api_client: client.ApiClient, namespace: str, fleet: Any, ignore: set[str]) -> dict[str, Any]:
    """Everything in ``namespace`` with nvlfleet's managed-by label except the ``ignore``d decoys, without what
    the API server assigns per object (uids, resourceVersions, timestamps, cluster IPs); plus each serving's
    placement, conditions and pods per rack."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    items = [
        *custom.list_namespaced_custom_object(
            *servings.LWS[:2], namespace, servings.LWS[2], label_selector=servings.MANAGED
        )["items"],
        *custom.list_namespaced_custom_object(
            *servings.CD[:2], namespace, servings.CD[2], label_selector=servings.MANAGED
        )["items"],
        *[_plain(s) for s in core.list_namespaced_service(namespace, label_selector=servings.MANAGED).items],
    ]
    owners = {
        s["metadata"]["uid"]: s["metadata"]["name"]
        for s in custom.list_namespaced_custom_object(servings.GROUP, servings.VERSION, namespace, servings.PLURAL)[
            "items"
        ]
    }
    children: dict[str, Any] = {}
    for obj in items:
        meta = obj["metadata"]
        kind = obj.get("kind") or "Service"
        spec = copy.deepcopy(obj.get("spec") or {})
        for assigned in ("clusterIP", "clusterIPs"):
            spec.pop(assigned, None)
        refs = [
            {
                "kind": r["kind"],
                "serving": owners.get(r["uid"], f"<gone {r['uid']}>"),
                "controller": r.get("controller"),
            }
            for r in meta.get("ownerReferences") or []
        ]
        key = f"{kind}/{meta['name']}"
        if key in ignore:
            continue
        assert key not in children, f"{key} twice"
        # nvlfleet.io/applied-hash hashes the whole child, owner uid included, and the uid is new in each run.
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != "nvlfleet.io/applied-hash"}
        children[key] = {
            "labels": meta.get("labels"),
            "annotations": annotations,
            "owners": refs,
            "spec": spec,
        }
    racks = {
        n.metadata.name: n.metadata.labels[fleets.LABEL_RACK]
        for n in core.list_node(label_selector=f"{fleets.LABEL_FLEET}={fleet.name}").items
    }
    pods: dict[str, dict[str, int]] = {}
    nodes_used: dict[str, int] = {}
    engines = "nvlfleet.io/serving,app.kubernetes.io/name=vllm"  # the routers' pods hold no tray
    for pod in core.list_namespaced_pod(namespace, label_selector=engines).items:
        if pod.metadata.deletion_timestamp is not None:
            continue
        name = pod.metadata.labels["nvlfleet.io/serving"]
        rack = racks.get(pod.spec.node_name or "", "unscheduled")
        pods.setdefault(name, {}).setdefault(rack, 0)
        pods[name][rack] += 1
        nodes_used[pod.spec.node_name] = nodes_used.get(pod.spec.node_name, 0) + 1
    assert all(count == 1 for count in nodes_used.values()), f"a tray runs two GPU pods: {nodes_used}"
    status = {}
    for obj in custom.list_namespaced_custom_object(servings.GROUP, servings.VERSION, namespace, servings.PLURAL)[
        "items"
    ]:
        st = obj.get("status") or {}
        status[obj["metadata"]["name"]] = {
            "placement": st.get("placement"),
            "ready": st.get("ready"),
            "conditions": sorted((c["type"], c["status"], c["reason"]) for c in st.get("conditions") or []),
        }
    return {"children": children, "servings": status, "pods_per_rack": pods}


def unconverged(api_client: client.ApiClient, namespace: str, plans: list[Plan]) -> dict[str, str]:
    """Servings that have not settled on their current generation yet: Ready and no longer Progressing, or (the one
    whose Service name a user took) NameConflict; {name: what it says now}."""
    custom = client.CustomObjectsApi(api_client)
    objs = custom.list_namespaced_custom_object(servings.GROUP, servings.VERSION, namespace, servings.PLURAL)["items"]
    waiting = {p.name: "not created" for p in plans}
    for obj in objs:
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        ready = servings.condition_of(obj, "Ready") or {}
        current = status.get("observedGeneration") == obj["metadata"]["generation"]
        want = "NameConflict" if name == conflicted(plans) else None
        settled = (servings.condition_of(obj, "Progressing") or {}).get("status") == "False"
        if current and (ready.get("reason") == want if want else servings.is_ready(obj) and settled):
            del waiting[name]
        else:
            waiting[name] = f"generation {obj['metadata']['generation']}, {status.get('ready')}, Ready: {ready}"
    return waiting


def await_convergence(api_client: client.ApiClient, namespace: str, plans: list[Plan], timeout: float) -> float:
    """Seconds until every serving converged; fails naming those that did not."""
    started = time.monotonic()
    while waiting := unconverged(api_client, namespace, plans):
        if time.monotonic() - started > timeout:
            pytest.fail(f"not converged after {timeout:.0f}s: {waiting}", pytrace=False)
        time.sleep(2.0)
    return time.monotonic() - started


def kill_moment(operator: OperatorProcess, rng: random.Random) -> dict[str, Any]:
    """Wait for a seeded random moment to kill: during start-up, or 0.2–8 s into reconciling."""
    started = time.monotonic()
    if rng.random() < STARTUP_KILLS:
        time.sleep(rng.uniform(0.2, 3.0))
        return {"phase": "starting", "after_seconds": round(time.monotonic() - started, 2)}
    delay = rng.uniform(0.2, 8.0)
    deadline = started + 120
    while "Activity 'startup' succeeded" not in operator.log.read_text(errors="replace").rsplit("==> ", 1)[-1]:
        assert time.monotonic() < deadline, "the operator did not start within 120 s"
        time.sleep(0.1)
    time.sleep(delay)
    return {"phase": "reconciling", "after_seconds": round(time.monotonic() - started, 2)}


def pass_durations(metrics_port: int) -> tuple[int, float]:
    """(passes, seconds spent in them) from the operator's own nvlfleet_reconcile_duration_seconds histogram."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    count = sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(metric_names.RECONCILE_DURATION + "_count")
    )
    total = sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(metric_names.RECONCILE_DURATION + "_sum")
    )
    return int(count), total


def leftovers(api_client: client.ApiClient, namespace: str, ignore: set[str]) -> list[str]:
    """Servings, nvlfleet-labelled children and serving pods still in ``namespace``, but the ``ignore``d decoys."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    found = [
        f"DeepSeekServing/{o['metadata']['name']} (finalizers {o['metadata'].get('finalizers')}, "
        f"deleted {o['metadata'].get('deletionTimestamp')})"
        for o in custom.list_namespaced_custom_object(servings.GROUP, servings.VERSION, namespace, servings.PLURAL)[
            "items"
        ]
    ]
    for kind, (group, version, plural) in (("LeaderWorkerSet", servings.LWS), ("ComputeDomain", servings.CD)):
        listed = custom.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=servings.MANAGED
        )
        found += [f"{kind}/{o['metadata']['name']}" for o in listed["items"]]
    found += [
        f"Service/{s.metadata.name}"
        for s in core.list_namespaced_service(namespace, label_selector=servings.MANAGED).items
    ]
    found += [
        f"Pod/{p.metadata.name}"
        for p in core.list_namespaced_pod(namespace, label_selector="nvlfleet.io/serving").items
    ]
    return [key for key in found if key not in ignore]


# ---------------------------------------------------------------------------------------------------------------
# The two runs, once for the module; each test below proves one property of how they ended


@dataclasses.dataclass
class Runs:
    """What the clean run and the crash run left, and what was observed on the way."""

    plans: list[Plan]
    cluster: servings.Cluster
    decoys: Decoys
    reference: dict[str, Any]  # the clean run's end state
    after: dict[str, Any]  # the crash run's end state
    clean_exit_code: int | None  # of the clean run's operator, stopped by SIGTERM
    finalizers_without_operator: list[str]  # servings a finalizer held after the clean run's operator stopped
    garbage_left: list[str]  # what garbage collection had not removed 300 s after the servings were deleted
    kill_exit_codes: list[int | None]  # of each SIGKILLed operator of the crash run
    final_operator_ran_throughout: bool


@pytest.fixture(scope="module")
def runs(
    api_client: client.ApiClient,
    module_namespace: str,
    kubeconfig: pathlib.Path,
    module_gb200_fleet: Callable[..., Any],
    tmp_path_factory: pytest.TempPathFactory,
    crd: None,
) -> Runs:
    namespace, tmp_path = module_namespace, tmp_path_factory.mktemp("crash-safety")
    plans = draw(SERVINGS, SEED)
    fleet = module_gb200_fleet(racks=plans[-1].rack + 1)
    cluster = servings.Cluster(api_client, namespace)
    decoys = Decoys(api_client, namespace)
    decoys.make(plans)
    operator = OperatorProcess(tmp_path / "operator", kubeconfig, [namespace], recheck_seconds=RECHECK_SECONDS)
    converge_timeout = 300 + 10 * SERVINGS  # passes run one at a time, a few seconds each at worst here

    try:
        # 1. The clean run.
        started = time.monotonic()
        operator.start().wait_ready(timeout=120)
        for plan in plans:
            cluster.create(spec_of(plan, fleet, plan.final_groups))
        await_convergence(api_client, namespace, plans, converge_timeout)
        clean_seconds = time.monotonic() - started
        clean_exit_code = operator.stop()
        reference = state(api_client, namespace, fleet, ignore=set(decoys.created))
        held = [o["metadata"]["name"] for o in cluster.list() if o["metadata"].get("finalizers")]

        for plan in plans:
            cluster.delete(plan.name)
        deadline = time.monotonic() + 300
        while (left := leftovers(api_client, namespace, set(decoys.created))) and time.monotonic() < deadline:
            time.sleep(2.0)

        # 2. The crash run: batches of servings arrive while the operator is killed and restarted.
        started = time.monotonic()
        kills, codes = kill_phase(operator, cluster, decoys, plans, fleet)
        kill_phase_seconds = time.monotonic() - started
        operator = OperatorProcess(
            tmp_path / "operator-final", kubeconfig, [namespace], recheck_seconds=RECHECK_SECONDS
        )
        operator.start().wait_ready(timeout=120)
        recovery_seconds = await_convergence(api_client, namespace, plans, converge_timeout)
        passes = pass_durations(operator.metrics_port)
        after = state(api_client, namespace, fleet, ignore=set(decoys.created))
        ran_throughout = operator.running()
    finally:
        operator.stop()
        print(f"--- {operator.log} ---\n{operator.tail()}")

    (tmp_path / "clean.json").write_text(json.dumps(reference, indent=1, sort_keys=True))
    (tmp_path / "crashed.json").write_text(json.dumps(after, indent=1, sort_keys=True))
    figures.record(
        f"crash_safety_{SERVINGS}_servings",
        {
            "servings": SERVINGS,
            "groups": expected_groups(plans),
            "racks": plans[-1].rack + 1,
            "kills": KILLS,
            "seed": SEED,
            "spec_changes_while_down": sum(p.final_groups != p.groups for p in plans),
            "decoys": len(decoys.created),
            "children_compared": len(reference["children"]),
            "clean_run_seconds": round(clean_seconds, 1),
            "kill_phase_seconds": round(kill_phase_seconds, 1),
            "converge_after_last_restart_seconds": round(recovery_seconds, 1),
            "kills_during_startup": sum(k["phase"] == "starting" for k in kills),
            "kills_while_reconciling": sum(k["phase"] == "reconciling" for k in kills),
            "kills_that_left_a_serving_half_written": sum(k["mid_pass"] for k in kills),
            "final_operator_passes": passes[0],
            "final_operator_mean_pass_seconds": round(passes[1] / passes[0], 2) if passes[0] else None,
            "kill_moments": kills,
        },
    )
    return Runs(plans, cluster, decoys, reference, after, clean_exit_code, held, left, codes, ran_throughout)


def kill_phase(
    operator: OperatorProcess, cluster: servings.Cluster, decoys: Decoys, plans: list[Plan], fleet: Any
) -> tuple[list[dict[str, Any]], list[int | None]]:
    """KILLS starts and SIGKILLs of ``operator``, batches of servings created between them and some specs changed
    while none runs; returns what each kill met and each killed operator's exit code."""
    rng = random.Random(SEED + 1)
    batches = [plans[i :: max(1, KILLS // 2)] for i in range(max(1, KILLS // 2))]
    change_round = {p.name: rng.randrange(KILLS // 2, KILLS) for p in plans if p.final_groups != p.groups}
    kills: list[dict[str, Any]] = []
    codes: list[int | None] = []
    for round_ in range(KILLS):
        operator.start()
        for plan in batches[round_] if round_ < len(batches) else []:
            created = cluster.create(spec_of(plan, fleet, plan.groups))
            if int(plan.name[1:]) % 5 == 0:
                decoys.attach(created)
        moment = kill_moment(operator, rng)
        this_start = operator.log.read_text(errors="replace").rsplit("==> ", 1)[-1]
        codes.append(operator.stop(kill=True))
        writes = re.findall(r" applied (\w+) ", this_start)
        kills.append(
            {
                **moment,
                "writes_before": len(writes),
                # A pass applies ComputeDomain, LeaderWorkerSet, Service in this order: a kill after either
                # of the first two left that serving half-written.
                "mid_pass": bool(writes) and writes[-1] != "Service",
                "servings_ready": sum(servings.is_ready(o) for o in cluster.list()),
            }
        )
        for plan in plans:  # while no operator runs
            if change_round.get(plan.name) == round_:
                cluster.patch_spec(plan.name, {"roles": {"decode": {"groups": plan.final_groups}}})
    return kills, codes


def expected_groups(plans: list[Plan]) -> int:
    """Groups that run in the end: every serving's final size, but the one whose Service name a user took."""
    return sum(p.final_groups for p in plans if p.name != conflicted(plans))


# -- on the way -------------------------------------------------------------------------------------------------


def test_sigterm_stops_the_clean_runs_operator_with_exit_code_0(runs: Runs) -> None:
    assert runs.clean_exit_code == 0


def test_nothing_holds_a_serving_for_a_stopped_operator(runs: Runs) -> None:
    # With no operator running the servings go at once.
    assert runs.finalizers_without_operator == []


def test_garbage_collection_removes_everything_the_deleted_servings_owned(runs: Runs) -> None:
    assert runs.garbage_left == [], f"garbage collection left {runs.garbage_left}"


def test_every_operator_of_the_crash_run_was_killed_not_exited(runs: Runs) -> None:
    for kill, code in enumerate(runs.kill_exit_codes, start=1):
        assert code == -9, f"the operator exited on its own (code {code}) before kill {kill}"


def test_the_last_operator_runs_throughout_the_final_convergence(runs: Runs) -> None:
    assert runs.final_operator_ran_throughout, "the operator exited during the final convergence"


# -- the crash run ends where the clean run ended, object for object ---------------------------------------------


def test_the_crash_run_leaves_the_same_children_as_the_clean_run(runs: Runs) -> None:
    assert sorted(runs.after["children"]) == sorted(runs.reference["children"])


def test_each_child_has_the_clean_runs_content(runs: Runs) -> None:
    assert differences(runs.after["children"], runs.reference["children"]) == []


def test_each_serving_has_the_clean_runs_placement_and_conditions(runs: Runs) -> None:
    assert differences(runs.after["servings"], runs.reference["servings"]) == []


def test_the_same_pods_run_in_each_rack(runs: Runs) -> None:
    assert runs.after["pods_per_rack"] == runs.reference["pods_per_rack"]


def test_every_group_runs_exactly_once(runs: Runs) -> None:
    running = sum(n for per in runs.after["pods_per_rack"].values() for n in per.values())
    assert running == expected_groups(runs.plans)


def test_each_serving_runs_its_final_size_in_its_own_rack(runs: Runs) -> None:
    for name, per_rack in runs.after["pods_per_rack"].items():
        plan = next(p for p in runs.plans if p.name == name)
        assert per_rack == {str(plan.rack): plan.final_groups}, name


def test_each_child_has_its_serving_as_its_one_controller(runs: Runs) -> None:
    assert all([o["controller"] for o in c["owners"]] == [True] for c in runs.after["children"].values())


def test_no_child_outlives_its_serving(runs: Runs) -> None:
    assert not [c for c in runs.after["children"].values() if c["owners"][0]["serving"].startswith("<gone")]


def test_no_user_object_that_looks_like_nvlfleets_is_modified_or_deleted(runs: Runs) -> None:
    assert runs.decoys.changes() == {}


def test_the_serving_whose_service_name_a_user_took_reports_name_conflict(runs: Runs) -> None:
    assert ("Warning", "NameConflict") in [(t, r) for t, r, _ in runs.cluster.events(conflicted(runs.plans))]
