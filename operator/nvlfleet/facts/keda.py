"""What the pinned KEDA writes on a ScaledObject, as nvlfleet reads it: the one home of KEDA's words.

Facts layer, read by ``core.autoscaling``: the renderer writes the ScaledObject in the shape KEDA's operator stores
it back (so the two field managers agree on every field), and the Autoscaling condition is judged from the
conditions KEDA sets in the ScaledObject's status. Read from KEDA v2.21.0's source (the Go module
``github.com/kedacore/keda/v2@v2.21.0``, the version ``localcluster`` builds; a unit test keeps the two equal):

- ``apis/keda/v1alpha1/condition_types.go``: the condition types. The controller initialises ``Ready``, ``Active``
  and ``Fallback`` as ``Unknown`` (no reason) and ``Paused`` as ``False``; ``HPAActive`` appears once the HPA it
  created reports its own ``ScalingActive`` condition.
- ``controllers/keda/scaledobject_controller.go``: on each reconcile of the ScaledObject (its spec, labels or
  annotations changed) ``Ready`` is ``True``/``ScaledObjectReady`` or ``False``/``ScaledObjectCheckFailed`` (the
  target is not scalable, the bounds are invalid, a trigger does not parse); ``Paused`` is ``True``/
  ``ScaledObjectPaused`` while an ``autoscaling.keda.sh/paused*`` annotation is set.
- ``pkg/scaling/executor/scale_scaledobjects.go``: on every polling interval the scale loop sets ``Ready`` again:
  ``True``/``ScaledObjectReady``, or ``False``/``TriggerError`` ("Triggers defined in ScaledObject are not working
  correctly": no trigger is active, one failed — e.g. Prometheus unreachable — and no fallback is set),
  ``Unknown``/``PartialTriggerError`` (some triggers active, some failed), ``False``/``ErrorGettingCurrentReplicas``
  or ``False``/``ErrorScalingTarget``. ``HPAActive`` mirrors the HPA's ``ScalingActive``: ``True``/``HPAActive``
  ("HPA is actively scaling"), ``True``/``ScalingDisabled`` (scaled to zero), or ``False`` with the HPA's own
  reason (e.g. ``FailedGetExternalMetric``) and "HPA is not actively scaling: <the HPA's message>" — the message
  that says *why* the metric failed, which ``TriggerError``'s fixed sentence does not.
- ``pkg/scaling/scale_handler.go``: when a trigger's metric cannot be read, the scale loop also records a Warning
  Event about the ScaledObject (through ``events.k8s.io``; in ``core/v1`` its ``involvedObject``) with reason
  ``KEDAScalerFailed`` and the scaler's own error as its message — e.g. the refused connection to Prometheus, the
  root cause that neither ``TriggerError``'s sentence nor the HPA's message carries. Repeats of it are a series
  (``series.lastObservedTime``).
- ``Fallback`` is ``True`` only with ``spec.fallback``, which nvlfleet never renders (and reverts when another
  manager adds it), so it is not read.
- ``apis/keda/v1alpha1/scaledobject_types.go``: ``AdvancedConfig.ScalingModifiers`` is a struct, not a pointer,
  and Go's ``encoding/json`` does not omit an empty struct under ``omitempty``; so every full update KEDA's
  operator makes (adding its finalizer, its ``scaledobject.keda.sh/name`` label) writes
  ``spec.advanced.scalingModifiers: {}`` and owns that field. Its other optional fields are pointers, strings
  or a false bool and stay out when unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

VERSION: Final = "v2.21.0"

# ScaledObject status.conditions types nvlfleet reads.
READY: Final = "Ready"
PAUSED: Final = "Paused"
HPA_ACTIVE: Final = "HPAActive"

# Ready reasons that say the trigger (nvlfleet's one Prometheus query) could not be read.
TRIGGER_ERROR: Final = "TriggerError"  # Ready False
PARTIAL_TRIGGER_ERROR: Final = "PartialTriggerError"  # Ready Unknown
TRIGGER_ERRORS: Final = frozenset({TRIGGER_ERROR, PARTIAL_TRIGGER_ERROR})

# The reason of the Event KEDA records about a ScaledObject whose scaler failed (its message: the scaler's error).
SCALER_FAILED: Final = "KEDAScalerFailed"

# The annotations that pause a ScaledObject (all of them, or one direction).
PAUSED_ANNOTATIONS: Final = (
    "autoscaling.keda.sh/paused",
    "autoscaling.keda.sh/paused-replicas",
    "autoscaling.keda.sh/paused-scale-in",
    "autoscaling.keda.sh/paused-scale-out",
)

# What KEDA's operator writes into spec.advanced of a ScaledObject that leaves them unset (see above).
ADVANCED_AS_WRITTEN: Final[Mapping[str, Any]] = {"scalingModifiers": {}}
