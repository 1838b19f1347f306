"""`ddpify verify`: each hand-written case in tests/verify_cases/ runs once, through the CLI.

A spy on `ddpify.verify.verify_script` keeps the result object the CLI got, so every case is
checked twice from one run: the API result and the CLI's exit code and table. Runs are real
(2 gloo ranks on CPU): the correct, argument, single-process and hang cases through torchrun, the
cases that fail a check through the direct launcher; the module takes about two minutes on 2 cores.
"""

from __future__ import annotations

import ast
import concurrent.futures
import io
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpify import verify as verify_api
from ddpify.cli import cli
from ddpify.cli.verify import Spinner
from ddpify.verify import forkserver

CASES = Path(__file__).resolve().parent / "verify_cases"
VERIFY_PACKAGE = Path(verify_api.__file__).parent
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
    """Invoke `ddpify verify`; a given `result` stands in for the run (the CLI then only renders it).

    With a stand-in, the options the CLI built must equal the stand-in's: the run behind it was
    made through the API with the options these arguments mean.
    """
    results: list[verify_api.VerifyResult] = []
    real_verify = verify_api.verify_script

    def spy(script, options, **kw):
        if result is not None:
            assert (Path(script).resolve(), options) == (result.script, result.options)
        results.append(result if result is not None else real_verify(script, options, **kw))
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


# Each case is a DDP script with one thing wrong, and the checks it must fail; `correct` fails none.
FAILING = {
    "print_every_rank": ["duplicate lines"],
    "module_prefix_checkpoint": ["checkpoint checkpoint.pt"],
    "diverged_replicas": ["replicas"],
    "no_ddp": ["replicas"],
    "trained_outside_ddp": ["replicas"],
    "bypass_ddp": ["replicas", "forward through DDP"],
    "unsharded_loader": ["data sharding"],
    "unsharded_stream": ["data sharding"],
    "no_set_epoch": ["data sharding"],
    "loader_per_epoch_no_set_epoch": ["data sharding"],
    "subsets_drawn_per_rank": ["data sharding"],
    "writes_every_rank": ["side effects"],
    "no_teardown": ["process group"],
}
# Cases run with verify options of their own: (CLI arguments, the same as VerifyOptions fields).
OPTIONS = {
    "correct": (["--single", "--format", "json"], {"single": True}),
    "needs_torchrun": (["--single"], {"single": True}),
    "endless": (["--steps", "5", "--launcher", "direct"], {"steps": 5, "launcher": "direct"}),
    "tensor_batches": (["--launcher", "direct"], {"launcher": "direct"}),
    "exit_code_and_args": (["--keep", "--", "--epochs", "1", "x y"], {"keep": True, "script_args": ("--epochs", "1", "x y")}),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, CliRun]:
    """Each case verified once, through the API, three at a time; then rendered by the CLI.

    The CLI is invoked with each case's arguments and must build the options the API run used
    (see `run_cli`). The hang case keeps its logs so the test can check that no rank outlived the
    run; the GPU-sharing case is an API run only.
    """
    timeout = {"timeout": float(TIMEOUT)}
    jobs = {name: (["--timeout", TIMEOUT, *args], {**timeout, **fields}) for name, (args, fields) in OPTIONS.items()}
    # The failing cases judge what the shim recorded, whoever started the ranks: the direct
    # launcher (one torch import, forked ranks) instead of torchrun's agent and two imports.
    direct = {**timeout, "launcher": "direct"}
    jobs.update({name: (["--timeout", TIMEOUT, "--launcher", "direct"], direct) for name in FAILING})
    jobs["hang_collective_under_guard"] = (["--timeout", HANG_TIMEOUT, "--keep"], {"timeout": float(HANG_TIMEOUT), "keep": True})
    # What verify sets when ranks share one GPU, forced here on a machine without one.
    shared_gpu_env = {verify_api.ENV_FORCE_GLOO: "1", verify_api.ENV_SHARED_GPUS: "1"}
    # API runs only; NAME@LABEL runs NAME.py. The direct launcher's runs start from verify's fork server.
    api_only = {
        "nccl_backend_forced_to_gloo": {**timeout, "extra_env": shared_gpu_env, "launcher": "direct"},
        "hang_collective_under_guard@direct": {"timeout": float(HANG_TIMEOUT), "keep": True, "launcher": "direct"},
    }
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {
            name: pool.submit(
                verify_api.verify_script, CASES / f"{name.split('@')[0]}.py", verify_api.VerifyOptions(**fields)
            )
            for name, fields in [*((n, f) for n, (_, f) in jobs.items()), *api_only.items()]
        }
        results = {name: future.result() for name, future in futures.items()}
    runs = {}
    for name, (args, _) in jobs.items():
        script_args = args[args.index("--"):] if "--" in args else []
        options = [a for a in args if a not in script_args]
        runs[name] = run_cli([str(CASES / f"{name}.py"), *options, *script_args], results[name])
    runs.update({name: CliRun(0, "", "", results[name]) for name in api_only})
    yield runs
    for name in ("hang_collective_under_guard", "hang_collective_under_guard@direct", "exit_code_and_args"):
        shutil.rmtree(runs[name].result.run.state_dir.parent.parent, ignore_errors=True)


