"""DDP207 module-on-maybe-unwrapped."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import single_small, wrap_target
from ddpify.syntax import code, dotted, string_value


class ModuleOnMaybeUnwrapped(Rule):
    """## What it does
    Flags `model.module` when `model` is wrapped in DDP only under a condition
    (`if world_size > 1: model = DDP(model)`, `DDP(model) if distributed else model`) and the
    access is not under that same condition or a `hasattr`/`isinstance` check.

    ## Why is this bad?
    On the path where the wrap did not happen (one GPU, a debug run, plain `python train.py`),
    `model` is the plain module and `model.module` raises `AttributeError: 'Net' object has no
    attribute 'module'`, typically at the end of training, when the checkpoint is saved.

    ## Example
    ```python
    if world_size > 1:
        model = DDP(model, device_ids=[local_rank])
    ...
    torch.save(model.module.state_dict(), "model.pt")
    ```

    ## Use instead
    ```python
    torch.save(getattr(model, "module", model).state_dict(), "model.pt")
    ```
    or keep the plain module in its own variable before wrapping
    (`model_without_ddp = model`).

    ## Fix safety
    Safe: `model.module` becomes `getattr(model, "module", model)`, which is the same object
    when the model is wrapped and the model itself when it is not.

    ## References
    - [DistributedDataParallel: the wrapped module is `.module`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    - [torchvision references: `model_without_ddp`](https://github.com/pytorch/vision/blob/main/references/classification/train.py)
    """

    code = "DDP207"
    name = "module-on-maybe-unwrapped"
    fix = "safe"

    @cached_property
    def _wraps(self) -> tuple[dict, dict, dict[str, list[cst.BaseExpression]]]:
        """Refs of conditionally and unconditionally wrapped models, and the wrap conditions by name."""
        conditional, unconditional = [], []
        conditions: dict[str, list[cst.BaseExpression]] = {}
        for wrap in self.script.ddp_wraps:
            target = wrap_target(self.tree, wrap)
            name = dotted(target) if target is not None else None
            if name is None:
                continue
            function = self.tree.function(wrap)
            condition = self._condition(wrap, name)
            if condition is None:
                unconditional.append((name, function))
            else:
                conditional.append((name, function))
                conditions.setdefault(name, []).append(condition)
        return self.program.propagate(conditional), self.program.propagate(unconditional), conditions

    def _condition(self, wrap: cst.Call, name: str) -> cst.BaseExpression | None:
        """The test a wrap depends on, unless every branch wraps."""
        if isinstance(self.tree.parent(wrap), cst.IfExp):
            choice = self.tree.parent(wrap)
            other = choice.orelse if choice.body is wrap else choice.body  # type: ignore[union-attr]
            if not self._wraps_in(other):
                return choice.test  # type: ignore[union-attr]
        child: cst.CSTNode = self.tree.statement(wrap)
        for ancestor in self.tree.ancestors(child):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and not self.tree.is_main_guard(ancestor):
                other = ancestor.orelse if child is ancestor.body else ancestor.body
                if other is None or not self._wraps_in(other, name):
                    return ancestor.test
            child = ancestor
        return None

    def _wraps_in(self, node: cst.CSTNode, name: str | None = None) -> bool:
        """A DDP (or DataParallel: it has `.module` too) wrap of `name` inside `node`."""
        for call in self.tree.calls(node):
            if call in self.script.ddp_wraps or self.tree.is_call_to(call, s.DATA_PARALLEL):
                target = wrap_target(self.tree, call)
                if name is None or (target is not None and dotted(target) == name):
                    return True
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "module":
            return
        name = dotted(node.value)
        if name is None:
            return
        function = self.tree.function(node)
        conditional, unconditional, conditions = self._wraps
        if name not in conditional.get(function, set()) or name in unconditional.get(function, set()):
            return
        if self._is_target(node) or self._checked(node, name, conditions.get(name, [])):
            return
        tests = {code(t) for t in conditions.get(name, [])}
        when = f"only if `{tests.pop()}`" if len(tests) == 1 else "only under a condition"
        self.report(
            node,
            f"`{code(node)}` fails where `{name}` is not wrapped (DDP is applied {when}); use `getattr({name}, \"module\", {name})`",
            fix=lambda plan: self._getattr(plan, node),
        )

    def _is_target(self, node: cst.Attribute) -> bool:
        parent = self.tree.parent(node)
        if isinstance(parent, cst.AssignTarget) and parent.target is node:
            return True
        return isinstance(parent, (cst.AugAssign, cst.AnnAssign, cst.Del)) and parent.target is node  # type: ignore[union-attr]

    def _checked(self, node: cst.CSTNode, name: str, wrap_tests: list[cst.BaseExpression]) -> bool:
        """Where the model is known to be wrapped: in the branch that wraps it, under the wrap's
        own condition, or under a `hasattr(name, "module")` / `isinstance(name, ...)` test."""
        wrap_codes = {code(t) for t in wrap_tests}
        child: cst.CSTNode = node
        for parent in self.tree.ancestors(node):
            test = None
            if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and child is parent.body:
                test = parent.test
            elif isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And) and child is parent.right:
                test = parent.left
            if test is not None and (code(test) in wrap_codes or self._inspects(test, name)):
                return True
            if isinstance(parent, cst.IndentedBlock) and self._wraps_before(parent, name, node):
                return True  # `if distributed: model = DDP(model); model_without_ddp = model.module`
            child = parent
        return False

    def _wraps_before(self, block: cst.IndentedBlock, name: str, node: cst.CSTNode) -> bool:
        """A statement of `block`, before `node`, that wraps `name` in DDP or DataParallel."""
        for statement in block.body:
            if self.tree.inside(node, statement):
                return False
            small = single_small(statement)
            value = small.value if isinstance(small, cst.Assign) else None
            if isinstance(value, cst.Call) and (value in self.script.ddp_wraps or self.tree.is_call_to(value, s.DATA_PARALLEL)):
                if [dotted(t.target) for t in small.targets] == [name]:  # type: ignore[union-attr]
                    return True
        return False

    def _inspects(self, test: cst.BaseExpression, name: str) -> bool:
        for call in self.tree.calls(test):
            if self.tree.is_builtin_call(call, "hasattr") and len(call.args) == 2:
                if dotted(call.args[0].value) == name and string_value(call.args[1].value) == "module":
                    return True
            if self.tree.is_builtin_call(call, "isinstance") and call.args and dotted(call.args[0].value) == name:
                return True
        return False

    def _getattr(self, plan: Plan, node: cst.Attribute) -> str | None:
        name = code(node.value)
        plan.replace(node, cst.parse_expression(f'getattr({name}, "module", {name})'))
        return f'uses `getattr({name}, "module", {name})`'
