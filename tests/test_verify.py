"""`ddpify verify`: each hand-written case in tests/verify_cases/ runs once, through the CLI.

A spy on `ddpify.verify.verify_script` keeps the result object the CLI got, so every case is
checked twice from one run: the API result and the CLI's exit code and table. Runs are real
(torchrun, 2 gloo ranks on CPU); the whole module takes about a minute on 2 cores.
"""

from __future__ import annotations

import ast
import concurrent.futures
import io
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpify import verify as verify_api
from ddpify.cli import cli
from ddpify.cli.verify import Spinner

CASES = Path(__file__).resolve().parent / "verify_cases"
VERIFY_MODULE = Path(verify_api.__file__)
# The hang case waits this long without progress; long enough for torch to import on a busy 2-core
# machine. The cases that do not hang get far more, so that a slow machine does not fake a hang.
HANG_TIMEOUT = "20"
TIMEOUT = "90"


@dataclass
class CliRun:
    exit_code: int
    stdout: str
    stderr: str
    result: verify_api.VerifyResult | None


def run_cli(args: list[str], result: verify_api.VerifyResult | None = None) -> CliRun:
    """Invoke `ddpify verify`; a given `result` stands in for the run (the CLI then only renders it)."""
    results: list[verify_api.VerifyResult] = []
    real_verify = verify_api.verify_script

    def spy(*a, **kw):
        results.append(result if result is not None else real_verify(*a, **kw))
        return results[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setattr(verify_api, "verify_script", spy)
        out = CliRunner().invoke(cli, ["verify", *args])
    if out.exception is not None and not isinstance(out.exception, SystemExit):
        raise out.exception
    return CliRun(out.exit_code, out.stdout, out.stderr, results[0] if results else None)


def table_row(stdout: str, check: str) -> str:
    (row,) = [line for line in stdout.splitlines() if line.startswith(check + " ")]
    return row


def line_of(case: str, needle: str) -> int:
    lines = (CASES / case).read_text().splitlines()
    (number,) = [i for i, line in enumerate(lines, 1) if needle in line]
    return number


@pytest.fixture(scope="module")
def runs() -> dict[str, CliRun]:
    """Each case verified once.

    The hang case spends its time blocked, waiting for the timeout, so it runs through the API
    in a thread while the other cases run through the CLI; the CLI then renders its result.
    It keeps its logs so the test can check that no rank outlived the run.
    """
    hang_case = CASES / "hang_collective_under_guard.py"
    hang_options = verify_api.VerifyOptions(
        timeout=float(HANG_TIMEOUT), keep=True, extra_env={"OMP_NUM_THREADS": "1"}
    )
    # What verify sets when ranks share one GPU, forced here on a machine without one.
    shared_gpu_env = {"OMP_NUM_THREADS": "1", verify_api.ENV_FORCE_GLOO: "1", verify_api.ENV_SHARED_GPUS: "1"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        hang = pool.submit(verify_api.verify_script, hang_case, hang_options)
        forced = pool.submit(
            verify_api.verify_script,
            CASES / "nccl_backend_forced_to_gloo.py",
            verify_api.VerifyOptions(timeout=float(TIMEOUT), extra_env=shared_gpu_env),
        )
        runs = {
            name: run_cli([str(CASES / f"{name}.py"), "--timeout", TIMEOUT])
            for name in ("correct", "print_every_rank", "module_prefix_checkpoint")
        }
        runs["exit_code_and_args"] = run_cli(
            [
                str(CASES / "exit_code_and_args.py"),
                "--timeout",
                TIMEOUT,
                "--keep",
                "--",
                "--epochs",
                "1",
                "x y",
            ]
        )
        runs["hang_collective_under_guard"] = run_cli(
            [str(hang_case), "--timeout", HANG_TIMEOUT], hang.result()
        )
        runs["nccl_backend_forced_to_gloo"] = CliRun(0, "", "", forced.result())  # API only, no CLI run
    yield runs
    for name in ("hang_collective_under_guard", "exit_code_and_args"):
        shutil.rmtree(runs[name].result.run.state_dir.parent, ignore_errors=True)


def test_correct_script_passes(runs: dict[str, CliRun]) -> None:
    run = runs["correct"]
    result = run.result
    assert result is not None and result.ok, run.stdout
    assert [(r.rank, r.exit_code, r.hung) for r in result.run.ranks] == [(0, 0, False), (1, 0, False)]
    assert result.duplicates == ()
    (ckpt,) = result.checkpoints
    assert (ckpt.path, ckpt.loaded, ckpt.prefixed_keys) == ("model.pt", True, 0)
    assert [(sd.key, sd.num_keys) for sd in ckpt.state_dicts] == [("", 2)]
    assert "epoch 1 loss" in result.run.ranks[0].stdout and result.run.ranks[1].stdout == ""
    assert run.exit_code == 0
    assert "gloo on CPU" in run.stdout.splitlines()[0]
    assert table_row(run.stdout, "rank 1").split()[2] == "ok"
    assert table_row(run.stdout, "duplicate lines").split()[2:] == ["ok", "none"]
    assert "no 'module.' prefix" in table_row(run.stdout, "checkpoint model.pt")
    assert run.stdout.rstrip().endswith("all checks passed")


def test_print_on_every_rank_is_flagged(runs: dict[str, CliRun]) -> None:
    run = runs["print_every_rank"]
    result = run.result
    assert result is not None and not result.ok
    assert all(r.exit_code == 0 for r in result.run.ranks)
    # Losses differ per rank; the lines still count as the same line printed twice.
    assert [(d.text.split(" loss ")[0], d.ranks) for d in result.duplicates] == [
        ("epoch 0", (0, 1)),
        ("epoch 1", (0, 1)),
    ]
    assert [c.name for c in result.failures] == ["duplicate lines"]
    assert run.exit_code == 1
    row = table_row(run.stdout, "duplicate lines")
    assert "FAIL" in row and "2 line(s) printed on ranks 0,1: 'epoch 0 loss" in row
    assert run.stdout.rstrip().endswith("1 check(s) failed")


def test_module_prefixed_checkpoint_is_flagged(runs: dict[str, CliRun]) -> None:
    run = runs["module_prefix_checkpoint"]
    result = run.result
    assert result is not None and not result.ok
    (ckpt,) = result.checkpoints
    assert (ckpt.path, ckpt.loaded) == ("checkpoint.pt", True)
    (state_dict,) = ckpt.state_dicts
    assert (state_dict.key, state_dict.num_keys) == ("model", 2)
    assert sorted(state_dict.prefixed) == ["module.bias", "module.weight"]
    assert [c.name for c in result.failures] == ["checkpoint checkpoint.pt"]
    assert run.exit_code == 1
    row = table_row(run.stdout, "checkpoint checkpoint.pt")
    assert "FAIL" in row and "['model']: 2/2 keys start with 'module.'" in row


def test_collective_under_rank_guard_is_a_named_hang(runs: dict[str, CliRun]) -> None:
    run = runs["hang_collective_under_guard"]
    result = run.result
    assert result is not None and not result.ok
    assert result.run.hung and result.run.hung_ranks == (0, 1)
    case = "hang_collective_under_guard.py"
    stuck = {r.rank: r.stuck_at for r in result.run.ranks}
    assert stuck == {
        0: f"{case}:{line_of(case, 'dist.all_reduce(')} in main",
        1: f"{case}:{line_of(case, 'dist.barrier()')} in main",
    }
    # gloo would wait 30 minutes; verify gave up after the no-progress timeout and killed the ranks.
    assert result.run.wall_time < float(HANG_TIMEOUT) + 30
    for rank in (0, 1):
        pid = int((result.run.state_dir / f"rank{rank}.pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert run.exit_code == 1
    row = table_row(run.stdout, "rank 0")
    assert row.split()[2] == "hang" and f"stuck at {stuck[0]}" in row
    assert "hang" in table_row(run.stdout, "rank 1")


def test_exit_status_arguments_and_scratch_dir(runs: dict[str, CliRun]) -> None:
    run = runs["exit_code_and_args"]
    result = run.result
    assert result is not None
    codes = {r.rank: r.exit_code for r in result.run.ranks}
    assert codes[1] == 3 and codes[0] in (0, None)  # torchrun may stop rank 0 once rank 1 failed
    assert run.exit_code == 1
    assert "exit 3" in table_row(run.stdout, "rank 1")
    if codes[0] == 0:
        written = (result.run.workdir / "args.json").read_text()
        assert '"argv": ["--epochs", "1", "x y"]' in written
        assert f'"cwd": "{result.run.workdir}"' in written
    assert result.run.workdir.is_relative_to(result.run.state_dir.parent)  # a fresh scratch dir
    assert result.checkpoints == ()
    assert "scratch directory:" in run.stderr


def test_shim_forces_gloo_and_maps_local_rank_onto_the_shared_gpu(runs: dict[str, CliRun]) -> None:
    result = runs["nccl_backend_forced_to_gloo"].result
    assert [r.exit_code for r in result.run.ranks] == [0, 0], [r.stderr[-2000:] for r in result.run.ranks]
    assert [r.stdout.strip() for r in result.run.ranks] == [
        "rank 0: backend=gloo world=2 LOCAL_RANK=0 true=0",
        "rank 1: backend=gloo world=2 LOCAL_RANK=0 true=1",
    ]


def test_missing_script_is_bad_input(tmp_path: Path) -> None:
    run = run_cli([str(tmp_path / "missing.py")])
    assert run.exit_code == 2 and run.result is None
    with pytest.raises(verify_api.VerifyInputError):
        verify_api.verify_script(tmp_path / "missing.py")


def test_interpreter_without_torch_is_bad_input(tmp_path: Path) -> None:
    # -S drops site-packages, so this interpreter cannot import torch.
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    no_torch.chmod(0o755)
    run = run_cli([str(CASES / "correct.py"), "--python", str(no_torch)])
    assert run.exit_code == 2
    assert "cannot import torch" in run.stderr


def test_help_documents_exit_codes() -> None:
    out = CliRunner().invoke(cli, ["verify", "--help"])
    assert out.exit_code == 0
    for code, meaning in (
        ("0", "all checks passed"),
        ("1", "a check failed"),
        ("2", "bad input"),
        ("123", "internal error"),
    ):
        assert f"  {code}  " in out.stdout and meaning in out.stdout


def test_verify_module_imports_only_the_standard_library() -> None:
    """scripts/gpu_verify.py loads ddpify/verify.py by path where only torch is installed."""
    tree = ast.parse(VERIFY_MODULE.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= sys.stdlib_module_names


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        pytest.param(
            {0: "epoch 0 loss 0.5\n", 1: "epoch 0 loss 0.7\n"},
            [("epoch 0 loss 0.5", (0, 1))],
            id="loss-differs",
        ),
        pytest.param({0: "done\n", 1: "x\n", 2: "done\n"}, [("done", (0, 2))], id="three-ranks"),
        pytest.param(
            {0: "acc 1e-3 nan\n", 1: "acc 2.5E+2 inf\n"}, [("acc 1e-3 nan", (0, 1))], id="exponents"
        ),
    ],
)
def test_duplicate_lines_fixes(outputs: dict[int, str], expected: list[tuple[str, tuple[int, ...]]]) -> None:
    assert [(d.text, d.ranks) for d in verify_api.find_duplicate_lines(outputs)] == expected


@pytest.mark.parametrize(
    "outputs",
    [
        pytest.param({0: "rank 0 ready\n", 1: "rank 1 ready\n"}, id="rank-numbers-differ"),
        pytest.param({0: "\n  \nloss 0.5\nloss 0.4\n", 1: "\n"}, id="blank-lines-and-repeats-on-one-rank"),
        pytest.param({0: "epoch 0\nepoch 1\n", 1: ""}, id="rank-0-only"),
    ],
)
def test_duplicate_lines_noop(outputs: dict[int, str]) -> None:
    assert verify_api.find_duplicate_lines(outputs) == ()


def test_spinner_redraws_one_line() -> None:
    stream = io.StringIO()
    spinner = Spinner(stream)
    spinner(verify_api.Progress(elapsed=1.0, finished_ranks=0, nproc=2, idle=0.0))
    spinner(verify_api.Progress(elapsed=9.0, finished_ranks=1, nproc=2, idle=6.0))
    spinner.clear()
    frames = stream.getvalue().split("\r")
    assert "0/2 ranks finished" in frames[1]
    assert "1/2 ranks finished  (no output for 6 s)" in frames[2]
    assert frames[-1] == "" and frames[-2].strip() == ""
