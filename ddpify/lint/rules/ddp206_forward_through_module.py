"""DDP206 forward-through-module."""

from __future__ import annotations

import libcst as cst

from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import assigned_names, names_in
from ddpify.syntax import code, dotted, is_backward


class ForwardThroughModule(Rule):
    """## What it does
    Flags a training forward through the module a DDP wrapper holds, `model.module(x)` or
    `model.module.forward(x)`: one whose result feeds `backward()`, or that runs in a loop that
    calls `backward()`. The same goes for a method of the model's class (defined in the same
    file) that runs its forward, `model.module.compute_loss(x, y)` where `compute_loss` calls
    `self(x)` or `self.forward(x)`, directly or through other methods of the class. Methods
    that do not run the forward (`model.module.init_hidden(batch_size)`) and evaluation
    through `.module` under `torch.no_grad()` are fine.

    ## Why is this bad?
    DDP synchronizes gradients from hooks it arms in its own `forward`. A forward that bypasses
    the wrapper arms nothing: `backward()` computes local gradients only, each rank steps with
    its own, and the replicas silently drift apart. Buffers (BatchNorm statistics) are not
    broadcast either. Nothing crashes; the model is just wrong.

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    for x, y in loader:
        loss = criterion(model.module(x), y)
        loss.backward()
    ```

    ```python
    class Net(nn.Module):
        def compute_loss(self, x, y):
            return criterion(self(x), y)

    for x, y in loader:
        model.module.compute_loss(x, y).backward()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
    ```

    ## Fix safety
    No fix: whether the wrapper's forward is wanted (it is a collective) depends on every rank
    running it.

    ## References
    - [DistributedDataParallel: forward and gradient synchronization](https://pytorch.org/docs/stable/notes/ddp.html#internal-design)
    - [DistributedDataParallel](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    """

    code = "DDP206"
    name = "forward-through-module"

    def visit_Call(self, node: cst.Call) -> None:
        wrapper = _module_forward(node)
        method = None
        if wrapper is None:
            wrapper, method = _module_method(node)
            if wrapper is None:
                return
        function = self.tree.function(node)
        if not self.script.is_ddp_model(wrapper, function) or self.tree.grad_disabled(node):
            return
        if method is not None and not any(method in self.script.forward_methods(c) for c in self.script.module_classes(wrapper, function)):
            return  # not a forward: `model.module.init_hidden(batch_size)`
        in_training_loop = any(loop in self.script.training_loops for loop in self.tree.loops(node))
        if not (in_training_loop or self._feeds_backward(node, function)):
            return
        name = dotted(wrapper)
        if method is None:
            self.report(node, f"training forward through `{code(node.func)}(...)` skips DDP's gradient all-reduce: the ranks drift apart; call `{name}(...)`")
        else:
            self.report(
                node,
                f"training forward through `{code(node.func)}(...)` (`{method}` calls the model's forward) skips DDP's gradient "
                f"all-reduce: the ranks drift apart; call `{name}(...)` and compute the rest from its output",
            )

    def _feeds_backward(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """The call's result reaches a `.backward()` in the same function (through assignments)."""
        scope = self.program.scope_nodes(function)
        tainted: set[str] = set()
        statement = self.tree.statement(call)
        tainted |= _targets(self.tree, statement, call)
        changed = True
        while changed:
            changed = False
            for node in scope:
                if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None:
                    if names_in(self.tree, node.value) & tainted:
                        new = assigned_names(self.tree, node) - tainted
                        if new:
                            tainted |= new
                            changed = True
        for node in scope:
            if isinstance(node, cst.Call) and is_backward(node):
                receiver = node.func.value
                if self.tree.inside(call, receiver) or names_in(self.tree, receiver) & tainted:
                    return True
                if any(names_in(self.tree, a.value) & tainted for a in node.args):
                    return True
        return False


def _module_forward(node: cst.Call) -> cst.BaseExpression | None:
    """The wrapper in `wrapper.module(...)` or `wrapper.module.forward(...)`."""
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        func = func.value
    if isinstance(func, cst.Attribute) and func.attr.value == "module":
        return func.value
    return None


def _module_method(node: cst.Call) -> tuple[cst.BaseExpression | None, str | None]:
    """The wrapper and the method in `wrapper.module.method(...)` (not `forward`)."""
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value != "forward":
        held = func.value
        if isinstance(held, cst.Attribute) and held.attr.value == "module":
            return held.value, func.attr.value
    return None, None


def _targets(tree, statement: cst.CSTNode, call: cst.Call) -> set[str]:
    """Names a statement assigns from an expression holding `call`."""
    found: set[str] = set()
    for node in tree.walk(statement):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and node.value is not None and tree.inside(call, node.value):
            found |= assigned_names(tree, node)
    return found
