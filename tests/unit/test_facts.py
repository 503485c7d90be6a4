"""The vLLM facts: the copies in package data, argument reading, and the rules file's own consistency."""

from __future__ import annotations

import pathlib

import pytest

from nvlfleet.facts import facts, hardware

REPO = pathlib.Path(__file__).resolve().parents[2]
# CI keeps a read-only copy of shared/ beside the clone; so does every developer checkout.
REFERENCE = REPO.parent / "shared" / "reference"
PACKAGE_DATA = REPO / "operator" / "nvlfleet" / "facts" / "data" / "vllm"
COPIED = ("cli-flags.json", "env-vars.json", "facts.json", "kv-connectors.json")


@pytest.fixture(scope="module")
def f() -> facts.Facts:
    return facts.load("0.33.0")


# --- the data ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", facts.versions())
@pytest.mark.parametrize("name", COPIED)
def test_package_copies_equal_the_reference(version: str, name: str) -> None:
    reference = REFERENCE / f"vllm-{version}" / name
    if not REFERENCE.is_dir():
        pytest.skip(f"{REFERENCE} is absent: the drift check needs shared/ beside the clone")
    assert reference.is_file(), f"{reference} is missing although nvlfleet packages facts for vLLM {version}"
    packaged = PACKAGE_DATA / version / name
    assert packaged.read_bytes() == reference.read_bytes(), (
        f"{packaged} differs from {reference}; copy the reference again (cp {reference} {packaged})"
    )


def test_every_reference_version_is_packaged() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"{REFERENCE} is absent: the drift check needs shared/ beside the clone")
    referenced = sorted(p.name.removeprefix("vllm-") for p in REFERENCE.glob("vllm-*") if p.is_dir())
    assert set(referenced) <= set(facts.versions())


def test_versions_and_unknown_version() -> None:
    assert facts.DEFAULT_VERSION in facts.versions()
    with pytest.raises(facts.UnknownVersion, match=r"no facts for vLLM 9\.9\.9 \(known versions: 0\.33\.0"):
        facts.load("9.9.9")


def test_facts_know_the_flags_env_vars_and_methods(f: facts.Facts) -> None:
    assert f.flag("--tensor-parallel-size").dest == "tensor_parallel_size"
    assert f.flag("-tp") == f.flag("--tensor-parallel-size")
    assert f.flag("-dpl").name == "--data-parallel-size-local"
    assert f.flag("--no-async-scheduling").stores is False
    assert f.flag("--async-scheduling").stores is True
    assert f.flag("--enable-custom-all-reduce").stores is False  # dest is disable_custom_all_reduce
    assert f.env_var("VLLM_ENGINE_READY_TIMEOUT_S") == "VLLM_ENGINE_READY_TIMEOUT_S"
    assert "dspark" in f.speculative_methods and "deepseek_mtp" in f.mtp_aliases
    assert f.canonical_speculative_method("deepseek_mtp") == "mtp"
    assert f.removed_env_vars["VLLM_ALL2ALL_BACKEND"] == "--all2all-backend"
    assert "flashinfer_nvlink_one_sided" in f.all2all_backends
    assert "nvfp4_ds_mla" in f.kv_cache_dtypes


def test_unknown_flag_and_env_var_raise_with_a_hint(f: facts.Facts) -> None:
    with pytest.raises(KeyError, match="has no flag --max-num-seq; did you mean --max-num-seqs"):
        f.flag("--max-num-seq")
    with pytest.raises(KeyError, match="does not read env var VLLM_ATTENTION_BACKEND"):
        f.env_var("VLLM_ATTENTION_BACKEND")


def test_json_flag_keys_come_from_the_facts_that_list_them(f: facts.Facts) -> None:
    eplb = f.json_flags["--eplb-config"]
    assert eplb.keys == set(f.raw["expert_parallel"]["eplb"]["fields"]) and eplb.complete
    assert f.json_flags["--speculative-config"].keys == set(f.raw["speculative_decoding"]["all_fields"])
    assert "kv_role" in (f.json_flags["--kv-transfer-config"].keys or ())
    assert f.json_flags["--additional-config"].keys is None  # vLLM passes it to plugins unchecked


def test_a_json_key_is_refused_warned_or_accepted_as_the_facts_allow(f: facts.Facts) -> None:
    assert f.json_flags["--eplb-config"].key_problem("window_size", f.version) is None
    assert f.json_flags["--eplb-config"].key_problem("window", f.version) == (
        "error",
        "vLLM 0.33.0 has no key 'window' in --eplb-config; did you mean window_size? it accepts "
        + ", ".join(sorted(f.raw["expert_parallel"]["eplb"]["fields"])),
    )
    severity, message = f.json_flags["--speculative-config"].key_problem("tensor_parallel_size", f.version) or ("", "")
    assert severity == "error" and "use draft_tensor_parallel_size" in message
    severity, _ = f.json_flags["--attention-config"].key_problem("no_such_key", f.version) or ("", "")
    assert severity == "warning"  # the facts name only some of AttentionConfig's keys
    assert f.json_flags["--additional-config"].key_problem("anything", f.version) is None


