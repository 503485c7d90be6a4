"""Generated DeepSeekServing specs, good and bad, over the fields the commands check: for properties that hold for
every spec, such as "validate, render and plan accept and refuse the same specs, at the same fields".

A spec starts from ``servingbuilder`` and varies names, pod labels, parallelism and roles, extraArgs (flags drawn
from the pinned vLLM facts, with plausible and implausible values), extraEnv (names from the facts and beside
them) and quantities. Nothing here says which of them is valid: the property compares the commands with each
other, not with a list somebody wrote. ``fleet(spec)`` is a fleet of ``fleetbuilder`` racks with room for the spec's
groups, so a valid one always fits.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from nvlfleet.facts import facts, hardware
from support import fleetbuilder as fb
from support import servingbuilder as sb

FACTS = facts.load("0.33.0")
GPUS = ("GB200", "GB300")
PRODUCTS = {"GB200": "NVIDIA-GB200", "GB300": "NVIDIA-GB300"}
MAX_GROUPS = 2  # decode groups; prefill has at most 1

# Names Kubernetes and nvlfleet take and ones they do not (upper case, '_', '.', too long, empty).
_NAME = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,14}[a-z0-9]", fullmatch=True),
    st.sampled_from(["a.b", "Bad", "bad_name", "x" * 64, "9lives", "-dash", "dash-", "a" * 40]),
)
_LABEL_KEY = st.one_of(
    st.from_regex(r"[a-z][a-z0-9.-]{0,10}[a-z0-9]", fullmatch=True),
    st.sampled_from(["team", "example.com/team", "nvlfleet.io/role", "app.kubernetes.io/name", "bad key", "-x"]),
)
_LABEL_VALUE = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?", fullmatch=True), st.sampled_from(["", "bad value", "-"])
)
_QUANTITY = st.sampled_from(["64Gi", "1.5Gi", "500m", "1e3", "+1", ".5", "1Gb", "-1Gi", "1 Gi", "2"])
_PARALLELISM = st.fixed_dictionaries(
    {"tensor": st.sampled_from([1, 2, 4, 8])},
    optional={"data": st.sampled_from([1, 2, 4, 6, 8, 16, 64]), "nodesPerGroup": st.sampled_from([1, 2, 4, 5, 18])},
)
# Every flag of the pinned vLLM, its underscore spelling, and flags it does not have.
_FLAGS = sorted(FACTS.flags)
_FLAG = st.one_of(
    st.sampled_from(_FLAGS),
    st.sampled_from(_FLAGS).map(lambda f: "--" + f[2:].replace("-", "_")),
    st.sampled_from(["--no-such-flag", "-tp", "--api-key"]),
)
_FLAG_VALUE = st.sampled_from(["1", "4", "true", "auto", "deepseek_v4", '{"no_such_key":1}', "{}", "x" * 3])
_ENV_NAME = st.one_of(
    st.sampled_from(sorted(FACTS.env_vars)),
    st.sampled_from(["NCCL_DEBUG", "NO_SUCH_VLLM_VAR", "VLLM_NO_SUCH", "HF_TOKEN", "lower_case"]),
)
_ENV_VALUE = st.sampled_from(["1", "0", "info", "hf_abcdefghijklmnopqrstuvwxyz0123456789"])


@st.composite
def _role(draw: st.DrawFn) -> dict[str, Any]:
    return {"groups": draw(st.integers(0, MAX_GROUPS)), "parallelism": draw(_PARALLELISM)}


@st.composite
def _extra_args(draw: st.DrawFn) -> list[str]:
    args: list[str] = []
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):  # most specs pass no extraArgs, as most users
        args.append(draw(_FLAG))
        if draw(st.booleans()):
            args.append(draw(_FLAG_VALUE))
    return args


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """One DeepSeekServing as a user would write it, valid or not."""
    gpu = draw(st.sampled_from(GPUS))
    obj = sb.serving_dict(name=draw(_NAME), gpu=gpu, tensor=None, nodes=None)
    spec = obj["spec"]
    spec["roles"] = {"decode": draw(_role())}
    if draw(st.booleans()):
        prefill = draw(_role())
        prefill["groups"] = min(prefill["groups"], 1)
        spec["roles"]["prefill"] = prefill
    pod: dict[str, Any] = {}
    if draw(st.booleans()):
        pod["labels"] = draw(st.dictionaries(_LABEL_KEY, _LABEL_VALUE, max_size=2))
    if draw(st.booleans()):
        pod["shmSize"] = draw(_QUANTITY)
    if draw(st.booleans()):
        pod["resources"] = {"requests": {"memory": draw(_QUANTITY)}}
    if pod:
        spec["pod"] = pod
    if args := draw(_extra_args()):
        spec["extraArgs"] = args
    env = draw(st.lists(st.builds(lambda n, v: {"name": n, "value": v}, _ENV_NAME, _ENV_VALUE), max_size=1))
    if env:
        spec["extraEnv"] = env
    return obj


def fleet(obj: dict[str, Any]) -> dict[str, Any]:
    """NVL72 racks of the spec's GPU with room for every group it asks for, as ``kubectl get nodes -o yaml`` prints
    them: a rack per group, each as big as the largest group (at most a rack of 18 trays). Small, because the
    commands read it as YAML on every run."""
    spec = obj["spec"]
    per_node = hardware.generation(spec["gpu"]).gpus_per_node
    roles = [r for r in spec["roles"].values() if isinstance(r, dict)]
    groups = sum(r.get("groups", 1) for r in roles)
    trays = max(_trays(r.get("parallelism", {}), per_node) for r in roles)
    nodes = [n for r in range(max(groups, 1)) for n in fb.rack(r, nodes=min(trays, 18), product=PRODUCTS[spec["gpu"]])]
    return fb.node_list(nodes)


def _trays(parallelism: dict[str, Any], per_node: int) -> int:
    gpus = parallelism.get("tensor", 1) * parallelism.get("data", 1)
    return max(parallelism.get("nodesPerGroup", 1), -(-gpus // per_node))
