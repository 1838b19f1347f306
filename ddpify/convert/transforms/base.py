"""What every transform shares: the facts it reads, the plan it writes, and scope-aware spellings."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.convert.analysis import Facts
from ddpify.edit import Plan


@dataclass(frozen=True)
class ConvertOptions:
    keep_global_batch: bool = False
    sync_bn: bool = False  # BatchNorm layers become SyncBatchNorm (on CUDA) before the wrap
    seed_per_rank: bool = False  # the script's seeds are offset by the rank once the model is wrapped


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

    def device(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> str | None:
        """The script's device variable as `function` spells it, if it has one (defined by `at`)."""
        return self.facts.device_expr(function, at)

    def rank(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> str:
        expr = self.facts.rank_expr(function, at)
        if expr == "rank":
            self.plan.uses.add("rank")
        return expr

    def world_size(self, function: cst.FunctionDef | None) -> str:
        expr = self.facts.world_size_expr(function)
        if expr == "world_size":
            self.plan.uses.add("world_size")
        return expr

    def plain(self, ref: str, at: cst.CSTNode | None = None) -> str:
        """How code at `at` reaches the plain model behind `ref` once it is wrapped: `ref.module`,
        or `getattr(ref, "module", ref)` where it may hold the plain model (wrapped only when it
        trains, or read back whole later)."""
        if self.facts.may_be_plain(ref, at):
            return f'getattr({ref}, "module", {ref})'
        return f"{ref}.module"

    def is_main_process(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> str:
        return f"{self.rank(function, at)} == 0"

    def origin_of(self, call: cst.Call, function: cst.FunctionDef | None) -> str:
        """Where a called object comes from, for a report: `a same-file EarlyStopping` for an
        instance of a class of this file, else `from another module`."""
        cls = self.program.instance_of(call.func, function)
        return f"(a same-file `{cls.name.value}`)" if cls is not None else "from another module"

    def change(self, node: cst.CSTNode, message: str) -> None:
        self.plan.change(node, self.name, message)

    def warn(self, node: cst.CSTNode | None, message: str) -> None:
        self.plan.warn(node, message)