def test_env_prefixes_allow_library_knobs_only(f: facts.Facts) -> None:
    assert f.env_allowed("NCCL_MNNVL_ENABLE")
    assert f.env_allowed("VLLM_USE_V2_MODEL_RUNNER")
    assert not f.env_allowed("VLLM_USE_V2_MODEL_RUNER")
    assert not f.env_allowed("MY_APP_SETTING")


def test_every_alias_names_an_existing_flag(f: facts.Facts) -> None:
    for alias, target in {**f.aliases, **f.attached_aliases}.items():
        assert target in f.flags, alias


def test_families_cover_every_model_family_of_the_api(f: facts.Facts) -> None:
    from nvlfleet.api import models

    assert set(f.families) == {family.value for family in models.ModelFamily}
    v41 = f.family("deepseek-v4.1")
    assert v41.matches("deepseek-ai/DeepSeek-V4.1-Flash")
    assert not f.family("deepseek-v4").matches("deepseek-ai/DeepSeek-V4.1-Flash")
    assert f.family("deepseek-v4").matches("deepseek-ai/DeepSeek-V4-Flash")
    expert_count = v41.experts_for("/models/DeepSeek-V4.1-Flash")
    assert expert_count is not None
    assert expert_count.experts == f.raw["deepseek_v41"]["flash_facts_from_code_comments"]["routed_experts"]
    for family in f.families.values():
        assert set(family.speculative_methods) <= f.speculative_methods


# --- the rules file ----------------------------------------------------------------------------------------------


def test_every_rule_has_a_reason_and_a_source(f: facts.Facts) -> None:
    ids = [rule.id for rule in f.rules]
    assert len(ids) == len(set(ids)), "rule ids must be unique"
    for rule in f.rules:
        assert rule.reason and rule.source and rule.message, rule.id
        assert rule.when, f"{rule.id} applies always; give it a `when`"
        assert not (rule.require and rule.check), rule.id
        if rule.require:
            assert "{requirement}" in rule.message, rule.id


def test_rules_speak_only_of_known_settings_and_values(f: facts.Facts) -> None:
    """A typo in rules.yaml (a setting key, a backend, a GPU) would silently disable a rule."""
    ccs = {g.compute_capability for g in hardware.generations().values()}
    values_of = {
        "all2allBackend": f.all2all_backends,
        "moeBackend": f.moe_backends | {"auto"},
        "kvCacheDtype": f.kv_cache_dtypes,
        "cudagraphMode": f.cudagraph_modes,
        "speculativeMethod": f.speculative_methods,
        "family": set(f.families),
        "computeCapability": ccs,
    }
    for rule in f.rules:
        for key, matcher in [*rule.when.items(), *rule.require.items()]:
            if key.startswith("arg."):
                assert any(flag.dest == key.removeprefix("arg.") for flag in f.flags.values()), (rule.id, key)
            elif key.startswith("env."):
                assert f.knows_env(key.removeprefix("env.")), (rule.id, key)
            else:
                assert key in f.settings, (rule.id, key)
            if key in values_of and matcher.kind in ("equal", "any", "not_in"):
                unknown = {v for v in matcher.values if v is not None} - set(values_of[key])
                assert not unknown, (rule.id, key, unknown)


# --- reading arguments -------------------------------------------------------------------------------------------


def _read(f: facts.Facts, *argv: str) -> tuple[list[tuple[str, tuple[str, ...]]], list[tuple[int, str]]]:
    parsed = f.parse_args(list(argv))
    return [(a.flag.name, a.values) for a in parsed.args], [(e.index, e.message) for e in parsed.errors]


