"""Where parameters start or stop requiring gradients, and what a model's wrap sees of it.

DDP averages only the parameters that required a gradient when it wrapped the model. A switch
after the wrap matters two ways: unfreezing (`requires_grad_(True)`, gradual fine-tuning)
leaves the newly trained parameters out of the averaging, while a model switched off and on as
a whole only after its wrap (a GAN's critic during the generator's step) was wrapped with all
of it and is fine. Convert wraps the model again after an unfreeze; lint DDP204 reports one.
Both read the switches from here (`Program.fact(GradSwitches)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import dotted, method_call, unchained

PARAMETER_METHODS = ("parameters", "named_parameters")


@dataclass
class GradSwitch:
    node: cst.For | cst.Call | cst.Assign  # the loop over the parameters, `m.requires_grad_(...)`, the call of a helper doing either, or `m.weight.requires_grad = flag`
    at: cst.CSTNode  # where lint reports it: the loop's `m.parameters()` (its `p.requires_grad_()`), or the call
    module: cst.BaseExpression  # whose parameters switch: `model.backbone`
    on: bool  # they start requiring gradients (False: the literal False turns them off)
    # only some of them, chosen in the loop (`if name.startswith("encoder."): p.requires_grad = False`)
    partial: bool = False


class GradSwitches:
    """The switches of one file, in source order."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.tree = program.tree

    @cached_property
    def all(self) -> list[GradSwitch]:
        """`for p in m.parameters(): p.requires_grad = flag` (or `p.requires_grad_(flag)`),
        `m.requires_grad_(flag)`, and a call of a same-file function that does the loop form to
        a module it is handed (`set_requires_grad(model.backbone, True)`) or, as a method of the
        model's class, to its own (`model.set_backbone_trainable(True)`), the flag then being
        what the call passes."""
        found: list[GradSwitch] = []
        in_loops: set[cst.Call] = set()
        for loop in self.tree.of_type(cst.For):
            switch = self._loop(loop)
            if switch is not None:
                found.append(self._over_a_loop(switch))
                in_loops.add(switch.at)  # type: ignore[arg-type]
        for assign in self.tree.of_type(cst.Assign):
            # `model.embedding.weight.requires_grad = True`: one parameter of a module, by its attribute (helper corpus BJ, repro 02)
            for target in assign.targets:
                held = target.target
                if type(held) is cst.Attribute and held.attr.value == "requires_grad" and type(held.value) is cst.Attribute and dotted(held.value) is not None:
                    value = assign.value
                    found.append(GradSwitch(assign, assign, held.value.value, not (type(value) is cst.Name and value.value == "False"), partial=True))
        for call in self.tree.calls():
            method = method_call(call)
            if method is not None and method[1] == "requires_grad_":
                if call not in in_loops:
                    found.append(self._over_a_loop(GradSwitch(call, call, method[0], not passes_false(call.args[:1]))))
                continue
            target = self.program.callee(call, self.tree.function(call))
            if target is None:
                continue
            helper = target[0]
            for inner in self.program.calls_in(helper):  # `module.requires_grad_(flag)` on what it is handed
                method = method_call(inner)
                if method is None or method[1] != "requires_grad_" or _root_name(method[0]) not in self.program.param_names(helper):
                    continue
                handed = self.program.argument_for(call, helper, _root_name(method[0]))  # type: ignore[arg-type]
                flag = inner.args[0].value if inner.args else None
                if type(flag) is cst.Name and flag.value in self.program.all_param_names(helper):
                    flag = self.program.argument_for(call, helper, flag.value) or self.program.default(helper, flag.value)
                if handed is not None and dotted(method[0]) == _root_name(method[0]):
                    found.append(GradSwitch(call, call, handed, not (type(flag) is cst.Name and flag.value == "False")))
            for loop in (n for n in self.program.scope_nodes(helper) if type(n) is cst.For):
                switch = self._loop(loop, helper, call)
                subject = _root_name(switch.module) if switch is not None else None
                if subject is not None and subject not in self.program.all_param_names(helper):
                    subject = self._iterated_parameter(subject, helper) or subject  # `for g in groups: for p in g.parameters()`
                # `set_requires_grad(model.backbone, True)`, or `set_backbone_trainable(model, True)` reaching `model.backbone`
                handed = self.program.argument_for(call, helper, subject) if subject is not None else None
                if subject == "self" and type(call.func) is cst.Attribute:
                    handed = call.func.value  # a method of the model's class: `model.set_backbone_trainable(True)`
                if switch is not None and handed is not None:
                    # `toggle([netD_A, netD_B], False)` over the list it walks: a switch of each
                    each = [e.value for e in handed.elements] if type(handed) in (cst.List, cst.Tuple) and subject != _root_name(switch.module) else [handed]
                    found += [GradSwitch(call, call, module, switch.on, switch.partial) for module in each]
        found.sort(key=lambda switch: self.tree.order(switch.node))
        return found

    def _over_a_loop(self, switch: GradSwitch) -> GradSwitch:
        """`for blk in model.blocks[:2]: for p in blk.parameters(): p.requires_grad = False` (or
        `blk.requires_grad_(False)`): the modules the outer loop walks switch, and the switch is
        that loop (helper corpus CS, repro 02: a freeze under reentrant checkpointing went unseen)."""
        if type(switch.module) is not cst.Name:
            return switch
        for outer in self.tree.loops(switch.node):
            if outer is not switch.node and type(outer) is cst.For and type(outer.target) is cst.Name and outer.target.value == switch.module.value:
                return GradSwitch(outer, switch.at, unchained(self.program.unwrap_iterable(outer.iter)), switch.on, switch.partial)
        return switch

    def _iterated_parameter(self, name: str, helper: cst.FunctionDef) -> str | None:
        """The helper's parameter that `name` walks: `for g in groups:` or `for i, g in
        enumerate(groups):` (ULMFiT's gradual unfreezing over layer groups, helper corpus BR, repro 02)."""
        for loop in (n for n in self.program.scope_nodes(helper) if type(n) is cst.For):
            targets = [loop.target] if type(loop.target) is cst.Name else [e.value for e in getattr(loop.target, "elements", [])]
            if not any(type(t) is cst.Name and t.value == name for t in targets):
                continue
            iterated = loop.iter
            if type(iterated) is cst.Call and type(iterated.func) is cst.Name and iterated.func.value == "enumerate" and iterated.args:
                iterated = iterated.args[0].value
            if type(iterated) is cst.Name and iterated.value in self.program.all_param_names(helper):
                return iterated.value
        return None

    def in_function(self, function: cst.FunctionDef | None) -> list[GradSwitch]:
        return [switch for switch in self.all if self.tree.function(switch.node) is function]

    def at(self, node: cst.CSTNode) -> GradSwitch | None:
        return next((switch for switch in self.all if switch.at is node), None)

    def toggled_after_wrap(self, name: str, wrap: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """`name`'s parameters are switched only as a whole and only after its wrap, and some
        switch turns them off (a GAN's critic during the generator's step): every one required a
        gradient when DDP wrapped it, and a backward with all of them off fires none of its hooks."""
        mine = [
            switch for switch in self.in_function(function)
            if (subject := dotted(switch.module)) is not None and (subject == name or subject.startswith(name + "."))
        ]  # fmt: skip
        wrapped = self.tree.order(wrap)
        return any(not switch.on for switch in mine) and all(
            dotted(switch.module) == name and not switch.partial and self.tree.order(switch.node) > wrapped and not self.tree.inside(switch.node, wrap)
            for switch in mine
        )

    def _loop(self, loop: cst.For, helper: cst.FunctionDef | None = None, call: cst.Call | None = None) -> GradSwitch | None:
        """`for p in m.parameters(): p.requires_grad = X` (or `p.requires_grad_(X)`). In a helper,
        X may be its parameter: what `call` passes for it."""
        iterated = unchained(self.program.unwrap_iterable(loop.iter))
        found = method_call(iterated)
        if not found or found[1] not in PARAMETER_METHODS:
            return None
        for node in self.tree.walk(loop.body):
            if type(node) is cst.Assign and any(type(t.target) is cst.Attribute and t.target.attr.value == "requires_grad" for t in node.targets):
                value = node.value
                if helper is not None and call is not None and type(value) is cst.Name and value.value in self.program.all_param_names(helper):
                    # `p.requires_grad = flag` in `set_requires_grad(module, flag)`: what the call passes
                    passed = self.program.argument_for(call, helper, value.value)
                    value = passed if passed is not None else (self.program.default(helper, value.value) or value)
                partial = any(type(a) is cst.If for a in self.tree.ancestors(node) if self.tree.inside(a, loop.body))
                return GradSwitch(loop, iterated, found[0], not (type(value) is cst.Name and value.value == "False"), partial)
            method = method_call(node) if type(node) is cst.Call else None
            if method and method[1] == "requires_grad_":
                partial = any(type(a) is cst.If for a in self.tree.ancestors(node) if self.tree.inside(a, loop.body))
                return GradSwitch(loop, node, found[0], not passes_false(node.args), partial)  # type: ignore[attr-defined]
        return None


def _root_name(module: cst.BaseExpression) -> str | None:
    """The name a module expression starts from: `model` of `model.backbone`, of
    `model.module.backbone` and of `getattr(model, "module", model).backbone`."""
    node = module
    while True:
        if type(node) in (cst.Attribute, cst.Subscript):
            node = node.value  # type: ignore[union-attr]
        elif type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "getattr" and node.args:
            node = node.args[0].value
        else:
            break
    return node.value if type(node) is cst.Name else None


def passes_false(args) -> bool:
    """`requires_grad_(False)`: the first argument is the literal False."""
    return bool(args) and type(args[0].value) is cst.Name and args[0].value.value == "False"
