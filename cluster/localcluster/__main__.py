"""Command line of the local cluster: `python -m localcluster up|down|status|build|fleet|env|keda|sa-kubeconfig`.

The Makefile's cluster-up/cluster-down/cluster-status/fleet/on-demand/keda-up targets call this. Faults print
one line naming the component and its log file (exit 1); `up` and `status` end with `KUBECONFIG=<absolute path>`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from localcluster import binaries, cluster, errors, versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="get the binaries and start (or reuse) the local cluster")
    up.add_argument(
        "--node-grace-seconds",
        type=_positive,
        default=None,
        metavar="S",
        help="seconds the node lifecycle controller waits for a node's heartbeat before marking it NotReady "
        "(default: Kubernetes' 50 s); thousands of kwok nodes on a saturated machine need more "
        "(the benchmark cluster uses 300). A running cluster started with another value is restarted with this one",
    )
    commands.add_parser("down", help="stop the cluster by its recorded PIDs and remove its state")
    commands.add_parser("status", help="show each component, its PID, ports and health")
    commands.add_parser("env", help="print shell exports: KUBECONFIG and PATH with kubectl and helm")
    build = commands.add_parser(
        "build",
        help="build (or find cached) the on-demand components, Kueue and KEDA, without starting anything",
        description="Builds the on-demand Go components from the Go module proxy if they are not cached yet. "
        "`make integration` runs this before pytest, so a cold build (KEDA: about 10 to 20 minutes on two "
        "cores) prints its progress here instead of eating a test's time limit.",
    )
    build.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"components to build, of {', '.join(_on_demand())} (default: all of them)",
    )
    fleet = commands.add_parser("fleet", help="add simulated GPU nodes (kwok) to the running cluster")
    fleet.add_argument("--racks", type=int, default=4, help="NVLink domains (racks); nodes for H200/B200")
    fleet.add_argument("--gpu", default="GB200", help="GB200, GB300, H200 or B200")
    fleet.add_argument("--name", default="sim", help="fleet name: node name prefix and clique UUID seed")
    fleet.add_argument("--taint", action="append", default=[], help="key=value:Effect on every node")
    fleet.add_argument("--kwok-taint", action="store_true", help="add kwok's kwok.x-k8s.io/node=fake taint")
    fleet.add_argument("--odd-rack", type=int, default=-1, help="rack that gets the odd cases (default last)")
    fleet.add_argument("--without-clique", type=int, default=0, help="trays missing the clique label")
    fleet.add_argument("--cordoned", type=int, default=0, help="cordoned trays")
    fleet.add_argument("--tainted", type=int, default=0, help="trays tainted nvidia.com/gpu=maintenance")
    fleet.add_argument("--occupied", type=int, default=0, help="trays already running a 4-GPU pod")
    keda = commands.add_parser("keda", help="KEDA (operator + external metrics API server) on the running cluster")
    keda.add_argument("action", choices=["up", "down"])
    sa = commands.add_parser("sa-kubeconfig", help="write a kubeconfig that acts as a ServiceAccount")
    sa.add_argument("--namespace", required=True)
    sa.add_argument("--name", required=True)
    sa.add_argument("--output", type=pathlib.Path, required=True)
    sa.add_argument("--expiration-seconds", type=int, default=3600)
    args = parser.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except errors.ComponentError as error:
        print(error.line(), file=sys.stderr)
        return 1
    except (ValueError, TimeoutError) as error:
        print(f"localcluster: {error}", file=sys.stderr)
        return 1


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    return value


def _up(args: argparse.Namespace) -> int:
    running = cluster.up(node_grace_seconds=args.node_grace_seconds)
    _print_components(running)
    print(f"KUBECONFIG={running.kubeconfig}")
    return 0


def _down(_: argparse.Namespace) -> int:
    stopped = cluster.down()
    print(f"localcluster: stopped {len(stopped)} process(es); no recorded process is left")
    return 0


def _status(_: argparse.Namespace) -> int:
    running, health = cluster.status()
    if running is None:
        print("localcluster: no cluster is recorded (make cluster-up starts one)")
        print(f"KUBECONFIG={cluster.default_kubeconfig()}")
        return 1
    _print_components(running, health)
    print(f"KUBECONFIG={running.kubeconfig}")
    return 0 if all(health.values()) else 1


def _env(_: argparse.Namespace) -> int:
    running, health = cluster.status()
    if running is None or not all(health.values()):
        print("localcluster: the cluster is not running (make cluster-up)", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={running.kubeconfig}")
    print(f'export PATH="{binaries.path_dir()}:$PATH"')
    return 0


def _fleet(args: argparse.Namespace) -> int:
    from kubernetes import config

    from localcluster import fleet

    running, health = cluster.status()
    if running is None or not all(health.values()):
        print("localcluster: the cluster is not running (make cluster-up)", file=sys.stderr)
        return 1
    taints = [_parse_taint(t) for t in args.taint] + ([dict(fleet.KWOK_TAINT)] if args.kwok_taint else [])
    oddities = fleet.Oddities(
        rack=args.odd_rack,
        without_clique=args.without_clique,
        cordoned=args.cordoned,
        tainted=args.tainted,
        occupied=args.occupied,
    )
    api = config.new_client_from_config(config_file=str(running.kubeconfig))
    try:
        nodes = fleet.apply_fleet(api, args.racks, args.gpu, fleet=args.name, taints=taints, oddities=oddities)
    finally:
        api.close()
    cliques = sorted(
        {n["metadata"]["labels"][fleet.LABEL_CLIQUE] for n in nodes if fleet.LABEL_CLIQUE in n["metadata"]["labels"]}
    )
    without = sum(fleet.LABEL_CLIQUE not in n["metadata"]["labels"] for n in nodes)
    print(f"localcluster: {len(nodes)} {args.gpu.upper()} nodes Ready in fleet {args.name!r}")
    for value in cliques:
        print(f"  clique {value}")
    if without:
        print(f"  {without} node(s) without a clique label")
    return 0


def _on_demand() -> list[str]:
    return [c.name for c in versions.GO_COMPONENTS if c.on_demand]


def _build(args: argparse.Namespace) -> int:
    names = args.names or _on_demand()
    unknown = sorted(set(names) - set(_on_demand()))
    if unknown:
        raise ValueError(f"build: no on-demand component {', '.join(unknown)}; there are {', '.join(_on_demand())}")
    found = binaries.ensure_on_demand(names)
    for name in names:
        print(f"localcluster: {name} {versions.go_component(name).version}: {found[name]}")
    return 0


def _keda(args: argparse.Namespace) -> int:
    if args.action == "down":
        stopped = cluster.keda_down()
        print(f"localcluster: stopped {', '.join(stopped) or 'nothing'}; the external metrics APIService is removed")
        return 0
    ports = cluster.keda_up()
    print(
        f"localcluster: KEDA {versions.KEDA} up; external.metrics.k8s.io served on 127.0.0.1:{ports['keda-apiserver']}"
    )
    return 0


def _sa_kubeconfig(args: argparse.Namespace) -> int:
    from localcluster import credentials

    path = credentials.service_account_kubeconfig(
        cluster.default_kubeconfig(), args.namespace, args.name, args.output.resolve(), args.expiration_seconds
    )
    print(f"KUBECONFIG={path}")
    return 0


def _parse_taint(text: str) -> dict[str, str]:
    try:
        key_value, effect = text.rsplit(":", 1)
        key, _, value = key_value.partition("=")
    except ValueError:
        raise ValueError(f"--taint {text!r}: expected key=value:Effect") from None
    if effect not in {"NoSchedule", "PreferNoSchedule", "NoExecute"} or not key:
        effects = "NoSchedule|PreferNoSchedule|NoExecute"
        raise ValueError(f"--taint {text!r}: expected key=value:Effect with Effect {effects}")
    return {"key": key, "value": value, "effect": effect}


def _print_components(running: cluster.Cluster, health: dict[str, bool] | None = None) -> None:
    from localcluster import components

    print(f"local cluster {running.server} (Kubernetes {versions.KUBERNETES}) in {running.layout.root}")
    for component in components.ALL:
        ports = ", ".join(f"{p}={running.ports[p]}" for p in component.ports)
        state = "" if health is None else ("  healthy" if health.get(component.name) else "  NOT HEALTHY")
        pid = running.pids.get(component.name, "-")
        print(f"  {component.name:<24} pid {pid!s:<8} {ports}{state}")
    print(f"  kubectl {versions.KUBECTL}: {running.kubectl}")
    print(f"  helm {versions.HELM}: {running.helm}")


_COMMANDS = {
    "up": _up,
    "down": _down,
    "status": _status,
    "env": _env,
    "build": _build,
    "fleet": _fleet,
    "sa-kubeconfig": _sa_kubeconfig,
    "keda": _keda,
}

if __name__ == "__main__":
    sys.exit(main())
