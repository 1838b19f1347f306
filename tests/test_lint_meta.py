"""The rule set as a whole: codes, registration, fixtures, documentation, generated docs."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import ddpify.lint.rules as rules_package
from ddpify.cli import cli
from ddpify.cli.lint import rules_markdown
from ddpify.lint.rule import SECTIONS
from ddpify.lint.rules import MODULES, all_rules

REPO = Path(__file__).resolve().parent.parent
RULES = all_rules()


def test_codes_and_names_are_unique_and_well_formed() -> None:
    codes = [r.code for r in RULES]
    names = [r.name for r in RULES]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    for rule, module in zip(RULES, MODULES):
        assert re.fullmatch(r"DDP\d{3}", rule.code)
        assert re.fullmatch(r"[a-z]+(-[a-z0-9]+)*", rule.name)
        assert module == f"{rule.code.lower()}_{rule.name.replace('-', '_')}"
    assert codes == sorted(codes)


def test_every_rule_module_is_registered() -> None:
    found = {m.name for m in pkgutil.iter_modules(rules_package.__path__) if not m.name.startswith("_")}
    assert found == set(MODULES)


def test_off_by_default_rules_are_the_catalog_ones() -> None:
    assert {r.code for r in RULES if not r.default} == {"DDP303", "DDP901", "DDP902"}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_documents_itself(rule) -> None:
    sections = rule.sections()
    missing = [s for s in SECTIONS if not sections.get(s)]
    assert not missing, f"{rule.code} docstring lacks {missing}"
    assert "```python" in sections["Example"] and "```python" in sections["Use instead"]
    assert "http" in sections["References"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_has_bad_and_good_fixtures(rule) -> None:
    folder = REPO / "fixtures" / "lint" / rule.code
    assert (folder / "bad.py").is_file() and (folder / "good.py").is_file()


def test_rules_command_lists_every_rule() -> None:
    result = CliRunner().invoke(cli, ["rules"])
    assert result.exit_code == 0
    for rule in RULES:
        assert re.search(rf"^{rule.code}\s+(on |off)\s+{re.escape(rule.name)}\s", result.output, re.MULTILINE)


def test_rule_command_prints_the_docstring() -> None:
    result = CliRunner().invoke(cli, ["rule", "ddp401"])
    assert result.exit_code == 0
    assert result.output.startswith("# DDP401 collective-under-rank-guard")
    for section in SECTIONS:
        assert f"## {section}" in result.output
    missing = CliRunner().invoke(cli, ["rule", "DDP999"])
    assert missing.exit_code == 2 and "no rule DDP999" in missing.output


def test_rule_docs_are_generated(update_golden: bool) -> None:
    """docs/rules.md comes from the docstrings (`ddpify rules --format markdown`), never by hand."""
    docs = REPO / "docs" / "rules.md"
    if update_golden:
        docs.write_text(rules_markdown())
    assert docs.read_text() == rules_markdown(), "docs/rules.md is stale: pytest --update-golden regenerates it"
