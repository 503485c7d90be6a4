"""What a pass reports: the serving's status (its conditions, placement, readiness) and the events it records.

Pure core, the last step of a pass (… → render → diff → health → **status**): ``nvlfleet.core.reconciler`` hands
over the plan, the groups' health and whether anything is being applied, and gets back a typed
``servingstatus.DeepSeekServingStatus``, which it writes as a merge patch of the fields it owns.

Conditions follow Kubernetes conventions: ``lastTransitionTime`` moves only when a condition's status changes,
each carries the generation it describes. Events are emitted only for changes (a new placement, a condition
turning or saying something new), so a quiet fleet produces none. A frozen fleet (an invalid spec, a missing
prerequisite, a name conflict) keeps what its status said about placement and readiness: that is still what runs.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Literal

import pydantic

from nvlfleet.api import models, objects, problems, reasons, servingstatus
from nvlfleet.core import health, inventory, planner, render
from nvlfleet.facts import hardware

Status = Literal["True", "False", "Unknown"]
Conditions = dict[str, tuple[Status, str, str]]  # condition type → (status, reason, message)

# The fields a frozen fleet keeps from the status it had, by their wire names.
_KEPT_WHEN_FROZEN = (
    "placement",
    "ready",
    "readyGroups",
    "desiredGroups",
    "gpus",
    "replicas",
    "selector",
    "endpoint",
)


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to record on the serving."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


# ---------------------------------------------------------------------------------------------------------------
# The status of a pass that ran, and of a frozen one


def status(
    serving: models.DeepSeekServing,
    plan: planner.Plan,
    groups: health.Health,
    busy: bool,
    before: Mapping[str, Any],
    now: datetime.datetime,
    extra: Conditions | None = None,
) -> servingstatus.DeepSeekServingStatus:
    """The status after a pass that planned ``serving``; ``busy``: children are being applied or deleted;
    ``extra``: conditions of ``reasons.OPTIONAL_CONDITION_TYPES`` the pass judged (Autoscaling, RouterReady)."""
    key = inventory.ServingKey(serving.metadata.namespace, serving.metadata.name)
    generation = serving.metadata.generation
    roles = [plan.role(key, role.value) for role, _ in serving.spec.roles_present()]
    desired = sum(r.groups for r in roles)
    gpus_per_node = hardware.generation(serving.spec.gpu.value).gpus_per_node
    gpus = sum(r.placed_groups * r.nodes_per_group * gpus_per_node for r in roles)
    ready = groups.ready_groups
    decode = models.RoleName.DECODE
    return servingstatus.DeepSeekServingStatus(
        observed_generation=generation,
        conditions=_conditions({**_judged(roles, groups, busy, gpus), **(extra or {})}, before, generation, now),
        placement=plan.placement(key),
        ready=f"{ready}/{desired}",
        ready_groups=ready,
        desired_groups=desired,
        gpus=gpus,
        replicas=groups.ready_by_role.get(decode.value, 0),
        selector=",".join(f"{k}={v}" for k, v in render.leader_labels(serving, decode).items()),
        endpoint=render.endpoint(serving),
    )


def frozen(
    serving: Mapping[str, Any], before: Mapping[str, Any], reason: str, message: str, now: datetime.datetime
) -> servingstatus.DeepSeekServingStatus:
    """The status of a fleet left as it is: Ready and Progressing say why, the rest is what the status said."""
    generation = objects.as_mapping(serving.get("metadata")).get("generation")
    generation = generation if isinstance(generation, int) else None
    previous = {c.get("type"): c for c in _old_conditions(before)}
    conds: Conditions = {
        reasons.READY: ("False", reason, message),
        reasons.PROGRESSING: ("False", reason, "the fleet is left as it is until this is fixed"),
    }
    for ctype in (reasons.PLACED, reasons.DEGRADED, reasons.INSUFFICIENT_CAPACITY):
        old = _kept_condition(previous.get(ctype))
        conds[ctype] = old if old is not None else ("Unknown", reason, "not evaluated: " + message)
    for ctype in reasons.OPTIONAL_CONDITION_TYPES:  # kept as they were: a frozen fleet changes nothing they judge
        if (old := _kept_condition(previous.get(ctype))) is not None:
            conds[ctype] = old
    return servingstatus.DeepSeekServingStatus(
        observed_generation=generation,
        conditions=_conditions(conds, before, generation, now),
        **_kept_fields(before),
    )


def differs(patch: Mapping[str, Any], before: Mapping[str, Any]) -> bool:
    """Whether writing ``patch`` would change the status ``before``.

    A field an older CRD prunes (``servingstatus.NEWER_THAN_SOME_CRDS``) counts only once the stored status has it:
    under such a CRD it never sticks, and a pass that wrote because it is missing would write on every pass. It is
    written with the next change instead (or with the first status of a new serving).
    """
    return any(
        value != before.get(key)
        for key, value in patch.items()
        if key in before or key not in servingstatus.NEWER_THAN_SOME_CRDS
    )


# ---------------------------------------------------------------------------------------------------------------
# Conditions


def _judged(roles: list[planner.RolePlan], groups: health.Health, busy: bool, gpus: int) -> Conditions:
    """Every condition of a pass that planned ``roles``, as (status, reason, message)."""
    desired = sum(r.groups for r in roles)
    placed = sum(r.placed_groups for r in roles)
    unplaced = sum(r.unplaced for r in roles)
    ready = groups.ready_groups
    capacity = list(dict.fromkeys(reason for r in roles if r.unplaced for reason in r.reasons[:1]))  # a P/D unit's once
    fleet_note = next((r.reasons[-1] for r in roles if r.unplaced and len(r.reasons) > 1), None)
    placed_text = "; ".join(_placed_sentence(r) for r in roles) or "no roles"
    conds: Conditions = {}
    if unplaced:
        text = "; ".join(capacity) + (f" ({fleet_note})" if fleet_note else "")
        placed_message = f"{placed}/{desired} groups placed: {placed_text}"
        conds[reasons.PLACED] = ("False", reasons.INSUFFICIENT_CAPACITY, placed_message)
        conds[reasons.INSUFFICIENT_CAPACITY] = ("True", reasons.NOT_ENOUGH_FREE_NODES, text)
    else:
        fits = f"every group fits: {problems.counted(desired, 'group')} placed"
        conds[reasons.PLACED] = ("True", reasons.ALL_GROUPS_PLACED, placed_text)
        conds[reasons.INSUFFICIENT_CAPACITY] = ("False", reasons.FITS, fits)
    if groups.hurt:
        conds[reasons.DEGRADED] = ("True", reasons.GROUPS_UNHEALTHY, "; ".join(groups.hurt))
    else:
        conds[reasons.DEGRADED] = ("False", reasons.HEALTHY, "no group has lost a node or crashed")
    if busy or groups.rolling or ready < placed:
        detail = [*groups.rolling, *groups.not_ready] or ["applying the children"]
        # The reason says the state, not what this pass did: while groups are not ready it stays WaitingForGroups
        # whether or not this pass applied something, so the pass after the first apply (which applies nothing)
        # finds the same status and writes none.
        if groups.rolling:
            reason = reasons.ROLLING_UPDATE
        elif ready < placed:
            reason = reasons.WAITING_FOR_GROUPS
        else:
            reason = reasons.APPLYING
        conds[reasons.PROGRESSING] = ("True", reason, f"{ready}/{placed} placed groups ready; " + "; ".join(detail))
    else:
        tail = f"; {problems.counted(unplaced, 'group')} wait for capacity" if unplaced else ""
        complete = f"all {problems.counted(placed, 'placed group')} ready{tail}"
        conds[reasons.PROGRESSING] = ("False", reasons.COMPLETE, complete)
    if ready == desired:
        reason = reasons.ALL_GROUPS_READY if desired else reasons.SCALED_TO_ZERO
        conds[reasons.READY] = ("True", reason, f"{ready}/{desired} groups ready, {gpus} GPUs")
    else:
        hurt = reasons.DEGRADED if groups.hurt else reasons.GROUPS_NOT_READY
        conds[reasons.READY] = (
            "False",
            reasons.INSUFFICIENT_CAPACITY if unplaced else hurt,
            f"{ready}/{desired} groups ready",
        )
    return conds


def _placed_sentence(r: planner.RolePlan) -> str:
    if not r.placed:
        return f"{r.role}: no group placed"
    where = ", ".join(f"{g} in domain {inventory.short_domain(d)}" for d, g in r.placed.items())
    groups, nodes = problems.counted(r.placed_groups, "group"), problems.counted(r.nodes_per_group, "node")
    return f"{r.role}: {groups} of {nodes} ({where})"


def _conditions(
    conds: Mapping[str, tuple[Status, str, str]],
    before: Mapping[str, Any],
    generation: int | None,
    now: datetime.datetime,
) -> list[servingstatus.Condition]:
    previous = {c.get("type"): c for c in _old_conditions(before)}
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = []
    present = [t for t in reasons.OPTIONAL_CONDITION_TYPES if t in conds]
    for ctype in (*reasons.CONDITION_TYPES, *present):
        status_, reason, message = conds[ctype]
        old = previous.get(ctype)
        kept = old.get("lastTransitionTime") if old is not None and old.get("status") == status_ else None
        out.append(
            servingstatus.Condition(
                type=ctype,
                status=status_,
                reason=reason,
                message=message,
                last_transition_time=kept if isinstance(kept, str) and kept else stamp,
                observed_generation=generation,
            )
        )
    return out


def _old_conditions(before: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in before.get("conditions") or [] if isinstance(c, Mapping)]


def _kept_condition(old: Mapping[str, Any] | None) -> tuple[Status, str, str] | None:
    """A condition of the status before as (status, reason, message); None when there is none that reads well."""
    if old is None:
        return None
    status_, reason, message = old.get("status", "Unknown"), old.get("reason", ""), old.get("message", "")
    if status_ not in ("True", "False", "Unknown") or not isinstance(reason, str) or not isinstance(message, str):
        return None
    return status_, reason, message


def _kept_fields(before: Mapping[str, Any]) -> dict[str, Any]:
    """What a frozen fleet keeps from the status before, by Python name; a field that does not parse is dropped."""
    kept: dict[str, Any] = {}
    for wire in _KEPT_WHEN_FROZEN:
        try:
            parsed = servingstatus.DeepSeekServingStatus.model_validate({wire: before.get(wire)})
        except pydantic.ValidationError:
            continue
        field = next(name for name, f in type(parsed).model_fields.items() if f.alias == wire)
        kept[field] = getattr(parsed, field)
    return kept


# ---------------------------------------------------------------------------------------------------------------
# Events


def events(before: Mapping[str, Any], after: servingstatus.DeepSeekServingStatus) -> list[Event]:
    """Events for what changed between two statuses that a person must hear of: a move to a new placement, a
    warning condition turning or given a new reason, a recovery, autoscaling stopping or resuming. Ready turning
    True is the status' to tell."""
    old = {c.get("type"): c for c in _old_conditions(before)}
    new = {c.type: c for c in after.conditions}
    out: list[Event] = []

    def turned(ctype: str) -> bool:
        prev = old.get(ctype)
        return prev is None or prev.get("status") != new[ctype].status or prev.get("reason") != new[ctype].reason

    def said(ctype: str) -> bool:
        prev = old.get(ctype)
        return turned(ctype) or (prev is not None and prev.get("message") != new[ctype].message)

    if after.placement and before.get("placement") and after.placement != before.get("placement"):
        out.append(Event("Normal", reasons.PLACED, new[reasons.PLACED].message))  # moved: the first is in status
    ready = new[reasons.READY]
    if ready.reason in reasons.FREEZES and said(reasons.READY):
        out.append(Event("Warning", ready.reason, ready.message))
    for ctype in (reasons.INSUFFICIENT_CAPACITY, reasons.DEGRADED):
        if new[ctype].status == "True" and said(ctype):
            out.append(Event("Warning", ctype, new[ctype].message))
    if new[reasons.DEGRADED].status == "False" and (old.get(reasons.DEGRADED) or {}).get("status") == "True":
        out.append(Event("Normal", reasons.RECOVERED, "every placed group is healthy again"))
    scaling = new.get(reasons.AUTOSCALING)
    if scaling is not None and turned(reasons.AUTOSCALING):
        # Decode stops following its signal: a person must hear it. Waiting for KEDA's first report is how every
        # autoscaled serving starts, and KEDA's own messages change on every poll, so only a new reason is news.
        if scaling.status == "False" and scaling.reason != reasons.WAITING_FOR_KEDA:
            out.append(Event("Warning", reasons.AUTOSCALING, scaling.message))
        elif scaling.status == "True" and (old.get(reasons.AUTOSCALING) or {}).get("reason") not in (
            None,
            reasons.WAITING_FOR_KEDA,
        ):
            out.append(Event("Normal", reasons.AUTOSCALING, scaling.message))  # it follows its signal again
    return out
