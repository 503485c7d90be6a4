"""The operator reaches the API server with what a kubeconfig or the pod's ServiceAccount says, without the
official client: tokens, client certificates inline or in files, exec plugins, rotated token files, and a server
reached by an address its certificate does not name (``tls-server-name``), by kopf's watches too."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import pathlib
import ssl
import stat
import subprocess
import sys
import textwrap
import types
from typing import Any

import kopf
import pytest
import yaml

from nvlfleet.adapters import connection, main

T0 = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)


def kubeconfig(tmp_path: pathlib.Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "here",
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_a_token_user_sends_its_token_to_the_named_server(tmp_path: pathlib.Path) -> None:
    creds = connection.connect(kubeconfig(tmp_path, {"token": "abc"})).credentials()
    assert (creds.server, creds.token, creds.cert_file) == ("https://127.0.0.1:6443", "abc", None)
    assert not creds.insecure


def test_inline_certificates_are_written_to_private_files(tmp_path: pathlib.Path) -> None:
    data = {k: base64.b64encode(f"PEM {k}".encode()).decode() for k in ("ca", "cert", "key")}
    conn = connection.connect(
        kubeconfig(
            tmp_path,
            {"client-certificate-data": data["cert"], "client-key-data": data["key"]},
            {"server": "https://127.0.0.1:6443", "certificate-authority-data": data["ca"]},
        )
    )
    creds = conn.credentials()
    assert [pathlib.Path(p).read_text() for p in (creds.ca_file, creds.cert_file, creds.key_file)] == [
        "PEM ca",
        "PEM cert",
        "PEM key",
    ]
    assert stat.S_IMODE(os.stat(creds.key_file).st_mode) == 0o600  # type: ignore[arg-type]
    assert stat.S_IMODE(os.stat(pathlib.Path(creds.key_file).parent).st_mode) == 0o700  # type: ignore[arg-type]


def test_certificate_files_are_relative_to_the_kubeconfig_that_names_them(tmp_path: pathlib.Path) -> None:
    path = kubeconfig(tmp_path, {"client-certificate": "u.crt", "client-key": "/abs/u.key"})
    creds = connection.connect(path).credentials()
    assert (creds.cert_file, creds.key_file) == (str(tmp_path / "u.crt"), "/abs/u.key")


def test_kubeconfig_list_the_first_file_naming_an_entry_wins(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    kubeconfig(first, {"token": "first"})
    kubeconfig(second, {"token": "second"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first / "kubeconfig"), str(second / "kubeconfig")]))
    assert connection.connect().credentials().token == "first"


def test_a_named_kubeconfig_that_is_missing_is_an_error_not_a_fall_back(tmp_path: pathlib.Path) -> None:
    with pytest.raises(connection.CredentialsError, match="no such file"):
        connection.connect(str(tmp_path / "absent"))


@pytest.mark.parametrize(
    ("user", "said"),
    [
        ({"auth-provider": {"name": "gcp"}}, "auth-provider is not supported"),
        ({"username": "admin", "password": "x"}, "basic authentication"),
    ],
)
def test_auth_kubectl_dropped_is_refused_with_the_reason(
    tmp_path: pathlib.Path, user: dict[str, Any], said: str
) -> None:
    with pytest.raises(connection.CredentialsError, match=said):
        connection.connect(kubeconfig(tmp_path, user))


def test_a_context_naming_an_unknown_cluster_says_which(tmp_path: pathlib.Path) -> None:
    path = pathlib.Path(kubeconfig(tmp_path, {"token": "t"}))
    config = yaml.safe_load(path.read_text())
    config["contexts"][0]["context"]["cluster"] = "elsewhere"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(connection.CredentialsError, match="no cluster named 'elsewhere'"):
        connection.connect(str(path))


def plugin(tmp_path: pathlib.Path, status: dict[str, Any]) -> dict[str, Any]:
    """An exec plugin that prints an ExecCredential with ``status`` and counts its runs in a file beside it."""
    script = tmp_path / "plugin.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os, pathlib
        runs = pathlib.Path({str(tmp_path / "runs")!r})
        runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else "1")
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        assert info["spec"]["interactive"] is False
        print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": {status!r}}}))
        """)
    )
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script)]}


def test_an_exec_plugin_token_is_asked_for_again_when_it_expires(tmp_path: pathlib.Path) -> None:
    conn = connection.connect(
        kubeconfig(tmp_path, {"exec": plugin(tmp_path, {"token": "t1", "expirationTimestamp": "2026-12-03T12:10:00Z"})})
    )
    conn._clock = lambda: T0  # before expiry (less the margin): the plugin is not run again
    creds = conn.credentials()
    assert (creds.token, creds.expiration) == ("t1", T0 + datetime.timedelta(minutes=10))
    assert (tmp_path / "runs").read_text() == "1"
    conn._clock = lambda: T0 + datetime.timedelta(minutes=10)
    conn.credentials()
    assert (tmp_path / "runs").read_text() == "2"


def test_an_exec_plugin_that_fails_says_what_it_printed(tmp_path: pathlib.Path) -> None:
    failing = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": ["-c", "1/0"]}
    with pytest.raises(connection.CredentialsError, match="ZeroDivisionError"):
        connection.connect(kubeconfig(tmp_path, {"exec": failing}))


