"""The servings whose rendered manifests are pinned as golden files in ``tests/unit/golden/``.

Every ``DeepSeekServing`` in ``examples/*.yaml`` (rendered unpinned, as ``nvlfleet render -f`` without
``--nodes`` does) plus builder-made cases for the shapes of the vLLM README's validated examples, pinned to fixed
clique values. The golden files are generated, never hand-edited: ``make golden`` (``python -m
support.golden_cases`` with ``tests/`` on PYTHONPATH) rewrites them, and ``test_render.py`` fails when rendering
drifts from them.
Review the diff of a regeneration like code: it is exactly what the operator would apply differently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from nvlfleet.api import models, names, yamltext
from nvlfleet.core import render
from support import servingbuilder as sb

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "unit" / "golden"
EXAMPLES = ROOT / "examples"

Case = tuple[models.DeepSeekServing, Mapping[str, Mapping[str, int]] | None]


def builder_cases() -> dict[str, Case]:
    """README §7 shapes: A/B (GB200 DP8 over 2 trays), C (GB300 DP16 over 4), D (GB300 TP4), E (GB200 TP4)."""
    return {
        "gb200-dp8-ep8-two-racks": (
            sb.serving(name="dsv41", gpu="GB200", tensor=1, nodes=2, groups=3),
            {"decode": {sb.CLIQUE_A: 2, sb.CLIQUE_B: 1}},
        ),
        "gb300-dp16-ep16": (
            sb.serving(name="dsv41-gb300", gpu="GB300", tensor=1, nodes=4),
            {"decode": {sb.CLIQUE_A: 1}},
        ),
        "gb300-latency-tp4": (
            sb.serving(name="dsv41-fast", gpu="GB300", goal="latency", tensor=4, nodes=1, groups=2),
            {"decode": {sb.CLIQUE_A: 2}},
        ),
        "gb200-latency-tp4": (
            sb.serving(name="dsv41-chat", gpu="GB200", goal="latency", tensor=4, nodes=1),
            {"decode": {sb.CLIQUE_B: 1}},
        ),
        "h200-v3-single-node": (
            sb.serving(name="dsv3", gpu="H200", family="deepseek-v3", tensor=1, nodes=1, groups=2),
            {"decode": {"h200-node-07": 1, "h200-node-11": 1}},
        ),
        "gb200-disaggregated-unpinned": (
            sb.serving(
                name="dsv41-pd",
                gpu="GB200",
                tensor=1,
                nodes=4,
                prefill=sb.role(groups=1, tensor=1, nodes=2),
                model={
                    "revision": "0123456789abcdef",
                    "hfTokenSecretRef": {"name": "hf-token"},
                    "weights": {"cache": "pvc", "pvc": {"claimName": "deepseek-weights", "subPath": "hub"}},
                },
                pod={
                    "resources": {"requests": {"cpu": "64", "memory": "512Gi"}, "limits": {"memory": "800Gi"}},
                    "tolerations": [{"key": "kubernetes.io/arch", "value": "arm64", "effect": "NoSchedule"}],
                    "nodeSelector": {"pool": "gb200"},
                    "shmSize": "128Gi",
                    "priorityClassName": "inference",
                },
                extraArgs=["--enable-prompt-tokens-details", "--uvicorn-log-level", "warning", "--kv-cache-metrics"],
                extraEnv=[{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}],
                monitoring={"podMonitor": True},
            ),
            None,
        ),
    }


def example_cases() -> Iterator[tuple[str, Case]]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == names.KIND]
        for i, doc in enumerate(docs):
            suffix = f"-{i + 1}" if len(docs) > 1 else ""
            yield f"example-{path.stem}{suffix}", (models.DeepSeekServing.model_validate(doc), None)


def cases() -> dict[str, Case]:
    return {**builder_cases(), **dict(example_cases())}


def rendered(case: Case) -> str:
    serving, placement = case
    return dump(render.render(serving, placement))


def dump(manifests: list[dict[str, Any]]) -> str:
    return yamltext.dump_all(manifests, width=1000)


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    wanted = cases()
    for stale in GOLDEN.glob("*.yaml"):
        if stale.stem not in wanted:
            stale.unlink()
    for name, case in wanted.items():
        (GOLDEN / f"{name}.yaml").write_text(rendered(case))
    print(f"wrote {len(wanted)} golden files to {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
