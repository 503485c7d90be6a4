"""The demo runs the real router with its pod's own arguments, moved to 127.0.0.1 on ports of its own."""

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
