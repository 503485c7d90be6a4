"""Bad input against the real API server and a running operator: refused at admission, or reported as a
condition; the operator never crash-loops and a healthy serving beside the bad ones keeps being reconciled.

The operator runs *without* its admission webhook: the webhook is a fast path for feedback (failurePolicy Ignore,
see nvlfleet.adapters.webhook), so what must hold without it is what is proven here — the CRD's schema and CEL
rules refuse what they can see, and the reconciler reports the rest as ``Ready=False`` (``InvalidSpec`` naming the
field, or a capacity condition for what needs cluster facts) while creating nothing for that serving.

Examples:

- hand-written nasty ones (huge numbers, unicode, 63/64-character names, negative and zero sizes, conflicting
  kernel settings, malformed price windows, extraArgs smuggling shell metacharacters, prefill/decode servings the
  P/D facts rule out), each with the outcome it must have (refused at a field / a condition naming a field /
  accepted and run);
- generated ones (tests/support/badinput.py): a constraint of the CRD schema broken at a random field (sent with
  ``fieldValidation=Strict``, as kubectl sends it), and GB200 decode shapes, which the API server must refuse
  exactly when they break the GB200 NVL72 rules.

At the end every pod template the operator wrote is checked for a shell, and the operator's log for a traceback.

The webhook kopf manages is cluster-wide: when another test's operator (with ``webhook=True``) runs at the same
time, a case expected to become a condition may instead be refused at admission by that webhook; that is
accepted only when the refusal names the same field, and counted in the figures.
Counts go to figures.py's file.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kubernetes import client
from kubernetes.client.rest import ApiException

from support import badinput, figures, servings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

Wait = Callable[..., Any]
PRICES = {"inputCacheHitPerMillion": 0.003, "inputCacheMissPerMillion": 0.15, "outputPerMillion": 0.6}
SHELLISH = "/$(HF_TOKEN);`id`|sh&&curl x"
WEBHOOK = 'admission webhook "validate-deepseekserving.nvlfleet.io"'


def window(name: str = "peak", start: str = "08:00", end: str = "20:00", multiplier: float = 1.5) -> dict[str, Any]:
    return {"name": name, "start": start, "end": end, "multiplier": multiplier}


def priced(*windows: dict[str, Any], **prices: Any) -> dict[str, Any]:
    return {"pricing": {**PRICES, **prices, "schedule": list(windows)}}


def decode(**fields: Any) -> dict[str, Any]:
    return {"roles": {"decode": fields}}


def parallelism(**fields: Any) -> dict[str, Any]:
    return decode(parallelism={"tensor": 1, "nodesPerGroup": 1, **fields})


# (case, changes to the spec or {"metadata": ...}, expected outcome, field the outcome names)
# Outcomes: "refused" at admission; "InvalidSpec" / "InsufficientCapacity" as Ready=False; "runs" (Ready).
NASTY: list[tuple[str, dict[str, Any], str, str]] = [
    ("groups 2^31", decode(groups=2**31), "refused", "spec.roles.decode.groups"),
    ("groups 10^20", decode(groups=10**20), "refused", "spec.roles.decode.groups"),
    ("maxModelLen 2^63", {"maxModelLen": 2**63}, "refused", "spec.maxModelLen"),
    ("multiplier 1e308", priced(window(multiplier=1e308)), "refused", "spec.pricing.schedule[0].multiplier"),
    ("negative price", priced(outputPerMillion=-0.6), "refused", "spec.pricing.outputPerMillion"),
    ("unicode name", {"metadata": {"name": "deepseek-ü"}}, "refused", "metadata.name"),
    ("emoji served name", {"model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "servedName": "ds😀"}}, "refused",
     "spec.model.servedName"),
    ("unicode env name", {"extraEnv": [{"name": "NCCL_É", "value": "1"}]}, "refused", "spec.extraEnv[0].name"),
    ("window name of 64", priced(window(name="w" * 64)), "refused", "spec.pricing.schedule[0].name"),
    ("groups -1", decode(groups=-1), "refused", "spec.roles.decode.groups"),
    ("tensor 0", parallelism(tensor=0), "refused", "spec.roles.decode.parallelism.tensor"),
    ("data 0", decode(parallelism={"tensor": 1, "data": 0}), "refused", "spec.roles.decode.parallelism.data"),
    ("nodes 0", parallelism(nodesPerGroup=0), "refused", "spec.roles.decode.parallelism.nodesPerGroup"),
    ("speculative tokens 0", {"speculative": {"numSpeculativeTokens": 0}}, "refused",
     "spec.speculative.numSpeculativeTokens"),
    ("max seqs 0", decode(maxNumSeqs=0), "refused", "spec.roles.decode.maxNumSeqs"),
    ("capture size 0", {"kernels": {"cudaGraph": {"captureSizes": [0, 8]}}}, "refused",
     "spec.kernels.cudaGraph.captureSizes[0]"),
    ("negative shm", {"pod": {"shmSize": "-1Gi"}}, "refused", "spec.pod.shmSize"),
    ("graph window inverted", {"kernels": {"cudaGraph": {"minBatch": 512, "maxBatch": 64}}}, "refused",
     "spec.kernels.cudaGraph"),
    ("window at 24:00", priced(window(start="24:00")), "refused", "spec.pricing.schedule[0].start"),
    ("window at 7:00", priced(window(start="7:00")), "refused", "spec.pricing.schedule[0].start"),
    ("empty window", priced(window(start="07:00", end="07:00")), "refused", "spec.pricing.schedule[0]"),
    ("multiplier 0", priced(window(multiplier=0)), "refused", "spec.pricing.schedule[0].multiplier"),
    ("lower-case currency", priced(currency="usd"), "refused", "spec.pricing.currency"),
    ("name of 64", {"metadata": {"name": "n" * 64}}, "refused", "metadata.name"),
    ("DBO on V4.1", {"kernels": {"dualBatchOverlap": {"enabled": True}}}, "InvalidSpec",
     "spec.kernels.dualBatchOverlap.enabled"),
    ("mega attention, fp8 rows", {"kernels": {"attentionBackend": "FLASHMLA_MEGA_ATTN_DSV41",
                                              "kvCacheDtype": "fp8_e4m3"}}, "InvalidSpec", "spec.kernels.kvCacheDtype"),
    ("overlapping windows", priced(window("a", "01:00", "05:00"), window("b", "04:00", "06:00", 0.5)), "InvalidSpec",
     "spec.pricing.schedule[1]"),
    ("overlap across midnight", priced(window("a", "22:00", "02:00"), window("b", "01:00", "03:00", 0.5)),
     "InvalidSpec", "spec.pricing.schedule[1]"),
    ("positional shell line", {"extraArgs": ["; rm -rf /"]}, "InvalidSpec", "spec.extraArgs[0]"),
    ("bash -c", {"extraArgs": ["bash", "-c", "id"]}, "InvalidSpec", "spec.extraArgs[0]"),
    ("owned flag with a shell line", {"extraArgs": ["--served-model-name", "x; rm -rf /"]}, "InvalidSpec",
     "spec.extraArgs[0]"),
    ("line break in an argument", {"extraArgs": ["--root-path", "/a\nb"]}, "InvalidSpec", "spec.extraArgs[1]"),
    ("unicode pod label value", {"pod": {"labels": {"team": "ünïcode"}}}, "InvalidSpec", 'spec.pod.labels["team"]'),
    ("pod label value of 64", {"pod": {"labels": {"team": "t" * 64}}}, "InvalidSpec", 'spec.pod.labels["team"]'),
    ("annotation key with a space", {"pod": {"annotations": {"my note": "x"}}}, "InvalidSpec",
     'spec.pod.annotations["my note"]'),
    ("group bigger than the free trays", parallelism(nodesPerGroup=18), "InsufficientCapacity", ""),
    ("GB300 on a GB200 fleet", {"gpu": "GB300"}, "InsufficientCapacity", ""),
    ("name of 63", {"metadata": {"name": "n" * 63}}, "runs", ""),
    ("shell metacharacters as a value", {"extraArgs": ["--root-path", SHELLISH]}, "runs", ""),
    ("zero groups", decode(groups=0), "runs", ""),
    # Prefill/decode servings the P/D facts rule out (badinput.PD_REFUSALS): only validation sees them.
    *((f"P/D: {case}", changes, "InvalidSpec", field) for case, changes, field, _ in badinput.PD_REFUSALS),
]  # fmt: skip


def nasty_object(index: int, changes: dict[str, Any], fleet: Any) -> dict[str, Any]:
    obj = servings.serving(f"nasty-{index:02d}", fleet, groups=1, nodes=1)
    changes = copy.deepcopy(changes)
    obj["metadata"].update(changes.pop("metadata", {}))
    obj["spec"] = _merge(obj["spec"], changes)
    return obj


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def submit(custom: client.CustomObjectsApi, namespace: str, obj: dict[str, Any], *, dry_run: bool = False) -> str:
    """ "" when admitted, else the API server's refusal (status and message)."""
    try:
        custom.create_namespaced_custom_object(
            servings.GROUP,
            servings.VERSION,
            namespace,
            servings.PLURAL,
            obj,
            field_validation="Strict",
            dry_run="All" if dry_run else None,
        )
    except ApiException as error:
        assert error.status in (400, 422), error.body
        return f"{error.status}: {json.loads(error.body).get('message', error.body)}"
    return ""