def test_correct_script_passes_every_check(runs: dict[str, CliRun]) -> None:
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
    report = json.loads(run.stdout)
    assert report["ok"] is True and report["setup"]["nproc"] == 2 and report["setup"]["single"] is True
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert statuses == {
        "rank 0": "ok", "rank 1": "ok", "replicas": "ok", "forward through DDP": "ok", "data sharding": "ok",
        "side effects": "ok", "process group": "ok", "duplicate lines": "ok", "checkpoint model.pt": "ok",
        "single process": "ok", "wall time": "info",
    }  # fmt: skip
    evidence = {check["name"]: check["evidence"] for check in report["checks"]}
    # 8 steps of SGD over 2 epochs of 32 samples per rank, batch 8: the facts behind the verdicts.
    (model,) = evidence["replicas"]["models"]
    assert (model["params"], model["mismatch"]) == (2, None)
    (loader,) = evidence["data sharding"]["loaders"]
    assert (loader["sampler"], loader["indices_per_rank"], loader["shared_indices"]) == ("DistributedSampler", [32, 32], 0)
    assert evidence["forward through DDP"]["models"][0]["forward_grad"] == {"0": 8, "1": 8}
    assert evidence["process group"] == {"0": {"init": 1, "destroy": 1}, "1": {"init": 1, "destroy": 1}}


def test_correct_script_table(runs: dict[str, CliRun]) -> None:
    """The same result as a table: one row per check, 'all checks passed' at the end."""
    table = verify_api.format_table(runs["correct"].result)
    assert "gloo on CPU" in table.splitlines()[0]
    assert table_row(table, "rank 1").split()[2] == "ok"
    assert table_row(table, "duplicate lines").split()[2:] == ["ok", "none"]
    assert "no 'module.' prefix" in table_row(table, "checkpoint model.pt")
    assert "identical on 2 ranks" in table_row(table, "replicas")
    assert "DistributedSampler: disjoint sample indices on 2 ranks" in table_row(table, "data sharding")
    assert "as one plain process: exit 0" in table_row(table, "single process")
    assert table.rstrip().endswith("all checks passed")


@pytest.mark.parametrize("case", sorted(FAILING))
def test_each_wrong_script_fails_its_check(runs: dict[str, CliRun], case: str) -> None:
    run = runs[case]
    result = run.result
    assert result is not None
    assert all(r.exit_code == 0 for r in result.run.ranks), [r.stderr[-2000:] for r in result.run.ranks]
    assert [c.name for c in result.failures] == FAILING[case], run.stdout
    assert run.exit_code == 1
    for name in FAILING[case]:
        assert table_row(run.stdout, name).split()[len(name.split())] == "FAIL"
    assert run.stdout.rstrip().endswith(f"{len(FAILING[case])} check(s) failed")


