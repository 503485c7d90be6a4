"""The words of a DeepSeekServing's status: its condition types, their reasons, and the reasons of its Events.

Pure API vocabulary at the end of the data flow (… → apply → prune → **status**): the reconciler writes them, and
people, ``kubectl wait --for=condition=Ready``, alerts and dashboards read them, so each is spelled here once.
Reasons are one CamelCase word, as Kubernetes conventions ask. A reason may be another condition's type: Ready is
False *because* of InsufficientCapacity or Degraded.
"""

from __future__ import annotations

from typing import Final

# ---------------------------------------------------------------------------------------------------------------
# Condition types, in the order the status lists them

READY: Final = "Ready"
PLACED: Final = "Placed"
PROGRESSING: Final = "Progressing"
DEGRADED: Final = "Degraded"
INSUFFICIENT_CAPACITY: Final = "InsufficientCapacity"
CONDITION_TYPES: Final = (READY, PLACED, PROGRESSING, DEGRADED, INSUFFICIENT_CAPACITY)
AUTOSCALING: Final = "Autoscaling"  # only while spec.autoscaling is set
ROUTER_READY: Final = "RouterReady"  # only while spec.router.enabled (core.routerstatus)
OPTIONAL_CONDITION_TYPES: Final = (AUTOSCALING, ROUTER_READY)

# ---------------------------------------------------------------------------------------------------------------
# Condition reasons

ALL_GROUPS_PLACED: Final = "AllGroupsPlaced"  # Placed True
NOT_ENOUGH_FREE_NODES: Final = "NotEnoughFreeNodes"  # InsufficientCapacity True
FITS: Final = "Fits"  # InsufficientCapacity False
GROUPS_UNHEALTHY: Final = "GroupsUnhealthy"  # Degraded True
HEALTHY: Final = "Healthy"  # Degraded False
ROLLING_UPDATE: Final = "RollingUpdate"  # Progressing True
APPLYING: Final = "Applying"  # Progressing True
WAITING_FOR_GROUPS: Final = "WaitingForGroups"  # Progressing True
COMPLETE: Final = "Complete"  # Progressing False
ALL_GROUPS_READY: Final = "AllGroupsReady"  # Ready True
SCALED_TO_ZERO: Final = "ScaledToZero"  # Ready True
GROUPS_NOT_READY: Final = "GroupsNotReady"  # Ready False
# Autoscaling (core.autoscaling): the first two before a ScaledObject can be rendered, the rest from what KEDA reports
# on it (facts.keda).
KEDA_MISSING: Final = "KedaMissing"  # Autoscaling False: the ScaledObject API is not installed
NO_PROMETHEUS_ADDRESS: Final = "NoPrometheusAddress"  # Autoscaling False: neither the spec nor the operator names one
WAITING_FOR_KEDA: Final = "WaitingForKeda"  # Autoscaling False: KEDA has not reported on the ScaledObject yet
KEDA_PAUSED: Final = "KedaPaused"  # Autoscaling False: a KEDA pause annotation is on the ScaledObject
SIGNAL_UNAVAILABLE: Final = "SignalUnavailable"  # Autoscaling False: KEDA's trigger or its HPA cannot read the signal
KEDA_NOT_READY: Final = "KedaNotReady"  # Autoscaling False: KEDA reports the ScaledObject not Ready for another reason
KEDA_READY: Final = "KedaReady"  # Autoscaling True: KEDA reports the ScaledObject Ready and its HPA not failing
ROUTING: Final = "Routing"  # RouterReady True: a router pod is ready and every routed role has a ready leader
ROUTER_NOT_READY: Final = "RouterNotReady"  # RouterReady False: no router pod ready (or no Deployment yet)
NO_ENGINES: Final = "NoEngines"  # RouterReady False: the router runs, but a routed role has no ready leader

# Why the fleet is frozen (left exactly as it runs): the reason of Ready and Progressing, and of the Warning
# event that says so.
INVALID_SPEC: Final = "InvalidSpec"
MISSING_PREREQUISITE: Final = "MissingPrerequisite"
NAME_CONFLICT: Final = "NameConflict"
APPLY_REFUSED: Final = "ApplyRefused"  # the API server refused a child (quota, admission, an invalid field)
FREEZES: Final = (INVALID_SPEC, MISSING_PREREQUISITE, NAME_CONFLICT, APPLY_REFUSED)

# ---------------------------------------------------------------------------------------------------------------
# Event reasons besides the condition types and freezes above

APPLIED: Final = "Applied"  # children created or updated
RECREATING: Final = "Recreating"  # a ComputeDomain deleted to be created again (its spec is immutable)
PRUNED: Final = "Pruned"  # children no longer in the plan deleted
SPEC_WARNING: Final = "SpecWarning"  # accepted, but validation warns it will run badly
RECOVERED: Final = "Recovered"  # Degraded turned False
REVERTED: Final = "Reverted"  # fields another field manager set on a child were removed
APPLY_FAILED: Final = "ApplyFailed"  # a write failed for a passing reason (unreachable, conflict): retried
