"""The pure core: every decision nvlfleet takes, as functions of their inputs.

Operator flow: inventory + spec → ``validation`` → ``inventory`` + ``planner`` (which NVLink domain each group
goes to) → ``profiles`` (reading ``profile_data`` and the ``settings`` table) + ``render`` (the manifests) →
``reconciler`` (what to apply, what to prune, which status to write). Telemetry flow: metrics → ``exposition`` +
``samples`` (the text, read) → ``rates`` → ``economics`` ($, per GPU-hour) → ``group_telemetry`` (per role and
NVLink domain) → gauges and status fields.

Where it sits: above ``nvlfleet.api`` and ``nvlfleet.facts``, which it may import; below the adapters, the
simulator and the artifact generators, which it may not. No kopf, Kubernetes client, aiohttp, prometheus-client,
urllib, socket or ``time``, and no reading of the clock: ``now`` and the observed cluster are arguments
(pyproject.toml's import-linter contracts and tests/unit/test_layers.py check this).
"""