@pytest.mark.parametrize(
    ("case", "check", "needles"),
    [
        pytest.param("diverged_replicas", "replicas", ["Linear (wrapped at diverged_replicas.py:", "weight differs between ranks 0 and 1"], id="reinit-after-wrap"),
        pytest.param("no_ddp", "replicas", ["no DistributedDataParallel model, yet backward() ran 8 time(s)"], id="no-ddp"),
        pytest.param("trained_outside_ddp", "replicas", ["optimizer SGD", "outside DDP and they differ across ranks", "Linear.weight"], id="outside-ddp"),
        pytest.param("bypass_ddp", "forward through DDP", ["Regressor", "never ran forward with gradients through DDP", "its module ran forward 8 time(s) directly"], id="custom-method"),
        pytest.param("unsharded_loader", "data sharding", ["RandomSampler is not distributed", "64 of 64 sample indices"], id="random-sampler"),
        pytest.param("unsharded_stream", "data sharding", ["IterableDataset that yields the same first batch on every rank"], id="iterable"),
        pytest.param("no_set_epoch", "data sharding", ["set_epoch() is not called"], id="set-epoch"),
        pytest.param("loader_per_epoch_no_set_epoch", "data sharding", ["built anew for each of 3 passes", "iterated at loader_per_epoch_no_set_epoch.py:14", "same order every epoch"], id="set-epoch-rebuilt"),
        pytest.param("subsets_drawn_per_rank", "data sharding", ["overlap", "indices of the base dataset, through any Subset"], id="subsets-per-rank"),
        pytest.param("writes_every_rank", "side effects", ["2 path(s) written by more than one rank", "train.log (ranks 0,1, writes_every_rank.py:", "samples.pt (ranks 0,1", "also wrote rank1.txt"], id="writes"),
        pytest.param("no_teardown", "process group", ["never destroyed on rank(s) 0,1"], id="teardown"),
    ],
)  # fmt: skip
def test_failure_names_its_evidence(runs: dict[str, CliRun], case: str, check: str, needles: list[str]) -> None:
    detail = runs[case].result.check(check).detail
    for needle in needles:
        assert needle in detail, detail


def test_data_not_from_a_dataloader_is_unchecked_not_passed(runs: dict[str, CliRun]) -> None:
    run = runs["tensor_batches"]
    check = run.result.check("data sharding")
    assert check.status == verify_api.UNCHECKED and check.ok
    # the sharded loader's epoch before the tensor stage vouches for its own 4 batches only
    assert "8 of 12 backward() call(s)" in check.detail and "identical on every rank" in check.detail
    assert run.exit_code == 0 and table_row(run.stdout, "data sharding").split()[2] == "unchecked"


def test_steps_stops_every_rank_and_judges_the_run_so_far(runs: dict[str, CliRun]) -> None:
    run = runs["endless"]
    result = run.result
    assert run.exit_code == 0 and result.ok, run.stdout
    assert [r.exit_code for r in result.run.ranks] == [0, 0]
    assert [r.facts["steps"] for r in result.run.ranks] == [5, 5]
    assert [r.facts["stopped"] for r in result.run.ranks] == [True, True]
    assert result.check("steps").detail == "stopped after optimizer step 5 on rank(s) 0,1"
    assert "after 5 optimizer step(s)" in result.check("replicas").detail
    assert "teardown not reached" in result.check("process group").detail
    # The script's `except Exception` did not see the stop; it printed epoch 0 only (4 steps an epoch).
    assert result.run.ranks[0].stdout.splitlines() == [line for line in result.run.ranks[0].stdout.splitlines() if line.startswith("epoch 0 ")]
    assert "training failed" not in result.run.ranks[0].stdout + result.run.ranks[1].stdout