@pytest.mark.parametrize(
    ("argv", "args"),
    [
        (["-tp", "4"], [("--tensor-parallel-size", ("4",))]),
        (["-tp=4"], [("--tensor-parallel-size", ("4",))]),
        (["--max-num-seqs=64"], [("--max-num-seqs", ("64",))]),
        (["-O3"], [("--optimization-level", ("3",))]),
        (["-O", "3"], [("--optimization-level", ("3",))]),
        (["--no-async-scheduling"], [("--no-async-scheduling", ())]),
        (["--served-model-name", "a", "b"], [("--served-model-name", ("a", "b"))]),
        (["--hf-token"], [("--hf-token", ())]),
        (
            ["--additional-config", '{"decode_backend":"latency_specialized"}'],
            [("--additional-config", ('{"decode_backend":"latency_specialized"}',))],
        ),
        (["--max-num-batched-tokens", "8k"], [("--max-num-batched-tokens", ("8k",))]),
        (["--max-model-len", "auto"], [("--max-model-len", ("auto",))]),
        (
            ["--performance-mode", "interactivity", "--enable-auto-tool-choice"],
            [("--performance-mode", ("interactivity",)), ("--enable-auto-tool-choice", ())],
        ),
        (["--chat-template", "a b; rm -rf / $(x)"], [("--chat-template", ("a b; rm -rf / $(x)",))]),
        # FlexibleArgumentParser turns _ into - in a long option's name
        (["--max_num_seqs", "8"], [("--max-num-seqs", ("8",))]),
        (['--kv_transfer_config={"kv_role":"kv_both"}'], [("--kv-transfer-config", ('{"kv_role":"kv_both"}',))]),
        (["--no_async_scheduling"], [("--no-async-scheduling", ())]),
    ],
)
def test_reads_arguments_like_argparse(
    f: facts.Facts, argv: list[str], args: list[tuple[str, tuple[str, ...]]]
) -> None:
    assert _read(f, *argv) == (args, [])


@pytest.mark.parametrize(
    ("argv", "errors"),
    [
        (["--foo"], [(0, "vLLM 0.33.0 has no flag --foo")]),
        (
            ["--eplb-config.window_size", "5"],
            [(0, "has no flag --eplb-config.window_size; pass a JSON object to --eplb-config")],
        ),
        (
            ["--compilation_config.cudagraph_mode", "FULL"],
            [(0, "has no flag --compilation_config.cudagraph_mode; pass a JSON object to --compilation-config")],
        ),
        (["-t_p", "4"], [(0, "vLLM 0.33.0 has no flag -t_p")]),  # short options are not rewritten
        (["--max-num-seqs"], [(0, "--max-num-seqs needs a value")]),
        (["--max-num-seqs", "--enforce-eager"], [(0, "--max-num-seqs needs a value")]),
        (["--max-num-seqs", "many"], [(0, "--max-num-seqs expects an integer, got 'many'")]),
        (["--gpu-memory-utilization", "most"], [(0, "--gpu-memory-utilization expects a number, got 'most'")]),
        (["--enforce-eager=yes"], [(0, "--enforce-eager takes no value (got 'yes')")]),
        (
            ["--performance-mode", "fast"],
            [(0, "--performance-mode 'fast' is not one of: balanced, interactivity, throughput")],
        ),
        (["--compilation-config", "{bad"], [(0, "--compilation-config expects a JSON object, got '{bad'")]),
        (["--max-model-len", "big"], [(0, "--max-model-len expects an integer such as 131072 or 128k, got 'big'")]),
        (["8"], [(0, "unexpected positional argument '8'")]),
        (["--max-num-seqs", "8", "9"], [(2, "unexpected positional argument '9'")]),
    ],
)
def test_reports_what_argparse_would_refuse(f: facts.Facts, argv: list[str], errors: list[tuple[int, str]]) -> None:
    _, found = _read(f, *argv)
    assert [i for i, _ in found] == [i for i, _ in errors]
    for (_, message), (_, fragment) in zip(found, errors, strict=True):
        assert fragment in message


def test_negative_numbers_are_values(f: facts.Facts) -> None:
    assert _read(f, "--max-model-len", "-1") == ([("--max-model-len", ("-1",))], [])


# --- rule matchers -----------------------------------------------------------------------------------------------


def test_matchers_treat_unset_as_moot_in_require_and_absent_in_when() -> None:
    at_least_two = facts.Matcher("min", (2,))
    assert not at_least_two.when(None) and at_least_two.holds(None)
    assert at_least_two.when(2) and not at_least_two.holds(1)
    unset = facts.Matcher("equal", (None,))
    assert unset.when(None) and not unset.holds("pplx")
    assert not facts.Matcher("equal", (1,)).when(True)  # True == 1 in Python, not in rules
    assert facts.Matcher("not_in", ("a",)).holds(None) and not facts.Matcher("not_in", ("a",)).when(None)


# --- hardware ----------------------------------------------------------------------------------------------------


def test_no_gpu_generation_needs_a_linux_capability() -> None:
    """The reference facts give none (hardware.yaml says which were read); render adds back exactly these."""
    assert {name: g.capabilities for name, g in hardware.generations().items()} == {
        name: () for name in ("GB200", "GB300", "B200", "H200")
    }


@pytest.mark.parametrize("raw", [["ALL"], ["CAP_IPC_LOCK"], ["ipc_lock"], "IPC_LOCK", None])
def test_capabilities_must_be_single_names_as_kubernetes_spells_them(raw: object) -> None:
    with pytest.raises(ValueError, match=r"GB200\.capabilities"):
        hardware._capabilities("GB200", raw)
