"""``nvlfleet plan``: exit codes, the JSON interface, the table, and bad input named by file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvlfleet import cli
from nvlfleet.core import inventory
from support import fleetbuilder as fb

NODES = fb.DATA / "nodes-gb200-4racks.yaml"
TRAYS = 18
# What fleetbuilder.four_racks() builds, as GB200 nodes a serving without tolerations may use.
FREE = {0: TRAYS, 1: TRAYS - 3, 2: TRAYS, 3: TRAYS}  # schedulable nodes without a GPU pod, per rack
USABLE = {0: TRAYS, 1: TRAYS - 3, 2: TRAYS - 1, 3: 0}  # rack 2 has a 3-GPU tray, rack 3 is tainted


def serving(name: str, decode: tuple[int, int], prefill: tuple[int, int] | None = None, **spec: Any) -> dict:
    """A DeepSeekServing with (groups, nodes per group) per role."""
    roles = {"decode": {"groups": decode[0], "parallelism": {"nodesPerGroup": decode[1]}}}
    if prefill is not None:
        roles["prefill"] = {"groups": prefill[0], "parallelism": {"nodesPerGroup": prefill[1]}}
    return {
        "apiVersion": "nvlfleet.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": name, "namespace": "llm"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "runtime": {"image": "vllm/vllm-openai:v0.33.0"},
            "gpu": "GB200",
            "roles": roles,
        }
        | spec,
    }


def write(path: Path, *docs: Any) -> str:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = plan(capsys, *args, "-o", "json")
    assert err == ""
    result = json.loads(out)
    seconds = result.pop("planningSeconds")
    assert isinstance(seconds, float) and 0 <= seconds < 1
    return code, result


def domains_json(free_after: dict[int, int]) -> list[dict[str, Any]]:
    return [
        {
            "clique": fb.clique(r),
            "label": fb.CLIQUE_LABEL,
            "shortId": inventory.short_domain(fb.clique(r)),
            "nodes": TRAYS,
            "schedulableNodes": FREE[r],
            "freeNodesBefore": FREE[r],
            "freeNodesAfter": free_after[r],
            "shortNodes": 0,
        }
        for r in range(4)
    ]


def test_the_node_fixture_is_what_its_generator_writes() -> None:
    assert NODES.read_text() == fb.render_fixture(NODES.name)


def test_everything_fits_exit_0_and_the_json_interface(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write(tmp_path / "s.yaml", serving("flash", decode=(2, 2), prefill=(1, 1)))
    code, result = plan_json(capsys, "-f", files, "--nodes", str(NODES))
    # Best fit: rack 1 has the fewest usable free trays; decode goes first (bigger groups), prefill joins it.
    assert code == 0
    assert result == {
        "servings": [
            {
                "namespace": "llm",
                "name": "flash",
                "gpu": "GB200",
                "strategy": "pack",
                "roles": [
                    {
                        "role": "decode",
                        "nodesPerGroup": 2,
                        "gpusPerGroup": 8,
                        "groups": 2,
                        "placed": {fb.clique(1): 2},
                        "unplaced": 0,
                        "reasons": [],
                    },
                    {
                        "role": "prefill",
                        "nodesPerGroup": 1,
                        "gpusPerGroup": 4,
                        "groups": 1,
                        "placed": {fb.clique(1): 1},
                        "unplaced": 0,
                        "reasons": [],
                    },
                ],
            }
        ],
        "domains": domains_json({0: FREE[0], 1: FREE[1] - 5, 2: FREE[2], 3: FREE[3]}),
    }


def test_unplaceable_groups_exit_2_with_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    too_big = USABLE[0] - 1  # fits racks 0 and 2, not rack 1; rack 3 is tainted
    files = write(tmp_path / "s.yaml", serving("big", decode=(3, too_big)))
    code, result = plan_json(capsys, "-f", files, "--nodes", str(NODES))
    role = result["servings"][0]["roles"][0]
    assert code == 2
    assert (role["placed"], role["unplaced"]) == ({fb.clique(2): 1, fb.clique(0): 1}, 1)
    assert role["reasons"][0] == (
        f"decode needs {too_big} free nodes ({too_big * 4} GPUs) in one NVLink domain for each of 1 more group; "
        f"the largest free block is {USABLE[1]} nodes in domain {inventory.short_domain(fb.clique(1))}"
    )


def test_the_table_is_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write(tmp_path / "s.yaml", serving("flash", decode=(2, 2), prefill=(1, 1)))
    code, out, err = plan(capsys, "-f", files, "--nodes", str(NODES))
    short = [inventory.short_domain(fb.clique(r)) for r in range(4)]
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:-1] == [
        "SERVING    ROLE     GROUPS  NODES/GROUP  PLACED  UNPLACED  DOMAINS",
        f"llm/flash  decode   2       2            2       0         {short[1]} ×2",
        f"llm/flash  prefill  1       1            1       0         {short[1]} ×1",
        "",
        "DOMAIN          NODES  SCHEDULABLE  FREE BEFORE  FREE AFTER  SHORT",
        f"{short[0]}  18     18           18           18",
        f"{short[1]}  18     15           15           10",
        f"{short[2]}  18     18           18           18",
        f"{short[3]}  18     18           18           18",
        "",
    ]
    assert lines[-1].startswith("0 group(s) unplaced; planned in ")


def test_nodes_as_separate_yaml_documents_plan_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write(tmp_path / "s.yaml", serving("flash", decode=(3, 4)))
    docs = write(tmp_path / "nodes.yaml", *fb.four_racks())
    assert plan_json(capsys, "-f", files, "--nodes", docs) == plan_json(capsys, "-f", files, "--nodes", str(NODES))


def test_servings_in_several_files_share_the_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.yaml", serving("a", decode=(1, USABLE[0])))
    b = write(tmp_path / "b.yaml", serving("b", decode=(1, USABLE[0])))
    c = write(tmp_path / "c.yaml", serving("c", decode=(1, USABLE[0])))
    code, result = plan_json(capsys, "-f", a, "-f", b, "-f", c, "--nodes", str(NODES))
    placed = [s["roles"][0]["placed"] for s in result["servings"]]
    assert (code, placed) == (2, [{fb.clique(0): 1}, {}, {}])  # only rack 0 has 18 usable trays


def test_busy_nodes_from_pods_and_current_placement_from_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running = serving("flash", decode=(2, 2))
    running["status"] = {"placement": {"decode": {fb.clique(0): 1}}}
    files = write(tmp_path / "s.yaml", running)
    ours = [
        fb.pod(f"d0-{w}", f"rack-0-{w:02d}", namespace="llm", serving="flash", role="decode", lws="flash", group=0)
        for w in range(2)
    ]
    pods = write(tmp_path / "pods.yaml", fb.node_list([*ours, fb.pod("job", "rack-0-05")]))
    code, result = plan_json(capsys, "-f", files, "--nodes", str(NODES), "--pods", pods)
    assert code == 0
    assert result["servings"][0]["roles"][0]["placed"] == {fb.clique(0): 2}  # the running group stays, pack
    rack0 = result["domains"][0]
    assert (rack0["freeNodesBefore"], rack0["freeNodesAfter"]) == (FREE[0] - 3, FREE[0] - 3 - 2)


@pytest.mark.parametrize(
    ("serving_docs", "nodes_text", "message"),
    [
        (
            [serving("s", decode=(-1, 2))],
            None,
            "s.yaml: spec.roles.decode.groups: must be at least 0, got -1",
        ),
        (
            [serving("s", decode=(1, 2), pod={"tolerations": [{"key": "k", "operator": "Sometimes"}]})],
            None,
            "s.yaml: spec.pod.tolerations[0].operator: expected Equal or Exists, got 'Sometimes'",
        ),
        (
            [serving("a", decode=(1, 1)), serving("b", decode=(1, 1), placement={"domainLabel": "example.com/rack"})],
            None,
            "spec.placement.domainLabel differs between servings (example.com/rack, nvidia.com/gpu.clique); "
            "plan servings that name NVLink domains differently separately",
        ),
        ([serving("a", decode=(1, 1)), serving("a", decode=(1, 1))], None, "is also defined in"),
        # Refused exactly as `nvlfleet validate` refuses them (they used to be planned, exit 0).
        (
            [
                serving("s", decode=(1, 1))
                | {
                    "spec": serving("s", decode=(1, 1))["spec"]
                    | {"roles": {"decode": {"groups": 1, "parallelism": {"tensor": 1, "data": 6}}}}
                }
            ],
            None,
            "s.yaml: spec.roles.decode.parallelism.data: decode: tensor × data = 1 × 6 = 6 GPUs does not fill whole",
        ),
        (
            [
                serving("s", decode=(1, 1))
                | {
                    "spec": serving("s", decode=(1, 1))["spec"]
                    | {"roles": {"decode": {"groups": 1, "parallelism": {"tensor": 8}}}}
                }
            ],
            None,
            "s.yaml: spec.roles.decode.parallelism.tensor: decode: tensor-parallel size 8 is larger than the 4 GPUs",
        ),
        ([{"kind": "ConfigMap"}], None, "s.yaml: kind: no DeepSeekServing in this file"),
        (
            [serving("s", decode=(1, 1))],
            "apiVersion: v1\nkind: List\nitems:\n"
            "- metadata: {name: n1}\n  status: {allocatable: {nvidia.com/gpu: 2.5}}\n",
            'nodes.yaml: items[0].status.allocatable["nvidia.com/gpu"]: expected a whole number of GPUs, got 2.5',
        ),
        (
            [serving("s", decode=(1, 1))],
            "kind: Pod\nmetadata: {name: p}\n",
            "nodes.yaml: kind: expected Node (or a List of them), got Pod",
        ),
        ([serving("s", decode=(1, 1))], "items: [\n", "nodes.yaml: not valid YAML at line 2, column 1"),
    ],
)
def test_bad_input_exits_1_naming_the_file_and_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    serving_docs: list[dict],
    nodes_text: str | None,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "s.yaml", *serving_docs)
    nodes = str(NODES)
    if nodes_text is not None:
        (tmp_path / "nodes.yaml").write_text(nodes_text)
        nodes = "nodes.yaml"
    code, out, err = plan(capsys, "-f", "s.yaml", "--nodes", nodes)
    assert (code, out) == (1, "")
    assert err.startswith("nvlfleet plan: ") and message in err
    assert "Traceback" not in err


def test_a_missing_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan(capsys, "-f", str(tmp_path / "nope.yaml"), "--nodes", str(NODES))
    assert (code, err) == (1, f"nvlfleet plan: {tmp_path / 'nope.yaml'}: cannot read: No such file or directory\n")


def test_plan_sizes_prefill_from_decode_by_the_autoscaling_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scaling = {"minGroups": 1, "maxGroups": 8, "signal": "waitingRequests", "target": 8, "prefillPerDecode": 0.5}
    files = write(tmp_path / "s.yaml", serving("flash", decode=(6, 1), prefill=(1, 1), autoscaling=scaling))
    code, result = plan_json(capsys, "-f", files, "--nodes", str(NODES))
    assert code == 0
    groups = {r["role"]: r["groups"] for r in result["servings"][0]["roles"]}
    assert groups == {"decode": 6, "prefill": 3}
