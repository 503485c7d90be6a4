"""The router: the packaged vllm-router facts against the reference and the wheel, and what nvlfleet renders and
refuses for spec.router."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import pytest

from nvlfleet.api import names
from nvlfleet.core import render, router, validation
from nvlfleet.facts import vllm_router
from support import golden_cases, routerflags, routermetrics
from support import servingbuilder as sb

REPO = pathlib.Path(__file__).resolve().parents[2]
DISAGGREGATION = REPO.parent / "shared" / "reference" / "vllm-0.33.0" / "disaggregation.md"
PACKAGED = REPO / "operator" / "nvlfleet" / "facts" / "data" / "vllm-router" / vllm_router.VERSION
ROUTER_KINDS = ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]

FACTS = vllm_router.load()
installed = pytest.mark.skipif(
    routerflags.installed_version() is None, reason="vllm-router is not installed (pip install vllm-router==0.1.17)"
)


def reference() -> str:
    if not DISAGGREGATION.is_file():
        pytest.skip(f"{DISAGGREGATION} is absent: the drift check needs shared/ beside the clone")
    return DISAGGREGATION.read_text()


def section(text: str, number: int) -> str:
    """Section ``## <number>.`` of disaggregation.md, up to the next one."""
    return text.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]


def router_of(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The router's objects by kind (the Service is the one selecting router pods)."""
    out = {}
    for obj in manifests:
        if obj["metadata"]["labels"].get(names.COMPONENT_LABEL) == names.ROUTER_COMPONENT:
            out[obj["kind"]] = obj
    return out


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def router_args(serving: Any) -> list[str]:
    return list(container(router_of(render.render(serving))["Deployment"])["args"])


# --- the facts ---------------------------------------------------------------------------------------------------


def test_the_packaged_defaults_are_the_ones_disaggregation_md_states() -> None:
    text, d = reference(), FACTS.defaults
    assert f"`--host {d['--host']}` and `--port {d['--port']}` are the defaults" in section(text, 7)
    assert f"`--policy {d['--policy']}` by default" in section(text, 7)
    assert f"`--prometheus-host` (default **{d['--prometheus-host']}**)" in section(text, 6)
    assert f"`--prometheus-port` (default {d['--prometheus-port']};" in section(text, 6)
    assert f"defaults to **{d['--service-discovery-port']}** in the launcher" in section(text, 7)


def test_the_packaged_defaults_are_the_ones_the_flags_file_read_from_the_wheel_has() -> None:
    assert {flag: FACTS.flag(flag).default for flag in FACTS.defaults} == dict(FACTS.defaults)


def test_every_router_flag_disaggregation_md_names_is_in_the_packaged_flags() -> None:
    text = reference()
    named = set(re.findall(r"`(--[a-z][a-z-]*)", section(text, 6) + section(text, 7)))
    assert named  # the sections were found
    assert named - set(FACTS.flags) == set()
    connectors = re.search(r"`--kv-connector ([a-z|]+)` \(default ([a-z]+)\)", section(text, 7))
    assert connectors is not None
    assert FACTS.flag("--kv-connector").choices == tuple(connectors.group(1).split("|"))
    assert FACTS.flag("--kv-connector").default == connectors.group(2)


def test_the_default_policy_and_the_refusal_rest_on_what_the_reference_says() -> None:
    question = section(reference(), 9)
    assert "`/v1/chat/completions/render`" in question and "`--enable-scale-out`" in question
    assert "`power_of_two` polls `/get_load` only for URLs known at start-up" in question
    assert FACTS.default_policy in FACTS.policies and FACTS.default_policy not in FACTS.refused_policies
    assert set(FACTS.refused_policies) <= set(FACTS.policies)


@installed
def test_the_installed_wheel_is_the_pinned_version() -> None:
    assert routerflags.installed_version() == vllm_router.VERSION == FACTS.version


@installed
def test_the_packaged_flags_are_what_the_installed_wheel_defines() -> None:
    packaged = json.loads((PACKAGED / "cli-flags.json").read_text())["flags"]
    assert packaged == routerflags.flags(), "refresh it: see tests/support/routerflags.py"


# --- the metrics -------------------------------------------------------------------------------------------------


def router_metrics_named_by_the_reference() -> dict[str, set[str]]:
    """Each family disaggregation.md §6 "Router metrics" names, with the labels it gives in braces."""
    text = section(reference(), 6).split("**Router metrics**", 1)[1].split("\n\n", 1)[0]
    named: dict[str, set[str]] = {}
    for name, labels in re.findall(r"`(vllm_router_[a-z_*]+)(?:\{([a-z_,]+)\})?`", text):
        named[name] = set(labels.split(",")) if labels else set()
    return named


@installed
def test_the_packaged_metric_families_are_what_the_installed_router_exposes() -> None:
    """Every family with its type and own labels, as the real binary writes them in the provoked conditions."""
    packaged = {m.family: {"type": m.type, "labels": list(m.labels)} for m in FACTS.metrics.values()}
    exposed = routermetrics.families(routermetrics.exposition())
    assert packaged == exposed, "refresh metrics.yaml: see tests/support/routermetrics.py"


def test_every_router_metric_disaggregation_md_names_is_exposed_or_said_why_not() -> None:
    named = router_metrics_named_by_the_reference()
    assert len(named) >= 10  # the list was found
    assert set(named) - set(FACTS.metrics) - set(FACTS.unseen_metrics) == set()
    assert set(FACTS.unseen_metrics) <= set(named)  # nothing unseen that the reference does not name


def test_the_labels_disaggregation_md_gives_router_metrics_are_the_ones_they_carry() -> None:
    named = router_metrics_named_by_the_reference()
    given = {name: labels for name, labels in named.items() if labels and name in FACTS.metrics}
    assert given  # the reference gives labels for some
    assert {name: set(FACTS.metric(name).labels) for name in given} == given


# --- the command line --------------------------------------------------------------------------------------------


def known_to_the_facts(argv: list[str]) -> list[str]:
    """What in ``argv`` the packaged facts do not allow: unknown flags, wrong value counts, values off the choices."""
    wrong, i = [], 0
    while i < len(argv):
        spelling = argv[i]
        if not FACTS.knows(spelling):
            wrong.append(f"{spelling}: unknown")
            i += 1
            continue
        flag = FACTS.flag(spelling)
        values = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        expected = {None: 1, "0": 0}.get(flag.nargs)
        if (expected is not None and len(values) != expected) or (flag.nargs == "+" and not values):
            wrong.append(f"{spelling}: {len(values)} values")
        if flag.choices is not None and any(v not in flag.choices for v in values):
            wrong.append(f"{spelling}: {values} not in {flag.choices}")
    return wrong


@pytest.mark.parametrize("name", sorted(golden_cases.cases()))
def test_every_rendered_router_flag_is_one_the_pinned_router_accepts(name: str) -> None:
    serving, placement = golden_cases.cases()[name]
    deployment = router_of(render.render(serving, placement))["Deployment"]
    assert container(deployment)["command"] == [FACTS.binary]
    assert known_to_the_facts(container(deployment)["args"]) == []


PD = {"prefill": sb.role(groups=1, tensor=1, nodes=2)}


def leaders_of(role: str) -> dict[str, str]:
    return {names.SERVING_LABEL: "dsv41", names.ROLE_LABEL: role, names.LWS_WORKER_INDEX_LABEL: "0"}


@installed
def test_the_installed_router_parses_the_rendered_command_line_as_meant() -> None:
    args = routerflags.accepts(router_args(sb.serving()))

    assert (args.host, args.port, args.prometheus_host, args.prometheus_port) == ("0.0.0.0", 8000, "0.0.0.0", 29000)
    assert args.service_discovery and args.service_discovery_namespace == "llm"
    assert args.service_discovery_port == 8000  # vLLM's --port on the leaders, not the launcher's 80
    assert args.selector == leaders_of("decode")
    assert args.policy == FACTS.default_policy and not args.vllm_pd_disaggregation


@installed
def test_a_leader_that_vanishes_while_the_router_waits_for_it_holds_up_discovery_for_seconds_not_minutes() -> None:
    args = routerflags.accepts(router_args(sb.serving(**PD)))

    # The router's defaults are 600 s checked every 30 s; discovery handles one pod event at a time.
    assert args.worker_startup_timeout_secs == router.WORKER_STARTUP_TIMEOUT_SECONDS <= 30
    assert args.worker_startup_check_interval == router.WORKER_STARTUP_CHECK_SECONDS < 30


@installed
def test_the_installed_router_reads_p_d_mode_over_the_leaders_of_both_roles() -> None:
    args = routerflags.accepts(router_args(sb.serving(**PD)))

    assert args.vllm_pd_disaggregation and args.kv_connector == "nixl"
    assert args.prefill_selector == leaders_of("prefill") and args.decode_selector == leaders_of("decode")
    assert args.service_discovery and args.service_discovery_namespace == "llm" and args.service_discovery_port == 8000
    assert args.host == "0.0.0.0" and args.prometheus_host == "0.0.0.0"


def test_an_explicit_policy_is_rendered() -> None:
    args = router_args(sb.serving(router={"policy": "consistent_hash"}))
    assert args[args.index("--policy") + 1] == "consistent_hash"


# --- the objects -------------------------------------------------------------------------------------------------


def test_every_serving_gets_a_router_named_after_it_in_its_namespace() -> None:
    manifests = render.render(sb.serving())
    objects = router_of(manifests)

    assert [o["kind"] for o in manifests if o["kind"] in objects and o in objects.values()] == ROUTER_KINDS
    assert {(o["metadata"]["name"], o["metadata"]["namespace"]) for o in objects.values()} == {("dsv41-router", "llm")}
    assert render.endpoint(sb.serving()) == "http://dsv41-router.llm.svc:8000"


def selector_after(args: list[str], flag: str) -> dict[str, str]:
    start = args.index(flag) + 1
    end = next(i for i in range(start, len(args)) if args[i].startswith("--"))
    return dict(term.split("=", 1) for term in args[start:end])


def engine_pods(manifests: list[dict[str, Any]], role: str) -> list[dict[str, str]]:
    """Labels of a leader (index 0) and a worker (index 1) of each LeaderWorkerSet of ``role``."""
    out = []
    for lws in (m for m in manifests if m["kind"] == "LeaderWorkerSet"):
        if lws["metadata"]["labels"][names.ROLE_LABEL] == role:
            labels = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
            out += [{**labels, names.LWS_WORKER_INDEX_LABEL: index} for index in ("0", "1")]
    return out


def picked(wanted: dict[str, str], pods: list[dict[str, str]]) -> list[str]:
    return [p[names.LWS_WORKER_INDEX_LABEL] for p in pods if wanted.items() <= p.items()]


def test_without_prefill_discovery_matches_the_decode_leaders_and_nothing_else() -> None:
    manifests = render.render(sb.serving(nodes=2))
    wanted = selector_after(router_args(sb.serving(nodes=2)), "--selector")

    assert picked(wanted, engine_pods(manifests, "decode")) == ["0"]
    assert not picked(wanted, [router_of(manifests)["Deployment"]["spec"]["template"]["metadata"]["labels"]])


def test_p_d_discovery_matches_each_roles_leaders_and_nothing_else() -> None:
    serving = sb.serving(**PD)
    manifests, args = render.render(serving), router_args(serving)
    prefill, decode = selector_after(args, "--prefill-selector"), selector_after(args, "--decode-selector")

    assert "--vllm-pd-disaggregation" in args and "--selector" not in args
    assert picked(prefill, engine_pods(manifests, "prefill")) == ["0"] and not picked(
        prefill, engine_pods(manifests, "decode")
    )
    assert picked(decode, engine_pods(manifests, "decode")) == ["0"] and not picked(
        decode, engine_pods(manifests, "prefill")
    )
    router_pod = router_of(manifests)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert not picked(prefill, [router_pod]) and not picked(decode, [router_pod])


def test_the_router_names_the_serving_connector_as_its_own_kv_connector() -> None:
    args = router_args(sb.serving(**PD, disaggregation={"kvConnector": "NixlPushConnector"}))
    assert args[args.index("--kv-connector") + 1] == "nixl"


def test_the_router_service_selects_the_router_pods_and_no_engine() -> None:
    manifests = render.render(sb.serving())
    objects = router_of(manifests)
    wanted = objects["Service"]["spec"]["selector"]
    assert wanted.items() <= objects["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    assert wanted == objects["Deployment"]["spec"]["selector"]["matchLabels"]
    for lws in (m for m in manifests if m["kind"] == "LeaderWorkerSet"):
        for template in lws["spec"]["leaderWorkerTemplate"].values():
            if isinstance(template, dict):
                assert not wanted.items() <= template["metadata"]["labels"].items()


def test_the_router_may_read_pods_in_its_namespace_and_nothing_else() -> None:
    objects = router_of(render.render(sb.serving()))
    assert objects["Role"]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert set(FACTS.discovery_pod_verbs) <= set(objects["Role"]["rules"][0]["verbs"])
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dsv41-router"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dsv41-router", "namespace": "llm"}]
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dsv41-router"
    args = container(objects["Deployment"])["args"]
    assert args[args.index("--service-discovery-namespace") + 1] == "llm"  # never cluster-wide


