"""One Kubernetes quantity grammar: the pydantic model, the CRD's pattern and validation agree on every spelling.

The table is what k8s.io/apimachinery's ``resource.ParseQuantity`` accepts and refuses; ``spec.pod.shmSize`` is
the amount-typed field (no minus sign), ``spec.pod.resources`` the field validation checks with the grammar itself.
"""

from __future__ import annotations

import re

import pydantic
import pytest

from nvlfleet.api import crd, models, schema
from nvlfleet.core import validation
from support import servingbuilder as sb

ACCEPTED = ["1", "0", "1.5Gi", "500m", "1e3", "1E-2", "+1", ".5", "1.", "64Gi", "2Ei", "100n", "3u", "1k", "1.5e+3"]
REFUSED = ["1Gb", "1gi", "Gi", "1 Gi", "1e", "1e1.5", "1.2.3", "", ".", "1KiB", "0x10", "1Gi\n", "--1", "1K"]
NEGATIVE = ["-1", "-500m", "-1.5Gi"]


def _shm_size_pattern() -> str:
    pod = crd.definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return pod["pod"]["properties"]["shmSize"]["pattern"]


def _model_accepts_shm(size: str) -> bool:
    try:
        models.PodOverrides.model_validate({"shmSize": size})
    except pydantic.ValidationError:
        return False
    return True


def _validation_refuses(pod: dict[str, object], path: str) -> bool:
    return any(p.path == path for p in validation.validate(sb.serving_dict(pod=pod)))


@pytest.mark.parametrize("quantity", ACCEPTED + REFUSED + NEGATIVE)
def test_the_grammar_reads_a_quantity_as_kubernetes_does(quantity: str) -> None:
    assert (re.fullmatch(schema.QUANTITY, quantity) is not None) == (quantity not in REFUSED)


@pytest.mark.parametrize("quantity", ACCEPTED + REFUSED + NEGATIVE)
def test_the_model_the_crd_and_validation_agree_on_a_size(quantity: str) -> None:
    size = quantity not in REFUSED and quantity not in NEGATIVE
    crd_accepts = re.fullmatch(_shm_size_pattern(), quantity) is not None

    assert (_model_accepts_shm(quantity), crd_accepts) == (size, size)
    assert _validation_refuses({"shmSize": quantity}, "spec.pod.shmSize") == (not size)


@pytest.mark.parametrize("quantity", ACCEPTED + REFUSED + NEGATIVE)
def test_validation_refuses_a_resource_amount_kubernetes_would_refuse(quantity: str) -> None:
    amount = quantity not in REFUSED and quantity not in NEGATIVE
    where = 'spec.pod.resources.limits["memory"]'

    assert _validation_refuses({"resources": {"limits": {"memory": quantity}}}, where) == (not amount)


def test_the_router_resources_are_the_whole_spellings_it_canonicalizes() -> None:
    assert re.fullmatch(schema.WHOLE_QUANTITY, "2")
    assert re.fullmatch(schema.WHOLE_QUANTITY, "1.5Gi") is None