def test_single_runs_the_script_as_one_plain_process(runs: dict[str, CliRun]) -> None:
    run = runs["needs_torchrun"]
    result = run.result
    assert all(r.ok for r in result.run.ranks)
    assert result.single_run is not None and result.single_run.ranks[0].exit_code == 1
    assert [c.name for c in result.failures] == ["single process"]
    assert "KeyError: 'RANK'" in result.check("single process").detail
    assert run.exit_code == 1 and "FAIL" in table_row(run.stdout, "single process")
    assert result.single_run.workdir != result.run.workdir  # a fresh folder: no files of the DDP run


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether process `pid` no longer exists, waiting up to `within` seconds: a killed rank is
    reaped by the launcher (or the fork server) a moment later on a loaded machine."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_collective_under_rank_guard_is_a_named_hang(runs: dict[str, CliRun], launcher: str) -> None:
    """Under torchrun, and under the direct launcher forked from verify's fork server (where the
    ranks carry the server's command line, not the shim's)."""
    run = runs["hang_collective_under_guard" + ("@direct" if launcher == "direct" else "")]
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
        assert _gone(pid), f"rank {rank} (pid {pid}) is still running"
    # What the ranks did cannot be judged from ranks that never finished.
    assert result.check("replicas").status == verify_api.UNCHECKED
    if launcher == "direct":
        return  # an API run: the CLI's rendering is checked once, below
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
    for check in ("replicas", "forward through DDP", "data sharding", "side effects", "process group", "single process"):
        assert f"\n    {check}  " in out.stdout, check
    for option in ("--single", "--steps K", "--format [table|json]"):
        assert option in out.stdout


def imported_modules(node: ast.AST, *, in_functions: bool) -> set[str]:
    """Top-level names of the modules `node` imports (statements, `importlib.import_module("x")`,
    `__import__("x")`); `in_functions=False` leaves out what function bodies import (at call time)."""
    names = set()
    for child in ast.iter_child_nodes(node):
        if not in_functions and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(child, ast.Import):
            names |= {alias.name.split(".")[0] for alias in child.names}
        elif isinstance(child, ast.ImportFrom) and child.level == 0:
            names.add(child.module.split(".")[0])
        elif (
            isinstance(child, ast.Call)
            and ast.unparse(child.func) in ("importlib.import_module", "import_module", "__import__")
            and child.args
            and isinstance(child.args[0], ast.Constant)
        ):
            names.add(str(child.args[0].value).split(".")[0])
        names |= imported_modules(child, in_functions=in_functions)
    return names


def test_verify_package_imports_only_the_standard_library() -> None:
    """scripts/gpu_verify.py loads ddpify/verify/ by path where only torch is installed.

    The rank shim is the one file that imports torch at its top: it runs inside the ranks, never
    in ddpify. The direct launcher may import it in a function, when it is about to fork ranks.
    """
    at_call_time = {"launch.py": {"torch"}}
    for path in VERIFY_PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        allowed = sys.stdlib_module_names | {"__future__"} | ({"torch"} if path.name == "rank_shim.py" else set())
        assert imported_modules(tree, in_functions=False) <= allowed, path
        assert imported_modules(tree, in_functions=True) <= allowed | at_call_time.get(path.name, set()), path
    assert "torch" in imported_modules(ast.parse((VERIFY_PACKAGE / "launch.py").read_text()), in_functions=True)


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


