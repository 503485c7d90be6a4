"""The model family: the declared family must be the one the model's repository name says.

Pure core, inside the validate step: the family selects the tuning profile and the model's rules, so a wrong one
would tune the serving for another model.
"""

from __future__ import annotations

from nvlfleet.api import models
from nvlfleet.core.validation import findings
from nvlfleet.facts import facts


def check_family(spec: models.DeepSeekServingSpec, version_facts: facts.Facts, out: findings.Findings) -> None:
    declared = spec.model.family.value
    for family in version_facts.families.values():
        if family.name != declared and family.matches(spec.model.name):
            out.error(
                "spec.model.family",
                f"model {spec.model.name} is a {family.title} model, but family is {declared}; set family: "
                f"{family.name} (the family selects the tuning profile and the model's rules)",
            )
            return
