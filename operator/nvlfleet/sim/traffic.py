"""What a simulated vLLM server counted for the requests it really answered, per DP engine.

Test and demo adapter between ``protocol`` (which records every request it answers) and ``vllmsim`` (which adds
these counts to its published-rate counters in ``/metrics``), not part of the operator's data flow. Keys are vLLM
family names (``facts.vllm_metrics``) with the value of the family's extra label (``source``, ``finished_reason``)
or "" when it has none, so a test can compare ``/metrics`` with exactly what was sent.
"""

from __future__ import annotations

from nvlfleet.facts import vllm_metrics

Key = tuple[str, str, int]  # (family, extra label value or "", engine)


class Traffic:
    """Counters of served requests, per (family, label value, engine); cleared when the server restarts."""

    def __init__(self) -> None:
        self._counts: dict[Key, float] = {}

    def add(self, family: str, engine: int, amount: float, label: str = "") -> None:
        key = (family, label, engine)
        self._counts[key] = self._counts.get(key, 0.0) + amount

    def value(self, family: str, label: str, engine: int) -> float:
        return self._counts.get((family, label, engine), 0.0)

    def total(self, family: str, label: str | None = None) -> float:
        """Summed over engines (and over label values unless ``label`` is given)."""
        return sum(v for (f, lv, _), v in self._counts.items() if f == family and label in (None, lv))

    def clear(self) -> None:
        self._counts.clear()

    def record(self, engine: int, *, computed: int, external: int, generated: int, finished: str) -> None:
        """One finished request: prompt tokens computed here and read by KV transfer, tokens generated."""
        self.add(vllm_metrics.PROMPT_TOKENS, engine, computed + external)
        self.add(vllm_metrics.PROMPT_TOKENS_BY_SOURCE, engine, computed, vllm_metrics.SOURCE_LOCAL_COMPUTE)
        self.add(vllm_metrics.PROMPT_TOKENS_BY_SOURCE, engine, external, vllm_metrics.SOURCE_EXTERNAL_KV_TRANSFER)
        self.add(vllm_metrics.GENERATION_TOKENS, engine, generated)
        self.add(vllm_metrics.REQUEST_SUCCESS, engine, 1, finished)


# Families this module counts (``vllmsim`` adds them to its series per engine).
COUNTED = frozenset(
    {
        vllm_metrics.PROMPT_TOKENS,
        vllm_metrics.PROMPT_TOKENS_BY_SOURCE,
        vllm_metrics.GENERATION_TOKENS,
        vllm_metrics.REQUEST_SUCCESS,
    }
)
