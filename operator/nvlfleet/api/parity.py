"""``spec.parity``: the reference throughput the parity gauge compares a serving against, and which tokens it counts.

Pure API, beside ``models`` (which embeds ``ParitySpec`` as ``DeepSeekServingSpec.parity``) at the start of the
data flow; ``nvlfleet.core.economics`` divides the measured tokens/s per GPU of the same basis by the reference
(``nvlfleet_parity_ratio``). Published figures name their basis: a decode benchmark gives output (generated)
tokens/s per GPU, a mixed one total tokens/s. Dividing total tokens/s (prompt, cached prompt included) by an
output figure reads many times 100 %, so the basis is part of the reference, output by default.
"""

from __future__ import annotations

import enum
from typing import Annotated

import pydantic

from nvlfleet.api import schema


class ParityBasis(enum.StrEnum):
    """Which tokens a reference throughput counts."""

    OUTPUT = "output"  # generated tokens only
    TOTAL = "total"  # prompt tokens (cached ones included) plus generated tokens


class ParitySpec(schema.Model):
    """A reference throughput the parity gauge compares against (e.g. a vendor engine's published figure)."""

    reference_tokens_per_second_per_gpu: Annotated[
        float | None,
        pydantic.Field(description="Reference tokens/s per GPU, counted as basis says.", gt=0),
    ] = None
    basis: Annotated[
        ParityBasis,
        pydantic.Field(
            description="Which tokens the reference counts: output (generated tokens/s per GPU, what a decode "
            "benchmark publishes; the default) or total (prompt tokens, cached ones included, plus generated). "
            "Parity compares the serving's tokens/s per GPU of the same basis."
        ),
    ] = ParityBasis.OUTPUT
