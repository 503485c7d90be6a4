"""How the operator process is put together: ``nvlfleet run`` turns its flags into the operator's ``Config`` (and
refuses ports it could not listen on, in one line), and ``kopf run -m nvlfleet.adapters.main`` (no flags, an empty
``memo``) builds the operator from ``NVLFLEET_*``."""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import socket
from collections.abc import Iterator

import kopf
import pytest

from nvlfleet.adapters import main, operator
from nvlfleet.adapters.config import Config
from nvlfleet.api import policy
from nvlfleet.commands import run


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nvlfleet run", exit_on_error=False)
    run.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_nvlfleet_runs_flags_become_the_operators_settings() -> None:
    args = parsed(
        "--namespace", "team-a", "--namespace", "team-b", "--kubeconfig", "/tmp/kubeconfig",
        "--bind-address", "127.0.0.1", "--metrics-port", "9091", "--webhook-port", "9443",
        "--webhook-host", "10.0.0.7", "--webhook-cert-dir", "/certs", "--recheck-seconds", "3",
        "--scrape-seconds", "5", "--status-metrics-seconds", "2", "--passes-at-once", "2",
    )  # fmt: skip

    assert run.config_of(args) == Config(
        namespaces=frozenset({"team-a", "team-b"}),
        recheck_seconds=3.0,
        bind_address="127.0.0.1",
        metrics_port=9091,
        webhook_port=9443,
        webhook_host="10.0.0.7",
        webhook_cert_dir="/certs",
        scrape_seconds=5.0,
        status_metrics_seconds=2.0,
        passes_at_once=2,
        kubeconfig="/tmp/kubeconfig",
    )


def test_with_namespaces_kopf_watches_only_them() -> None:
    scope = run.kopf_scope(run.config_of(parsed("--namespace", "team-b", "--namespace", "team-a")))
    assert scope == (False, ["team-a", "team-b"])  # not cluster-wide: those namespaces only


def test_without_namespaces_kopf_watches_the_whole_cluster() -> None:
    assert run.kopf_scope(run.config_of(parsed("--all-namespaces"))) == (True, [])


def test_without_kubeconfig_flag_nvlfleet_run_uses_the_kubeconfig_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/home/me/.kube/lab")
    assert run.config_of(parsed()).kubeconfig == "/home/me/.kube/lab"
    monkeypatch.delenv("KUBECONFIG")
    assert run.config_of(parsed()).kubeconfig is None


def test_nvlfleet_runs_defaults_are_the_operators_defaults_but_for_its_ports() -> None:
    config = run.config_of(parsed())
    assert (config.metrics_port, config.webhook_port) == (9090, 0)
    assert dataclass_without_ports(config) == dataclass_without_ports(Config(kubeconfig=config.kubeconfig))


def dataclass_without_ports(config: Config) -> dict[str, object]:
    return {k: v for k, v in vars(config).items() if k not in ("metrics_port", "webhook_port")}


def test_kopf_run_builds_the_operator_from_the_environment_and_registers_no_webhook_without_a_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NVLFLEET_NAMESPACES", "team-a,team-b")
    monkeypatch.setenv("NVLFLEET_RECHECK_SECONDS", "7")
    monkeypatch.delenv("NVLFLEET_WEBHOOK_PORT", raising=False)
    monkeypatch.delenv("NVLFLEET_METRICS_PORT", raising=False)
    memo = kopf.Memo()
    settings = kopf.OperatorSettings()

    async def start_and_stop() -> None:
        await main.startup(settings=settings, memo=memo)
        await main.cleanup(memo=memo)

    asyncio.run(start_and_stop())

    op = memo.operator
    assert isinstance(op, operator.Operator)
    assert op.config.namespaces == {"team-a", "team-b"} and op.config.recheck_seconds == 7.0
    assert main._watched(namespace="team-a", memo=memo) and not main._watched(namespace="other", memo=memo)
    assert settings.admission.server is None  # kopf would refuse to start with an admission handler and no server
    assert not kopf.get_default_registry()._webhooks.get_all_handlers()


def test_a_memo_that_holds_an_operator_keeps_it() -> None:
    given = operator.Operator(Config(namespaces=frozenset({"mine"})), fence=lambda: False)
    memo = kopf.Memo(operator=given)

    async def start_and_stop() -> None:
        await main.startup(settings=kopf.OperatorSettings(), memo=memo)
        await main.cleanup(memo=memo)

    asyncio.run(start_and_stop())

    assert memo.operator is given
    assert not given.may_write()  # the fence ``nvlfleet run`` passes in (the Lease) decides