def test_an_exec_credential_without_token_or_certificate_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(connection.CredentialsError, match="neither a token nor a client certificate"):
        connection.exec_credentials(
            connection.Credentials(server="s"), json.dumps({"status": {}}).encode(), connection.PemFiles()
        )


def test_an_exec_plugins_renewed_certificates_leave_only_the_last_two_on_disk() -> None:
    files = connection.PemFiles()
    issued = [
        connection.exec_credentials(
            connection.Credentials(server="s"),
            json.dumps({"status": {"clientCertificateData": f"CERT {i}", "clientKeyData": f"KEY {i}"}}).encode(),
            files,
        )
        for i in range(3)
    ]

    on_disk = [pathlib.Path(str(c.cert_file)).exists() and pathlib.Path(str(c.key_file)).exists() for c in issued]
    assert on_disk == [False, True, True]  # the one just replaced may still be read by a pool built from it
    assert pathlib.Path(str(issued[2].cert_file)).read_text() == "CERT 2"


def service_account(tmp_path: pathlib.Path, token: str) -> pathlib.Path:
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_text("PEM")
    return tmp_path


def test_in_a_pod_the_service_account_names_the_server_and_its_ca(tmp_path: pathlib.Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = connection.in_cluster(service_account(tmp_path, "sa-1"), env).credentials()
    assert (creds.server, creds.ca_file, creds.token) == ("https://10.0.0.1:443", str(tmp_path / "ca.crt"), "sa-1")


def test_an_ipv6_service_host_is_bracketed(tmp_path: pathlib.Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert connection.in_cluster(service_account(tmp_path, "t"), env).credentials().server == "https://[fd00::1]:443"


def test_a_rotated_service_account_token_is_read_again(tmp_path: pathlib.Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    conn = connection.in_cluster(service_account(tmp_path, "old"), env)
    (tmp_path / "token").write_text("new")
    assert conn.credentials().token == "old"  # within the minute it is trusted
    conn._clock = lambda: datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=61)
    assert conn.credentials().token == "new"


def test_a_refused_token_is_read_again_at_once(tmp_path: pathlib.Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    conn = connection.in_cluster(service_account(tmp_path, "old"), env)
    (tmp_path / "token").write_text("new")
    conn.expire()  # what kube.Api does on a 401
    assert conn.credentials().token == "new"


def test_the_operator_image_needs_no_kubernetes_client() -> None:
    """The point of this module: importing the operator's adapters does not import the official client."""
    import subprocess

    code = "import sys, nvlfleet.adapters.kube, nvlfleet.adapters.connection; print('kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "False"


# ``tls-server-name``: a server reached by an address its certificate does not name (kubectl's meaning).


def server_certificate(tmp_path: pathlib.Path, name: str) -> tuple[str, str]:
    """A self-signed certificate naming only ``name`` (not 127.0.0.1), and its key: (cert file, key file)."""
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
            *("-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"),
            *("-addext", "basicConstraints=CA:TRUE", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


async def handshake(cert: str, key: str, client: ssl.SSLContext) -> str:
    """What a TLS server at 127.0.0.1 holding ``cert`` told a client connecting with ``client``'s context."""
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    named: list[str | None] = []
    served.sni_callback = lambda sock, sni, ctx: named.append(sni)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        said = (await reader.read()).decode()
        writer.close()
    finally:
        server.close()
    return f"{said} as {named[0]}"


def test_tls_server_name_is_the_name_kopfs_connections_verify_and_ask_for(tmp_path: pathlib.Path) -> None:
    cert, key = server_certificate(tmp_path, "api.cluster.internal")
    creds = connection.Credentials("https://127.0.0.1:6443", ca_file=cert, tls_server_name="api.cluster.internal")

    assert asyncio.run(handshake(cert, key, connection.ssl_context(creds))) == "hello as api.cluster.internal"


def test_without_tls_server_name_a_server_whose_certificate_names_another_host_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    cert, key = server_certificate(tmp_path, "api.cluster.internal")
    creds = connection.Credentials("https://127.0.0.1:6443", ca_file=cert)

    with pytest.raises(ssl.SSLCertVerificationError, match=r"127\.0\.0\.1"):
        asyncio.run(handshake(cert, key, connection.ssl_context(creds)))


def test_kopf_logs_in_with_a_session_that_reaches_a_server_by_its_tls_server_name(tmp_path: pathlib.Path) -> None:
    cert, key = server_certificate(tmp_path, "api.cluster.internal")
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    asked: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async def go() -> tuple[str, Any]:
        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
        port = server.sockets[0].getsockname()[1]
        cluster = {
            "server": f"https://127.0.0.1:{port}",
            "certificate-authority": cert,
            "tls-server-name": "api.cluster.internal",
        }
        conn = connection.connect(kubeconfig(tmp_path, {"token": "abc"}, cluster))
        memo = kopf.Memo(operator=types.SimpleNamespace(api_connection=lambda: conn))
        info = await main.login(settings=kopf.OperatorSettings(), memo=memo)
        assert isinstance(info, kopf.AiohttpSession)
        try:
            async with info.aiohttp_session.get(f"{info.server}/version") as response:
                return info.server, await response.json()
        finally:
            await info.aiohttp_session.close()
            server.close()

    server, body = asyncio.run(go())

    assert server.startswith("https://127.0.0.1:") and body == {}
    assert b"authorization: bearer abc" in asked[0].lower()
