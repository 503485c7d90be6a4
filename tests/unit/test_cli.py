"""The command line: `nvlfleet validate` and `nvlfleet crd` — exit codes, output lines, no tracebacks."""

from __future__ import annotations

import io
import pathlib
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvlfleet import cli
from nvlfleet.api import crd

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gb200-wide-ep-throughput.yaml"

VALID = textwrap.dedent(
    """\
    apiVersion: nvlfleet.io/v1alpha1
    kind: DeepSeekServing
    metadata: {name: flash, namespace: inference}
    spec:
      model: {name: deepseek-ai/DeepSeek-V4.1-Flash}
      runtime: {image: vllm/vllm-openai:v0.33.0}
      gpu: GB200
      roles:
        decode:
          parallelism: {tensor: 1, data: 8}
    """
)
TENSOR_8 = VALID.replace("{tensor: 1, data: 8}", "{tensor: 8}").replace("name: flash", "name: wide")
SECRET = "apiVersion: v1\nkind: Secret\nmetadata: {name: hf}\nstringData: {token: x}\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: pathlib.Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_valid_files_print_ok_and_exit_0(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    other = write(tmp_path, "two.yaml", VALID + "---\n" + VALID.replace("name: flash", "name: second"))
    code, out, err = run(capsys, "validate", "-f", str(EXAMPLE), "-f", other)
    assert (code, err) == (0, "")
    assert out == f"{EXAMPLE}: ok (1 serving)\n{other}: ok (2 servings)\n"


def test_problems_print_file_document_name_path_and_message(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    path = write(tmp_path, "mixed.yaml", SECRET + "---\n" + VALID + "---\n" + TENSOR_8)
    code, out, _ = run(capsys, "validate", "-f", path)
    assert code == 1
    assert out == (
        f"{path}#3 inference/wide: spec.roles.decode.parallelism.tensor: decode: tensor-parallel size 8 is larger "
        "than the 4 GPUs of one GB200 node; use data parallelism across nodes (e.g. tensor: 1, data: 8) with expert "
        "parallelism instead\n"
    )


def test_warnings_do_not_fail_the_file(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    slow = VALID + "  kernels: {all2allBackend: flashinfer_all2allv}\n"
    path = write(tmp_path, "slow.yaml", slow)
    code, out, _ = run(capsys, "validate", "-f", path)
    assert code == 0
    first, last = out.splitlines()
    assert first.startswith(f"{path} inference/flash: spec.kernels.all2allBackend: warning: decode: all-to-all backend")
    assert last == f"{path}: ok (1 serving, 1 warning)"
    assert run(capsys, "validate", "--no-warnings", "-f", path)[1] == f"{path}: ok (1 serving)\n"


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(VALID))
    assert run(capsys, "validate", "-f", "-") == (0, "<stdin>: ok (1 serving)\n", "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a: [1, 2\n", "not valid YAML: expected ',' or ']', but got '<stream end>' (line 2, column 1)"),
        ("key: value\n  bad: indent\n", "not valid YAML: mapping values are not allowed here (line 2, column 6)"),
        ("", "no DeepSeekServing found"),
        (SECRET, "no DeepSeekServing found"),
    ],
)
def test_unusable_files_are_one_line_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, content: str, message: str
) -> None:
    path = write(tmp_path, "bad.yaml", content)
    code, out, err = run(capsys, "validate", "-f", path)
    assert (code, out) == (1, "")
    assert err.startswith(f"{path}: ") and message in err and err.count("\n") == 1


def test_unreadable_files(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    code, _, err = run(capsys, "validate", "-f", str(tmp_path / "missing.yaml"), "-f", str(binary), "-f", str(tmp_path))
    assert code == 1
    assert err.splitlines() == [
        f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory",
        f"{binary}: cannot read: not UTF-8 text",
        f"{tmp_path}: cannot read: Is a directory",
    ]


def test_a_document_that_is_not_a_mapping(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "list.yaml", "- just\n- a list\n")
    code, out, _ = run(capsys, "validate", "-f", path)
    assert code == 1
    assert (
        out
        == f"{path} <unnamed>: a DeepSeekServing is a mapping with apiVersion, kind, metadata and spec, not a list\n"
    )


def test_validate_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["validate"])
    assert exit_info.value.code == 2
    assert "-f/--filename" in capsys.readouterr().err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300) | st.sampled_from([VALID[:n] for n in range(0, len(VALID), 17)]))
def test_no_input_makes_a_traceback(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    out, err = io.StringIO(), io.StringIO()
    from nvlfleet.commands import validate

    code = validate._check_file(str(path), out, err, warnings=True)
    assert code in (0, 1)
    assert "Traceback" not in out.getvalue() + err.getvalue()


def test_crd_prints_the_generated_definition(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "crd")
    assert code == 0 and out == crd.render()
    assert out == (REPO / "crds" / "nvlfleet.io_deepseekservings.yaml").read_text()


def test_validate_checks_against_the_policy_its_flags_give(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(EXAMPLE.parent / "gb300-throughput.yaml")
    code, out, _ = run(capsys, "validate", "-f", example)
    assert code == 1 and "spec.model.weights.hostPath.path: host path /mnt/nvme/models is not allowed" in out
    code, out, _ = run(capsys, "validate", "-f", example, "--allow-weights-host-path", "/mnt/nvme/models")
    assert (code, out) == (0, f"{example}: ok (1 serving)\n")


def test_render_takes_the_policy_validate_takes(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(EXAMPLE.parent / "gb300-throughput.yaml")
    code, _, err = run(capsys, "render", "-f", example)
    assert code == 1 and "spec.model.weights.hostPath.path: host path /mnt/nvme/models is not allowed" in err
    code, out, _ = run(capsys, "render", "-f", example, "--allow-weights-host-path", "/mnt/nvme/models")
    assert code == 0 and "kind: LeaderWorkerSet" in out
