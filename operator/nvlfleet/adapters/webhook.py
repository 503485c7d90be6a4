"""The admission webhook: the check ``kubectl apply`` of a DeepSeekServing gets at once, and the server kopf
serves it from.

Adapter, in front of the data flow: the webhook runs ``validation.validate``, the same checks as ``nvlfleet
validate`` (and the reconciler's first step), so a bad serving is refused with each field path before it is
stored. ``nvlfleet.adapters.main`` registers ``admit_serving`` under ``WEBHOOK_ID`` when a webhook port is set.

**Two failure policies.** The chart installs the webhook with ``failurePolicy: Fail`` (and a ``matchConditions``
rule that sends it only creates and spec changes, plus a ``namespaceSelector`` that leaves out the operator's own
namespace and kube-system): the admin's policy (``api.policy``) is a boundary only if nothing gets past it while
the operator is away, and metadata-only writes (kopf's bookkeeping, a finalizer removed by hand) still go through.
The configuration kopf manages for a local run (no certificate directory) is ``Ignore``, a fast path for feedback.
Either way the reconciler re-validates every generation under the same policy and touches nothing for a spec it
refuses (``Ready=False, InvalidSpec``), so what got in while no webhook answered is still reported. Updates that
leave the spec as it is are always admitted here too, so an object admitted while the webhook was down never gets
stuck.
"""

from __future__ import annotations

import logging
import pathlib
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

import kopf

from nvlfleet.adapters.config import Config
from nvlfleet.api import policy, problems
from nvlfleet.core import validation

log = logging.getLogger("nvlfleet")

WEBHOOK_ID = "validate-deepseekserving"  # kopf serves it at /validate-deepseekserving (the chart's path)


def admit_serving(
    body: kopf.Body,
    old: Mapping[str, Any] | None = None,
    operation: str | None = None,
    memo: Any = None,
    **_: Any,
) -> None:
    """Refuse a serving ``nvlfleet validate`` would refuse under the operator's policy, naming each field path."""
    if operation == "UPDATE" and old is not None and old.get("spec") == body.get("spec"):
        return
    try:
        allowed = memo.operator.config.policy if memo is not None else policy.DEFAULT
        found = validation.validate(dict(body), allowed)
    except Exception as err:  # under failurePolicy Ignore an error here would admit what nobody checked
        log.exception("admission check of %s failed", body.get("metadata", {}).get("name"))
        raise kopf.AdmissionError(f"nvlfleet could not analyse this DeepSeekServing ({type(err).__name__})") from err
    if found:
        raise kopf.AdmissionError(problems.summary(found), code=422)


def configure_server(settings: kopf.OperatorSettings, config: Config) -> None:
    """With a certificate directory (the chart's Secret), serve with it; the chart owns the configuration.
    Without one (a local cluster), make a CA and a serving certificate for ``webhook_host`` and let kopf keep a
    ValidatingWebhookConfiguration ``nvlfleet.io`` pointing at this process (removed again on exit)."""
    if config.webhook_cert_dir:
        certs = pathlib.Path(config.webhook_cert_dir)
        ca = certs / "ca.crt"
        settings.admission.server = kopf.WebhookServer(
            addr=config.bind_address,
            port=config.webhook_port,
            certfile=str(certs / "tls.crt"),
            pkeyfile=str(certs / "tls.key"),
            cafile=str(ca) if ca.exists() else None,
        )
        return
    certs = pathlib.Path(tempfile.mkdtemp(prefix="nvlfleet-webhook-"))
    _self_signed(certs, config.webhook_host)
    settings.admission.server = kopf.WebhookServer(
        addr=config.webhook_host,
        port=config.webhook_port,
        host=config.webhook_host,
        certfile=str(certs / "tls.crt"),
        pkeyfile=str(certs / "tls.key"),
        cafile=str(certs / "ca.crt"),
    )
    settings.admission.managed = "nvlfleet.io"


def _self_signed(directory: pathlib.Path, host: str) -> None:
    """A throw-away CA and a serving certificate for ``host`` (an IP or a DNS name), made with openssl."""
    san = f"IP:{host}" if host.replace(".", "").isdigit() or ":" in host else f"DNS:{host}"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    d = str(directory)
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{d}/ca.key")
    openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        f"{d}/ca.key",
        "-subj",
        "/CN=nvlfleet-webhook-ca",
        "-days",
        "365",
        "-out",
        f"{d}/ca.crt",
    )
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{d}/tls.key")
    openssl("req", "-new", "-key", f"{d}/tls.key", "-subj", f"/CN={host}", "-out", f"{d}/tls.csr")
    (directory / "ext.cnf").write_text(
        f"subjectAltName={san}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        f"{d}/tls.csr",
        "-CA",
        f"{d}/ca.crt",
        "-CAkey",
        f"{d}/ca.key",
        "-CAcreateserial",
        "-days",
        "365",
        "-extfile",
        f"{d}/ext.cnf",
        "-out",
        f"{d}/tls.crt",
    )
