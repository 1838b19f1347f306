"""The clean corpus: correct DDP scripts in many styles must get no finding from any family.

fixtures/lint/clean/*.py spell rank guards, collectives, metric reductions, no_sync and early
stopping in the ways real scripts do. Each is run with the default rules plus DDP303 (off by
default, the noisiest), so a rule that mistakes one of these spellings for a pitfall fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify.lint import Selection, lint_source
from ddpify.lint.rules import all_rules

CLEAN = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "clean"
SCRIPTS = sorted(CLEAN.glob("*.py"))
SELECTION = Selection(tuple(r.code for r in all_rules() if r.default) + ("DDP303",))


def test_corpus_is_large_enough() -> None:
    assert len(SCRIPTS) >= 6, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_clean_script_has_no_findings(script: Path) -> None:
    findings = lint_source(script.read_text(), script.name, SELECTION)
    assert [f.render() for f in findings] == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_clean_script_is_distributed(script: Path) -> None:
    """A corpus file that is not recognized as distributed would pass vacuously."""
    from ddpify.lint import _script

    assert _script(script.read_text(), script.name).distributed
