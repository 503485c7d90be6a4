"""Adapters: where the pure core meets kopf, the Kubernetes API, vLLM endpoints and Prometheus.

``operator`` runs the reconcile pass for each serving (``config`` its settings, ``nudges`` the queue of servings
due a pass, ``caches`` the trimmed watch objects and read-your-writes); ``kube`` carries out the reconciler's
decisions (server-side apply, prune, status patches) with the Kubernetes client; ``main`` wires the handlers into
kopf, ``webhook`` is its admission check; ``decoding`` keeps deep JSON from stopping kopf; ``servingtelemetry``
points the scraper at each serving's ready leaders and copies its figures into status; ``scraper`` fetches every
leader's vLLM ``/metrics`` and keeps the rates and money the core computes from them; ``exporter`` holds the
operator's own metrics and serves them, with the scraper's per-group gauges, over HTTP.

Where it sits: the *apply → prune → status* end of the operator flow and the *metrics → rates* and *gauges* ends
of the telemetry flow. It may import ``nvlfleet.core``, ``nvlfleet.api`` and ``nvlfleet.facts``; not the
simulator, the artifact generators nor the CLI. No decisions are taken here.
"""
