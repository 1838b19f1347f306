"""`convert_source`: a single-GPU training script in, a DDP script and a report out."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import libcst as cst

from ddpify.convert.analysis import Analyzer, NotConvertible
from ddpify.convert.driver import convert_driver
from ddpify.convert.pipeline import PIPELINE, PREPASSES
from ddpify.convert.transforms.base import ConvertOptions
from ddpify.edit.plan import Note, Plan
from ddpify.errors import InputError
from ddpify.syntax import Tree

__all__ = ["ConvertOptions", "ConvertResult", "Note", "convert_source"]


@dataclass(frozen=True)
class ConvertResult:
    source: str
    output: str
    status: Literal["converted", "unchanged"]
    reason: str | None = None  # why the script was left unchanged
    notes: list[Note] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.output != self.source

    @property
    def warnings(self) -> list[Note]:
        return [n for n in self.notes if n.kind == "warning"]


def convert_source(source: str, options: ConvertOptions | None = None, path: str = "<string>") -> ConvertResult:
    """Rewrite one script. Raises InputError when it does not parse."""
    options = options or ConvertOptions()
    if not source.strip():
        return ConvertResult(source, source, "unchanged", "empty file: nothing to convert")
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise InputError(path, f"cannot parse: {error.message} (line {error.raw_line}, column {error.raw_column})") from None
    tree = Tree.parse(module)
    original, early = source, Plan(tree)
    for prepass in PREPASSES:
        prepass(tree, early).run()
    if early.has_edits or early.imports:  # the DDP pipeline reads the script the prepasses made
        source = early.output(source)
        tree = Tree.parse(cst.parse_module(source))
    directory = Path(path).resolve().parent if path != "<string>" and Path(path).is_file() else None  # the script's own modules
    analyzer = Analyzer(tree, source, directory)
    plan = Plan(tree)
    try:
        facts = analyzer.run()
    except NotConvertible as reason:
        driver = Plan(tree)
        if str(reason).startswith("nothing to train") and source == original and convert_driver(analyzer.program, driver):
            return ConvertResult(original, driver.output(source), "converted", None, _sorted(early.notes + driver.notes))
        for node, message in analyzer.warnings:
            plan.warn(node, message)
        notes = early.notes + _moved(plan.notes, source, original)
        if source != original and str(reason).startswith("already distributed"):
            try:  # the reason names a line: the original's, where the original shows it
                Analyzer(Tree.parse(module), original, directory).run()
            except NotConvertible as first:
                reason = first if str(first).startswith("already distributed") else reason
            notes.append(Note(1, "change", "apex", f"{reason}: only its apex parts were converted"))
            return ConvertResult(original, source, "converted", None, _sorted(notes))
        return ConvertResult(original, original, "unchanged", str(reason), _sorted([n for n in notes if n.kind == "warning"]))
    for node, message in facts.warnings:
        plan.warn(node, message)
    for transform in PIPELINE:
        transform(facts, plan, options).run()
    notes = early.notes + _moved(plan.notes, source, original)
    return ConvertResult(original, plan.output(source), "converted", None, _sorted(notes))


def _moved(notes: list[Note], source: str, original: str) -> list[Note]:
    """Notes on lines of `source` (what the prepasses made of `original`), on the original's lines."""
    if source == original:
        return notes
    lines: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, original.splitlines(), source.splitlines(), autojunk=False)
    for _tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            lines[j + 1] = min(i1 + (j - j1), max(i2 - 1, i1)) + 1
    return [replace(n, line=lines.get(n.line, n.line)) for n in notes]


def _sorted(notes: list[Note]) -> list[Note]:
    return sorted(dict.fromkeys(notes), key=lambda n: (n.line, n.kind != "change"))
