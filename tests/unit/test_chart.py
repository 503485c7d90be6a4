"""The Helm chart, rendered for real with the pinned helm: lint, Kubernetes schemas, values schema, security
defaults, RBAC shape, webhook certificates, dashboards and alerts wiring, and agreement with the code it packages
(CRD, webhook path, image user, version). Installing it into a cluster is tests/integration/test_chart_install.py.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import subprocess
from collections.abc import Sequence
from typing import Any

import kubernetes_validate
import localprometheus
import pytest
import yaml
from localcluster import binaries

import nvlfleet
from nvlfleet.api import names
from nvlfleet.artifacts import alerts, dashboards
from support import servingbuilder as sb

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nvlfleet"

NAMESPACE = "nvlfleet-system"
RELEASE = "fleet"
FULLNAME = "fleet-nvlfleet"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas at hand.
K8S_VERSIONS = ("1.34.0", kubernetes_validate.latest_version())
# Kinds of the prometheus-operator and cert-manager APIs; kubernetes-validate knows only the built-in ones.
THIRD_PARTY = {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}
EVERYTHING_ON = {
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    "prometheusRule": {"enabled": True},
    "webhook": {"certManager": {"enabled": True}},
    "operator": {"watchNamespaces": ["inference-a", "inference-b"]},
    "policy": {"weightsHostPathPrefixes": ["/mnt/nvme/models"], "serviceAccounts": ["vllm"]},
}


@pytest.fixture(scope="module")
def helm() -> pathlib.Path:
    return binaries.kubectl_and_helm()["helm"]


def run_helm(helm: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def render(
    helm: pathlib.Path, values: dict[str, Any] | None = None, sets: Sequence[str] = (), tmp: pathlib.Path | None = None
) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"]
    if values:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["--values", str(path)]
    for item in sets:
        args += ["--set", item]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects)


# ---------------------------------------------------------------------------------------------------------------
# Lint and schemas


def test_helm_lint_passes_with_defaults_and_with_everything_on(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    (tmp_path / "on.yaml").write_text(yaml.safe_dump(EVERYTHING_ON))
    for extra in ([], ["--values", str(tmp_path / "on.yaml")]):
        result = run_helm(helm, "lint", "--strict", str(CHART), *extra)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_built_in_object_is_valid_against_the_kubernetes_schemas(
    helm: pathlib.Path, tmp_path: pathlib.Path, values: dict[str, Any], version: str
) -> None:
    for obj in render(helm, values, tmp=tmp_path):
        if obj["kind"] in THIRD_PARTY:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {err.message} at {list(err.path)}")


def test_the_defaults_render_exactly_the_operator_and_nothing_optional(helm: pathlib.Path) -> None:
    assert kinds(render(helm)) == sorted(
        [
            ("ClusterRole", f"{FULLNAME}-cluster"),
            ("ClusterRole", f"{FULLNAME}-manager"),
            ("ClusterRoleBinding", f"{FULLNAME}-cluster"),
            ("ClusterRoleBinding", f"{FULLNAME}-manager"),
            ("ConfigMap", f"{FULLNAME}-dashboard-nvlfleet-fleet"),
            ("ConfigMap", f"{FULLNAME}-dashboard-nvlfleet-operator"),
            ("ConfigMap", f"{FULLNAME}-dashboard-nvlfleet-serving"),
            ("CustomResourceDefinition", "deepseekservings.nvlfleet.io"),
            ("Deployment", FULLNAME),
            ("Role", f"{FULLNAME}-leader-election"),
            ("RoleBinding", f"{FULLNAME}-leader-election"),
            ("Secret", f"{FULLNAME}-webhook-tls"),
            ("Service", f"{FULLNAME}-metrics"),
            ("Service", f"{FULLNAME}-webhook"),
            ("ServiceAccount", FULLNAME),
            ("ValidatingWebhookConfiguration", FULLNAME),
        ]
    )


def test_a_misspelt_value_is_refused_with_its_path(helm: pathlib.Path) -> None:
    for typo, path in (
        ("operator.watchNamespace={a}", "/operator"),
        ("replicas=2", ""),
        ("grafana.dashboards.lable=x", "/grafana/dashboards"),
        ("webhook.failurePolicy=fail", "/webhook/failurePolicy"),
    ):
        result = run_helm(helm, "template", RELEASE, str(CHART), "--set", typo)
        assert result.returncode != 0, typo
        assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
        assert f"at '{path}'" in result.stderr, result.stderr


def _values_keys(node: Any, prefix: str = "") -> set[str]:
    keys = set()
    if isinstance(node, dict):
        for key, value in node.items():
            keys.add(prefix + key)
            keys |= _values_keys(value, f"{prefix}{key}.")
    return keys


def _schema_keys(schema: dict[str, Any], node: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, sub in (node.get("properties") or {}).items():
        if "$ref" in sub:
            sub = schema["definitions"][sub["$ref"].rsplit("/", 1)[1]]
        keys.add(prefix + key)
        if sub.get("additionalProperties") is False:
            keys |= _schema_keys(schema, sub, f"{prefix}{key}.")
    return keys


def test_the_schema_describes_every_key_of_values_yaml_and_no_stale_one() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    in_values = _values_keys(values)
    described = _schema_keys(schema, schema) - {"global"}
    # Objects handed to Kubernetes as they are (securityContext, probes, ...) are open in the schema: described,
    # but none of their children is.
    open_objects = {k for k in described if not any(d.startswith(k + ".") for d in described)}
    passthrough = {k for k in in_values if any(k.startswith(o + ".") for o in open_objects)}
    assert in_values - passthrough <= described, "keys of values.yaml the schema does not know"
    # A described key values.yaml leaves out must belong to an object values.yaml has (e.g. issuerRef.name).
    stale = {k for k in described - in_values if k.rpartition(".")[0] not in in_values}
    assert stale == set()


def test_every_value_has_a_helm_docs_comment() -> None:
    """helm-docs documents a key by the `# --` comment block right above it. Every leaf needs one, unless an
    enclosing object is documented as a whole (e.g. `resources`); objects that only group keys need none."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    entries = []  # (indent, key, documented, opens a block)
    for i, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z]\w*):(.*)$", line)
        if not match:
            continue
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("#") and not lines[j].strip().startswith("# --"):
            j -= 1
        entries.append((len(match[1]), match[2], j >= 0 and lines[j].strip().startswith("# --"), not match[3].strip()))
    undocumented = []
    path: list[tuple[int, str, bool]] = []
    for n, (indent, key, documented, opens) in enumerate(entries):
        while path and path[-1][0] >= indent:
            path.pop()
        covered = any(doc for _, _, doc in path)
        is_parent = opens and n + 1 < len(entries) and entries[n + 1][0] > indent
        if not (documented or covered or is_parent):
            undocumented.append(".".join([*(k for _, k, _ in path), key]))
        path.append((indent, key, documented))
    assert undocumented == []


