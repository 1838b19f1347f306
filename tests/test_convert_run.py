"""Converted fixtures are run, not just compared: `ddpify verify --single` on 2 gloo ranks.

Every golden `train_ddp.py` must pass every verify check (replicas, forward through DDP, data
sharding, side effects, process group, duplicate lines, checkpoints, the plain one-process run),
and on top of that train as its case.toml says: the epoch lines, a falling loss, checkpoints that
load strictly into the plain model, in both the 2-rank and the plain run.
"""

from __future__ import annotations

import shutil
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
    exec(compile(case.definitions(), str(case.source), "exec"), namespace)
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


@pytest.fixture
def verified(request: pytest.FixtureRequest, tmp_path: Path):
    """verify's runs of a case's golden train_ddp.py; the scratch folders are removed afterwards."""
    results = []

    def run(case: Case, **options) -> verify.VerifyResult:
        script = shutil.copy(case.converted, tmp_path / "train_ddp.py")
        if case.config.get("entry"):  # a library: its driver runs, with the converted file in its place
            shutil.copy(case.converted, tmp_path / "train.py")
            script = shutil.copy(case.folder / case.config["entry"], tmp_path / case.config["entry"])
        options = verify.VerifyOptions(
            timeout=TIMEOUT, script_args=tuple(case.config.get("run_args", [])), keep=True, **options
        )
        results.append(verify.verify_script(script, options))
        return results[-1]

    yield run
    for result in results:
        shutil.rmtree(result.run.state_dir.parent.parent, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_converted_fixture_passes_verify(case: Case, verified) -> None:
    result = verified(case, single=True)
    assert result.ok, _explain(result)
    assert result.check("single process").status == verify.OK  # it ran, and exited 0
    for run in (result.run, result.single_run):
        _check_training(case, run)
        _check_checkpoints(case, run.workdir)


def test_two_ranks_match_one_process(tmp_path: Path, verified) -> None:
    """--keep-global-batch: 2 ranks end with the parameters the original single process ends with."""
    (case,) = [c for c in CASES if c.config.get("equivalence")]
    assert "--keep-global-batch" in case.convert_args
    original = verify.verify_script(
        shutil.copy(case.source, tmp_path / "train.py"),
        verify.VerifyOptions(timeout=TIMEOUT, torchrun=False, workdir=tmp_path / "original"),
    )
    assert original.run.ok, verify.format_table(original)
    converted = verified(case)
    assert converted.ok, _explain(converted)
    one = torch.load(tmp_path / "original" / case.config["params_file"], map_location="cpu")
    two = torch.load(converted.run.workdir / case.config["params_file"], map_location="cpu")
    assert one.keys() == two.keys()
    for key in one:
        assert torch.allclose(one[key], two[key], atol=1e-5, rtol=0), f"{key}: max diff {(one[key] - two[key]).abs().max():.2e}"
