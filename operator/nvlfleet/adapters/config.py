"""The operator's settings: which namespaces it reconciles, its periods, its ports, its credentials.

Adapter, before the data flow starts: ``nvlfleet run`` builds a ``Config`` from its flags and hands it to the
``nvlfleet.adapters.operator.Operator`` it starts kopf with. ``Config.from_env`` reads the same settings from
``NVLFLEET_*`` environment variables for the one path that has no flags: ``kopf run -m nvlfleet.adapters.main``,
whose start-up handler builds the operator itself.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from nvlfleet.api import policy as policy_


@dataclasses.dataclass
class Config:
    """Operator settings."""

    namespaces: frozenset[str] = frozenset()  # empty: every namespace
    recheck_seconds: float = 60.0
    debounce_seconds: float = 1.0
    retry_seconds: float = 10.0
    bind_address: str = "0.0.0.0"  # noqa: S104 — in a pod, probes and Prometheus come from outside
    metrics_port: int = 0  # 0: no exporter
    webhook_port: int = 0  # 0: no admission webhook
    webhook_host: str = "127.0.0.1"  # the address the API server calls when nvlfleet manages the configuration
    webhook_cert_dir: str | None = None  # tls.crt/tls.key (+ ca.crt) from the chart; None: self-signed + managed
    scrape_seconds: float = 15.0
    status_metrics_seconds: float = 60.0
    # Passes of different servings in flight at once: they mostly wait on the API server, so a few side by side
    # keep it busy; those that place groups still go one at a time.
    passes_at_once: int = 4
    # kopf's login and the operator's own client use the same credentials: this file, else ~/.kube/config, else
    # the in-cluster ServiceAccount.
    kubeconfig: str | None = None
    # What a serving may ask for beyond what vLLM needs (api.policy); the webhook and every pass check it.
    policy: policy_.Policy = policy_.DEFAULT
    # The Prometheus a serving's KEDA ScaledObject queries when its spec.autoscaling.prometheus names none.
    prometheus_address: str | None = None

    def __post_init__(self) -> None:
        self.passes_at_once = max(1, self.passes_at_once)  # none at once would never reconcile anything

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Config:
        """The settings of ``kopf run -m nvlfleet.adapters.main``: ``NVLFLEET_<FIELD>`` (``NVLFLEET_NAMESPACES``
        comma-separated) and ``$KUBECONFIG``; a variable not set keeps the default."""

        def num(name: str, default: float) -> float:
            return float(env.get(f"NVLFLEET_{name}", default))

        names = env.get("NVLFLEET_NAMESPACES", "")
        return cls(
            namespaces=frozenset(n for n in names.split(",") if n),
            recheck_seconds=num("RECHECK_SECONDS", cls.recheck_seconds),
            bind_address=env.get("NVLFLEET_BIND_ADDRESS", cls.bind_address),
            metrics_port=int(num("METRICS_PORT", cls.metrics_port)),
            webhook_port=int(num("WEBHOOK_PORT", cls.webhook_port)),
            webhook_host=env.get("NVLFLEET_WEBHOOK_HOST", cls.webhook_host),
            webhook_cert_dir=env.get("NVLFLEET_WEBHOOK_CERT_DIR") or None,
            scrape_seconds=num("SCRAPE_SECONDS", cls.scrape_seconds),
            status_metrics_seconds=num("STATUS_METRICS_SECONDS", cls.status_metrics_seconds),
            passes_at_once=int(num("PASSES_AT_ONCE", cls.passes_at_once)),
            kubeconfig=env.get("KUBECONFIG") or None,
            prometheus_address=env.get("NVLFLEET_PROMETHEUS_ADDRESS") or None,
        )
