"""Converted fixtures are run, not just compared: `ddpify verify --single` on 2 gloo ranks.

Every golden `train_ddp.py` must pass every verify check (replicas, forward through DDP, data
sharding, side effects, process group, duplicate lines, checkpoints, the plain one-process run),
and on top of that train as its case.toml says: the epoch lines, a falling loss, checkpoints that
load strictly into the plain model, in both the 2-rank and the plain run.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import sys
from pathlib import Path

import pytest
import torch

from ddpify import verify
from ddpify.verify import RunResult
from tests.cases import Case, load_cases

CASES = [c for c in load_cases() if not c.expect_unchanged]
# Seconds without progress before verify calls a run hung; generous for a loaded 2-core machine.
TIMEOUT = 240.0


def _plain_model(case: Case) -> torch.nn.Module:
    namespace: dict = {}
    before = set(sys.modules)
    sys.path.insert(0, str(case.folder))  # `from utils import ...`: the case's own modules
    try:
        exec(compile(case.definitions(), str(case.source), "exec"), namespace)
    finally:
        sys.path.remove(str(case.folder))
        for name in set(sys.modules) - before:  # another case's `utils` is another module
            if (getattr(sys.modules[name], "__file__", None) or "").startswith(str(case.folder)):
                del sys.modules[name]
    return eval(case.config["model"], namespace)


def _check_checkpoints(case: Case, folder: Path) -> None:
    for name in case.config["checkpoints"]:
        path = folder / name
        assert path.exists(), f"{name} was not written"
        saved = torch.load(path, map_location="cpu", weights_only=False)
        state = saved[case.config["state_dict_key"]] if case.config["state_dict_key"] else saved
        _plain_model(case).load_state_dict(state)  # strict: every key matches the plain model


def _check_training(case: Case, run: RunResult) -> None:
    stdout = "".join(rank.stdout for rank in run.ranks)
    lines = case.epoch_lines(stdout)
    assert len(lines) == case.config["epochs"], f"expected {case.config['epochs']} epoch lines, got:\n" + "\n".join(lines)
    losses = case.losses(stdout)
    assert len(losses) == len(lines) and losses[-1] < losses[0], f"loss did not go down: {losses}"


def _explain(result: verify.VerifyResult) -> str:
    logs = "".join(
        f"\n--- {label} rank {r.rank} stderr\n{r.stderr[-2500:]}"
        for label, run in (("ddp", result.run), ("single", result.single_run))
        if run is not None
        for r in run.ranks
        if not r.ok
    )
    return verify.format_table(result) + logs


def _stage(case: Case, folder: Path) -> Path:
    """The golden train_ddp.py in a fresh folder, with the case's other modules; a library's
    driver runs it as train.py."""
    folder.mkdir()
    for module in case.folder.glob("*.py"):  # the script's own modules beside it (utils.py)
        if module.name not in ("train.py", "train_ddp.py"):
            shutil.copy(module, folder / module.name)
    script = shutil.copy(case.converted, folder / "train_ddp.py")
    if case.config.get("entry"):  # a library: its driver runs, with the converted file in its place
        shutil.copy(case.converted, folder / "train.py")
        script = shutil.copy(case.folder / case.config["entry"], folder / case.config["entry"])
    return Path(script)


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory):
    """verify's runs of every case's golden train_ddp.py (with --single), two cases at a time (a
    run leaves a core idle while ranks wait on each other), and of the equivalence case's original
    as one plain process. The ranks are started by verify's direct launcher (torchrun's
    environment, without torchrun's own torch import: test_verify covers torchrun itself), which
    verify's fork server forks, as it forks the plain runs: one torch import for all of them. The
    scratch folders are removed afterwards."""
    root = tmp_path_factory.mktemp("convert_run")
    jobs = {}
    for case in CASES:
        options = verify.VerifyOptions(
            timeout=TIMEOUT, script_args=tuple(case.config.get("run_args", [])), keep=True, single=True, launcher="direct"
        )
        jobs[case.name] = (_stage(case, root / case.name), options)
    (equivalence,) = [c for c in CASES if c.config.get("equivalence")]
    original = shutil.copy(equivalence.source, root / "train.py")
    jobs["original"] = (Path(original), verify.VerifyOptions(timeout=TIMEOUT, torchrun=False, workdir=root / "original"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(verify.verify_script, script, options) for name, (script, options) in jobs.items()}
        results = {name: future.result() for name, future in futures.items()}
    yield results
    for name in jobs:
        if name != "original":
            shutil.rmtree(results[name].run.state_dir.parent.parent, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_converted_fixture_passes_verify(case: Case, verified) -> None:
    result = verified[case.name]
    assert result.ok, _explain(result)
    assert result.check("single process").status == verify.OK  # it ran, and exited 0
    for run in (result.run, result.single_run):
        _check_training(case, run)
        _check_checkpoints(case, run.workdir)


def test_two_ranks_match_one_process(verified) -> None:
    """--keep-global-batch: 2 ranks end with the parameters the original single process ends with."""
    (case,) = [c for c in CASES if c.config.get("equivalence")]
    assert "--keep-global-batch" in case.convert_args
    original, converted = verified["original"], verified[case.name]
    assert original.run.ok, verify.format_table(original)
    assert converted.ok, _explain(converted)
    one = torch.load(original.run.workdir / case.config["params_file"], map_location="cpu")
    two = torch.load(converted.run.workdir / case.config["params_file"], map_location="cpu")
    assert one.keys() == two.keys()
    for key in one:
        assert torch.allclose(one[key], two[key], atol=1e-5, rtol=0), f"{key}: max diff {(one[key] - two[key]).abs().max():.2e}"
