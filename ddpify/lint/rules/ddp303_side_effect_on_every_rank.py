"""DDP303 side-effect-on-every-rank."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import add_keyword
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import (
    DevicesAndOutput,
    devices_and_output,
    guard_fix,
    in_except_handler,
    single_small,
)
from ddpify.syntax import code, dotted


class SideEffectOnEveryRank(Rule):
    """## What it does
    Flags output that every rank produces: `print`, `logging`/logger calls (below `error`),
    `tqdm` progress bars without `disable=`, and the creation of a TensorBoard
    `SummaryWriter` or a `wandb.init` run, when no rank guard covers them. Output that names
    the rank (`print(f"[rank {rank}] ...")`), error handlers, a logging level chosen per rank,
    and a `print` silenced per rank (`setup_for_distributed`, which DETR/DeiT-style
    `utils.init_distributed_mode(args)` calls) are fine. Off by default: noisy
    rather than wrong.

    ## Why is this bad?
    With N processes every line is printed N times, progress bars overwrite one another,
    TensorBoard gets N event files in one run directory (curves jump between ranks), and wandb
    starts N runs for one job.

    ## Example
    ```python
    writer = SummaryWriter("runs/exp")
    for epoch in range(epochs):
        for x, y in tqdm(loader):
            ...
        print(f"epoch {epoch} loss {loss:.4f}")
    ```

    ## Use instead
    ```python
    writer = SummaryWriter("runs/exp") if rank == 0 else None
    for epoch in range(epochs):
        for x, y in tqdm(loader, disable=rank != 0):
            ...
        if rank == 0:
            print(f"epoch {epoch} loss {loss:.4f}")
    ```

    ## Fix safety
    Safe unless the statement also runs a collective or a DDP forward. A print or log
    statement goes under the script's own rank-0 test (`rank == 0`, `is_main_process()`, ...)
    or `dist.get_rank() == 0`; a progress bar gets `disable=<not rank 0>`; `writer =
    SummaryWriter(...)` and `run = wandb.init(...)` become `... if <rank 0> else None` only
    when every later use is already guarded, and a bare `wandb.init(...)` is guarded only when
    every other wandb call is.

    ## References
    - [PyTorch DDP tutorial](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    - [W&B: log distributed training experiments](https://docs.wandb.ai/guides/track/log/distributed-training/)
    - [tqdm: `disable`](https://tqdm.github.io/docs/tqdm/)
    """

    code = "DDP303"
    name = "side-effect-on-every-rank"
    fix = "safe"
    default = False

    def visit_Call(self, node: cst.Call) -> None:
        facts = devices_and_output(self.script)
        function = self.tree.function(node)
        kind = facts.output_kind(node, function)
        if kind is None or self._intended(facts, node, kind, function):
            return
        if kind == "tqdm":
            message = "progress bar on every rank: N bars overwrite one another; pass `disable=` for ranks other than 0"
        elif kind in ("SummaryWriter", "wandb.init"):
            message = f"`{code(node.func)}(...)` on every rank: N {'event files' if kind == 'SummaryWriter' else 'runs'} for one job; create it on rank 0 only"
        else:
            message = f"`{code(node.func)}(...)` on every rank: each line is printed N times; output on rank 0 only"
        self.report(node, message, fix=self._fix(facts, node, kind, function))

    def _intended(self, facts: DevicesAndOutput, node: cst.Call, kind: str, function) -> bool:
        """Output that is not (or should not be) rank 0's alone."""
        if kind == "tqdm" and s.arg(node, None, "disable") is not None:
            return True
        if kind == "logging" and facts.rank_aware_logging:
            return True
        if kind == "print" and facts.print_silenced:
            return True
        if in_except_handler(self.tree, node) or facts.guarded_everywhere(node):
            return True
        return any(facts.mentions_rank(a.value, function, depth=1) for a in node.args)

    def _fix(self, facts: DevicesAndOutput, node: cst.Call, kind: str, function):
        """A function recording the fix in a plan, or None when no fix is safe."""
        statement = self.tree.statement(node)
        if kind == "tqdm":
            return lambda plan: self._disable(facts, plan, node)
        small = single_small(statement)
        if isinstance(small, cst.Assign) and small.value is node and kind in ("SummaryWriter", "wandb.init"):
            names = [dotted(t.target) for t in small.targets]
            if len(names) == 1 and names[0] is not None and self._uses_guarded(facts, names[0], statement, function):
                if kind == "wandb.init" and not self._other_wandb_guarded(facts, node):
                    return None
                return lambda plan: self._conditional_value(facts, plan, node)
            return None
        if kind == "SummaryWriter":
            return None
        if kind == "wandb.init" and not self._other_wandb_guarded(facts, node):
            return None
        if not facts.output_only(statement, function):
            return None
        return lambda plan: guard_fix(facts, plan, node)

    def _uses_guarded(self, facts: DevicesAndOutput, name: str, statement: cst.CSTNode, function) -> bool:
        """Every other use of `name` is rank-guarded or tests the name itself."""
        root: cst.CSTNode = function if function is not None else self.tree.module
        if name.startswith("self.") and function is not None:
            root = self.program.owner_class(function) or function
        for node in self.tree.walk(root):
            if not isinstance(node, (cst.Name, cst.Attribute)) or dotted(node) != name or self.tree.inside(node, statement):
                continue
            parent = self.tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is not node:
                continue
            if isinstance(parent, cst.Arg):
                return False  # passed on: uses elsewhere are not checked
            if self.script.rank_guard(node) is None and not self._tests_name(node, name):
                return False
        return True

    def _tests_name(self, node: cst.CSTNode, name: str) -> bool:
        """Inside (or is) a test on the name: `if writer is not None:`, `if writer:`."""
        child: cst.CSTNode = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(parent, (cst.If, cst.IfExp, cst.While)):
                mentions = any(dotted(n) == name for n in self.tree.walk(parent.test) if isinstance(n, (cst.Name, cst.Attribute)))
                if mentions:
                    return True
            if isinstance(parent, cst.BooleanOperation) and child is parent.right:
                if any(dotted(n) == name for n in self.tree.walk(parent.left) if isinstance(n, (cst.Name, cst.Attribute))):
                    return True
            child = parent
        return False

    def _other_wandb_guarded(self, facts: DevicesAndOutput, init: cst.Call) -> bool:
        return all(facts.guarded_everywhere(c) for c in self.script.calls(s.WANDB_CALLS) if c is not init)

    def _disable(self, facts: DevicesAndOutput, plan, node: cst.Call) -> str:
        condition = facts.not_main_condition(node)
        if facts.needs_distributed_import(condition.removeprefix("not ")):
            plan.add_import("torch.distributed", None, "dist")
        plan.replace(node, add_keyword("disable", condition))
        return f"shows the progress bar on rank 0 only (`disable={condition}`)"

    def _conditional_value(self, facts: DevicesAndOutput, plan, node: cst.Call) -> str:
        condition, _ = facts.main_condition(node)
        if facts.needs_distributed_import(condition):
            plan.add_import("torch.distributed", None, "dist")
        plan.replace(node, lambda updated: cst.parse_expression(f"{code(updated)} if {condition} else None"))
        return f"created on rank 0 only (`... if {condition} else None`)"
