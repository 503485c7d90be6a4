"""The API: the DeepSeekServing resource and the language in which problems with it are reported.

``models`` is the single source of the spec and status (pydantic), ``crd`` generates the CustomResourceDefinition
from it, ``problems`` holds the field-path problems every layer above reports with, ``metric_names`` the name of
every metric the operator exports (its Prometheus interface).

Where it sits: the *spec* that enters the data flow (inventory + spec → validate → plan → render → apply →
prune → status). It may import ``nvlfleet.facts`` only, and is pure: no kopf, Kubernetes client, network or clock.
"""
