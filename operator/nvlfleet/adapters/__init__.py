"""Adapters: where the pure core meets kopf, the Kubernetes API, vLLM endpoints and Prometheus.

``operator`` runs the reconcile pass for each serving (``config`` its settings, ``nudges`` the queue of servings
due a pass, ``caches`` the trimmed watch objects and read-your-writes); ``kube`` carries out the reconciler's
decisions (server-side apply, prune, status patches) with the Kubernetes client; ``main`` wires the handlers into
kopf, ``webhook`` is its admission check; ``decoding`` keeps deep JSON from stopping kopf; ``telemetry`` scrapes
vLLM ``/metrics``, turns them into rates, prices them with ``nvlfleet.core.economics`` and exports the gauges.

Where it sits: the *apply → prune → status* end of the operator flow and the *metrics → rates* and *gauges* ends
of the telemetry flow. It may import ``nvlfleet.core``, ``nvlfleet.api`` and ``nvlfleet.facts``; not the
simulator, the artifact generators nor the CLI. No decisions are taken here.
"""