def test_with_pod_monitoring_the_routers_exporter_is_scraped_as_the_engines_are() -> None:
    objects = router_of(render.render(sb.serving(monitoring={"podMonitor": True})))
    monitor = objects["PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"] == objects["Service"]["spec"]["selector"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in container(objects["Deployment"])["ports"]}
    args = container(objects["Deployment"])["args"]
    assert ports[endpoint["port"]] == int(args[args.index("--prometheus-port") + 1])
    assert endpoint["relabelings"][0]["targetLabel"] == "serving"
    assert "PodMonitor" not in router_of(render.render(sb.serving()))  # off by default, as for the engines


def test_the_router_pod_is_probed_on_the_routers_own_endpoints_and_runs_unprivileged() -> None:
    deployment = router_of(render.render(sb.serving()))["Deployment"]
    c = container(deployment)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readiness", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/liveness", "port": "http"}
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]} and c["securityContext"]["readOnlyRootFilesystem"]
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])


def test_replicas_image_and_resources_come_from_the_spec_in_the_api_servers_spelling() -> None:
    serving = sb.serving(
        router={
            "replicas": 3,
            "image": "registry.example/router:1",
            "resources": {"requests": {"cpu": "2000m", "memory": "1024Mi"}, "limits": {"memory": "3Gi"}},
        }
    )
    deployment = router_of(render.render(serving))["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    assert container(deployment)["image"] == "registry.example/router:1"
    assert container(deployment)["resources"] == {
        "requests": {"cpu": "2", "memory": "1Gi"},
        "limits": {"memory": "3Gi"},
    }


@pytest.mark.parametrize(
    ("given", "stored"),
    [("2000m", "2"), ("500m", "500m"), ("1024Mi", "1Gi"), ("1536Mi", "1536Mi"), ("2000", "2k"), ("1Gi", "1Gi")],
)
def test_quantities_are_rendered_as_the_api_server_stores_them(given: str, stored: str) -> None:
    assert router.canonical_quantity(given) == stored


def test_a_disabled_router_leaves_only_the_per_role_services() -> None:
    serving = sb.serving(router={"enabled": False})
    manifests = render.render(serving)
    assert router_of(manifests) == {}
    assert [m["metadata"]["name"] for m in manifests if m["kind"] == "Service"] == ["dsv41-decode"]
    assert render.endpoint(serving) is None


# --- explain and validation --------------------------------------------------------------------------------------


def test_explain_gives_the_default_policy_with_the_facts_reason() -> None:
    lines = render.explain_router(sb.serving())
    assert f"policy = {FACTS.default_policy}  (nvlfleet's default for vllm-router 0.1.17: " in lines[1]
    assert FACTS.default_policy_reason in lines[1]
    assert lines[0].startswith("endpoint = http://dsv41-router.llm.svc:8000")
    assert render.explain_router(sb.serving(router={"policy": "random"}))[1] == "policy = random  (spec.router.policy)"


def test_explain_says_a_p_d_serving_is_routed_in_p_d_mode_over_both_roles() -> None:
    lines = render.explain_router(sb.serving(**PD))
    assert any(line.startswith("prefill engines = the prefill group leaders") for line in lines)
    assert any(line.startswith("mode = --vllm-pd-disaggregation --kv-connector nixl") for line in lines)


def errors_of(**router_spec: Any) -> dict[str, str]:
    return {p.path: p.message for p in validation.validate(sb.serving_dict(router=router_spec))}


def test_a_policy_the_router_does_not_have_is_refused_with_its_choices() -> None:
    message = errors_of(policy="fastest")["spec.router.policy"]
    assert "vllm-router 0.1.17 has no routing policy 'fastest'" in message and "round_robin" in message


def test_a_policy_the_facts_rule_out_under_kubernetes_discovery_is_refused_with_the_reason() -> None:
    message = errors_of(policy="power_of_two")["spec.router.policy"]
    assert message.startswith("power_of_two cannot work behind Kubernetes service discovery")
    assert FACTS.refused_policies["power_of_two"] in message


def test_a_limit_below_the_request_is_refused_at_the_limit() -> None:
    found = errors_of(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}})
    assert found == {
        "spec.router.resources.limits.cpu": "the limit 1500m is below the request 2 (Kubernetes refuses such a pod)"
    }


def test_a_valid_router_spec_is_accepted() -> None:
    assert errors_of(policy="cache_aware", replicas=2, resources={"limits": {"cpu": "4", "memory": "2Gi"}}) == {}


def test_router_fields_are_checked_at_the_field() -> None:
    assert "spec.router.replicas" in errors_of(replicas=0)
    assert "spec.router.resources.requests.cpu" in errors_of(resources={"requests": {"cpu": "0.5"}})
    assert "spec.router.typo" in errors_of(typo=True)
