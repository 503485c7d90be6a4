"""The API: the DeepSeekServing resource, the names it shares with the cluster, and the language of its problems.

``models`` is the single source of the spec (pydantic), with ``kubetypes`` (the Kubernetes types it embeds),
``servingstatus`` (the status) and ``schema`` (their base type and CEL rules); ``crd`` generates the
CustomResourceDefinition from them. ``names`` spells every resource type, label and annotation key, ``reasons``
every condition type and reason, ``ownership`` the rule that makes an object a serving's child, ``metric_names``
the name of every metric the operator exports (its Prometheus interface), ``policy`` what the cluster admin lets
a serving ask for. ``problems`` holds the field-path problems every layer above reports with; ``nesting`` bounds
how deep an object may nest.

Where it sits: the *spec* that enters the data flow (inventory + spec → validate → plan → render → apply →
prune → status). It may import ``nvlfleet.facts`` only, and is pure: no kopf, Kubernetes client, network or clock.
"""