def test_the_chart_version_is_the_operator_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == nvlfleet.__version__


# ---------------------------------------------------------------------------------------------------------------
# CRD: the chart ships the generated one


def test_the_chart_ships_the_generated_crd_byte_for_byte() -> None:
    generated = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    assert generated, "crds/ holds the CRD generated from the models (make crd)"
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == generated, "run `make generated`"
    for name in generated:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes(), f"{name}: make generated"


# ---------------------------------------------------------------------------------------------------------------
# The operator's pod: restricted Pod Security, probes, resources, and the image it runs


def test_the_pod_meets_the_restricted_pod_security_standard(helm: pathlib.Path) -> None:
    pod = one(render(helm), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    assert not any("hostPath" in v for v in pod["volumes"])
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_the_pod_runs_as_the_images_user() -> None:
    (user,) = re.findall(r"^USER (\d+):(\d+)$", (REPO / "Dockerfile").read_text(), flags=re.M)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert (values["securityContext"]["runAsUser"], values["securityContext"]["runAsGroup"]) == tuple(map(int, user))


def test_the_operator_has_probes_resources_and_its_ports(helm: pathlib.Path) -> None:
    (container,) = one(render(helm), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9090, "health": 8080, "webhook": 9443}
    assert container["image"] == f"ghcr.io/nvlfleet/nvlfleet:{nvlfleet.__version__}"


def test_a_digest_pins_the_image(helm: pathlib.Path) -> None:
    digest = "sha256:" + "ab" * 32
    (container,) = one(render(helm, sets=[f"image.digest={digest}"]), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["image"] == f"ghcr.io/nvlfleet/nvlfleet@{digest}"


# ---------------------------------------------------------------------------------------------------------------
# The admin's policy: what a DeepSeekServing may ask for, as flags of `nvlfleet run`


def allow_args(objects: list[dict[str, Any]]) -> list[str]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return [arg for arg in container["args"] if arg.startswith("--allow-")]


def test_the_default_policy_allows_nothing(helm: pathlib.Path) -> None:
    assert allow_args(render(helm)) == []


def test_each_policy_entry_becomes_one_flag_of_nvlfleet_run(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    from nvlfleet.api import policy

    allowed = {
        "weightsHostPathPrefixes": ["/mnt/nvme/models", '/srv/model cache "v4"'],
        "volumeHostPathPrefixes": ["/var/lib/nvlfleet: scratch"],
        "serviceAccounts": ["vllm", "vllm-profiler"],
        "priorityClasses": ["inference-high"],
    }
    expected = [
        f"{flag}={entry}" for flag, value in policy.FLAGS.values() for entry in allowed[value.removeprefix("policy.")]
    ]
    assert len(expected) == 6, "every setting of api.policy has a chart value"
    # Spaces, quotes and `: ` stay inside one argument, byte for byte.
    assert sorted(allow_args(render(helm, {"policy": allowed}, tmp=tmp_path))) == sorted(expected)


def test_a_policy_entry_that_is_no_absolute_path_or_no_object_name_is_refused(helm: pathlib.Path) -> None:
    for entry, path in (
        ("policy.weightsHostPathPrefixes={mnt/models}", "/policy/weightsHostPathPrefixes/0"),
        # Kubernetes would expand $(VAR) in the argument: the allowed directory would not be the one written.
        ("policy.volumeHostPathPrefixes={/data/$(POD_NAME)}", "/policy/volumeHostPathPrefixes/0"),
        ("policy.serviceAccounts={Vllm}", "/policy/serviceAccounts/0"),
        ("policy.priorityClasses={high priority}", "/policy/priorityClasses/0"),
    ):
        result = run_helm(helm, "template", RELEASE, str(CHART), "--set", entry)
        assert result.returncode != 0, entry
        assert f"at '{path}'" in result.stderr, result.stderr


# ---------------------------------------------------------------------------------------------------------------
# RBAC: least privilege, by construction


def rules(objects: list[dict[str, Any]]) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """Every rule of every role as (role, apiGroup/resource, verbs, resourceNames)."""
    out = []
    for obj in objects:
        if obj["kind"] in ("ClusterRole", "Role"):
            for rule in obj["rules"]:
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        out.append(
                            (
                                obj["metadata"]["name"],
                                f"{group}/{resource}",
                                tuple(rule["verbs"]),
                                tuple(rule.get("resourceNames", ())),
                            )
                        )
    return out


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_rbac_has_no_wildcards_no_secrets_and_no_escalation(
    helm: pathlib.Path, tmp_path: pathlib.Path, values: dict[str, Any]
) -> None:
    objects = render(helm, values, tmp=tmp_path)
    for obj in objects:
        for rule in obj.get("rules", []) if obj["kind"] in ("ClusterRole", "Role") else []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (obj["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule
    granted = rules(objects)
    assert not [r for r in granted if r[1].split("/")[1] in ("secrets", "configmaps")]
    assert not [r for r in granted if set(r[2]) & {"escalate", "bind", "impersonate", "deletecollection"}]
    assert not [r for r in granted if r[1].startswith("admissionregistration")]
    # RBAC objects: only the routers' namespaced Roles and RoleBindings, in the manager role, never cluster-wide
    # ones; without escalate and bind (above) the operator can grant nothing it does not hold itself.
    rbac = [r for r in granted if r[1].startswith("rbac.authorization.k8s.io/")]
    assert {r[1] for r in rbac} == {"rbac.authorization.k8s.io/roles", "rbac.authorization.k8s.io/rolebindings"}
    assert {r[0] for r in rbac} == {f"{FULLNAME}-manager"}


TWO_NAMESPACES = ["operator.watchNamespaces={inference-a,inference-b}"]


def test_cluster_scoped_grants_are_read_only(helm: pathlib.Path) -> None:
    cluster = [r for r in rules(render(helm)) if r[0] == f"{FULLNAME}-cluster"]
    assert cluster and all(set(verbs) <= {"get", "list", "watch"} for _, _, verbs, _ in cluster)


def test_watching_some_namespaces_grants_the_manager_role_only_there(helm: pathlib.Path) -> None:
    objects = render(helm, sets=TWO_NAMESPACES)
    manager = [o for o in objects if o["metadata"]["name"] == f"{FULLNAME}-manager"]
    assert sorted((o["kind"], o["metadata"].get("namespace")) for o in manager) == [
        ("Role", "inference-a"),
        ("Role", "inference-b"),
        ("RoleBinding", "inference-a"),
        ("RoleBinding", "inference-b"),
    ]
    bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
        if binding["kind"] == "RoleBinding":  # a Role of its own namespace, never a ClusterRole bound there
            assert binding["roleRef"]["kind"] == "Role"


def test_watching_some_namespaces_reads_nothing_namespaced_cluster_wide(helm: pathlib.Path) -> None:
    cluster_wide = {(r[1], r[2]) for r in rules(render(helm, sets=TWO_NAMESPACES)) if r[0] == f"{FULLNAME}-cluster"}
    assert cluster_wide == {
        ("/nodes", ("list", "watch")),
        ("apiextensions.k8s.io/customresourcedefinitions", ("list", "watch")),
        ("/namespaces", ("list", "watch")),
    }
    assert not [
        o
        for o in render(helm, sets=TWO_NAMESPACES)
        if o["kind"] == "ClusterRoleBinding" and "manager" in o["metadata"]["name"]
    ]


def test_the_lease_is_granted_by_name_in_the_release_namespace_only(helm: pathlib.Path) -> None:
    role = one(render(helm), "Role", f"{FULLNAME}-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [f"{FULLNAME}-leader"],
            "verbs": ["get", "update"],
        },
    ]


# ---------------------------------------------------------------------------------------------------------------
# The admission webhook


def _openssl(*args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_the_webhook_calls_the_operators_handler_through_its_service(helm: pathlib.Path) -> None:
    from nvlfleet.adapters.webhook import WEBHOOK_ID

    objects = render(helm)
    (webhook,) = one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["clientConfig"]["service"] == {
        "name": f"{FULLNAME}-webhook",
        "namespace": NAMESPACE,
        "port": 443,
        "path": f"/{WEBHOOK_ID}",
    }
    assert webhook["rules"] == [
        {
            "apiGroups": ["nvlfleet.io"],
            "apiVersions": ["*"],
            "resources": ["deepseekservings"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    service = one(objects, "Service", f"{FULLNAME}-webhook")
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]


def test_the_webhook_refuses_writes_while_no_operator_answers_unless_told_to_ignore(helm: pathlib.Path) -> None:
    def failure_policy(sets: list[str]) -> str:
        (webhook,) = one(render(helm, sets=sets), "ValidatingWebhookConfiguration")["webhooks"]
        return str(webhook["failurePolicy"])

    assert failure_policy([]) == "Fail"
    assert failure_policy(["webhook.failurePolicy=Ignore"]) == "Ignore"


def test_the_webhook_is_only_called_for_creates_and_spec_changes(helm: pathlib.Path) -> None:
    """The handler admits an update that leaves the spec as it is (nvlfleet.adapters.main.admit_serving); the
    configuration does not call it for one, so metadata writes need no operator. The API server evaluating this
    expression is tests/integration/test_chart_install.py."""
    (webhook,) = one(render(helm), "ValidatingWebhookConfiguration")["webhooks"]
    (condition,) = webhook["matchConditions"]
    assert condition["expression"] == (
        "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec"
    )


OWN_NAMESPACES = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]}


def test_the_webhook_never_checks_the_operators_own_namespace_or_kube_system(helm: pathlib.Path) -> None:
    (webhook,) = one(render(helm), "ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["namespaceSelector"] == {"matchExpressions": [OWN_NAMESPACES]}


def test_a_namespace_selector_from_the_values_narrows_the_webhook_and_keeps_the_exclusion(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    team = {"key": "team", "operator": "In", "values": ["inference"]}
    values = {"webhook": {"namespaceSelector": {"matchLabels": {"tier": "gpu"}, "matchExpressions": [team]}}}
    (webhook,) = one(render(helm, values, tmp=tmp_path), "ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["namespaceSelector"] == {"matchLabels": {"tier": "gpu"}, "matchExpressions": [team, OWN_NAMESPACES]}


def _webhook_service_dns_names(objects: list[dict[str, Any]]) -> set[str]:
    """The names a client may use for the webhook's Service, from the rendered Service itself."""
    service = one(objects, "Service", f"{FULLNAME}-webhook")["metadata"]
    name, namespace = service["name"], service["namespace"]
    return {name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"}


def _helm_issued_tls(objects: list[dict[str, Any]], into: pathlib.Path) -> dict[str, pathlib.Path]:
    """The Secret's certificate and key and the webhook configuration's caBundle, as PEM files."""
    secret = one(objects, "Secret", f"{FULLNAME}-webhook-tls")["data"]
    (webhook,) = one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    encoded = {
        "tls.crt": secret["tls.crt"],
        "tls.key": secret["tls.key"],
        "caBundle": webhook["clientConfig"]["caBundle"],
    }
    files = {}
    for name, data in encoded.items():
        files[name] = into / name
        files[name].write_bytes(base64.b64decode(data))
    return files


def test_the_helm_issued_certificate_names_exactly_the_webhook_services_dns_names(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    objects = render(helm)
    tls = _helm_issued_tls(objects, tmp_path)
    extension = _openssl("x509", "-in", str(tls["tls.crt"]), "-noout", "-ext", "subjectAltName")
    header, names = extension.strip().splitlines()
    assert header.strip() == "X509v3 Subject Alternative Name:"
    entries = [entry.strip() for entry in names.split(",")]
    assert all(entry.startswith("DNS:") for entry in entries), entries  # no IP addresses, no URIs
    assert {entry.removeprefix("DNS:") for entry in entries} == _webhook_service_dns_names(objects)


def test_the_webhook_configurations_ca_bundle_signs_the_helm_issued_certificate(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    objects = render(helm)
    tls = _helm_issued_tls(objects, tmp_path)
    # What the API server checks when it calls the webhook: a chain to the caBundle, fit for a TLS server, for the
    # name it dials. Every Service name is tried, not only the `.svc` one the API server uses today.
    for name in sorted(_webhook_service_dns_names(objects)):
        _openssl(
            "verify", "-CAfile", str(tls["caBundle"]), "-purpose", "sslserver", "-verify_hostname", name,
            str(tls["tls.crt"]),
        )  # fmt: skip
    # ... and the operator serves with the key of that certificate.
    public_of_key = _openssl("pkey", "-in", str(tls["tls.key"]), "-pubout")
    public_of_cert = _openssl("x509", "-in", str(tls["tls.crt"]), "-noout", "-pubkey")
    assert public_of_key == public_of_cert


def test_a_certificate_for_another_name_or_from_another_ca_fails_the_same_check(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The check above can fail: openssl refuses a wrong host name, and a caBundle from another render."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    tls = _helm_issued_tls(render(helm), ours)
    other_ca = _helm_issued_tls(render(helm), theirs)["caBundle"]
    for ca, name in ((tls["caBundle"], "kubernetes.default.svc"), (other_ca, f"{FULLNAME}-webhook.{NAMESPACE}.svc")):
        result = subprocess.run(
            ["openssl", "verify", "-CAfile", str(ca), "-verify_hostname", name, str(tls["tls.crt"])],
            capture_output=True,
            check=False,
        )
        assert result.returncode != 0, (ca, name)


def test_the_secret_keeps_the_ca_the_webhook_trusts_so_upgrades_reuse_it(helm: pathlib.Path) -> None:
    objects = render(helm)
    (webhook,) = one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    assert one(objects, "Secret", f"{FULLNAME}-webhook-tls")["data"]["ca.crt"] == webhook["clientConfig"]["caBundle"]


def test_a_new_helm_issued_certificate_restarts_the_operator(helm: pathlib.Path) -> None:
    # The operator reads its serving certificate at start; the checksum of it in the pod template rolls the pod.
    annotations = one(render(helm), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/webhook-tls"])
    assert (
        annotations["checksum/webhook-tls"]
        != one(render(helm), "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/webhook-tls"]
    ), "helm template issues a fresh certificate each time, so the checksum changes"


def test_cert_manager_issues_the_certificate_and_injects_the_ca(helm: pathlib.Path) -> None:
    objects = render(helm, sets=["webhook.certManager.enabled=true"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    certificate = one(objects, "Certificate")
    assert certificate["spec"]["secretName"] == f"{FULLNAME}-webhook-tls"
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": f"{FULLNAME}-selfsigned"}
    assert one(objects, "Issuer")["spec"] == {"selfSigned": {}}
    configuration = one(objects, "ValidatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{FULLNAME}-webhook"
    }
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]


def test_cert_manager_can_use_an_existing_issuer(helm: pathlib.Path) -> None:
    issuer = ["webhook.certManager.issuerRef.name=corp-ca", "webhook.certManager.issuerRef.kind=ClusterIssuer"]
    objects = render(helm, sets=["webhook.certManager.enabled=true", *issuer])
    assert not [o for o in objects if o["kind"] == "Issuer"]
    assert one(objects, "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_without_the_webhook_nothing_of_it_is_rendered(helm: pathlib.Path) -> None:
    objects = render(helm, sets=["webhook.enabled=false"])
    assert not [o for o in objects if o["kind"] in ("ValidatingWebhookConfiguration", "Secret")]
    assert not [o for o in objects if o["metadata"]["name"].endswith("-webhook")]
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "readinessProbe" not in container
    assert not [m for m in container["volumeMounts"] if m["name"] == "webhook-tls"]


# ---------------------------------------------------------------------------------------------------------------
# Monitoring: ServiceMonitor, PrometheusRule, dashboards


def test_the_service_monitor_scrapes_the_metrics_port_and_keeps_the_servings_namespace(helm: pathlib.Path) -> None:
    objects = render(helm, sets=["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kps"])
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "honorLabels": True, "interval": "30s"}
    service = one(objects, "Service", f"{FULLNAME}-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_the_prometheus_rule_carries_the_generated_alerts_with_the_users_tuning(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    objects = render(
        helm,
        sets=[
            "prometheusRule.enabled=true",
            "prometheusRule.disabled.NvlfleetReconcileErrors=true",
            "prometheusRule.additionalRuleLabels.team=inference",
            "prometheusRule.runbookUrl=https://runbooks.example/nvlfleet",
        ],
    )
    (group,) = one(objects, "PrometheusRule")["spec"]["groups"]
    shipped = {a.name: a.rule() for a in alerts.all_alerts() if a.name != "NvlfleetReconcileErrors"}
    assert [r["alert"] for r in group["rules"]] == list(shipped)
    for rule in group["rules"]:
        want = shipped[rule["alert"]]
        assert rule["expr"] == want["expr"] and rule["for"] == want["for"]
        assert rule["labels"] == {**want["labels"], "team": "inference"}
        assert rule["annotations"] == {
            **want["annotations"],
            "runbook_url": f"https://runbooks.example/nvlfleet#{rule['alert'].lower()}",
        }
    # What the template produced is a valid rule file for Prometheus itself.
    path = tmp_path / "rendered.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [group]}))
    promtool = localprometheus.ensure().promtool
    result = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboards_are_configmaps_for_the_grafana_sidecar(helm: pathlib.Path) -> None:
    maps = [o for o in render(helm) if o["kind"] == "ConfigMap"]
    assert {name for m in maps for name in m["data"]} == {d.file_name for d in dashboards.all_dashboards()}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "nvlfleet"}
        ((name, text),) = config_map["data"].items()
        assert text == (CHART / "dashboards" / name).read_text(encoding="utf-8")


def test_the_sidecar_label_folder_and_namespace_are_configurable(helm: pathlib.Path) -> None:
    maps = [
        o
        for o in render(
            helm,
            sets=[
                "grafana.dashboards.label=dashboards",
                "grafana.dashboards.labelValue=nvlfleet",
                "grafana.dashboards.folderAnnotation=k8s-sidecar-target-directory",
                "grafana.dashboards.folder=/tmp/dashboards/nvlfleet",
                "grafana.dashboards.namespace=monitoring",
            ],
        )
        if o["kind"] == "ConfigMap"
    ]
    assert len(maps) == 3
    for config_map in maps:
        assert config_map["metadata"]["namespace"] == "monitoring"
        assert config_map["metadata"]["labels"]["dashboards"] == "nvlfleet"
        assert "grafana_dashboard" not in config_map["metadata"]["labels"]
        assert config_map["metadata"]["annotations"] == {"k8s-sidecar-target-directory": "/tmp/dashboards/nvlfleet"}
    assert not [o for o in render(helm, sets=["grafana.dashboards.enabled=false"]) if o["kind"] == "ConfigMap"]


MANAGER_GRANT = {
    ("nvlfleet.io/deepseekservings", ("get", "list", "watch", "patch"), ()),
    ("nvlfleet.io/deepseekservings/status", ("patch",), ()),
    ("leaderworkerset.x-k8s.io/leaderworkersets", ("get", "list", "watch", "create", "patch", "update", "delete"), ()),
    ("resource.nvidia.com/computedomains", ("get", "list", "watch", "create", "patch", "delete"), ()),
    ("/services", ("get", "list", "watch", "create", "patch", "update", "delete"), ()),
    ("monitoring.coreos.com/podmonitors", ("get", "list", "watch", "create", "patch", "delete"), ()),
    ("keda.sh/scaledobjects", ("get", "list", "watch", "create", "patch", "delete"), ()),
    ("apps/deployments", ("get", "list", "watch", "create", "patch", "update", "delete"), ()),
    ("/serviceaccounts", ("get", "list", "watch", "create", "patch", "delete"), ()),
    ("rbac.authorization.k8s.io/roles", ("get", "list", "watch", "create", "patch", "delete"), ()),
    ("rbac.authorization.k8s.io/rolebindings", ("get", "list", "watch", "create", "patch", "delete"), ()),
    ("/pods", ("get", "list", "watch"), ()),
    ("/events", ("create", "list"), ()),
}
LEADER_ELECTION_GRANT = {
    ("leader-election", "coordination.k8s.io/leases", ("create",), ()),
    ("leader-election", "coordination.k8s.io/leases", ("get", "update"), (f"{FULLNAME}-leader",)),
}


def grant(objects: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """The rules of `objects` as (role without the full name, namespace or None, apiGroup/resource, verbs, names)."""
    out = set()
    for obj in objects:
        if obj["kind"] in ("ClusterRole", "Role"):
            for role, resource, verbs, resource_names in rules([obj]):
                out.add(
                    (
                        role.removeprefix(f"{FULLNAME}-"),
                        obj["metadata"].get("namespace"),
                        resource,
                        verbs,
                        resource_names,
                    )
                )
    return out


def test_the_complete_grant_watching_every_namespace(helm: pathlib.Path) -> None:
    """Every permission the chart gives, in one table; each line is used by kube.py, main.py or kopf (see the
    comments in templates/rbac.yaml), and tests/integration/test_rbac_audit.py proves them used on the API server."""
    assert grant(render(helm)) == {
        ("cluster", None, "/nodes", ("list", "watch"), ()),
        ("cluster", None, "apiextensions.k8s.io/customresourcedefinitions", ("list", "watch"), ()),
        *{("manager", None, *rule) for rule in MANAGER_GRANT},
        *{(role, NAMESPACE, *rest) for role, *rest in LEADER_ELECTION_GRANT},
    }


def test_the_complete_grant_watching_two_namespaces(helm: pathlib.Path) -> None:
    assert grant(render(helm, sets=TWO_NAMESPACES)) == {
        ("cluster", None, "/nodes", ("list", "watch"), ()),
        ("cluster", None, "apiextensions.k8s.io/customresourcedefinitions", ("list", "watch"), ()),
        ("cluster", None, "/namespaces", ("list", "watch"), ()),
        *{("manager", namespace, *rule) for rule in MANAGER_GRANT for namespace in ("inference-a", "inference-b")},
        *{(role, NAMESPACE, *rest) for role, *rest in LEADER_ELECTION_GRANT},
    }


def held(helm: pathlib.Path, sets: list[str] | None = None) -> dict[str, set[str]]:
    """What the operator may do in a served namespace, per apiGroup/resource: its cluster and manager grants."""
    out: dict[str, set[str]] = {}
    for role, resource, verbs, resource_names in rules(render(helm, sets=sets or [])):
        if role in (f"{FULLNAME}-cluster", f"{FULLNAME}-manager") and not resource_names:
            out.setdefault(resource, set()).update(verbs)
    return out


@pytest.mark.parametrize("sets", [[], TWO_NAMESPACES], ids=["all-namespaces", "two-namespaces"])
def test_the_operator_holds_what_the_routers_role_grants_so_it_needs_neither_escalate_nor_bind(
    helm: pathlib.Path, sets: list[str]
) -> None:
    from nvlfleet.core import router

    role = router.role(sb.serving(), "dsv41-router")
    holds = held(helm, sets)
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert set(rule["verbs"]) <= holds.get(f"{group}/{resource}", set()), (group, resource)
    verbs = {verb for _, _, rule_verbs, _ in rules(render(helm, sets=sets)) for verb in rule_verbs}
    assert not verbs & {"escalate", "bind", "impersonate", "*"}


def test_every_child_kind_can_be_applied_read_listed_and_pruned(helm: pathlib.Path) -> None:
    grant = held(helm)
    for kind in names.CHILD_KINDS:
        assert {"get", "list", "create", "patch", "delete"} <= grant.get(f"{kind.group}/{kind.plural}", set()), kind


@pytest.mark.parametrize(
    ("sets", "namespaces"),
    [([], []), (["operator.watchNamespaces={inference-a,inference-b}"], ["inference-a", "inference-b"])],
    ids=["all-namespaces", "two-namespaces"],
)
def test_nvlfleet_run_accepts_the_deployments_arguments(
    helm: pathlib.Path, sets: list[str], namespaces: list[str]
) -> None:
    import argparse

    from nvlfleet.commands import run

    (container,) = one(render(helm, sets=sets), "Deployment")["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser(prog="nvlfleet run", exit_on_error=False)
    run.add_arguments(parser)
    args = parser.parse_args(container["args"])
    assert args.namespace == namespaces
    assert args.all_namespaces is (not namespaces)
    assert (args.metrics_port, args.health_port, args.webhook_port) == (9090, 8080, 9443)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-tls")
    assert args.webhook_cert_dir == mount["mountPath"]
    assert args.leader_election_lease == f"{FULLNAME}-leader"
    assert args.log_level == "info"
    # The Lease lives in the pod's namespace: run reads it from POD_NAMESPACE, which the chart sets.
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"


def test_the_policy_values_become_the_operators_policy(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    import argparse

    from nvlfleet.api import policy
    from nvlfleet.commands import run

    values = {"policy": {"weightsHostPathPrefixes": ["/mnt/nvme/models"], "priorityClasses": ["inference-high"]}}
    (container,) = one(render(helm, values=values, tmp=tmp_path), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    parser = argparse.ArgumentParser(prog="nvlfleet run", exit_on_error=False)
    run.add_arguments(parser)
    assert run.config_of(parser.parse_args(container["args"])).policy == policy.Policy(
        weights_host_path_prefixes=("/mnt/nvme/models",), priority_classes=("inference-high",)
    )
