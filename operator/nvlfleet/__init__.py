"""nvlfleet: a Kubernetes operator that turns one DeepSeekServing into a tuned vLLM fleet on NVL72 racks.

Data flows one way. The pure core turns inventory + spec into manifests:
``models`` (the API) → ``validation`` → ``inventory`` + ``planner`` (which NVLink domain each group goes to)
→ ``profiles`` + ``render`` (the manifests). The adapter ``kube`` applies them with server-side apply, prunes
stale children and writes status; ``main`` wires it into kopf. Telemetry flows the same way:
vLLM ``/metrics`` → ``telemetry`` (rates) → ``economics`` ($) → Prometheus gauges and status fields.
"""

__version__ = "0.1.0"
