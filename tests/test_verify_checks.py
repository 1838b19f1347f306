"""ddpify.verify.checks on recorded facts: the judgements behind each verify check, without a run.

The facts are what the rank shim writes (`Facts.to_json`); each case builds the few fields a
check reads, so the edges (padding, sampling with replacement, tolerance, a stop at --steps)
are pinned down without starting torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify.verify import checks
from ddpify.verify.checks import FAIL, INFO, OK, UNCHECKED


def param(name: str, total: float, shape=(2,), sample=(0.5, 0.25)) -> dict:
    return {"name": name, "shape": list(shape), "sum": total, "sumsq": total * total, "sample": list(sample)}


def rank_facts(**fields) -> dict:
    base = {
        "backward": 4, "backward_without_loader": 0, "steps": 4, "stopped": False, "pg_init": 1, "pg_destroy": 1,
        "backend": "gloo", "ddp": [], "optimizers": [], "loaders": [], "writes": [],
    }  # fmt: skip
    return {**base, **fields}


def ddp_model(*params: dict, forward_grad: int = 4, direct: int = 0, bypassed: int = 0) -> dict:
    return {
        "site": "train.py:10", "module": "Net", "forward": forward_grad, "forward_grad": forward_grad,
        "direct_forward_grad": direct, "bypassed_backward": bypassed, "first_unfed_input": None, "params": list(params),
    }  # fmt: skip


def loader(indices: list[int], **fields) -> dict:
    base = {
        "index": 0, "site": "train.py:20", "dataset": "TensorDataset", "iterable": False,
        "sampler": "DistributedSampler", "batch_sampler": "BatchSampler", "distributed": True, "shuffle": True,
        "replacement": None, "sampler_len": len(indices), "dataset_len": 64, "passes": 1, "batches": 4,
        "backward": 4, "indices": indices, "indices_seen": len(indices), "pass_heads": [indices[:8]], "first_batch": None,
    }  # fmt: skip
    return {**base, **fields}


# -- replicas ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(param("w", 1.0), id="identical"),
        pytest.param(param("w", 1.0 + 1e-9), id="within-tolerance"),
        pytest.param({**param("w", 1.0), "sum": "nan", "sumsq": "nan"}, id="nan-on-both"),
    ],
)
def test_replicas_noop(other: dict) -> None:
    mine = param("w", 1.0) if other["sum"] != "nan" else other
    facts = {0: rank_facts(ddp=[ddp_model(mine)]), 1: rank_facts(ddp=[ddp_model(other)])}
    check = checks.replicas(facts, finished=True)
    assert check.status == OK, check.detail
    assert "identical on 2 ranks after 4 optimizer step(s)" in check.detail


def test_replicas_diverge_by_more_than_the_tolerance() -> None:
    facts = {0: rank_facts(ddp=[ddp_model(param("fc.weight", 1.0))]), 1: rank_facts(ddp=[ddp_model(param("fc.weight", 1.001))])}
    check = checks.replicas(facts, finished=True)
    assert check.status == FAIL
    assert check.detail == "replicas diverged: Net (wrapped at train.py:10): fc.weight differs between ranks 0 and 1 (sum 1 vs 1.001)"


def test_replicas_shape_or_count_mismatch_fails() -> None:
    facts = {0: rank_facts(ddp=[ddp_model(param("w", 1.0))]), 1: rank_facts(ddp=[ddp_model(param("w", 1.0, shape=(3,)))])}
    assert checks.replicas(facts, finished=True).status == FAIL
    facts = {0: rank_facts(ddp=[ddp_model(param("w", 1.0))]), 1: rank_facts(ddp=[])}
    check = checks.replicas(facts, finished=True)
    assert check.status == FAIL and "different numbers of models" in check.detail


def test_parameters_outside_ddp_are_compared_too() -> None:
    def optimizer(total: float) -> dict:
        return {"type": "Adam", "site": "train.py:30", "steps": 4, "num_params": 1, "outside_ddp": [param("Head.bias", total)]}

    same = {r: rank_facts(ddp=[ddp_model(param("w", 1.0))], optimizers=[optimizer(2.0)]) for r in (0, 1)}
    check = checks.replicas(same, finished=True)
    assert check.status == OK and "1 parameter tensor(s) trained outside DDP are identical too" in check.detail
    differ = {0: same[0], 1: rank_facts(ddp=[ddp_model(param("w", 1.0))], optimizers=[optimizer(2.5)])}
    check = checks.replicas(differ, finished=True)
    assert check.status == FAIL and "optimizer Adam (first step at train.py:30)" in check.detail and "Head.bias" in check.detail


def test_no_ddp_model_fails_only_when_something_was_trained() -> None:
    trained = {r: rank_facts() for r in (0, 1)}
    check = checks.replicas(trained, finished=True)
    assert check.status == FAIL and check.detail.startswith("no DistributedDataParallel model, yet backward() ran 4 time(s)")
    idle = {r: rank_facts(backward=0) for r in (0, 1)}
    assert checks.replicas(idle, finished=True).status == UNCHECKED


def test_unfinished_runs_are_not_judged() -> None:
    facts = {0: rank_facts(ddp=[ddp_model(param("w", 1.0))])}
    for judge in (checks.replicas, checks.forward_through_ddp, checks.data_sharding):
        check = judge(facts, finished=False)
        assert (check.status, check.detail) == (UNCHECKED, "not every rank finished")


# -- forward through DDP -----------------------------------------------------------------------


def test_forward_through_ddp_passes_with_eval_forwards_of_the_module() -> None:
    # Forwards of model.module with gradients, but each backward also followed a DDP forward.
    facts = {r: rank_facts(ddp=[ddp_model(param("w", 1.0), direct=4, bypassed=0)]) for r in (0, 1)}
    check = checks.forward_through_ddp(facts, finished=True)
    assert check.status == OK and check.detail == "Net (wrapped at train.py:10): 4 forward(s) with gradients through DDP"


def test_backward_after_module_forwards_only_is_a_bypass() -> None:
    facts = {r: rank_facts(ddp=[ddp_model(param("w", 1.0), direct=8, bypassed=4)]) for r in (0, 1)}
    check = checks.forward_through_ddp(facts, finished=True)
    assert check.status == FAIL
    assert "4 backward() call(s) on every rank followed forwards of Net (wrapped at train.py:10)'s module" in check.detail


def test_a_wrapper_superseded_before_it_ran_is_no_bypass() -> None:
    """`model = DDP(model.module)` again after a new layer (or an unfreeze) before training: the
    first wrapper never runs, the second does. Only a wrapper nobody replaced must have run."""
    first = {**ddp_model(param("w", 1.0), forward_grad=0), "superseded": True}
    facts = {r: rank_facts(ddp=[first, ddp_model(param("w", 1.0))]) for r in (0, 1)}
    check = checks.forward_through_ddp(facts, finished=True)
    assert check.status == OK and "wrapped again before it ran" in check.detail
    facts = {r: rank_facts(ddp=[{**first, "superseded": False}, ddp_model(param("w", 1.0))]) for r in (0, 1)}
    assert checks.forward_through_ddp(facts, finished=True).status == FAIL


def test_forward_through_ddp_without_backward_is_info() -> None:
    facts = {r: rank_facts(backward=0, ddp=[ddp_model(param("w", 1.0), forward_grad=0)]) for r in (0, 1)}
    assert checks.forward_through_ddp(facts, finished=True).status == INFO


# -- data sharding -----------------------------------------------------------------------------


def sharded(first: list[int], second: list[int], **fields) -> dict:
    return {0: rank_facts(loaders=[loader(first, **fields)]), 1: rank_facts(loaders=[loader(second, **fields)])}


@pytest.mark.parametrize(
    "facts",
    [
        pytest.param(sharded(list(range(0, 64, 2)), list(range(1, 64, 2))), id="disjoint"),
        # 63 samples on 2 ranks: DistributedSampler pads with one repeated index.
        pytest.param(sharded(list(range(0, 63, 2)), [*range(1, 63, 2), 0], dataset_len=63), id="padding"),
        # --steps stopped after 2 batches: a partial pass, still disjoint.
        pytest.param(sharded([0, 2, 4, 6], [1, 3, 5, 7]), id="partial-pass"),
        pytest.param(
            sharded([5, 5, 9, 1], [7, 2, 2, 8], distributed=False, sampler="WeightedRandomSampler", replacement=True, sampler_len=1000),
            id="replacement-draws-differ",
        ),
        pytest.param(  # `RandomSampler(ds, num_samples=16)` on each rank: a draw of some, its own per rank (helper corpus AP, repro 01)
            sharded([3, 7, 9, 1], [7, 2, 5, 8], distributed=False, sampler="RandomSampler", sampler_len=16), id="a-draw-of-some-differs",
        ),
        pytest.param(
            {rank: rank_facts(loaders=[loader([], iterable=True, first_batch=[{"sum": float(rank)}])]) for rank in (0, 1)},
            id="iterable-batches-differ",
        ),
    ],
)  # fmt: skip
def test_data_sharding_noop(facts: dict) -> None:
    check = checks.data_sharding(facts, finished=True)
    assert check.status == OK, check.detail


@pytest.mark.parametrize(
    ("facts", "needle"),
    [
        pytest.param(sharded(list(range(32)), list(range(16, 48))), "DistributedSamplers overlap: 16 of 48", id="sampler-seeds-differ"),
        pytest.param(
            sharded(list(range(8)), list(range(8, 16)), distributed=False, sampler="RandomSampler", sampler_len=64),
            "every rank's epoch covers all 64 samples", id="random-sampler-partial-pass",
        ),
        pytest.param(
            sharded([5, 5, 9, 1], [5, 5, 9, 1], distributed=False, sampler="RandomSampler", replacement=True, sampler_len=1000),
            "draws the same samples on every rank", id="replacement-same-seed",
        ),
        pytest.param(
            sharded([3, 7, 9, 1], [3, 7, 9, 1], distributed=False, sampler="RandomSampler", sampler_len=16),
            "draws the same samples on every rank", id="a-draw-of-some-the-same",
        ),
        pytest.param(
            sharded([0, 2], [1, 3], passes=2, pass_heads=[[0, 2], [0, 2]]), "set_epoch() is not called", id="no-set-epoch",
        ),
        pytest.param(sharded([], [], iterable=True, first_batch=[{"sum": 1.0}]), "same first batch on every rank", id="iterable"),
    ],
)  # fmt: skip
def test_data_sharding_fixes(facts: dict, needle: str) -> None:
    check = checks.data_sharding(facts, finished=True)
    assert check.status == FAIL and needle in check.detail, check.detail


def test_one_rank_has_no_data_to_split() -> None:
    # GPU report: `nccl×1` failed the endless RandomSampler(replacement=True) fixture as 'the same
    # samples on every rank' with only rank 0 there to compare.
    facts = {0: rank_facts(loaders=[loader([5, 5, 9, 1], distributed=False, sampler="RandomSampler", replacement=True, sampler_len=1000)])}
    check = checks.data_sharding(facts, finished=True)
    assert check.status == INFO and check.detail.startswith("one rank: there is no other rank"), check.detail


def test_data_without_a_loader_is_unchecked() -> None:
    facts = {r: rank_facts(backward_without_loader=4) for r in (0, 1)}
    check = checks.data_sharding(facts, finished=True)
    assert check.status == UNCHECKED and check.ok
    assert check.detail == (
        "4 of 4 backward() call(s) on rank 0 came before any DataLoader batch or after a DataLoader's pass had ended "
        "(batches the script makes itself): that data is unchecked"
    )


def test_evaluation_loaders_are_not_judged() -> None:
    # A loader iterated with no backward() after its batches is an evaluation loader: whole on every rank.
    facts = {r: rank_facts(loaders=[loader(list(range(64)), distributed=False, sampler="SequentialSampler", backward=0)]) for r in (0, 1)}
    facts[0]["backward_without_loader"] = facts[1]["backward_without_loader"] = 4
    assert checks.data_sharding(facts, finished=True).status == UNCHECKED


# -- side effects and the process group -----------------------------------------------------------


def write(path: str, how: str = "open") -> dict:
    return {"path": path, "how": how, "site": "train.py:40", "count": 1}


def test_side_effects() -> None:
    work = Path("/scratch/work")
    facts = {
        0: rank_facts(writes=[write("/scratch/work/log.txt"), write("/home/u/.cache/fonts.json")]),
        1: rank_facts(writes=[write("/home/u/.cache/fonts.json"), write("/scratch/work/rank1.txt")]),
    }
    check = checks.side_effects(facts, [work], work, [])
    # A cache outside the scratch and script folders is not the script's side effect.
    assert check.status == OK and check.detail == "no path written by two ranks; ranks other than 0 wrote 1: rank1.txt (rank 1)"
    facts[1]["writes"].append(write("/scratch/work/log.txt", "torch.save"))
    check = checks.side_effects(facts, [work], work, [])
    assert check.status == FAIL and check.detail.startswith("1 path(s) written by more than one rank: log.txt (ranks 0,1, train.py:40)")
    assert check.evidence["shared"] == [{"path": "log.txt", "ranks": [0, 1], "how": ["open", "torch.save"]}]


def test_side_effects_in_the_machines_temp_folder() -> None:
    """Helper corpora CC, CH, CI, CL: both ranks saving one `/tmp/.../best.pt` passed as "no file
    written": only the scratch and script folders were judged. The temp folder the ranks of a node
    share is judged too, for what the script writes there itself: not a library's `mkstemp` scratch
    file (`os.open`), nor torch.compile's caches, nor each process's own `mkdtemp()` folder."""
    work, tmp = Path("/scratch/work"), Path("/tmp")
    facts = {
        rank: rank_facts(writes=[
            write("/tmp/run/best.pt", "torch.save"), write(f"/tmp/tmp{rank}abc/own.pt", "torch.save"),
            write(f"/tmp/x{rank}q", "os.open"), write("/tmp/torchinductor_root/k.py"),
        ])
        for rank in (0, 1)
    }  # fmt: skip
    check = checks.side_effects(facts, [work], work, [], [tmp])
    assert check.status == FAIL and check.detail.startswith("1 path(s) written by more than one rank: /tmp/run/best.pt (ranks 0,1, train.py:40)")
    assert checks.side_effects(facts, [work], work, []).status == OK  # without the temp folder: the blind spot


@pytest.mark.parametrize(
    ("counts", "exit_codes", "status", "needle"),
    [
        pytest.param([(1, 1), (1, 1)], [0, 0], OK, "initialized once and destroyed once on every rank (gloo)", id="once"),
        pytest.param([(2, 2), (2, 2)], [0, 0], FAIL, "initialized twice on rank(s) 0,1", id="twice"),
        pytest.param([(1, 0), (1, 1)], [0, 0], FAIL, "never destroyed on rank(s) 0", id="no-teardown"),
        pytest.param([(1, 0), (1, 0)], [1, 0], FAIL, "never destroyed on rank(s) 1", id="crashed-rank-not-judged"),
        pytest.param([(0, 0), (0, 0)], [0, 0], FAIL, "never initialized on rank(s) 0,1", id="never"),
    ],
)  # fmt: skip
def test_process_group(counts, exit_codes, status, needle) -> None:
    facts = {rank: rank_facts(pg_init=i, pg_destroy=d) for rank, (i, d) in enumerate(counts)}
    check = checks.process_group(facts, dict(enumerate(exit_codes)))
    assert check.status == status and needle in check.detail, check.detail


def test_process_group_teardown_is_not_required_after_a_stop() -> None:
    facts = {rank: rank_facts(pg_destroy=0, stopped=True) for rank in (0, 1)}
    check = checks.process_group(facts, {0: 0, 1: 0})
    assert check.status == OK and "teardown not reached: stopped at --steps" in check.detail


def test_checkpoint_files_are_known_by_the_end_of_their_names() -> None:
    """The ImageNet example's `checkpoint.pth.tar` was never loaded: only the last suffix counted."""
    from ddpify.verify import checkpoint_files

    paths = [Path(n) for n in ("a.pt", "b.PTH", "checkpoint.pth.tar", "model_best.pth.tar", "data.tar", "log.txt", "w.ckpt")]
    assert [p.name for p in checkpoint_files(paths)] == ["a.pt", "b.PTH", "checkpoint.pth.tar", "model_best.pth.tar", "w.ckpt"]


