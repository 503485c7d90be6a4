"""``nvlfleet run``: run the operator (kopf) against the current cluster.

The flags become the operator's ``Config``; this command builds the ``Operator`` from it and starts kopf with
the handlers of ``nvlfleet.adapters.main``, handing it the operator in kopf's ``memo``. kopf runs cluster-wide:
nodes and GPU pods are always watched everywhere because a rack's free capacity is a cluster fact;
``--namespace`` limits which DeepSeekServings are reconciled.

Leader election (``--leader-election-lease``) uses a ``coordination.k8s.io`` Lease, the way controller-runtime
does: a replica starts kopf only once it holds the Lease, renews it every few seconds, and stops (exit 1, so
its Deployment restarts it as a standby) as soon as it cannot renew within the deadline — before the Lease
expires for the others, so two replicas never reconcile at once. Until it has stopped, a leader whose last
successful renewal (timed from when it was sent) is older than that deadline writes nothing (the operator is
built with ``Leadership.current`` as its fence): a process frozen
past the Lease's expiry (a long pause, a stalled node) wakes up with its writes fenced off, finds the Lease taken
and exits. A clean shutdown releases the Lease so a standby takes over immediately.

Exit codes: 0 after a clean stop (SIGINT/SIGTERM), 1 when the Lease was lost or kopf failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Callable

from aiohttp import web

from nvlfleet.adapters import exporter, kube
from nvlfleet.adapters.config import Config
from nvlfleet.adapters.operator import Operator
from nvlfleet.commands import policyflags

LEASE_SECONDS = 15  # how long a silent leader keeps the Lease
RENEW_SECONDS = 5  # how often the leader renews
RENEW_DEADLINE_SECONDS = 10  # a leader that could not renew for this long stops (< LEASE_SECONDS)

log = logging.getLogger("nvlfleet.run")


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
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address of the metrics and health endpoints")  # noqa: S104
    parser.add_argument("--metrics-port", type=int, default=9090, help="Prometheus /metrics port (0: none)")
    parser.add_argument(
        "--health-port",
        type=int,
        default=8080,
        help="liveness /healthz port, served by the leader and by a standby waiting for the Lease (0: none)",
    )
    parser.add_argument("--webhook-port", type=int, default=0, help="serve the validating admission webhook here")
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
    except ValueError as err:  # a bad --policy file: one line, no traceback
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
    )


async def _operate(args: argparse.Namespace, config: Config) -> int:
    import kopf

    from nvlfleet.adapters import main  # noqa: F401 — importing registers the handlers with kopf's default registry

    stop = asyncio.Event()
    lost = asyncio.Event()
    api: kube.Api | None = None
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    renewing: asyncio.Task[None] | None = None
    fence: Callable[[], bool] | None = None
    if args.leader_election_lease:
        api = kube.Api(kube.connect(config.kubeconfig))
        # A standby is alive while it waits: it answers /healthz itself until kopf's endpoint takes the port.
        standby = await _serve_standby_health(args.bind_address, args.health_port) if args.health_port else None
        try:
            acquired = await _acquire(api, args.leader_election_namespace, args.leader_election_lease, identity)
        finally:
            if standby is not None:
                await standby.cleanup()
        leadership = Leadership(acquired)
        fence = leadership.current  # no write once the Lease may have passed to another replica
        renewing = asyncio.create_task(
            _renew(api, args.leader_election_namespace, args.leader_election_lease, identity, leadership, stop, lost)
        )
    liveness = f"http://{args.bind_address}:{args.health_port}/healthz" if args.health_port else None
    log.info("nvlfleet operator %s starting (namespaces: %s)", identity, ", ".join(args.namespace) or "all")
    try:
        await kopf.operator(
            clusterwide=True,
            standalone=True,
            stop_flag=stop,
            liveness_endpoint=liveness,
            memo=kopf.Memo(operator=Operator(config, fence=fence)),
        )
    finally:
        if renewing is not None:
            renewing.cancel()
        if api is not None and not lost.is_set():
            await asyncio.to_thread(
                api.release_lease, args.leader_election_namespace, args.leader_election_lease, identity
            )
    return 1 if lost.is_set() else 0


class Leadership:
    """When this replica last renewed its Lease, counted from the moment the renewal was *sent*, so a reply that
    arrives late (or a process that was frozen) never stretches the time this replica believes it leads."""

    def __init__(self, renewed: float) -> None:
        self.renewed = renewed

    def current(self) -> bool:
        return time.monotonic() - self.renewed < RENEW_DEADLINE_SECONDS


async def _serve_standby_health(host: str, port: int) -> web.AppRunner:
    """``/healthz`` for a replica standing by, so its liveness probe passes while another replica leads."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"standby": True})

    return await exporter.serve_route(host, port, "/healthz", healthz)


async def _acquire(api: kube.Api, namespace: str, name: str, identity: str) -> float:
    announced = False
    while True:
        sent = time.monotonic()
        try:
            acquired = await asyncio.to_thread(api.acquire_lease, namespace, name, identity, LEASE_SECONDS)
        except kube.ApiError as err:  # the API server away for a moment: a standby keeps waiting, it does not crash
            log.warning("could not ask for Lease %s/%s, asking again in %ss: %s", namespace, name, RENEW_SECONDS, err)
            acquired = False
        if acquired:
            log.info("became the leader (Lease %s/%s)", namespace, name)
            return sent
        if not announced:
            log.info("standing by: Lease %s/%s is held by another replica", namespace, name)
            announced = True
        await asyncio.sleep(RENEW_SECONDS)


async def _renew(
    api: kube.Api,
    namespace: str,
    name: str,
    identity: str,
    leadership: Leadership,
    stop: asyncio.Event,
    lost: asyncio.Event,
) -> None:
    while True:
        await asyncio.sleep(RENEW_SECONDS)
        sent = time.monotonic()
        try:
            held = await asyncio.to_thread(api.acquire_lease, namespace, name, identity, LEASE_SECONDS)
        except Exception as err:  # the API server may be unreachable for a moment; the deadline decides
            log.warning("could not renew Lease %s/%s: %s", namespace, name, err)
            held = None
        if held:
            leadership.renewed = sent
            continue
        if held is False or not leadership.current():
            log.error("lost Lease %s/%s; stopping so that only one replica reconciles", namespace, name)
            lost.set()
            stop.set()
            return
