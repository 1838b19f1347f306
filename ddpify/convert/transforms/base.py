"""What every transform shares: the facts it reads, the plan it writes, and scope-aware spellings."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import libcst as cst

from ddpify.convert.analysis import Facts
from ddpify.convert.plan import Plan


@dataclass(frozen=True)
class ConvertOptions:
    keep_global_batch: bool = False
    sync_bn: bool = False  # BatchNorm layers become SyncBatchNorm (on CUDA) before the wrap
    seed_per_rank: bool = False  # the script's seeds are offset by the rank once the model is wrapped


def statements(source: str) -> list[cst.BaseStatement]:
    """Parse statements; comment lines above the first one stay attached to it."""
    return list(_parsed(source))


@functools.lru_cache(maxsize=1024)
def _parsed(source: str) -> tuple[cst.BaseStatement, ...]:
    # Nodes are immutable: the same emitted code is parsed once and may appear in several places.
    return tuple(cst.parse_module("pass\n" + source).body[1:])


def keyword(name: str, value: str) -> cst.Arg:
    """`name=value` formatted the PEP 8 way."""
    return cst.Arg(
        keyword=cst.Name(name),
        value=cst.parse_expression(value),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def appended(call: cst.Call, new: cst.Arg) -> list[cst.Arg]:
    """The call's arguments with `new` last, in the call's own layout."""
    args = list(call.args)
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: one argument per line
        if len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
            separator = args[-2].comma
        else:
            separator = cst.Comma(whitespace_after=call.whitespace_before_args)
        return [*args[:-1], last.with_changes(comma=separator), new.with_changes(comma=last.comma)]
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]


def add_keyword(name: str, value: str):
    """A replacement that appends `name=value` to a call's arguments."""
    new = keyword(name, value)

    def add(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        return updated.with_changes(args=appended(updated, new))

    return add


class Transform:
    """One concern of the rewrite. Reads `facts`, records edits and reasons in `plan`."""

    name = ""
    DESCRIPTION = ""

    def __init__(self, facts: Facts, plan: Plan, options: ConvertOptions) -> None:
        self.facts = facts
        self.plan = plan
        self.options = options
        self.tree = facts.tree
        self.program = facts.program

    def run(self) -> None:
        raise NotImplementedError

    # spellings that depend on where the code runs; entry names used are recorded so the
    # process-group setup defines exactly those

    def device(self, function: cst.FunctionDef | None) -> str | None:
        """The script's device variable as `function` spells it, if it has one."""
        return self.facts.device_expr(function)

    def rank(self, function: cst.FunctionDef | None) -> str:
        expr = self.facts.rank_expr(function)
        if expr == "rank":
            self.plan.uses.add("rank")
        return expr

    def world_size(self, function: cst.FunctionDef | None) -> str:
        expr = self.facts.world_size_expr(function)
        if expr == "world_size":
            self.plan.uses.add("world_size")
        return expr

    def is_main_process(self, function: cst.FunctionDef | None) -> str:
        return f"{self.rank(function)} == 0"

    def change(self, node: cst.CSTNode, message: str) -> None:
        self.plan.change(node, self.name, message)

    def warn(self, node: cst.CSTNode | None, message: str) -> None:
        self.plan.warn(node, message)
