"""nvlfleet: a Kubernetes operator that turns one DeepSeekServing into a tuned vLLM fleet on NVL72 racks.

The subpackages are the layers, top to bottom; each may import only the layers below it (pyproject.toml's
import-linter contracts check this):

- ``cli`` and ``commands``: the ``nvlfleet`` command line, one module per subcommand.
- ``adapters`` (kopf wiring, Kubernetes client, scraper, metrics exporter), ``sim`` (simulated vLLM endpoints) and
  ``artifacts`` (generated dashboards and alerts): side by side, none imports another.
- ``core``: the pure decisions.
- ``api``: the DeepSeekServing models, the generated CRD, the problems reported about them.
- ``facts``: vLLM and hardware facts, as data.

Data flows one way. The pure core turns inventory + spec into manifests: ``api.models`` (the spec) →
``core.validation`` → ``core.inventory`` + ``core.planner`` (which NVLink domain each group goes to) →
``core.profiles`` + ``core.render`` (the manifests) → ``core.reconciler``. The adapter ``adapters.kube`` applies
them with server-side apply, prunes stale children and writes status; ``adapters.main`` wires it into kopf.
Telemetry flows the same way: vLLM ``/metrics`` → ``adapters.scraper`` → ``core.samples`` → ``core.rates`` →
``core.economics`` ($) → ``core.group_telemetry`` → ``adapters.exporter`` (Prometheus gauges) and status fields.
"""

__version__ = "0.1.0"
