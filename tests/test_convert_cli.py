"""`ddpify convert` / `ddpify diff` through the real entry point: modes, outputs, exit codes,
and bad input (nothing written, a message naming the file and the reason)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpify.cli import cli
from ddpify.convert import files as convert_files

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "fixtures" / "convert" / "main_argparse" / "train.py"
GOLDEN = REPO / "fixtures" / "convert" / "main_argparse" / "train_ddp.py"
LAUNCHER = REPO / "fixtures" / "convert" / "main_argparse" / "train_ddp.sh"


def ddpify(*args: str, stdin: bytes | None = None):
    return CliRunner().invoke(cli, list(args), input=stdin)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return Path(shutil.copy(SCRIPT, tmp_path / "train.py"))


def test_convert_writes_the_output_and_launcher_beside_the_source(script: Path) -> None:
    result = ddpify("convert", str(script))
    assert result.exit_code == 0, result.output
    assert (script.parent / "train_ddp.py").read_text() == GOLDEN.read_text()
    launcher = script.parent / "train_ddp.sh"
    assert launcher.read_text() == LAUNCHER.read_text() and launcher.stat().st_mode & 0o111
    assert script.read_text() == SCRIPT.read_text()
    assert f"converted {script} -> {script.parent / 'train_ddp.py'}" in result.stderr


def test_output_option_no_launcher_and_in_place(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "ddp.py"
    out.parent.mkdir()
    assert ddpify("convert", str(script), "-o", str(out), "--no-launcher").exit_code == 0
    assert out.read_text() == GOLDEN.read_text() and not (out.parent / "ddp.sh").exists()
    assert ddpify("convert", str(script), "--in-place").exit_code == 0
    assert script.read_text() == GOLDEN.read_text() and (tmp_path / "train.sh").exists()


def test_check_exits_1_and_writes_nothing(script: Path) -> None:
    result = ddpify("convert", "--check", str(script))
    assert result.exit_code == 1 and f"would convert {script}" in result.stderr
    assert sorted(p.name for p in script.parent.iterdir()) == ["train.py"]
    assert ddpify("convert", "--check", str(GOLDEN)).exit_code == 0  # already distributed: nothing to do


def test_diff_prints_a_unified_diff_and_writes_nothing(script: Path) -> None:
    for args in (["diff", str(script)], ["convert", "--diff", str(script)]):
        result = ddpify(*args)
        assert result.exit_code == 0
        assert result.stdout.startswith(f"--- {script}\n+++ {script.parent / 'train_ddp.py'}\n@@")
        assert "+        dist.init_process_group(backend)\n" in result.stdout
    assert sorted(p.name for p in script.parent.iterdir()) == ["train.py"]
    colored = ddpify("diff", "--color", str(script)).stdout
    assert "\033[32m+" in colored and "\033[31m-" in colored
    assert "\033[" not in ddpify("diff", "--no-color", str(script)).stdout


def test_stdin_to_stdout() -> None:
    result = ddpify("convert", "-", stdin=SCRIPT.read_bytes())
    assert result.exit_code == 0 and result.stdout == GOLDEN.read_text()


def test_report_lists_every_change_with_its_line(script: Path) -> None:
    result = ddpify("convert", "--report", "--no-launcher", str(script))
    expected = (GOLDEN.parent / "report.txt").read_text().replace("train.py:", f"{script}:")
    for line in expected.splitlines():
        assert line in result.stderr


def test_warnings_are_always_printed(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    source = SCRIPT.read_text().replace('torch.device("cuda" if torch.cuda.is_available() else "cpu")', "torch.device(args.device)")
    script.write_text(source)
    result = ddpify("convert", str(script))
    assert result.exit_code == 0
    line = source.splitlines().index("    device = torch.device(args.device)") + 1
    assert f"{script}:{line}: warning `device = torch.device(args.device)` is kept: pass \"cuda\"" in result.stderr


def test_folder_converts_its_training_scripts(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    shutil.copy(SCRIPT, project / "train.py")
    shutil.copy(REPO / "fixtures" / "convert" / "gan" / "train.py", project / "sub" / "gan.py")
    (project / "utils.py").write_text("def helper():\n    return 1\n")
    result = ddpify("convert", str(project))
    assert result.exit_code == 0, result.output
    assert (project / "train_ddp.py").exists() and (project / "sub" / "gan_ddp.py").exists()
    assert not (project / "utils_ddp.py").exists()
    assert "2 files converted, 1 file unchanged." in result.stderr
    again = ddpify("convert", str(project))  # outputs (*_ddp.py) are not converted again
    assert not (project / "train_ddp_ddp.py").exists() and again.exit_code == 0


def test_unchanged_scripts_come_back_with_a_message(tmp_path: Path) -> None:
    for case, reason in (("already_ddp", "already distributed"), ("inference_only", "nothing to train")):
        script = Path(shutil.copy(REPO / "fixtures" / "convert" / case / "train.py", tmp_path / f"{case}.py"))
        result = ddpify("convert", str(script))
        assert result.exit_code == 0 and f"unchanged {script}: {reason}" in result.stderr
        assert not (tmp_path / f"{case}_ddp.py").exists()


# --- bad input -------------------------------------------------------------------------------


def test_syntax_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef main(:\n    pass\n")
    result = ddpify("convert", str(bad))
    assert result.exit_code == 2 and f"error: {bad}: cannot parse" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py"]


def test_non_utf8_bytes(tmp_path: Path) -> None:
    bad = tmp_path / "latin.py"
    bad.write_bytes(SCRIPT.read_bytes().replace(b"Train a small", b"Train a caf\xe9 small", 1))
    result = ddpify("convert", str(bad))
    assert result.exit_code == 2 and f"{bad}: not valid utf-8: byte 0xe9" in result.stderr
    assert not (tmp_path / "latin_ddp.py").exists()
    declared = tmp_path / "declared.py"  # with a coding cookie the same bytes are fine, and kept
    declared.write_bytes(b"# -*- coding: latin-1 -*-\n" + bad.read_bytes())
    assert ddpify("convert", str(declared)).exit_code == 0
    assert b"caf\xe9" in (tmp_path / "declared_ddp.py").read_bytes()


def test_crlf_line_endings_are_kept(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_bytes(SCRIPT.read_bytes().replace(b"\n", b"\r\n"))
    assert ddpify("convert", str(script)).exit_code == 0
    output = (tmp_path / "train_ddp.py").read_bytes()
    assert output.count(b"\r\n") == output.count(b"\n") > 0
    assert output.replace(b"\r\n", b"\n") == GOLDEN.read_bytes()


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("")
    result = ddpify("convert", str(empty))
    assert result.exit_code == 0 and "empty file: nothing to convert" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.py"]


def test_missing_path(tmp_path: Path) -> None:
    result = ddpify("convert", str(tmp_path / "nope.py"))
    assert result.exit_code == 2 and f"{tmp_path / 'nope.py'}: no such file" in result.stderr


def test_output_inside_a_missing_folder(script: Path, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "out.py"
    result = ddpify("convert", str(script), "-o", str(target))
    assert result.exit_code == 2 and f"folder {target.parent} does not exist" in result.stderr
    assert not target.parent.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_usage_errors_exit_2(script: Path) -> None:
    assert ddpify("convert", str(script), "-o", "x.py", "--in-place").exit_code == 2
    assert ddpify("convert", str(script), str(script), "-o", "x.py").exit_code == 2


def test_internal_error_exits_123(script: Path, monkeypatch) -> None:
    def boom(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(convert_files, "convert_source", boom)
    result = ddpify("convert", str(script))
    assert result.exit_code == 123 and "internal error" in result.stderr and "RuntimeError: boom" in result.stderr


def test_help_documents_the_exit_codes() -> None:
    for command in ("convert", "diff"):
        text = ddpify(command, "--help").output
        assert "0 done or nothing to do" in text and "123 internal error" in text


def test_python_dash_m_works() -> None:
    result = subprocess.run([sys.executable, "-m", "ddpify", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and "ddpify" in result.stdout


def test_installed_wheel_converts_and_writes_a_valid_launcher(installed_wheel: Path, tmp_path: Path) -> None:
    """Templates ship in the wheel: convert from a fresh venv (no torch), then `bash -n` the launcher."""
    script = Path(shutil.copy(SCRIPT, tmp_path / "train.py"))
    result = subprocess.run([str(installed_wheel / "ddpify"), "convert", str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "train_ddp.py").read_text() == GOLDEN.read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "train_ddp.sh")]).returncode == 0


@pytest.mark.parametrize(("kind", "suffix"), [("slurm", ".sbatch"), ("k8s", ".yaml")])
def test_convert_can_write_a_cluster_launcher(script: Path, kind: str, suffix: str) -> None:
    result = ddpify("convert", str(script), "--launcher", kind)
    if kind == "k8s":  # a Kubernetes job needs an image: convert names the problem, writes nothing
        assert result.exit_code == 2 and "image" in result.stderr
        assert not (script.parent / "train_ddp.py").exists()
        return
    assert result.exit_code == 0, result.output
    launcher = script.parent / f"train_ddp{suffix}"
    assert "#SBATCH --ntasks-per-node=1" in launcher.read_text()
    assert subprocess.run(["bash", "-n", str(launcher)]).returncode == 0


@pytest.mark.parametrize(
    ("case", "flag", "line"),
    [
        ("sync_batchnorm", "--sync-bn", "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)"),
        ("seed_per_rank", "--seed-per-rank", "set_seed(args.seed + rank)"),
    ],
)
def test_options_reach_convert_and_diff(case: str, flag: str, line: str, tmp_path: Path) -> None:
    folder = REPO / "fixtures" / "convert" / case
    source = Path(shutil.copy(folder / "train.py", tmp_path / "train.py"))
    result = ddpify("convert", str(source), "-o", str(tmp_path / "out.py"), "--no-launcher", flag)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.py").read_text() == (folder / "train_ddp.py").read_text()
    added = [text[1:].strip() for text in ddpify("diff", flag, str(source)).stdout.splitlines() if text.startswith("+")]
    assert any(text.startswith(line) for text in added)
    assert line not in ddpify("diff", str(source)).stdout  # the option is what does it
    assert flag in ddpify("convert", "--help").stdout and flag in ddpify("diff", "--help").stdout


def test_report_explains_steps_from_len_loader(tmp_path: Path) -> None:
    source = Path(shutil.copy(REPO / "fixtures" / "convert" / "schedule_from_loader" / "train.py", tmp_path / "train.py"))
    result = ddpify("diff", "--keep-global-batch", "--report", str(source))
    assert f"{source}:42: loader-length: `len(train_loader)` keeps its value under DDP" in result.stderr


def test_apex_script_converts_through_the_cli_with_its_report(tmp_path: Path) -> None:
    fixture = REPO / "fixtures" / "convert" / "apex_amp"
    script = Path(shutil.copy(fixture / "train.py", tmp_path / "train.py"))
    result = ddpify("convert", str(script), "--report")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "train_ddp.py").read_text() == (fixture / "train_ddp.py").read_text()
    assert f"{script}:55: apex: `amp.initialize` becomes a GradScaler" in result.stderr
    assert f"{script}:63: warning checkpoints saved with apex amp hold no GradScaler state" in result.stderr
    assert ddpify("convert", "--check", str(tmp_path / "train_ddp.py")).exit_code == 0  # nothing of apex left to convert
