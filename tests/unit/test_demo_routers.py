"""The demo runs the real router with its pod's own arguments, listening on its pod's IP (or, when that is taken,
on 127.0.0.1 on ports of its own)."""

from __future__ import annotations

from localdemo import routers

from nvlfleet.core import render
from support import servingbuilder as sb


def pod_args() -> list[str]:
    (deployment,) = [m for m in render.render(sb.serving()) if m["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_only_where_the_router_listens_changes() -> None:
    args = pod_args()
    local = routers.local_args(args, 31000, 31001)

    changed = {i for i, (a, b) in enumerate(zip(args, local, strict=True)) if a != b}
    assert {local[i - 1] for i in changed} == {"--host", "--port", "--prometheus-host", "--prometheus-port"}
    assert local[local.index("--host") + 1] == local[local.index("--prometheus-host") + 1] == "127.0.0.1"
    assert (local[local.index("--port") + 1], local[local.index("--prometheus-port") + 1]) == ("31000", "31001")


def test_a_router_without_listen_flags_gets_them() -> None:
    local = routers.local_args(["--policy", "round_robin"], 31000, 31001)
    assert local[:2] == ["--policy", "round_robin"] and local[local.index("--host") + 1] == "127.0.0.1"


def router_pod(ip: str | None, args: list[str] | None = None) -> routers.RouterPod:
    return routers.RouterPod("llm", "dsv41", "dsv41-router-0", "uid", "dsv41-router", tuple(args or pod_args()), ip)


def test_the_router_listens_on_its_pods_ip_and_ports_when_they_are_free() -> None:
    args = pod_args()
    port, metrics_port = routers.pod_ports(args)

    chosen = routers.listen_address(router_pod("127.254.0.7", args), lambda host, p: True, lambda: 1)

    assert chosen == ("127.254.0.7", port, metrics_port, "pod IP")
    assert str(port) == args[args.index("--port") + 1]


def test_a_taken_pod_address_moves_the_router_to_127_0_0_1_and_says_why() -> None:
    spare = iter((31000, 31001))
    taken = {("127.254.0.7", routers.pod_ports(pod_args())[0])}

    host, port, metrics_port, why = routers.listen_address(
        router_pod("127.254.0.7"), lambda h, p: (h, p) not in taken, lambda: next(spare)
    )

    assert (host, port, metrics_port) == ("127.0.0.1", 31000, 31001)
    assert "is taken" in why


def test_a_pod_without_a_loopback_ip_is_served_on_127_0_0_1() -> None:
    for ip in (None, "10.244.0.5"):
        host, _port, _metrics, why = routers.listen_address(router_pod(ip), lambda h, p: True, lambda: 31000)
        assert host == "127.0.0.1" and "not a loopback address" in why


def test_a_router_without_port_flags_listens_on_the_routers_own_defaults() -> None:
    assert routers.pod_ports(["--policy", "round_robin"]) == (30000, 29000)  # vllm-router 0.1.17, §6-7
