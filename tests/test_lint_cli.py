"""`ddpify lint` through its entry point: formats, exit codes, selection, noqa, config, --fix,
bad input, and the pre-commit situation (installed without torch, run by pre-commit)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpify.cli import cli
from ddpify.lint import Selection, lint_source
from tests.cases import load_cases

REPO = Path(__file__).resolve().parent.parent
LINT = REPO / "fixtures" / "lint"
BAD = LINT / "DDP401" / "bad.py"  # three DDP401 findings
GOOD = LINT / "DDP401" / "good.py"


def lint(*args: str, cwd: Path | None = None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(cli, ["lint", *args])
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(cli, ["lint", *args])
    finally:
        os.chdir(old)


def test_findings_are_printed_sorted_and_exit_1() -> None:
    result = lint(str(BAD))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith(f"{BAD}:") and " DDP401 " in line for line in lines)
    positions = [tuple(int(p) for p in line.split(":")[1:3]) for line in lines]
    assert positions == sorted(positions)
    assert "Found 3 findings." in result.stderr


def test_clean_file_exits_0() -> None:
    result = lint(str(GOOD))
    assert result.exit_code == 0 and result.stdout == ""


def test_single_gpu_script_gets_no_findings() -> None:
    """Not distributed: that is a job for `ddpify convert`, not a lint finding."""
    script = REPO / "fixtures" / "convert" / "main_argparse" / "train.py"
    assert lint(str(script)).exit_code == 0


def test_unparsable_file_is_reported_and_the_others_still_checked(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch.distributed as dist\n\ndef main(:\n    pass\n")
    result = lint(str(broken), str(BAD))
    assert result.exit_code == 2
    assert f"error: {broken}: cannot parse" in result.stderr
    assert " DDP401 " in result.stdout


def test_file_naming_nothing_distributed_is_not_parsed(tmp_path: Path) -> None:
    """The text pre-filter: no `distributed`, RANK or WORLD_SIZE in the text, no findings possible,
    so lint does not parse it (a syntax error there is not lint's business)."""
    plain = tmp_path / "plain.py"
    plain.write_text("def main(:\n    print('single GPU')\n")
    assert lint(str(plain)).exit_code == 0
    plain.write_text("import os\nrank = int(os.environ['RANK'])\ndef main(:\n    pass\n")
    assert lint(str(plain)).exit_code == 2  # names RANK: parsed, and the error is reported


def test_missing_path_exits_2(tmp_path: Path) -> None:
    result = lint(str(tmp_path / "nope.py"))
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_select_and_ignore_by_code_or_prefix() -> None:
    assert lint("--select", "DDP3", str(BAD)).exit_code == 0
    assert lint("--ignore", "DDP4", str(BAD)).exit_code == 0
    assert lint("--select", "DDP401", str(BAD)).exit_code == 1
    unknown = lint("--select", "DDP777", str(BAD))
    assert unknown.exit_code == 2 and "unknown rule code" in unknown.output


def test_off_by_default_rule_runs_only_when_selected() -> None:
    source = (REPO / "fixtures" / "lint" / "DDP302" / "good.py").read_text() + "\nprint('every rank says hi')\n"
    assert not [f for f in lint_source(source) if f.code == "DDP303"]
    assert [f for f in lint_source(source, selection=Selection(("DDP303",))) if f.code == "DDP303"]


def test_ddp303_reports_click_and_pprint_output_too() -> None:
    """Helper corpus AV, repro 09: `click.echo` and `click.secho` on every rank were not reported."""
    source = (REPO / "fixtures" / "lint" / "DDP302" / "good.py").read_text() + "\nimport click\nimport pprint\nclick.echo('hi')\npprint.pprint({})\n"
    found = [f.message for f in lint_source(source, selection=Selection(("DDP303",)))]
    assert any(m.startswith("`click.echo(...)` on every rank") for m in found) and any(m.startswith("`pprint.pprint(...)` on every rank") for m in found)


def test_noqa(tmp_path: Path) -> None:
    lines = BAD.read_text().splitlines()
    findings = lint_source(BAD.read_text())
    first, second = findings[0].line, findings[1].line
    lines[first - 1] += "  # noqa"
    lines[second - 1] += "  # noqa: DDP401"
    script = tmp_path / "script.py"
    script.write_text("\n".join(lines) + "\n")
    remaining = lint_source(script.read_text())
    assert [f.line for f in remaining] == [f.line for f in findings[2:]]
    lines[findings[2].line - 1] += "  # noqa: DDP101"  # another code does not silence it
    assert len(lint_source("\n".join(lines) + "\n")) == 1


def test_pyproject_config_is_found_walking_up(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.ddpify.lint]\nignore = ["DDP401"]\n')
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    script = shutil.copy(BAD, deep / "train.py")
    assert lint(str(script)).exit_code == 0
    assert lint("--select", "DDP401", str(script)).exit_code == 1  # an explicit --select replaces the file's settings
    assert lint("--ignore", "DDP3", str(script)).exit_code == 0  # without one, ignores add up
    (tmp_path / "pyproject.toml").write_text('[tool.ddpify.lint]\nselect = ["DDP3"]\n')
    from ddpify.lint.selection import config_for

    config_for.cache_clear()
    assert lint(str(script)).exit_code == 0
    assert lint("--select", "DDP4", str(script)).exit_code == 1  # the command line wins over the file
    config_for.cache_clear()


def test_json_and_github_formats() -> None:
    rows = json.loads(lint("--format", "json", str(BAD)).stdout)
    assert {r["code"] for r in rows} == {"DDP401"} and all({"path", "line", "column", "message", "fixable"} <= r.keys() for r in rows)
    github = lint("--format", "github", str(BAD)).stdout.splitlines()
    assert github[0].startswith(f"::error file={BAD},line=") and ",title=DDP401::" in github[0]


def test_fix_applies_safe_fixes_and_says_what_it_did(tmp_path: Path) -> None:
    script = shutil.copy(LINT / "DDP302" / "bad.py", tmp_path / "train.py")
    result = lint("--fix", str(script))
    assert result.exit_code == 0, result.output
    assert f"fixed {script}:15: DDP302" in result.stderr
    assert "model.module.state_dict()" in Path(script).read_text()
    assert lint(str(script)).exit_code == 0


@pytest.mark.parametrize("case", [c for c in load_cases() if not c.expect_unchanged], ids=lambda c: c.name)
def test_converted_fixtures_lint_clean(case) -> None:
    """Our own output lints clean under our own rules (the defaults, and DDP303 too)."""
    findings = lint_source(case.converted.read_text(), str(case.converted), Selection(("DDP0", "DDP1", "DDP2", "DDP3", "DDP4")))
    assert findings == [], "\n".join(f.render() for f in findings)


def test_installed_without_torch_the_hook_works(installed_wheel: Path) -> None:
    """The pre-commit situation: libcst, click and jinja2 only."""
    python = installed_wheel / "python"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    result = subprocess.run([str(installed_wheel / "ddpify"), "lint", str(BAD)], capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout.count(" DDP401 ") == 3, result.stderr


@pytest.fixture(scope="session")
def pre_commit(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pre-commit")
    venv.create(folder / "venv", with_pip=True)
    bin_dir = folder / "venv" / "bin"
    installed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "pre-commit"], capture_output=True, text=True)
    assert installed.returncode == 0, f"pre-commit could not be installed from PyPI: {installed.stderr[-500:]}"
    return bin_dir / "pre-commit"


def test_pre_commit_hook_runs_against_a_scratch_repository(pre_commit: Path, tmp_path: Path) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    committed = subprocess.run(["git", "cat-file", "-e", f"{head}:.pre-commit-hooks.yaml"], cwd=REPO)
    assert committed.returncode == 0, "pre-commit installs the hook from a commit: .pre-commit-hooks.yaml must be committed"
    project = tmp_path / "project"
    project.mkdir()
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {REPO}\n  rev: {head}\n  hooks:\n  - id: ddpify-lint\n"
    )
    shutil.copy(GOOD, project / "good.py")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PATH": f"{pre_commit.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    subprocess.run([*git, "add", "."], cwd=project, check=True)
    clean = subprocess.run([str(pre_commit), "run", "--all-files"], cwd=project, env=env, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    shutil.copy(BAD, project / "bad.py")
    subprocess.run([*git, "add", "."], cwd=project, check=True)
    dirty = subprocess.run([str(pre_commit), "run", "--all-files"], cwd=project, env=env, capture_output=True, text=True)
    assert dirty.returncode == 1
    assert "bad.py:" in dirty.stdout and " DDP401 " in dirty.stdout, dirty.stdout