def test_direct_launcher_judges_as_torchrun_does(tmp_path: Path) -> None:
    """`--launcher direct` starts the ranks with torchrun's environment and no agent: the correct
    script passes every check, and a failing rank fails the run with its own exit status."""
    options = {"timeout": float(TIMEOUT), "launcher": "direct"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        correct = pool.submit(verify_api.verify_script, CASES / "correct.py", verify_api.VerifyOptions(**options))
        failing = pool.submit(
            verify_api.verify_script, CASES / "exit_code_and_args.py", verify_api.VerifyOptions(workdir=tmp_path, **options)
        )
        correct_result, failing_result = correct.result(), failing.result()
    assert correct_result.ok, verify_api.format_table(correct_result)
    assert [c.name for c in correct_result.checks if c.status == verify_api.FAIL] == []
    codes = {r.rank: r.exit_code for r in failing_result.run.ranks}
    assert codes[1] == 3 and codes[0] in (0, None) and not failing_result.ok
    assert failing_result.check("rank 1").status == verify_api.FAIL
    assert failing_result.run.launcher_exit == 1
    with pytest.raises(verify_api.VerifyInputError, match="unknown launcher"):
        verify_api.verify_script(CASES / "correct.py", verify_api.VerifyOptions(launcher="mpirun"))


LAUNCH = VERIFY_PACKAGE / "launch.py"
# Run by each rank under launch.py: what the rank sees, in rank<N>.json next to the program.
PROBE = """
import atexit, json, os, signal, sys, threading, time
preloaded = "torch" in sys.modules  # the launcher's import, when it forked this rank
import helper  # from the program's own folder
facts = {
    "name": __name__, "argv": sys.argv, "path0": sys.path[0], "preloaded": preloaded, "helper": helper.VALUE,
    "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "OMP_NUM_THREADS")},
    "own_session": os.getsid(0) == os.getpid(),
    "sigint_default": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "stdin_is_devnull": os.path.samestat(os.fstat(0), os.stat(os.devnull)),
}
listed = [int(fd) for fd in os.listdir("/proc/self/fd")]  # the listing's own descriptor is closed by now
facts["open_fds"] = [fd for fd in listed if fd > 2 and os.path.exists(f"/proc/self/fd/{fd}")]
facts["torch_seed"] = sys.modules["torch"].initial_seed() if preloaded else None  # each rank's own, as in a fresh import
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "rank%s.json" % os.environ["RANK"]), "w") as out:
    json.dump(facts, out)
marker = os.path.join(here, "rank%s" % os.environ["RANK"])
atexit.register(lambda: open(marker + ".atexit", "w").close())
def late():
    time.sleep(0.5)
    open(marker + ".thread", "w").close()
threading.Thread(target=late).start()  # not a daemon: the rank's exit waits for it
os.write(1, b"rank %s done\\n" % os.environ["RANK"].encode())  # one write: the ranks share stdout
sys.exit(None)
"""


def run_launcher(tmp_path: Path, program: str, args: list[str], nproc: int = 2, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """launch.py in `tmp_path` with a program written to prog/probe.py (and prog/helper.py)."""
    folder = tmp_path / "prog"
    folder.mkdir(exist_ok=True)
    (folder / "probe.py").write_text(program)
    (folder / "helper.py").write_text("VALUE = 42\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RANK", "WORLD_SIZE")}
    return subprocess.run(
        [sys.executable, *flags, str(LAUNCH), str(nproc), "prog/probe.py", *args],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def run_launcher_from_server(tmp_path: Path, program: str, args: list[str]) -> subprocess.CompletedProcess:
    """run_launcher's launch, forked by verify's fork server (its output in one log, as verify keeps it)."""
    folder = tmp_path / "prog"
    folder.mkdir()
    (folder / "probe.py").write_text(program)
    (folder / "helper.py").write_text("VALUE = 42\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RANK", "WORLD_SIZE")}
    assert forkserver.usable(sys.executable)
    log = tmp_path / "launcher.log"
    run = forkserver.start([str(LAUNCH), "2", "prog/probe.py", *args], tmp_path, env, log)
    code = run.wait(timeout=120)
    return subprocess.CompletedProcess(run.pid, code, log.read_text(), log.read_text())


@pytest.mark.parametrize(
    ("start", "preloaded"),
    [
        pytest.param((), True, id="forked"),
        pytest.param(("-S",), False, id="popen-without-torch-in-launcher"),
        pytest.param("server", True, id="launcher-forked-by-verify-fork-server"),
    ],
)
def test_direct_launcher_runs_each_rank_as_python_would(tmp_path: Path, start: tuple[str, ...] | str, preloaded: bool) -> None:
    """Forked from the launcher's torch import, or a fresh interpreter when the launcher has no torch
    (-S), or with the launcher itself forked by verify's fork server: each rank sees what
    `python prog/probe.py a "b c"` under torchrun would see."""
    if start == "server":
        proc = run_launcher_from_server(tmp_path, PROBE, ["a", "b c"])
    else:
        proc = run_launcher(tmp_path, PROBE, ["a", "b c"], flags=start)
    assert proc.returncode == 0, proc.stderr
    # what a fresh interpreter started from here gets (SIGINT is ignored when pytest runs in the background)
    fresh = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    sigint_default = fresh.stdout.strip() == "True"
    assert sorted(proc.stdout.splitlines()) == ["rank 0 done", "rank 1 done"]
    seeds = [json.loads((tmp_path / "prog" / f"rank{rank}.json").read_text()).pop("torch_seed") for rank in (0, 1)]
    assert seeds == [None, None] if not preloaded else seeds[0] != seeds[1]  # forked ranks drew one seed each
    for rank in (0, 1):
        facts = json.loads((tmp_path / "prog" / f"rank{rank}.json").read_text())
        facts.pop("torch_seed")
        assert facts == {
            "name": "__main__", "argv": ["prog/probe.py", "a", "b c"], "path0": str((tmp_path / "prog").resolve()),
            "preloaded": preloaded, "helper": 42,
            "env": {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"},
            "own_session": True, "sigint_default": sigint_default, "stdin_is_devnull": True, "open_fds": [],
        }  # fmt: skip
        assert (tmp_path / "prog" / f"rank{rank}.atexit").exists()
        assert (tmp_path / "prog" / f"rank{rank}.thread").exists()


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        pytest.param("raise ValueError('boom')", "ValueError: boom", id="exception"),
        pytest.param("sys.exit('bad config')", "bad config", id="exit-message"),
        pytest.param("os.kill(os.getpid(), signal.SIGKILL)", "", id="signal"),
    ],
)
def test_direct_launcher_kills_the_other_ranks_when_one_fails(tmp_path: Path, failure: str, message: str) -> None:
    """Rank 0 and a child of its own wait; rank 1 fails: the launcher kills rank 0's process group
    and exits 1 at once, with rank 1's error on stderr."""
    program = f"""
import os, signal, subprocess, sys, time
pids = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank0.pids")
if os.environ["RANK"] == "0":
    sleeper = subprocess.Popen(["sleep", "60"])
    with open(pids + ".tmp", "w") as out:
        out.write(f"{{os.getpid()}} {{sleeper.pid}}")
    os.replace(pids + ".tmp", pids)
    time.sleep(60)
while not os.path.exists(pids):
    time.sleep(0.05)
{failure}
"""
    start = time.monotonic()
    proc = run_launcher(tmp_path, program, [])
    assert proc.returncode == 1
    assert time.monotonic() - start < 45
    assert message in proc.stderr
    rank0, sleeper = map(int, (tmp_path / "prog" / "rank0.pids").read_text().split())
    deadline = time.monotonic() + 10  # the sleeper, orphaned by the kill, is reaped by init
    while process_alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(rank0) and not process_alive(sleeper)


