"""`lint_source`: findings for one DDP script; `fix_source`: the same, with safe fixes applied."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ddpify.edit import Plan
from ddpify.errors import InputError
from ddpify.lint.rule import Finding, Rule, visit_all
from ddpify.lint.rules import all_rules
from ddpify.lint.script import DISTRIBUTED_TEXT, Script
from ddpify.lint.selection import Selection, suppressed
from ddpify.syntax import Tree

__all__ = ["Finding", "FixResult", "Rule", "Selection", "fix_source", "lint_source"]


def _script(source: str, path: str) -> Script:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise InputError(path, f"cannot parse: {error.message} (line {error.raw_line}, column {error.raw_column})") from None
    return Script(Tree.parse(module), path)


def _findings(script: Script, source: str, selection: Selection) -> list[tuple[Rule, Finding]]:
    if not script.distributed:
        return []
    lines = source.splitlines()
    found: dict[Finding, Rule] = {}
    rules = [rule_class(script) for rule_class in selection.enabled(all_rules())]
    visit_all(script.tree, rules)
    for rule in rules:
        for finding in rule.findings:
            line = lines[finding.line - 1] if finding.line <= len(lines) else ""
            if not suppressed(line, finding.code):
                found.setdefault(finding, rule)
    return sorted(((rule, f) for f, rule in found.items()), key=lambda pair: pair[1].sort_key)


def lint_source(source: str, path: str = "<string>", selection: Selection | None = None) -> list[Finding]:
    """Findings for one script, sorted. Files that are not distributed get none: a file whose text
    names nothing distributed is not even parsed."""
    if not DISTRIBUTED_TEXT.search(source):
        return []
    script = _script(source, path)
    return [f for _, f in _findings(script, source, selection or Selection())]


@dataclass
class FixResult:
    output: str
    fixed: list[tuple[Finding, str]] = field(default_factory=list)  # finding, what was done
    remaining: list[Finding] = field(default_factory=list)


def fix_source(source: str, path: str = "<string>", selection: Selection | None = None) -> FixResult:
    """Apply the safe fixes through the convert rewrite machinery, then lint the result again."""
    selection = selection or Selection()
    if not DISTRIBUTED_TEXT.search(source):
        return FixResult(source)
    script = _script(source, path)
    plan = Plan(script.tree)
    fixed = []
    for rule, finding in _findings(script, source, selection):
        if finding.fixable and finding.fix is not None:
            done = finding.fix(plan)
            if done:
                fixed.append((finding, done))
    output = plan.output(source) if plan.has_edits else source
    return FixResult(output, fixed, lint_source(output, path, selection))