# ---------------------------------------------------------------------------------------------------------------
# One operator, one rack and every hand-written case in one namespace for the whole module; each test below proves
# one behaviour of that scene. The last tests check the operator survived all of it.


@dataclasses.dataclass
class Scene:
    """What the module's tests share: the namespace's readers, the running operator, what admission said."""

    cluster: servings.Cluster
    custom: client.CustomObjectsApi
    namespace: str
    fleet: Any
    operator: Any
    pid: int
    refusals: dict[str, str]  # case -> the API server's refusal ("" when admitted)
    admitted: dict[str, tuple[str, str, str]]  # serving name -> (case, outcome, field)
    by_another_webhook: list[str]
    figures: dict[str, Any]


@pytest.fixture(scope="module")
def scene(
    module_cluster: servings.Cluster,
    module_namespace: str,
    module_gb200_fleet: Callable[..., Any],
    module_start_operator: Callable[..., Any],
    api_client: client.ApiClient,
    wait_for: Wait,
) -> Iterator[Scene]:
    """A Ready canary serving, then every hand-written case submitted once: they sit in the namespace together
    while the tests run. The figures are recorded when every test that measures one has run."""
    fleet = module_gb200_fleet(racks=1)
    operator = module_start_operator(recheck_seconds=30)
    custom = client.CustomObjectsApi(api_client)
    module_cluster.create(servings.serving("canary", fleet, groups=1, nodes=1))
    wait_for(lambda: module_cluster.ready("canary"), 120, "the canary serving to be Ready")
    found = Scene(module_cluster, custom, module_namespace, fleet, operator, operator.pid, {}, {}, [], {})
    for index, (case, changes, outcome, field) in enumerate(NASTY):
        obj = nasty_object(index, changes, fleet)
        refusal = submit(custom, module_namespace, obj)
        found.refusals[case] = refusal
        if outcome == "InvalidSpec" and refusal and WEBHOOK in refusal:
            # Another test's operator serves the (cluster-wide) webhook right now: refused early, at the field.
            found.by_another_webhook.append(case)
        elif outcome != "refused" and refusal == "":
            found.admitted[obj["metadata"]["name"]] = (case, outcome, field)
    yield found
    if {"generated", "shapes", "canary_seconds"} <= set(found.figures):
        outcomes = [o for _, _, o, _ in NASTY]
        generated, shapes = found.figures["generated"], found.figures["shapes"]
        figures.record(
            "bad_input",
            {
                "hand_written": len(NASTY),
                "hand_written_refused_at_admission": outcomes.count("refused"),
                "hand_written_invalid_spec_condition": outcomes.count("InvalidSpec") - len(found.by_another_webhook),
                "hand_written_refused_by_another_operators_webhook": len(found.by_another_webhook),
                "hand_written_capacity_condition": outcomes.count("InsufficientCapacity"),
                "hand_written_accepted_and_run": outcomes.count("runs"),
                "generated_schema_violations": generated["refused"] + generated["admitted"],
                "generated_schema_violations_refused": generated["refused"],
                "generated_gb200_shapes": shapes["refused"] + shapes["admitted"],
                "generated_gb200_shapes_refused_by_cel": shapes["refused"],
                "operator_restarts": 0,
                "tracebacks_in_operator_log": 0,
                "healthy_serving_scaled_seconds": round(found.figures["canary_seconds"], 1),
            },
        )