def test_direct_launcher_dataloader_workers_in_forked_ranks(tmp_path: Path) -> None:
    """A DataLoader with two worker processes inside each forked rank, under the shim: it trains,
    passes every check, and the shim records each rank's batches through the workers."""
    script = tmp_path / "workers.py"
    script.write_text(
        """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.arange(64.0).reshape(16, 4), torch.ones(16, 1))
loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data), num_workers=2)
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
for epoch in range(2):
    loader.sampler.set_epoch(epoch)
    for inputs, targets in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
dist.destroy_process_group()
"""
    )
    result = verify_api.verify_script(script, verify_api.VerifyOptions(timeout=float(TIMEOUT), launcher="direct"))
    assert result.ok, verify_api.format_table(result)
    for rank in result.run.ranks:
        (loader,) = rank.facts["loaders"]
        assert (loader["batches"], loader["passes"], loader["distributed"]) == (8, 2, True)


def test_a_whole_model_saved_through_a_file_object_is_judged_from_the_save(tmp_path: Path) -> None:
    """`with open("net.pt", "wb") as f: torch.save(net, f)` of a class defined in the script: the
    shim records the save through the file object's name, so the checkpoint row reports its keys
    instead of failing to unpickle `__main__.Net` in verify's own loader (helper corpus M)."""
    script = tmp_path / "whole.py"
    script.write_text(
        """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x)


dist.init_process_group("gloo")
model = DDP(Net())
if dist.get_rank() == 0:
    with open("net.pt", "wb") as f:
        torch.save(model.module, f)
dist.destroy_process_group()
"""
    )
    result = verify_api.verify_script(script, verify_api.VerifyOptions(timeout=float(TIMEOUT), launcher="direct"))
    row = result.check("checkpoint net.pt")
    assert row.status == verify_api.OK and "no 'module.' prefix" in row.detail, verify_api.format_table(result)


