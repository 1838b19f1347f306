"""Converted fixtures are run, not just compared: 2 gloo ranks under torchrun, and plain python."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.cases import Case, load_cases
from tests.runner import run_script

CASES = [c for c in load_cases() if not c.expect_unchanged]


def _plain_model(case: Case) -> torch.nn.Module:
    namespace: dict = {}
    exec(compile(case.definitions(), str(case.source), "exec"), namespace)
    return eval(case.config["model"], namespace)


def _check_checkpoints(case: Case, folder) -> None:
    for name in case.config["checkpoints"]:
        path = folder / name
        assert path.exists(), f"{name} was not written"
        saved = torch.load(path, map_location="cpu", weights_only=False)
        state = saved[case.config["state_dict_key"]] if case.config["state_dict_key"] else saved
        prefixed = [k for k in state if k.startswith("module.")]
        assert not prefixed, f"{name} has DDP-prefixed keys: {prefixed[:3]}"
        _plain_model(case).load_state_dict(state)  # strict: every key matches the plain model


def _check_training(case: Case, stdout: str) -> None:
    lines = case.epoch_lines(stdout)
    assert len(lines) == case.config["epochs"], f"expected {case.config['epochs']} epoch lines, got:\n" + "\n".join(lines)
    assert len(set(lines)) == len(lines), "an epoch line was printed by more than one rank"
    losses = case.losses(stdout)
    assert len(losses) == len(lines) and losses[-1] < losses[0], f"loss did not go down: {losses}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_two_ranks(case: Case, tmp_path) -> None:
    script = shutil.copy(case.converted, tmp_path / "train_ddp.py")
    run = run_script(script, case.config.get("run_args", []), tmp_path, nproc=2)
    assert run.returncode == 0, run.explain()
    _check_training(case, run.stdout)
    _check_checkpoints(case, tmp_path)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_plain_python(case: Case, tmp_path) -> None:
    script = shutil.copy(case.converted, tmp_path / "train_ddp.py")
    run = run_script(script, case.config.get("run_args", []), tmp_path)
    assert run.returncode == 0, run.explain()
    _check_training(case, run.stdout)
    _check_checkpoints(case, tmp_path)


def test_two_ranks_match_one_process(tmp_path) -> None:
    """--keep-global-batch: 2 ranks end with the parameters the original single process ends with."""
    (case,) = [c for c in CASES if c.config.get("equivalence")]
    assert "--keep-global-batch" in case.convert_args
    single, double = tmp_path / "single", tmp_path / "double"
    single.mkdir(), double.mkdir()
    original = run_script(shutil.copy(case.source, single / "train.py"), [], single)
    assert original.returncode == 0, original.explain()
    converted = run_script(shutil.copy(case.converted, double / "train_ddp.py"), [], double, nproc=2)
    assert converted.returncode == 0, converted.explain()
    one = torch.load(single / case.config["params_file"], map_location="cpu")
    two = torch.load(double / case.config["params_file"], map_location="cpu")
    assert one.keys() == two.keys()
    for key in one:
        assert torch.allclose(one[key], two[key], atol=1e-5, rtol=0), f"{key}: max diff {(one[key] - two[key]).abs().max():.2e}"