def _cases(outcome: str) -> list[Any]:
    return [pytest.param(case, field, id=case) for case, _, o, field in NASTY if o == outcome]


@pytest.mark.parametrize(("case", "field"), _cases("refused"))
def test_a_case_the_schema_can_see_is_refused_at_admission_naming_its_field(
    scene: Scene, case: str, field: str
) -> None:
    refusal = scene.refusals[case]
    assert refusal and field in refusal and WEBHOOK not in refusal, f"{case}: {refusal or 'admitted'}"


@pytest.mark.parametrize(("case", "field"), _cases("InvalidSpec"))
def test_a_case_only_validation_sees_is_admitted_or_refused_by_a_webhook_at_its_field(
    scene: Scene, case: str, field: str
) -> None:
    refusal = scene.refusals[case]
    if case in scene.by_another_webhook:
        assert field in refusal, f"{case}: {refusal}"
    else:
        assert refusal == "", f"{case}: {refusal}"


@pytest.mark.parametrize(("case", "field"), [*_cases("InsufficientCapacity"), *_cases("runs")])
def test_a_case_that_needs_cluster_facts_or_is_fine_is_admitted(scene: Scene, case: str, field: str) -> None:
    assert scene.refusals[case] == "", f"{case}: {scene.refusals[case]}"


