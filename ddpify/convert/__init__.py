"""`convert_source`: a single-GPU training script in, a DDP script and a report out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import libcst as cst

from ddpify.convert.analysis import Analyzer, NotConvertible
from ddpify.convert.pipeline import PIPELINE
from ddpify.edit.plan import Note, Plan
from ddpify.convert.transforms.base import ConvertOptions
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
    analyzer = Analyzer(tree, source)
    plan = Plan(tree)
    try:
        facts = analyzer.run()
    except NotConvertible as reason:
        for node, message in analyzer.warnings:
            plan.warn(node, message)
        return ConvertResult(source, source, "unchanged", str(reason), _sorted(plan.notes))
    for node, message in facts.warnings:
        plan.warn(node, message)
    for transform in PIPELINE:
        transform(facts, plan, options).run()
    return ConvertResult(source, plan.apply().code, "converted", None, _sorted(plan.notes))


def _sorted(notes: list[Note]) -> list[Note]:
    return sorted(dict.fromkeys(notes), key=lambda n: (n.line, n.kind != "change"))
