"""``nvlfleet run``: run the operator (kopf) against the current cluster.

The flags become the operator's ``Config``; this command builds the ``Operator`` from it and starts kopf with
the handlers of ``nvlfleet.adapters.main``, handing it the operator in kopf's ``memo``. ``--namespace`` limits
every namespaced watch, list and index (DeepSeekServings, their children, GPU pods) to those namespaces, so the
chart's RBAC can end where the operator's reach ends; only nodes (and CRDs, namespaces for kopf) are read
cluster-wide. The planner then counts only GPUs held by pods in those namespaces: a group planned onto GPUs a
foreign pod holds waits Pending for the scheduler (give nvlfleet racks of its own, or watch every namespace).

**Leader election** (``--leader-election-lease``, ``nvlfleet.adapters.election``): a replica runs kopf from the
start, leader or not — a *warm* standby, its watches and indexes filled, its handlers running — with every write
fenced off until it holds the Lease (the operator's fence is ``Leadership.current``, kopf's DeepSeekServing
handlers are blind while it stands by and kopf posts no Event, see ``nvlfleet.adapters.main``). When it wins the
Lease it reconciles every serving it knows from its watch at once, so a takeover costs the Lease's expiry and one
pass, not a cold start. The one exception is a self-managed webhook configuration (``--webhook-port`` without
``--webhook-cert-dir``, a local run): kopf writes that configuration as soon as it starts, pointing it at this
process, so such a replica waits for the Lease *before* starting kopf (a cold standby, answering ``/healthz``
itself meanwhile).

Every port is checked before anything starts: a bad number is an argparse error, a port that cannot be listened on
one line and exit code 2 (kopf would otherwise log a traceback and retry its start-up forever).

Exit codes: 0 after a clean stop (SIGINT/SIGTERM), 1 when the Lease was lost or kopf failed, 2 for bad settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING

from aiohttp import web

from nvlfleet.adapters import election, exporter, kube
from nvlfleet.adapters.config import Config
from nvlfleet.adapters.operator import Operator
from nvlfleet.commands import policyflags

if TYPE_CHECKING:
    import kopf

log = logging.getLogger("nvlfleet.run")

PORT_MAX = 65535


def port(value: str) -> int:
    """An argparse type: a TCP port number, 0 meaning none."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= number <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"{number} is not a port number (0..{PORT_MAX}, 0: none)")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="reconcile DeepSeekServings in this namespace only (repeatable)",
    )
    scope.add_argument("--all-namespaces", action="store_true", help="reconcile every namespace (the default)")
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster); users with a token, tokenFile, "
        "client certificate or exec plugin (auth-provider and basic auth are refused)",
    )
    parser.add_argument("--bind-address", default="0.0.0.0", help="address of the metrics and health endpoints")  # noqa: S104
    parser.add_argument("--metrics-port", type=port, default=9090, help="Prometheus /metrics port (0: none)")
    parser.add_argument(
        "--health-port",
        type=port,
        default=8080,
        help="liveness /healthz port, served by the leader and by a standby waiting for the Lease (0: none)",
    )
    parser.add_argument("--webhook-port", type=port, default=0, help="serve the validating admission webhook here")
    parser.add_argument(
        "--webhook-cert-dir",
        help="directory with tls.crt, tls.key (and ca.crt) for the webhook; the webhook configuration is then "
        "managed by whoever issued them (the Helm chart). Without it: a self-signed CA and an nvlfleet-managed "
        "ValidatingWebhookConfiguration pointing at --webhook-host",
    )
    parser.add_argument(
        "--webhook-host", default="127.0.0.1", help="address the API server calls without --webhook-cert-dir"
    )
    parser.add_argument("--leader-election-lease", metavar="NAME", help="elect one active replica with this Lease")
    parser.add_argument(
        "--leader-election-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the Lease (default: $POD_NAMESPACE, else default)",
    )
    parser.add_argument(
        "--recheck-seconds", type=float, default=Config.recheck_seconds, help="period of the level re-check"
    )
    parser.add_argument(
        "--scrape-seconds",
        type=float,
        default=Config.scrape_seconds,
        help="period of the scrape of vLLM /metrics on group leaders",
    )
    parser.add_argument(
        "--status-metrics-seconds",
        type=float,
        default=Config.status_metrics_seconds,
        help="at most this often, tokens/s and revenue are copied into each serving's status",
    )
    parser.add_argument(
        "--passes-at-once",
        type=int,
        default=Config.passes_at_once,
        help="reconcile passes of different servings in flight at once",
    )
    parser.add_argument(
        "--prometheus-address",
        metavar="URL",
        help="Prometheus that autoscaled servings' KEDA ScaledObjects query unless spec.autoscaling.prometheus says",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    policyflags.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import kopf

    kopf.configure(verbose=args.log_level == "debug", quiet=args.log_level in ("warning", "error"))
    logging.getLogger().setLevel(args.log_level.upper())
    if args.log_level != "debug":
        # kopf logs every watch-event handler run ("Handler 'node_event' succeeded") and every webhook request at
        # INFO; nvlfleet logs what it changes. Failures still show at WARNING and above.
        for noisy in ("kopf.objects", "aiohttp.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = config_of(args)
        check_listenable(listened(args))
    except ValueError as err:  # a bad --policy file, a port in use (exporter.CannotListen): one line, no traceback
        print(f"nvlfleet run: {err}", file=sys.stderr)
        return 2
    return asyncio.run(_operate(args, config))


def config_of(args: argparse.Namespace) -> Config:
    """The operator's settings from the flags (``Config.from_env`` is for ``kopf run``, which has none)."""
    return Config(
        namespaces=frozenset(args.namespace),
        recheck_seconds=args.recheck_seconds,
        bind_address=args.bind_address,
        metrics_port=args.metrics_port,
        webhook_port=args.webhook_port,
        webhook_host=args.webhook_host,
        webhook_cert_dir=args.webhook_cert_dir or None,
        scrape_seconds=args.scrape_seconds,
        status_metrics_seconds=args.status_metrics_seconds,
        passes_at_once=args.passes_at_once,
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        policy=policyflags.policy_of(args),
        prometheus_address=args.prometheus_address or None,
    )


def kopf_scope(config: Config) -> tuple[bool, list[str]]:
    """kopf's ``clusterwide`` and ``namespaces``: every namespace, or only the reconciled ones for every namespaced
    watch, list and index (nodes stay cluster-wide, being cluster-scoped), so no cluster-wide grant is needed."""
    return not config.namespaces, sorted(config.namespaces)


def listened(args: argparse.Namespace) -> list[tuple[str, int]]:
    """Every address this process listens on, as (host, port): metrics, liveness, webhook (ports 0 left out)."""
    webhook_host = args.bind_address if args.webhook_cert_dir else args.webhook_host  # as webhook.configure_server
    wanted = [
        (args.bind_address, args.metrics_port),
        (args.bind_address, args.health_port),
        (webhook_host, args.webhook_port),
    ]
    return [(host, number) for host, number in wanted if number]


def check_listenable(addresses: list[tuple[str, int]]) -> None:
    """Raise ``exporter.CannotListen`` for the first address nothing could listen on (in use, not this host's).

    Each is bound the way aiohttp binds it (``SO_REUSEADDR``: a port in TIME_WAIT is free) and all are held until
    the last, so one port given twice is caught too. They are released before the servers bind them for real: a
    port taken in that instant still fails later (in kopf, which then stops), but a port in use at start fails
    here, once, in one line.
    """
    with contextlib.ExitStack() as held:
        for host, number in addresses:
            try:
                for family, kind, proto, _name, address in socket.getaddrinfo(
                    host, number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
                ):
                    sock = held.enter_context(socket.socket(family, kind, proto))
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(address)
                    sock.listen()
            except OSError as err:
                raise exporter.CannotListen(host, number, err) from None


async def _operate(args: argparse.Namespace, config: Config) -> int:
    import kopf

    from nvlfleet.adapters import main  # noqa: F401 — importing registers the handlers with kopf's default registry

    stop, lost = asyncio.Event(), asyncio.Event()
    settings = kopf.OperatorSettings()  # the start-up handler fills it in; leader election switches its posting
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    leadership = election.Leadership() if args.leader_election_lease else None
    op = Operator(config, fence=leadership.current if leadership is not None else None)
    lease: election.Lease | None = None
    electing: asyncio.Task[None] | None = None
    if leadership is not None:
        api = kube.Api(kube.connect(config.kubeconfig))
        lease = election.Lease(api, args.leader_election_namespace, args.leader_election_lease, identity)
        electing = _start_election(lease, leadership, op, settings, stop, lost)
        if args.webhook_port and not args.webhook_cert_dir:  # kopf would write the webhook configuration at once
            await _stand_by_cold(args, leadership, stop)
            if not leadership.won.is_set():
                return 1  # the election failed before this replica ever led
    liveness = f"http://{args.bind_address}:{args.health_port}/healthz" if args.health_port else None
    clusterwide, namespaces = kopf_scope(config)
    log.info("nvlfleet operator %s starting (namespaces: %s)", identity, ", ".join(args.namespace) or "all")
    try:
        await kopf.operator(
            clusterwide=clusterwide,
            namespaces=namespaces,
            standalone=True,
            stop_flag=stop,
            liveness_endpoint=liveness,
            settings=settings,
            memo=kopf.Memo(operator=op),
        )
    except Exception as err:
        refused = _cannot_listen(err)
        if refused is None:
            raise
        print(f"nvlfleet run: {refused}", file=sys.stderr)  # a port taken since the check, kopf logged it too
        return 2
    finally:
        if electing is not None:
            electing.cancel()
        if lease is not None and not lost.is_set():
            await lease.release()  # a no-op for a standby: only the holder releases
    return 1 if lost.is_set() else 0


def _cannot_listen(err: Exception) -> exporter.CannotListen | None:
    """The port failure behind kopf's start-up error, if that is what it was: kopf's ``ActivityError`` (not
    exported) keeps each start-up handler's outcome, and ``main.startup`` raises its refusal from the port's."""
    for outcome in getattr(err, "outcomes", {}).values():
        cause = getattr(outcome.exception, "__cause__", None)
        if isinstance(cause, exporter.CannotListen):
            return cause
    return None


def _start_election(
    lease: election.Lease,
    leadership: election.Leadership,
    op: Operator,
    settings: kopf.OperatorSettings,
    stop: asyncio.Event,
    lost: asyncio.Event,
) -> asyncio.Task[None]:
    """Compete for the Lease beside kopf. Until this replica wins it, kopf posts no Event (the fence keeps the
    operator's own writes back); once it wins, posting is back on and every serving gets a pass at once."""
    settings.posting.enabled = False

    async def take_over() -> None:
        settings.posting.enabled = True
        await op.take_over()

    def ended(task: asyncio.Task[None]) -> None:
        """Whatever ends the election ends the process with exit 1: a lost Lease, or a failure of the election
        itself, which would otherwise leave a standby that never takes over."""
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("leader election failed; stopping", exc_info=task.exception())
        lost.set()
        stop.set()

    electing = asyncio.create_task(election.elect(lease, leadership, take_over), name="leader election")
    electing.add_done_callback(ended)
    return electing


async def _stand_by_cold(args: argparse.Namespace, leadership: election.Leadership, stop: asyncio.Event) -> None:
    """Wait for the Lease (or the end of the election) before kopf starts, answering ``/healthz`` meanwhile."""
    standby = await _serve_standby_health(args.bind_address, args.health_port) if args.health_port else None
    waits = [asyncio.ensure_future(leadership.won.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        if standby is not None:
            await standby.cleanup()


async def _serve_standby_health(host: str, port: int) -> web.AppRunner:
    """``/healthz`` for a cold standby, so its liveness probe passes while another replica leads (a warm standby
    runs kopf, whose endpoint answers)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"standby": True})

    return await exporter.serve_route(host, port, "/healthz", healthz)