def test_generated_schema_violations_are_all_refused_at_admission(scene: Scene) -> None:
    generated = {"refused": 0, "admitted": 0}

    @settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(badinput.schema_violations())
    def schema_violation_is_refused(violation: badinput.Violation) -> None:
        obj = violation.apply(badinput.base_serving("generated"))
        refusal = submit(scene.custom, scene.namespace, obj, dry_run=True)
        generated["refused" if refusal else "admitted"] += 1
        assert refusal, f"admitted: {violation}"

    schema_violation_is_refused()
    scene.figures["generated"] = generated


def test_generated_gb200_shapes_are_refused_exactly_when_they_break_the_nvl72_rules(scene: Scene) -> None:
    shapes = {"refused": 0, "admitted": 0}

    @settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(badinput.gb200_shapes())
    def shape_is_refused_iff_gb200_cannot_run_it(shape: badinput.Shape) -> None:
        obj = shape.apply(badinput.base_serving("shape"))
        refusal = submit(scene.custom, scene.namespace, obj, dry_run=True)
        shapes["refused" if refusal else "admitted"] += 1
        broken = badinput.breaks_gb200_rules(shape)
        assert bool(refusal) == (broken is not None), (shape, broken, refusal)
        if refusal:
            assert "spec.roles.decode" in refusal or "spec: Invalid value" in refusal, refusal

    shape_is_refused_iff_gb200_cannot_run_it()
    scene.figures["shapes"] = shapes


def test_the_healthy_serving_keeps_being_reconciled_beside_the_bad_ones(scene: Scene, wait_for: Wait) -> None:
    cluster = scene.cluster
    cluster.patch_spec("canary", {"roles": {"decode": {"groups": 2}}})
    started = time.monotonic()
    wait_for(lambda: cluster.ready("canary") and cluster.get("canary")["status"]["ready"] == "2/2", 120, "canary 2/2")
    scene.figures["canary_seconds"] = time.monotonic() - started


@pytest.fixture(scope="module")
def reported(scene: Scene, wait_for: Wait) -> dict[str, tuple[str, str, str]]:
    """The admitted cases, once every one of them carries a condition and the good ones are Ready."""

    def has_conditions(name: str) -> bool:
        obj = scene.cluster.get(name)
        status = obj.get("status") or {}
        return status.get("observedGeneration") == obj["metadata"]["generation"] and bool(status.get("conditions"))

    admitted = scene.admitted
    wait_for(lambda: all(has_conditions(n) for n in admitted), 180, "a condition on every admitted bad serving")
    wait_for(
        lambda: all(scene.cluster.ready(n) for n, (_, o, _) in admitted.items() if o == "runs"), 180, "the good ones"
    )
    return admitted


