"""Golden files for `ddpify convert`: every fixture's converted script, launcher and report.

`pytest --update-golden` rewrites them from the current code; read the diff it makes.
Every case is also checked for compiling and for idempotence.
"""

from __future__ import annotations

import pytest

from ddpify import launcher
from ddpify.convert import ConvertOptions, convert_source
from tests.cases import Case, load_cases

CASES = load_cases()


def _options(case: Case) -> ConvertOptions:
    return ConvertOptions(
        keep_global_batch="--keep-global-batch" in case.convert_args,
        sync_bn="--sync-bn" in case.convert_args,
        seed_per_rank="--seed-per-rank" in case.convert_args,
    )


def _report(result) -> str:
    lines = [note.render("train.py") for note in result.notes]
    if result.status == "unchanged":
        lines.append(f"unchanged: {result.reason}")
    return "\n".join(lines) + "\n"


def _check(path, actual: str, update: bool) -> None:
    if update:
        path.write_text(actual)
        return
    assert path.exists(), f"{path} is missing: run pytest --update-golden and read the diff"
    expected = path.read_text()
    assert actual == expected, f"{path} differs from the converter's output (pytest --update-golden regenerates it)"


def test_corpus_is_large_and_varied():
    assert len(CASES) >= 15
    assert {c.name for c in CASES if c.expect_unchanged} >= {"already_ddp", "inference_only"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden(case: Case, update_golden: bool) -> None:
    source = case.source.read_text()
    result = convert_source(source, _options(case), path=str(case.source))  # its folder's modules are read too
    _check(case.report, _report(result), update_golden)
    if case.expect_unchanged:
        assert result.status == "unchanged" and result.output == source
        assert not case.converted.exists() and not case.launcher.exists()
        return
    assert result.status == "converted", result.reason
    compile(result.output, str(case.converted), "exec")
    _check(case.converted, result.output, update_golden)
    text = launcher.render(launcher.spec_for_script(case.converted, "torchrun"))
    _check(case.launcher, text, update_golden)


@pytest.mark.parametrize("case", [c for c in CASES if not c.expect_unchanged], ids=lambda c: c.name)
def test_idempotent(case: Case) -> None:
    once = convert_source(case.source.read_text(), _options(case)).output
    twice = convert_source(once, _options(case))
    assert twice.output == once
    assert twice.status == "unchanged" and twice.reason.startswith("already distributed")
