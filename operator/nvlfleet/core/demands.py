"""A DeepSeekServing as the planner's input: one demand per role, its current placement, what its pods need of a node.

Pure core, between validation and planning (inventory + spec → validate → **plan** → render → apply): the
operator's reconciler, ``nvlfleet plan`` and ``nvlfleet render --nodes`` turn each parsed serving into
``planner.Demand`` and ``placements.Placement`` values here, so ``planner`` itself knows nothing of the API models.
"""

from __future__ import annotations

from nvlfleet.api import models
from nvlfleet.core import inventory, kubeobjects, placements, planner
from nvlfleet.facts import hardware


def requirements(spec: models.DeepSeekServingSpec) -> inventory.NodeRequirements:
    """What every vLLM pod of ``spec`` asks of a node. Raises ``problems.InvalidSpec`` for bad tolerations."""
    gen = hardware.generation(spec.gpu.value)
    return inventory.NodeRequirements(
        gpu_product=gen.product,
        gpus_per_node=gen.gpus_per_node,
        tolerations=kubeobjects.parse_tolerations([t.to_wire() for t in spec.pod.tolerations], "spec.pod.tolerations"),
        node_selector=tuple(sorted(spec.pod.node_selector.items())),
        scope="clique" if gen.multi_node_nvlink else "node",
    )


def of(serving: models.DeepSeekServing) -> list[planner.Demand]:
    """One demand per role present in the spec."""
    spec = serving.spec
    req = requirements(spec)
    key = inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)
    return [
        planner.Demand(
            serving=key,
            role=role.value,
            nodes_per_group=models.role_topology(spec.gpu, role_spec).nodes_per_group,
            groups=role_spec.groups,
            requirements=req,
            strategy=spec.placement.strategy,
        )
        for role, role_spec in spec.roles_present()
    ]


def current(serving: models.DeepSeekServing) -> list[placements.Placement]:
    """The serving's current placement from ``status.placement``, for roles its spec still has."""
    if serving.status is None or serving.status.placement is None:
        return []
    key = inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)
    placement = serving.status.placement
    return [
        placements.Placement(
            serving=key,
            role=role.value,
            nodes_per_group=models.role_topology(serving.spec.gpu, role_spec).nodes_per_group,
            groups={d: g for d, g in sorted(placement[role.value].items()) if g > 0},
        )
        for role, role_spec in serving.spec.roles_present()
        if role.value in placement
    ]