def _admitted(reported: dict[str, tuple[str, str, str]], outcome: str) -> list[tuple[str, str, str]]:
    found = [(name, case, field) for name, (case, o, field) in reported.items() if o == outcome]
    assert found, f"no admitted case expected to end as {outcome}"
    return found


def owned_by(scene: Scene, name: str) -> list[str]:
    """Children of the serving by owner reference (a 64-character name is no label value to select by)."""
    found = []
    for group, version, plural in (servings.LWS, servings.CD):
        for obj in scene.custom.list_namespaced_custom_object(group, version, scene.namespace, plural)["items"]:
            if any(ref["name"] == name for ref in obj["metadata"].get("ownerReferences") or []):
                found.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return found


def test_an_admitted_invalid_spec_is_reported_as_invalid_spec_naming_its_field(
    scene: Scene, reported: dict[str, tuple[str, str, str]]
) -> None:
    for name, case, field in _admitted(reported, "InvalidSpec"):
        ready = servings.condition_of(scene.cluster.get(name), "Ready")
        assert ready is not None, case
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), f"{case}: {ready}"
        assert field in ready["message"], f"{case}: {ready['message']}"


def test_a_serving_the_fleet_cannot_hold_is_reported_as_insufficient_capacity(
    scene: Scene, reported: dict[str, tuple[str, str, str]]
) -> None:
    for name, case, _ in _admitted(reported, "InsufficientCapacity"):
        obj = scene.cluster.get(name)
        assert servings.condition_of(obj, "Ready") is not None, case
        assert scene.cluster.is_(name, "InsufficientCapacity"), f"{case}: {obj['status']['conditions']}"


def test_an_odd_but_valid_serving_runs(scene: Scene, reported: dict[str, tuple[str, str, str]]) -> None:
    for name, case, _ in _admitted(reported, "runs"):
        ready = servings.condition_of(scene.cluster.get(name), "Ready")
        assert ready is not None, case
        assert ready["status"] == "True", f"{case}: {ready}"


def test_nothing_is_created_for_a_serving_that_cannot_run(
    scene: Scene, reported: dict[str, tuple[str, str, str]]
) -> None:
    for name, (case, outcome, _) in reported.items():
        if outcome != "runs":
            assert owned_by(scene, name) == [], f"{case}: something was created"


def test_a_value_full_of_shell_metacharacters_reaches_the_pod_as_one_argument_after_no_shell(
    scene: Scene, reported: dict[str, tuple[str, str, str]]
) -> None:
    shellish = next(n for n, (c, _, _) in reported.items() if c == "shell metacharacters as a value")
    (pod,) = scene.cluster.pods(shellish)
    command = pod.spec.containers[0].command
    badinput.assert_no_shell(command)
    assert command[command.index("--root-path") + 1] == SHELLISH.replace("$(", "$$(")


def test_no_pod_template_the_operator_wrote_runs_a_shell(
    scene: Scene, reported: dict[str, tuple[str, str, str]]
) -> None:
    lws_items = scene.custom.list_namespaced_custom_object(*servings.LWS[:2], scene.namespace, servings.LWS[2])
    for lws in lws_items["items"]:
        template = lws["spec"]["leaderWorkerTemplate"]
        for pod_template in (template.get("leaderTemplate"), template["workerTemplate"]):
            for container in (pod_template or {}).get("spec", {}).get("containers", []):
                badinput.assert_no_shell([*container.get("command", []), *container.get("args", [])])


def test_the_operator_neither_died_nor_restarted(scene: Scene, reported: dict[str, tuple[str, str, str]]) -> None:
    time.sleep(5)
    assert scene.operator.running() and scene.operator.pid == scene.pid, "the operator died or was restarted"


def test_the_operator_logged_no_traceback(scene: Scene, reported: dict[str, tuple[str, str, str]]) -> None:
    log = scene.operator.log.read_text(errors="replace")
    assert "Traceback" not in log, scene.operator.tail(120)
