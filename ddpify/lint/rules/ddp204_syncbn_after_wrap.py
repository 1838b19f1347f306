"""DDP204 syncbn-after-wrap."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.switches import PARAMETER_METHODS, GradSwitches
from ddpify.edit import Plan
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import (
    CONVERT_SYNC_BATCHNORM,
    assigned_names,
    between,
    devices_and_output,
    moved_statement,
    names_in,
    root_names,
    same_block,
    single_small,
    uses_beyond_parameters,
    wrap_target,
    wrapped_module,
)
from ddpify.syntax import code, dotted, method_call, unchained


class SyncbnAfterWrap(Rule):
    """## What it does
    Flags `nn.SyncBatchNorm.convert_sync_batchnorm(model)` and other module surgery (assigning
    a new submodule, `add_module`, freezing or unfreezing parameters with `requires_grad`, also
    through a same-file helper handed the module: `set_requires_grad(model.backbone, True)`)
    applied to a model after it was wrapped in `DistributedDataParallel`, either on the wrapper
    or on the module it wraps. Surgery in a branch that excludes the wrap's (the wrap under
    `if args.distributed:`, `model.features = nn.DataParallel(model.features)` under its
    `else:`) never runs after it and is not flagged.

    ## Why is this bad?
    DDP registers the module's parameters and its gradient hooks when it is constructed. Layers
    swapped in afterwards are invisible to it: their gradients are never all-reduced, so the
    ranks silently drift apart, or DDP fails with "Expected to have finished reduction in the
    prior iteration". Assigning a layer to the wrapper (`ddp_model.fc = ...`) does not even
    reach the wrapped model. Freezing parameters after the wrap fails the same way: DDP waits
    for gradients that never come. SyncBatchNorm must be in place before the wrap, as its
    documentation says.

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ```

    ## Use instead
    ```python
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    Safe when the surgery is a statement in the same block as the wrap, acts on the module the
    wrap takes, and nothing in between uses the model except through `.parameters()`: the wrap
    moves to just after the surgery, with its comments, and `model.module.x` in the surgery is
    written `model.x`. Otherwise no fix is offered.

    ## References
    - [torch.nn.SyncBatchNorm: convert before wrapping with DDP](https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html)
    - [DistributedDataParallel: do not change parameters after wrapping](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    """

    code = "DDP204"
    name = "syncbn-after-wrap"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        subject, what = self._surgery(node)
        if subject is None:
            return
        function = self.tree.function(node)
        facts = devices_and_output(self.script)
        for name in _prefixes(subject):
            wrap = facts.wrapped_at(name, node, function)
            if wrap is None:
                continue
            if self._wrapped_again(node, name, function):
                return  # `model = DDP(model.module)` after it: the new wrapper sees the change
            switch = self.program.fact(GradSwitches).at(node)
            if switch is not None and not switch.on and not self._trains_after(node, name, function):
                return  # a teacher frozen once it has trained, run under no_grad from then on: no gradient to sync
            if switch is not None and subject == name and self.program.fact(GradSwitches).toggled_after_wrap(name, wrap, function):
                return  # a GAN's critic off for the generator's step, on again for its own: DDP was built with all of it
            if "requires_grad" in what or switch is not None:
                why = "DDP only syncs the parameters that required grad when it was built; freeze before wrapping"
            else:
                why = "DDP never syncs the new layers; change the model before wrapping it"
            order = self._reorder(node, wrap)
            fix = (lambda plan, order=order: self._before_wrap(plan, order)) if order is not None else None
            self.report(node, f"{what} after the DDP wrap (line {self.tree.line(wrap)}): {why}", fix=fix)
            return

    def _wrapped_again(self, node: cst.Call, name: str, function: cst.FunctionDef | None) -> bool:
        """A wrap of the same model that runs after `node` in its function (gradual unfreezing
        re-wraps the plain model once its parameters change)."""
        facts = devices_and_output(self.script)
        for wrap in facts.wraps_in(function):
            if self.tree.order(wrap) <= self.tree.order(node) or not self.tree.may_follow(node, wrap):
                continue
            target, inner = wrap_target(self.tree, wrap), wrapped_module(wrap)
            if (target is not None and dotted(target) == name) or (inner is not None and dotted(inner) in (name, f"{name}.module")):
                return True
        return False

    def _trains_after(self, node: cst.Call, name: str, function: cst.FunctionDef | None) -> bool:
        """A forward of `name` with gradients after `node` in its function (or in a function it calls)."""
        for call in self.program.calls_in(function):
            if self.tree.order(call) <= self.tree.order(node):
                continue
            if dotted(call.func) == name and not self.tree.grad_disabled(call):
                return True
            target = self.program.callee(call, function)
            if target is not None and (
                any(dotted(a.value) == name for a in call.args)
                or any(type(n) is cst.Name and n.value == name.split(".")[0] for n in self.program.scope_nodes(target[0]))
            ):
                return True  # a same-file function handed it (or reading it) may train it: keep the finding
        return False

    def _surgery(self, node: cst.Call) -> tuple[str | None, str]:
        """The model a call changes, and how: convert_sync_batchnorm(m), m.x = Layer(),
        m.add_module(...), m.requires_grad_(...), or a loop over m.parameters() that sets requires_grad."""
        if self.tree.qname(node.func) in CONVERT_SYNC_BATCHNORM and node.args:
            return dotted(node.args[0].value), f"`convert_sync_batchnorm({code(node.args[0].value)})`"
        found = method_call(node)
        if found is not None and found[1] in ("add_module", "register_module") and self._builds_module(node.args[-1].value if node.args else None):
            return dotted(found[0]), f"`{code(node.func)}(...)`"
        switch = self.program.fact(GradSwitches).at(node)
        if switch is not None:
            # `m.requires_grad_(...)` (in a loop over `m.parameters()`, or a helper's), or that loop setting `p.requires_grad`
            setting = type(switch.node) is cst.For and (method_call(node) or ("", ""))[1] in PARAMETER_METHODS
            if setting:
                return dotted(switch.module), f"`requires_grad` set on `{code(node)}`"
            helper = (method_call(node) or ("", ""))[1] != "requires_grad_"
            return dotted(switch.module), f"`{code(node.func)}(...)`" + (" (it sets `requires_grad`)" if helper else "")
        parent = self.tree.parent(node)
        if isinstance(parent, cst.Assign) and parent.value is node and self._builds_module(node):
            for t in parent.targets:
                if isinstance(t.target, cst.Attribute) and (owner := dotted(t.target.value)) is not None:
                    return owner, f"`{code(t.target)}` replaced"
        return None, ""

    def _builds_module(self, node: cst.BaseExpression | None) -> bool:
        """A call that constructs a layer: `nn.Linear(...)`, `torchvision.ops.FrozenBatchNorm2d(...)`,
        or a same-file `nn.Module` subclass."""
        if not isinstance(node, cst.Call):
            return False
        inner = unchained(node)
        if inner is not node:
            return self._builds_module(inner)  # nn.Linear(16, 1).to(device)
        name = self.tree.qname(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name.startswith(("torch.nn.", "torchvision.")) and last[:1].isupper():
            return not name.startswith(("torch.nn.parallel.", "torch.nn.utils."))
        cls = self.program.classes.get(dotted(node.func) or "")
        return cls is not None and any("Module" in code(b.value) or "Layer" in code(b.value) for b in cls.bases)

    def _reorder(self, node: cst.Call, wrap: cst.Call) -> tuple[cst.BaseStatement, cst.BaseStatement, str, str] | None:
        """(surgery statement, wrap statement, wrapper name, module name) when the move is safe."""
        statement = self.tree.statement(node)
        wrap_statement = self.tree.statement(wrap)
        if not same_block(self.tree, statement, wrap_statement):
            return None
        small = single_small(statement)
        target, inner = wrap_target(self.tree, wrap), wrapped_module(wrap)
        wrapper = dotted(target) if target is not None else None
        module = dotted(inner) if inner is not None else None
        wrap_small = single_small(wrap_statement)
        if wrapper is None or module is None or not isinstance(wrap_small, cst.Assign) or wrap_small.value is not wrap:
            return None
        if not isinstance(small, (cst.Assign, cst.Expr)) or not self.tree.inside(node, small.value):
            return None
        # after the move every use must name the plain module
        for n in self.tree.walk(statement):
            if isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) == wrapper and wrapper != module:
                parent = self.tree.parent(n)
                if not (isinstance(parent, cst.Attribute) and parent.attr.value == "module"):
                    return None
        if isinstance(small, cst.Assign) and self.tree.qname(node.func) in CONVERT_SYNC_BATCHNORM:
            if [dotted(t.target) for t in small.targets] != [module]:
                return None
        assigned: set[str] = set()
        for other in between(self.tree, wrap_statement, statement):
            if uses_beyond_parameters(self.tree, other, {wrapper, module}):
                return None
            assigned |= assigned_names(self.tree, other)
        if root_names(self.tree, statement) & assigned or names_in(self.tree, statement) & assigned_names(self.tree, wrap_statement) - {wrapper, module}:
            return None
        return statement, wrap_statement, wrapper, module

    def _before_wrap(self, plan: Plan, order: tuple) -> str | None:
        statement, wrap_statement, wrapper, module = order
        # the surgery now runs on the plain module: `model.module.fc` is `model.fc`
        for n in self.tree.walk(statement):
            if isinstance(n, cst.Attribute) and dotted(n) == f"{wrapper}.module":
                plan.replace(n, cst.parse_expression(module))
        plan.remove(wrap_statement)
        plan.insert_after(statement, [moved_statement(wrap_statement)])
        return "wraps the model in DDP after the change"


def _prefixes(name: str) -> list[str]:
    """`model.module.fc` -> `model.module.fc`, `model.module`, `model`."""
    parts = name.split(".")
    found = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    return [p for p in found if p and p != "self"]
