"""The metrics nvlfleet exports, by the sample name a PromQL query uses: the one home of each ``nvlfleet_*`` name.

API layer: these names and labels are the operator's Prometheus interface, as the CRD is its Kubernetes one.
The exporter (``adapters.exporter``) registers each metric under its name here; the dashboards and alerts
(``artifacts``) query them by the same constants, and a unit test proves every name they use is really
exported. Counters are named with their ``_total`` suffix (prometheus-client strips it from the family name
and adds it back to the sample); histograms by the family name (``_bucket``, ``_sum``, ``_count`` appended).
"""

from __future__ import annotations

# Per group (labels ``GROUP_LABELS``), from the scraper's latest round.
TOKENS_PER_SECOND = "nvlfleet_tokens_per_second"  # {kind=prompt|prompt_cached|generation}
TOKENS_PER_SECOND_PER_GPU = "nvlfleet_tokens_per_second_per_gpu"
SPEC_ACCEPTANCE_RATE = "nvlfleet_spec_decode_acceptance_rate"
SPEC_MEAN_ACCEPTED_LENGTH = "nvlfleet_spec_decode_mean_accepted_length"
STREAMING_TPS_PER_REQUEST = "nvlfleet_streaming_tokens_per_second_per_request"
REVENUE_PER_HOUR = "nvlfleet_revenue_per_hour"  # {currency}
REVENUE_PER_GPU_HOUR = "nvlfleet_revenue_per_gpu_hour"  # {currency}
COST_PER_GPU_HOUR = "nvlfleet_cost_per_gpu_hour"  # {currency}
MARGIN_PER_GPU_HOUR = "nvlfleet_margin_per_gpu_hour"  # {currency}
PRICE_MULTIPLIER = "nvlfleet_price_multiplier"
PARITY_RATIO = "nvlfleet_parity_ratio"
GPUS = "nvlfleet_gpus"
COVERAGE = "nvlfleet_telemetry_coverage_ratio"
REVENUE_TOTAL = "nvlfleet_revenue_total"  # counter {currency}

# The operator's own work.
RECONCILE_TOTAL = "nvlfleet_reconcile_total"  # {namespace, serving}
RECONCILE_ERRORS_TOTAL = "nvlfleet_reconcile_errors_total"  # {namespace, serving, reason}
RECONCILE_DURATION = "nvlfleet_reconcile_duration_seconds"  # histogram
PLANNER_DURATION = "nvlfleet_planner_duration_seconds"  # histogram
SCRAPE_ERRORS_TOTAL = "nvlfleet_scrape_errors_total"  # {namespace, serving, reason}
SCRAPE_DURATION = "nvlfleet_scrape_duration_seconds"  # histogram
SCRAPE_ROUND_DURATION = "nvlfleet_scrape_round_duration_seconds"
SCRAPE_TARGETS = "nvlfleet_scrape_targets"  # {state=up|pending|down}
SERVING_CONDITION = "nvlfleet_serving_condition"  # {namespace, serving, condition=Ready|Placed|...}: 1 while True
DOMAIN_FREE_NODES = "nvlfleet_domain_free_nodes"  # {domain}
GROUPS_DESIRED = "nvlfleet_groups_desired"  # {namespace, serving, role}: what the spec (and autoscaler) asks for
GROUPS_READY = "nvlfleet_groups_ready"  # {namespace, serving, role}: groups whose pods are all Ready
AUTOSCALING_MAX_GROUPS = "nvlfleet_autoscaling_max_groups"  # {namespace, serving}: only while spec.autoscaling is set

# The labels every per-group series carries, in the order the operator exports them.
GROUP_LABELS = ("namespace", "serving", "role", "domain")
