"""Generated artifacts: the Grafana dashboards (``dashboards``, built from ``grafana``'s small dashboard model) and
Prometheus alerts (``alerts``), as code.

``nvlfleet dashboards --out charts/nvlfleet`` (``make generated``) writes them into the Helm chart; unit tests
fail when the committed files differ, and check that every metric they query is exported by the operator
(``nvlfleet.api.metric_names``) or by vLLM (``nvlfleet.facts.vllm_metrics``).

Where it sits: beside the data flow, describing its *gauges* end to humans. It may import ``nvlfleet.facts``
(and the core and API below it); not the adapters, the simulator nor the CLI, and it is pure: no kopf, Kubernetes
client, network or clock.
"""