def test_nvlfleet_runs_policy_flags_and_policy_file_become_the_operators_policy(tmp_path: pathlib.Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("policy:\n  priorityClasses: [inference-high]\n")
    args = parsed(
        "--policy", str(values), "--allow-weights-host-path", "/mnt/nvme/models",
        "--allow-service-account", "engine", "--allow-priority-class", "batch",
    )  # fmt: skip
    assert run.config_of(args).policy == policy.Policy(
        weights_host_path_prefixes=("/mnt/nvme/models",),
        service_accounts=("engine",),
        priority_classes=("inference-high", "batch"),
    )


def test_a_bad_policy_file_stops_nvlfleet_run_with_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("policy:\n  hostPaths: [/]\n")
    assert run.run(parsed("--policy", str(values))) == 2
    assert capsys.readouterr().err == (
        f"nvlfleet run: --policy {values}: unknown policy key(s) hostPaths; known: priorityClasses, "
        "serviceAccounts, volumeHostPathPrefixes, weightsHostPathPrefixes\n"
    )


@pytest.mark.parametrize("flag", ["--metrics-port", "--health-port", "--webhook-port"])
@pytest.mark.parametrize("value", ["99999", "65536", "-1", "http"])
def test_nvlfleet_run_refuses_a_port_number_that_is_none(flag: str, value: str) -> None:
    with pytest.raises(argparse.ArgumentError, match=f"argument {flag}: .*(not a port number|0..65535)"):
        parsed(flag, value)


@pytest.mark.parametrize("value", [0, 1, 65535])
def test_nvlfleet_run_takes_every_port_number_and_0_for_none(value: int) -> None:
    args = parsed("--metrics-port", str(value), "--health-port", str(value), "--webhook-port", str(value))
    assert (args.metrics_port, args.health_port, args.webhook_port) == (value, value, value)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("flag", ["--metrics-port", "--health-port", "--webhook-port"])
def test_a_port_in_use_stops_nvlfleet_run_at_once_with_one_line(
    flag: str, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    ports = {"--metrics-port": "0", "--health-port": "0", flag: str(taken_port)}
    args = parsed("--bind-address", "127.0.0.1", *[arg for item in ports.items() for arg in item])
    assert run.run(args) == 2
    assert capsys.readouterr().err == f"nvlfleet run: cannot listen on 127.0.0.1:{taken_port}: address in use\n"


def test_one_port_given_for_two_endpoints_is_in_use_for_the_second(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    args = parsed("--bind-address", "127.0.0.1", "--metrics-port", str(free), "--health-port", str(free))
    assert run.run(args) == 2
    assert capsys.readouterr().err == f"nvlfleet run: cannot listen on 127.0.0.1:{free}: address in use\n"


def test_a_metrics_port_taken_after_the_check_fails_the_start_up_for_good(taken_port: int) -> None:
    """kopf retries a start-up handler that fails, forever; a PermanentError ends it (and ``nvlfleet run`` prints
    the port's one line)."""
    memo = kopf.Memo(operator=operator.Operator(Config(bind_address="127.0.0.1", metrics_port=taken_port)))

    async def start() -> None:
        try:
            await main.startup(settings=kopf.OperatorSettings(), memo=memo)
        finally:
            await main.cleanup(memo=memo)

    with pytest.raises(kopf.PermanentError, match=f"cannot listen on 127.0.0.1:{taken_port}: address in use"):
        asyncio.run(start())


def test_kopf_runs_every_handler_of_a_watch_on_the_event_loop_not_in_its_thread_pool() -> None:
    """A plain function would cost a thread hop per object and handler (tens of thousands at start-up), and an
    event handler running in a thread raced the nudge queue."""
    registry = kopf.get_default_registry()
    handlers = [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]

    assert {h.id for h in handlers} >= set(main.INDEXES) | {"node_event", "gpu_pod_event", "lws_event"}
    assert [h.id for h in handlers if not asyncio.iscoroutinefunction(h.fn)] == []


def test_the_diff_base_is_kopfs_own_essence_of_the_object() -> None:
    body = kopf.Body(
        {
            "apiVersion": "nvlfleet.io/v1alpha1",
            "kind": "DeepSeekServing",
            "metadata": {
                "name": "s",
                "namespace": "ns",
                "uid": "u",
                "resourceVersion": "7",
                "labels": {"team": "a"},
                "annotations": {
                    "note": "kept",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "nvlfleet.io/kopf-managed": "yes",
                    "nvlfleet.io/reconcile": "{}",
                },
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"model": "x", "decode": {"groups": 2}},
            "status": {"observedGeneration": 1},
        }
    )
    ours = main._FencedDiffBases(operator.Operator(Config()))

    assert ours.build(body=body) == kopf.AnnotationsDiffBaseStorage().build(body=body)
    assert ours.build(body=body) == {
        "spec": body["spec"],
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "kept"}},
    }


def test_kopf_is_sent_only_nvlfleets_own_objects_of_each_child_kind() -> None:
    settings = kopf.OperatorSettings()
    memo = kopf.Memo(operator=operator.Operator(Config()))

    async def start_and_stop() -> None:
        await main.startup(settings=settings, memo=memo)
        await main.cleanup(memo=memo)

    asyncio.run(start_and_stop())

    def selectors(group: str, version: str, plural: str) -> list[str]:
        resource = kopf.Resource(group, version, plural, namespaced=True)
        return settings.watching.label_selectors.collect(resource)

    own = "app.kubernetes.io/managed-by=nvlfleet"
    assert selectors("", "v1", "services") == [own]
    assert selectors("leaderworkerset.x-k8s.io", "v1", "leaderworkersets") == [own]
    assert selectors("apps", "v1", "deployments") == [own]
    assert selectors("", "v1", "pods") == []  # every GPU pod holds GPUs, whoever made it
    assert selectors("nvlfleet.io", "v1alpha1", "deepseekservings") == []


def test_a_gpu_pod_is_indexed_under_its_namespace_and_serving_and_one_no_serving_labels_is_not() -> None:
    labels = {"nvlfleet.io/serving": "chat", "leaderworkerset.sigs.k8s.io/name": "chat-decode"}
    pod = kopf.Body({"metadata": {"name": "chat-decode-0", "namespace": "team-a", "labels": labels}})
    other = kopf.Body({"metadata": {"name": "training-0", "namespace": "team-a", "labels": {}}})

    indexed = asyncio.run(main.serving_pods(namespace="team-a", labels=labels, body=pod))
    left_out = asyncio.run(main.serving_pods(namespace="team-a", labels={}, body=other))

    assert list(indexed) == [("team-a", "chat")]
    assert indexed[("team-a", "chat")]["metadata"]["name"] == "chat-decode-0"
    assert left_out == {}
