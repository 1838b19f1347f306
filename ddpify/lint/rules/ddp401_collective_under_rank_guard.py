"""DDP401 collective-under-rank-guard."""

from __future__ import annotations

from collections import Counter

import libcst as cst

from ddpify.lint.rule import Rule
from ddpify.syntax import code


class CollectiveUnderRankGuard(Rule):
    """## What it does
    Flags a collective (`dist.barrier`, `all_reduce`, `broadcast`, `all_gather`, ...), a
    forward of a DDP-wrapped model, a `backward()`, or a call of a same-file function that runs
    one of these, when only some ranks can reach it: under `if rank == 0:`, after `if rank != 0: return`, or in
    one branch of a conditional expression.

    ## Why is this bad?
    A collective completes only when every rank in the group calls it. If rank 0 enters it
    alone, rank 0 waits for the others and they wait for rank 0 somewhere else: the job hangs
    until the NCCL timeout (30 minutes by default) and then dies with no useful traceback.
    A DDP forward counts: it broadcasts buffers and prepares the gradient all-reduce, which
    `backward()` then runs. The classic case is evaluating the wrapped model on rank 0 only.

    ## Example
    ```python
    if rank == 0:
        accuracy = evaluate(model, val_loader)  # evaluate() calls model(x): a DDP forward
        dist.barrier()
    ```

    ## Use instead
    ```python
    accuracy = evaluate(model, val_loader)  # every rank evaluates
    if rank == 0:
        print(f"accuracy {accuracy:.3f}")
    dist.barrier()
    ```
    or evaluate the plain module on rank 0 (`model.module`), which runs no collective.

    ## Fix safety
    No fix: moving a collective out of a guard changes what every rank does.

    ## References
    - [pytorch/pytorch#54059](https://github.com/pytorch/pytorch/issues/54059): collective under a rank guard hangs
    - [torch.distributed collectives](https://pytorch.org/docs/stable/distributed.html#collective-functions)
    """

    code = "DDP401"
    name = "collective-under-rank-guard"

    def visit_Call(self, node: cst.Call) -> None:
        function = self.tree.function(node)
        if not self.script.is_collective_call(node, function):
            return
        guard = self.script.rank_guard(node)
        if guard is None or self._balanced(guard, function):
            return
        self.report(node, f"`{code(node.func)}(...)` runs a collective that only some ranks reach (guarded by `{code(guard)}`): the others hang")

    def _balanced(self, guard: cst.CSTNode, function) -> bool:
        """`if rank == 0: dist.broadcast(t, 0) else: dist.broadcast(t, 0)`: every rank calls it."""
        statement = self.tree.parent(guard)
        if not isinstance(statement, cst.If) or statement.orelse is None:
            return False
        orelse = statement.orelse.body if isinstance(statement.orelse, cst.Else) else statement.orelse

        def kinds(node: cst.CSTNode) -> Counter:
            return Counter(code(c.func) for c in self.tree.calls(node) if self.script.is_collective_call(c, function))

        return kinds(statement.body) == kinds(orelse)
