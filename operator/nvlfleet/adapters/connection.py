"""How the operator reaches the API server: the address and credentials of a kubeconfig or of the in-cluster
ServiceAccount, for nvlfleet's own calls (``kube.Api``) and kopf's watches (``main.login``) alike.

Adapter, under every read and write of the data flow. The official ``kubernetes`` client is not used: nvlfleet
needs a dozen fields of it, and importing it costs about 21 MiB of resident memory (its 700 generated models,
which kopf also imports whenever the package is installed), so the operator image does without it.

What a kubeconfig may say, and what nvlfleet does with it:

* ``$KUBECONFIG`` as a list of files is merged the way kubectl merges it: the first file naming a context,
  cluster or user (or setting ``current-context``) wins.
* Cluster: ``server``, ``certificate-authority`` / ``-data``, ``insecure-skip-tls-verify``, ``tls-server-name``,
  ``proxy-url``. User: ``token``, ``tokenFile``, ``client-certificate`` / ``-data``, ``client-key`` / ``-data``,
  and ``exec`` plugins (``client.authentication.k8s.io/v1`` and ``v1beta1``: EKS, GKE, AKS, OIDC login), whose
  credential is asked for again when its ``expirationTimestamp`` has passed. A relative path is relative to the
  file that names it, as kubectl reads it.
* Refused with the reason: ``auth-provider`` (kubectl itself dropped the gcp and azure providers in 1.26: their
  exec plugins replace them) and ``username``/``password`` (the API server dropped basic auth in 1.19).

In a pod the ServiceAccount's token file is read again every minute: a projected token is rotated by the
kubelet, and a token read once at start-up stops working within hours.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
import yaml

SERVICE_ACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
# How long a token read from a file is trusted before the file is read again (the kubelet rotates projected
# ServiceAccount tokens well before they expire; client-go re-reads them on the same period).
TOKEN_FILE_SECONDS = 60.0
# An exec credential is asked for again this long before it expires, so no request carries a token that expires
# in flight.
EXEC_MARGIN = datetime.timedelta(seconds=30)


class CredentialsError(Exception):
    """A kubeconfig or ServiceAccount that gives no way to reach the API server, with what is wrong in it."""


@dataclasses.dataclass(frozen=True)
class Credentials:
    """Everything one request needs to reach and authenticate to the API server, at one moment."""

    server: str
    ca_file: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    token: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    refresh_at: datetime.datetime | None = None  # when this process reads the token (or asks the plugin) again
    expiration: datetime.datetime | None = None  # when the credential itself stops being valid, if its issuer says

    @property
    def tls(self) -> tuple[str | None, bool, str | None, str | None, str | None, str | None]:
        """What a connection pool is built from: a change of any of it needs a new pool."""
        return (self.ca_file, self.insecure, self.tls_server_name, self.proxy_url, self.cert_file, self.key_file)


class Connection:
    """The credentials of one kubeconfig user or ServiceAccount, read again when due; thread-safe. It owns the
    private files its inline PEM data was written to, removed with it."""

    def __init__(
        self,
        fixed: Credentials,
        refresh: Callable[[], Credentials] | None = None,
        files: PemFiles | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self._fixed = fixed
        self._refresh = refresh
        self._files = files
        self._clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._current: Credentials | None = None if refresh else fixed
        self._lock = threading.Lock()

    def credentials(self) -> Credentials:
        """The credentials to use now: read again from the token file or the exec plugin once they are due."""
        with self._lock:
            current = self._current
            if current is None or (current.refresh_at is not None and self._clock() >= current.refresh_at):
                current = self._current = self._refresh() if self._refresh else self._fixed
            return current

    def expire(self) -> None:
        """The API server refused the credentials (401): the next request reads them again, if they can be."""
        with self._lock:
            if self._refresh is not None:
                self._current = None

    def pool(self, credentials: Credentials, maxsize: int = 16) -> urllib3.PoolManager:
        """A connection pool that verifies the API server and presents the client certificate of ``credentials``."""
        tls: dict[str, Any] = {
            "cert_reqs": "CERT_NONE" if credentials.insecure else "CERT_REQUIRED",
            "ca_certs": credentials.ca_file,
            "cert_file": credentials.cert_file,
            "key_file": credentials.key_file,
        }
        if credentials.tls_server_name:
            tls["server_hostname"] = credentials.tls_server_name
        if credentials.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the kubeconfig asked for it
        if credentials.proxy_url:
            return urllib3.ProxyManager(credentials.proxy_url, maxsize=maxsize, **tls)
        return urllib3.PoolManager(maxsize=maxsize, **tls)


def ssl_context(credentials: Credentials) -> ssl.SSLContext:
    """A client context for asyncio connections (kopf's watches) that verifies the API server as ``pool`` does: its
    CA (or the system's), the client certificate, and under ``tls-server-name`` that name rather than the URL's
    host, asked for by SNI too, as kubectl does (a server reached by an address its certificate does not name)."""
    context = _ServerNamed(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = credentials.tls_server_name
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif credentials.ca_file:
        context.load_verify_locations(cafile=credentials.ca_file)
    else:
        context.load_default_certs()
    if credentials.cert_file and credentials.key_file:
        context.load_cert_chain(credentials.cert_file, credentials.key_file)
    return context


class _ServerNamed(ssl.SSLContext):
    """An SSL context whose connections name ``server_name`` (when set) for SNI and hostname verification, whatever
    host asyncio was asked to connect to: aiohttp, under kopf, offers no per-session server name."""

    server_name: str | None = None

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        named = self.server_name if self.server_name and not server_side else server_hostname
        return super().wrap_bio(incoming, outgoing, server_side, named, session)


class PemFiles:
    """A private directory (mode 0700) for the certificates and keys a kubeconfig or an exec plugin gives inline:
    the TLS library reads them from files only. Removed when its connection goes, or at exit. An exec plugin's
    certificate is renewed for the process's lifetime (``renewed``): only the last two renewals' files are kept."""

    def __init__(self) -> None:
        self.directory: str | None = None
        self._renewals: collections.deque[tuple[str, ...]] = collections.deque()

    def write(self, content: bytes) -> str:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="nvlfleet-credentials-")
            weakref.finalize(self, shutil.rmtree, self.directory, ignore_errors=True)
        fd, path = tempfile.mkstemp(dir=self.directory, suffix=".pem")  # mode 0600
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        return path

    def renewed(self, *paths: str) -> None:
        """``paths`` hold the credential that replaces the last one renewed: the files of the one before that go.
        The credential just replaced is kept: a pool or a kopf session built from it reads its files until it is
        built again (at its next request, or at kopf's next login), long before the next renewal."""
        self._renewals.append(paths)
        while len(self._renewals) > 2:
            for path in self._renewals.popleft():
                pathlib.Path(path).unlink(missing_ok=True)


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The connection ``kubeconfig`` (or ``$KUBECONFIG``, or ``~/.kube/config``) describes; without any of them,
    the in-cluster ServiceAccount's. A kubeconfig named but missing is an error, not a fall-back."""
    paths = _kubeconfig_paths(kubeconfig)
    if paths:
        return from_kubeconfig(_merged(paths), context)
    if kubeconfig is None and (SERVICE_ACCOUNT_DIR / "token").exists():
        return in_cluster()
    raise CredentialsError(
        "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and no in-cluster ServiceAccount "
        f"({SERVICE_ACCOUNT_DIR}/token): nothing says how to reach the API server"
    )


def in_cluster(directory: pathlib.Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] | None = None) -> Connection:
    """The pod's ServiceAccount: the API server the kubelet names in the environment, its CA, its token file."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise CredentialsError("in a pod without KUBERNETES_SERVICE_HOST/PORT: the API server's address is unknown")
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    ca = directory / "ca.crt"
    fixed = Credentials(server=server, ca_file=str(ca) if ca.exists() else None)
    return _with_token_file(fixed, directory / "token", "the ServiceAccount token")


def from_kubeconfig(config: Mapping[str, Any], context: str | None = None) -> Connection:
    """The connection of ``context`` (else the current context) of a merged kubeconfig (see ``_merged``)."""
    name = context or config.get("current-context")
    if not name:
        raise CredentialsError("the kubeconfig sets no current-context and none was given")
    ctx = _entry(config, "contexts", "context", name)
    cluster = _entry(config, "clusters", "cluster", ctx.get("cluster"))
    user = _entry(config, "users", "user", ctx.get("user")) if ctx.get("user") else {}
    where = {k: pathlib.Path(v) for k, v in config.get("_origins", {}).items()}
    files = PemFiles()
    if not cluster.get("server"):
        raise CredentialsError(f"cluster {ctx.get('cluster')!r} of context {name!r} has no server")
    for refused, why in _REFUSED_AUTH.items():
        if user.get(refused):
            raise CredentialsError(f"user {ctx.get('user')!r}: {refused} is not supported ({why})")
    cluster_dir = where.get(f"clusters/{ctx.get('cluster')}", pathlib.Path.cwd())
    user_dir = where.get(f"users/{ctx.get('user')}", pathlib.Path.cwd())
    fixed = Credentials(
        server=str(cluster["server"]),
        ca_file=_file(cluster, "certificate-authority", cluster_dir, files),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=cluster.get("tls-server-name"),
        proxy_url=cluster.get("proxy-url"),
        token=user.get("token"),
        cert_file=_file(user, "client-certificate", user_dir, files),
        key_file=_file(user, "client-key", user_dir, files),
    )
    if isinstance(user.get("exec"), Mapping):
        return _with_exec(fixed, user["exec"], cluster, user_dir, files)
    if not fixed.token and user.get("tokenFile"):
        path = _resolved(str(user["tokenFile"]), user_dir)
        return _with_token_file(fixed, path, "the kubeconfig's tokenFile", files)
    return Connection(fixed, files=files)


_REFUSED_AUTH = {
    "auth-provider": "kubectl dropped the gcp and azure auth providers in 1.26; use their exec plugins",
    "username": "the API server dropped basic authentication in 1.19; use a token or a client certificate",
    "password": "the API server dropped basic authentication in 1.19; use a token or a client certificate",
}


def _kubeconfig_paths(kubeconfig: str | None) -> list[pathlib.Path]:
    if kubeconfig:
        path = pathlib.Path(kubeconfig).expanduser()
        if not path.is_file():
            raise CredentialsError(f"kubeconfig {kubeconfig}: no such file")
        return [path]
    listed = [pathlib.Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [p for p in listed if p.is_file()]  # kubectl skips a listed file that is not there
    default = pathlib.Path("~/.kube/config").expanduser()
    return [default] if default.is_file() else []


def _merged(paths: list[pathlib.Path]) -> dict[str, Any]:
    """One kubeconfig from several, the first to name an entry winning; ``_origins`` says which file each named
    cluster and user came from, for the paths they give."""
    merged: dict[str, Any] = {"contexts": [], "clusters": [], "users": [], "_origins": {}}
    for path in paths:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise CredentialsError(f"kubeconfig {path}: cannot be read: {err}") from err
        if not isinstance(loaded, Mapping):
            raise CredentialsError(f"kubeconfig {path}: not a mapping")
        if loaded.get("current-context") and not merged.get("current-context"):
            merged["current-context"] = loaded["current-context"]
        for section in ("contexts", "clusters", "users"):
            known = {e.get("name") for e in merged[section]}
            for entry in loaded.get(section) or []:
                if isinstance(entry, Mapping) and entry.get("name") not in known:
                    merged[section].append(entry)
                    merged["_origins"][f"{section}/{entry.get('name')}"] = str(path.parent)
    return merged


def _entry(config: Mapping[str, Any], section: str, key: str, name: object) -> Mapping[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            value = entry.get(key)
            return value if isinstance(value, Mapping) else {}
    raise CredentialsError(f"the kubeconfig has no {key} named {name!r}")


def _resolved(path: str, base: pathlib.Path) -> pathlib.Path:
    given = pathlib.Path(path).expanduser()
    return given if given.is_absolute() else base / given


def _file(section: Mapping[str, Any], key: str, base: pathlib.Path, files: PemFiles) -> str | None:
    """The path of ``key``'s PEM: the file the kubeconfig names, or ``key-data`` written to a private file."""
    data = section.get(f"{key}-data")
    if data:
        try:
            return files.write(base64.b64decode(str(data), validate=True))
        except ValueError as err:
            raise CredentialsError(f"{key}-data is not base64: {err}") from err
    path = section.get(key)
    return str(_resolved(str(path), base)) if path else None


def _with_token_file(fixed: Credentials, path: pathlib.Path, what: str, files: PemFiles | None = None) -> Connection:
    def refresh() -> Credentials:
        try:
            token = path.read_text().strip()
        except OSError as err:
            raise CredentialsError(f"{what} {path} cannot be read: {err}") from err
        again = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=TOKEN_FILE_SECONDS)
        return dataclasses.replace(fixed, token=token or None, refresh_at=again)

    connection = Connection(fixed, refresh, files)
    connection.credentials()  # a missing token file is said at start-up, not at the first request
    return connection


def _with_exec(
    fixed: Credentials, plugin: Mapping[str, Any], cluster: Mapping[str, Any], base: pathlib.Path, files: PemFiles
) -> Connection:
    version = plugin.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise CredentialsError(f"exec plugin apiVersion {version!r}: nvlfleet speaks {', '.join(EXEC_API_VERSIONS)}")
    command = str(plugin.get("command") or "")
    if not command:
        raise CredentialsError("exec plugin without a command")
    if "/" in command and not os.path.isabs(command):
        command = str(base / command)  # as kubectl: a relative path with a slash is relative to the kubeconfig
    argv = [command, *(str(a) for a in plugin.get("args") or [])]
    spec: dict[str, Any] = {"interactive": False}
    if plugin.get("provideClusterInfo"):
        spec["cluster"] = {k: v for k, v in cluster.items() if k in ("server", "certificate-authority-data")}
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in plugin.get("env") or [] if "name" in e}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": version, "kind": "ExecCredential", "spec": spec})

    def refresh() -> Credentials:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CredentialsError(f"exec plugin {command} could not run: {err}") from err
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip()[-500:]
            raise CredentialsError(f"exec plugin {command} exited {done.returncode}: {said}")
        return exec_credentials(fixed, done.stdout, files, command)

    connection = Connection(fixed, refresh, files)
    connection.credentials()
    return connection