def test_a_file_torch_save_wrote_is_a_checkpoint_whatever_its_name() -> None:
    """The tutorials' general checkpoint, `torch.save({...}, "model.tar")`: verify loaded nothing
    ("none written") and never saw `module.` keys in it (helper corpus AE, repro 05)."""
    from ddpify.verify import checkpoint_files

    paths = [Path("/w/model.tar"), Path("/w/history.json"), Path("/w/last.pt")]
    assert [p.name for p in checkpoint_files(paths)] == ["last.pt"]
    assert [p.name for p in checkpoint_files(paths, saved={"/w/model.tar"})] == ["model.tar", "last.pt"]


@pytest.mark.parametrize(
    ("source", "fixed"),
    [
        ('OUT = "/tmp/ft_run"\n', True),  # helper corpus BR, repro 05: made, then removed at the end
        ("root = os.path.join(tempfile.gettempdir(), 'cache')\n", True),
        ("path = '~/runs/best.pt'\n", True),
        ('OUT = "runs/exp"\n', False),  # inside the working directory: each run has its own scratch
    ],
)
def test_a_script_naming_a_fixed_place_runs_single_after_the_ranks(tmp_path, source: str, fixed: bool) -> None:
    """The plain run of --single and the ranks ran at once on the CPU: a script writing a fixed
    folder outside its working directory, then removing it, had one run delete the other's
    files ("Parent directory /tmp/ft_run does not exist"), a false FAIL."""
    from ddpify.verify import _names_fixed_places

    script = tmp_path / "train.py"
    script.write_text(source)
    assert _names_fixed_places(script) is fixed