def test_a_checkpoint_saved_outside_the_run_folder_and_removed_is_still_judged(tmp_path: Path) -> None:
    """A save into a folder of the process's own (`tempfile.mkdtemp()`), read back and removed
    before the run ends: verify said "checkpoints: none written" (helper corpora CH and CR), so a
    wrapper's `module.` keys there went unseen. Rank 0's saves are judged from the shim's record."""
    script = tmp_path / "scratch.py"
    script.write_text(
        """
import os
import shutil
import tempfile
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(nn.Linear(2, 1))
work = tempfile.mkdtemp()
torch.save(model.state_dict(), os.path.join(work, "wrapped.pt"))
torch.save(model.module.state_dict(), os.path.join(work, "plain.pt"))
model.module.load_state_dict(torch.load(os.path.join(work, "plain.pt")))
shutil.rmtree(work)
dist.destroy_process_group()
"""
    )
    result = verify_api.verify_script(script, verify_api.VerifyOptions(timeout=float(TIMEOUT), launcher="direct"))
    rows = {c.name.rsplit("/", 1)[-1]: c for c in result.checks if c.name.startswith("checkpoint ")}
    assert set(rows) == {"plain.pt", "wrapped.pt"}, verify_api.format_table(result)
    assert rows["plain.pt"].status == verify_api.OK and rows["wrapped.pt"].status == verify_api.FAIL, verify_api.format_table(result)


def test_module_keys_of_a_models_own_attribute_are_not_the_wrappers(tmp_path: Path) -> None:
    """An AveragedModel (or a timm ModelEmaV2) keeps its copy in `self.module`: its state dict has
    `module.` keys that no DDP wrapper made. The shim marks what DistributedDataParallel's
    state_dict() returns, so that row passes, and a wrapper's state dict still fails, even in the
    one-process run of a converted script (helper corpora N, O and P)."""
    script = tmp_path / "swa.py"
    body = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.swa_utils import AveragedModel

if "RANK" in os.environ:
    dist.init_process_group("gloo")
else:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
model = DDP(nn.Linear(2, 1))
swa = AveragedModel(model.module)
if dist.get_rank() == 0:
    torch.save(swa.state_dict(), "swa.pt")
    torch.save(SAVED.state_dict(), "wrapper.pt")
dist.destroy_process_group()
"""
    script.write_text(body.replace("SAVED", "model"))
    result = verify_api.verify_script(script, verify_api.VerifyOptions(timeout=float(TIMEOUT), launcher="direct", single=True))
    assert result.check("checkpoint swa.pt").status == verify_api.OK, verify_api.format_table(result)
    assert "the model's own (an attribute named module" in result.check("checkpoint swa.pt").detail
    assert result.check("checkpoint wrapper.pt").status == verify_api.FAIL, verify_api.format_table(result)