def exec_credentials(
    fixed: Credentials, output: bytes, files: PemFiles, command: str = "the exec plugin"
) -> Credentials:
    """``fixed`` with what an exec plugin printed (an ExecCredential): its token or client certificate, and when
    it expires. A credential without an expiry is kept until the API server refuses it (``Connection.expire``)."""
    try:
        status = (json.loads(output) or {}).get("status") or {}
    except (ValueError, AttributeError) as err:
        raise CredentialsError(f"{command} printed no ExecCredential: {err}") from err
    token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
    if not token and not (cert and key):
        raise CredentialsError(f"{command} gave neither a token nor a client certificate and key")
    expiration = None
    if status.get("expirationTimestamp"):
        try:
            stamp = datetime.datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00"))
        except ValueError as err:
            raise CredentialsError(f"{command}: expirationTimestamp is not a time: {err}") from err
        expiration = stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)
    cert_file, key_file = fixed.cert_file, fixed.key_file
    if cert and key:
        cert_file, key_file = files.write(str(cert).encode()), files.write(str(key).encode())
        files.renewed(cert_file, key_file)
    return dataclasses.replace(
        fixed,
        token=str(token) if token else fixed.token,
        cert_file=cert_file,
        key_file=key_file,
        refresh_at=expiration - EXEC_MARGIN if expiration else None,
        expiration=expiration,
    )
