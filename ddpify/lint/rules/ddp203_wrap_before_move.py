"""DDP203 wrap-before-move."""

from __future__ import annotations

import libcst as cst

from ddpify.edit import Plan
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import (
    assigned_names,
    between,
    is_device_move,
    moved_statement,
    root_names,
    same_block,
    single_small,
    uses_beyond_parameters,
    wrap_target,
    wrapped_module,
)
from ddpify.syntax import code, dotted

# Uses of the model that see the same Parameter objects before and after `.to(device)`.


class WrapBeforeMove(Rule):
    """## What it does
    Flags a `DistributedDataParallel(model, ...)` wrap when the model is moved to its device
    (`.to(device)`, `.cuda()`) only after the wrap. A move in a branch that excludes the
    wrap's (`if distributed: model = DDP(model)` / `else: model.to(device)`) is not after it.

    ## Why is this bad?
    DDP reads the module's device when it is constructed: it broadcasts the parameters from
    rank 0 and builds its gradient buckets there. With `device_ids=[local_rank]` and a module
    still on the CPU, the constructor fails with `ValueError: DistributedDataParallel
    device_ids and output_device arguments only work with single-device/multiple-device GPU
    modules or CPU modules`; without `device_ids`, DDP sets itself up for a CPU module and the
    later move leaves its buckets on the wrong device.

    ## Example
    ```python
    model = Net()
    model = DDP(model, device_ids=[local_rank])
    model.to(device)
    ```

    ## Use instead
    ```python
    model = Net()
    model.to(device)
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    Safe when the wrap and the move are statements of one block and nothing between them uses
    the model except through `.parameters()` (moving a module keeps its Parameter objects, so
    an optimizer built in between is unchanged): the wrap moves to just after the move, with
    its comments. Otherwise no fix is offered.

    ## References
    - [DistributedDataParallel](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    - [PyTorch DDP tutorial](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    """

    code = "DDP203"
    name = "wrap-before-move"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        if node not in self.script.ddp_wraps:
            return
        move = self._move_after(node)
        if move is None:
            return
        self.report(
            node,
            f"`{code(node.func)}(...)` wraps a module that is moved to its device only later (line {self.tree.line(move)}): move it first, then wrap",
            fix=(lambda plan: self._wrap_after(plan, order)) if (order := self._reorder(node, move)) is not None else None,
        )

    def _names(self, wrap: cst.Call) -> tuple[str | None, str | None]:
        inner = wrapped_module(wrap)
        target = wrap_target(self.tree, wrap)
        return (dotted(inner) if inner is not None else None), (dotted(target) if target is not None else None)

    def _move_after(self, wrap: cst.Call) -> cst.Call | None:
        function = self.tree.function(wrap)
        inner, target = self._names(wrap)
        inner_expr = wrapped_module(wrap)
        if inner_expr is None or self._moved_before(inner_expr, inner, wrap, function):
            return None
        names = {n for n in (inner, target) if n is not None}
        for call in self.program.calls_in(function):
            if not self.tree.may_follow(wrap, call):
                continue  # before the wrap, or in a branch exclusive to it
            receiver = is_device_move(self.tree, call)
            name = dotted(receiver) if receiver is not None else None
            if name is not None and (name in names or name.removesuffix(".module") in names):
                return call
        return None

    def _moved_before(self, expr: cst.BaseExpression, name: str | None, wrap: cst.Call, function) -> bool:
        if any(is_device_move(self.tree, c) is not None for c in self.tree.calls(expr)):
            return True  # DDP(Net().to(device))
        for origin in self.program.origins(expr, function):
            if origin.function is function and not self.tree.may_follow(origin.node, wrap):
                continue  # assigned after the wrap, or in a branch exclusive to it
            if any(is_device_move(self.tree, c) is not None for c in self.tree.calls(origin.node)):
                return True  # model = Net().to(device)
        if name is None:
            return False
        for call in self.program.calls_in(function):
            receiver = is_device_move(self.tree, call)
            if receiver is not None and dotted(receiver) == name and self.tree.may_follow(call, wrap):
                return True
        return False

    def _reorder(self, wrap: cst.Call, move: cst.Call) -> tuple[cst.BaseStatement, cst.BaseStatement] | None:
        """(wrap statement, move statement) when moving the wrap after the move is safe."""
        wrap_statement = self.tree.statement(wrap)
        move_statement = self.tree.statement(move)
        inner, target = self._names(wrap)
        small = single_small(wrap_statement)
        if inner is None or target is None or not isinstance(small, cst.Assign) or small.value is not wrap:
            return None
        if not same_block(self.tree, wrap_statement, move_statement):
            return None
        moved = single_small(move_statement)
        receiver = is_device_move(self.tree, move)
        if receiver is None or dotted(receiver) != inner:
            return None
        if isinstance(moved, cst.Expr) and moved.value is move:
            pass
        elif isinstance(moved, cst.Assign) and moved.value is move and [dotted(t.target) for t in moved.targets] == [inner]:
            pass
        else:
            return None
        involved = {inner, target}
        assigned: set[str] = set()
        for statement in between(self.tree, wrap_statement, move_statement):
            if uses_beyond_parameters(self.tree, statement, involved):
                return None
            assigned |= assigned_names(self.tree, statement)
        if root_names(self.tree, wrap) & assigned:
            return None
        return wrap_statement, move_statement

    def _wrap_after(self, plan: Plan, order: tuple[cst.BaseStatement, cst.BaseStatement]) -> str | None:
        wrap_statement, move_statement = order
        plan.remove(wrap_statement)
        plan.insert_after(move_statement, [moved_statement(wrap_statement)])
        return "wraps the module after it is moved to its device"
