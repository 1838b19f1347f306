"""The names that hold a DDP-wrapped model, per function: where it is wrapped, the parameters and
`self.<attr>`s it is handed to (`Program.propagate`), and the other names bound to it after the
wrap: `best = model`, or the value of a same-file function or method that returns it (`best =
Trainer(model, loader).fit()` with `return self.model`), and names bound from those in turn.

Convert starts from the models it wraps (their anchors: the wrap goes right after), lint from
the names bound to `DDP(...)`; a name bound from the model before the wrap holds the plain module.
A function whose `return model` convert rewrites to the plain model (`return model.module`) is
named in `plain_returns`: what it returns is no wrapper.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import Tree, dotted, unchained

Refs = dict[cst.FunctionDef | None, set[str]]
Seed = tuple[str, cst.FunctionDef | None]


def wrapper_names(
    tree: Tree,
    program: Program,
    seeds: list[Seed],
    wrapped_at: Mapping[Seed, cst.CSTNode],
    plain_returns: Collection[Seed] = (),
    plain_arguments: Collection[int] = (),
) -> Refs:
    """Names denoting the wrapped model, per function. `wrapped_at`: for a seed, the statement
    after which its name holds the wrapper (before it, the plain module); `plain_arguments`: ids
    of arguments handed as the plain model (`Head(encoder.module)`)."""
    seeds = list(seeds)
    refs = program.propagate(seeds, plain_arguments)
    held = _instance_attributes(program, refs)
    if held:
        seeds += held
        refs = program.propagate(seeds, plain_arguments)
    for _ in range(3):  # `best = trainer.fit()`, then `final = best`
        aliases = _aliases(tree, program, refs, wrapped_at, plain_returns)
        if not aliases:
            break
        seeds += aliases
        refs = program.propagate(seeds, plain_arguments)
    return refs


def _instance_attributes(program: Program, refs: Refs) -> list[Seed]:
    """`trainer.model` outside the class, where `trainer` is an object of a class whose
    `__init__` holds the wrapper in `self.model` (it wraps it there, or is handed it):
    `trainer = Trainer(...)`, or a callback's parameter handed `self` (`cb.on_epoch_end(self)`)."""
    held: dict[cst.ClassDef, set[str]] = {}
    for function, names in refs.items():
        if function is None or function.name.value != "__init__" or (cls := program.owner_class(function)) is None:
            continue
        attributes = {name[5:] for name in names if name.startswith("self.") and name.count(".") == 1}
        if attributes:
            held.setdefault(cls, set()).update(attributes)
    found: list[Seed] = []
    if not held:
        return found
    for function in [None, *program.all_functions]:
        if program.owner_class(function) in held:
            continue  # its methods reach it as `self.model`
        for node in program.scope_nodes(function):
            if type(node) is not cst.Attribute:
                continue
            if type(node.value) is cst.Name and node.value.value != "self":
                classes = {program.instance_of(o.node, o.function) for o in program.origins(node.value, function)} or _handed_by_name(program, node.value.value, function)
            elif (kept := dotted(node.value)) is not None and kept.startswith("self.") and kept.count(".") == 1:
                classes = _kept_from_a_handed(program, kept, function)  # `self.trainer.model`, `self.trainer = trainer` in on_fit_start
            else:
                continue
            if len(classes) == 1 and (cls := classes.pop()) in held and node.attr.value in held[cls]:  # type: ignore[operator]
                seed = (f"{dotted(node.value)}.{node.attr.value}", function)
                if seed not in found:
                    found.append(seed)
    return found


def _handed_by_name(program: Program, param: str, function: cst.FunctionDef | None) -> set[cst.ClassDef | None]:
    """The classes of what a method's parameter is handed where the method is called through an
    object this file cannot follow (`for cb in self.callbacks: cb.on_epoch_end(self, epoch)`):
    the calls of a method of that name no same-file function answers."""
    if function is None or program.owner_class(function) is None or param not in program.param_names(function):
        return set()
    index = program.param_names(function).index(param)  # param_names leaves self out
    found: set[cst.ClassDef | None] = set()
    for caller in [None, *program.all_functions]:
        for call in program.calls_in(caller):
            # also `getattr(cb, name)(self)`: fastai's callbacks called by the name of the event (helper corpus CV, repro 05)
            by_event = type(call.func) is cst.Call and program.tree.is_builtin_call(call.func, "getattr") and len(call.func.args) == 2
            if not by_event and (type(call.func) is not cst.Attribute or call.func.attr.value != function.name.value or program.callee(call, caller) is not None):
                continue
            positional = [a for a in call.args if a.keyword is None and not a.star]
            found.add(program.instance_of(positional[index].value, caller) if 0 <= index < len(positional) else None)
    return found


def _kept_from_a_handed(program: Program, kept: str, function: cst.FunctionDef | None) -> set[cst.ClassDef | None]:
    """The classes of what a callback keeps from a method's parameter (`def on_fit_start(self,
    trainer): self.trainer = trainer`), by what the calls of that method hand it."""
    cls = program.owner_class(function)
    found: set[cst.ClassDef | None] = set()
    for method in program.methods.get(cls, {}).values() if cls is not None else ():
        value = program.bound_once(method, kept)
        if type(value) is cst.Name and value.value in program.param_names(method):
            found |= _handed_by_name(program, value.value, method)
    return found


def _aliases(tree: Tree, program: Program, refs: Refs, wrapped_at: Mapping[Seed, cst.CSTNode], plain_returns: Collection[Seed]) -> list[Seed]:
    found = []
    for function, names in refs.items():
        for call, caller in program.call_sites(function) if function is not None else ():
            statement = tree.parent(call)
            if type(statement) is cst.Assign and statement.value is call and len(statement.targets) == 1 and type(statement.targets[0].target) is cst.Tuple:
                found += [(alias, caller) for alias in _unpacked_wrappers(program, statement, caller, refs, plain_returns) if alias not in refs.get(caller, set())]
        for node in program.scope_nodes(function):
            if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                continue
            alias = node.targets[0].target.value
            if alias in names or not _holds_the_wrapper(tree, program, node.value, function, refs, wrapped_at, plain_returns):
                continue
            bound = [v for v, _ in program.assignments(function, alias)]
            if all(_holds_the_wrapper(tree, program, v, function, refs, wrapped_at, plain_returns) for v in bound):
                found.append((alias, function))
    return found


def _unpacked_wrappers(program: Program, node: cst.Assign, function: cst.FunctionDef | None, refs: Refs, plain_returns: Collection[Seed]) -> list[str]:
    """`model, opt = build(device)`, where the same-file builder wraps the model and returns
    `model, opt`: the names that get the wrapper (helper corpus BW, repro 07)."""
    target = program.callee(node.value, function) if type(node.value) is cst.Call else None
    if target is None:
        return []
    returned = program.returns(target[0])
    elements = node.targets[0].target.elements  # type: ignore[attr-defined]
    if not returned or any(type(r) is not cst.Tuple or len(r.elements) != len(elements) for r in returned):
        return []
    found = []
    for i, element in enumerate(elements):
        values = [dotted(r.elements[i].value) for r in returned]  # type: ignore[attr-defined]
        if type(element.value) is cst.Name and all(v is not None and v in refs.get(target[0], set()) and (v, target[0]) not in plain_returns for v in values):
            found.append(element.value.value)
    return found


def _holds_the_wrapper(
    tree: Tree, program: Program, value: cst.CSTNode, function: cst.FunctionDef | None, refs: Refs,
    wrapped_at: Mapping[Seed, cst.CSTNode], plain_returns: Collection[Seed],
) -> bool:  # fmt: skip
    if isinstance(value, cst.Call) and unchained(value) is not value:
        value = unchained(value)  # `cpu_model = model.cpu()`: the module it is called on (helper corpus BD, repro 08)
    ref = dotted(value) if isinstance(value, cst.BaseExpression) else None
    if ref is not None:
        wrap = wrapped_at.get((ref, function))
        if wrap is not None and (tree.order(value) < tree.order(wrap) or tree.inside(value, wrap)):
            return False  # bound before the wrap: the plain module
        return ref in refs.get(function, set())
    if type(value) is not cst.Call:
        return False
    target = program.callee(value, function)
    if target is None:
        return False
    returned = program.returns(target[0])
    return bool(returned) and all(
        (r := dotted(v)) is not None and r in refs.get(target[0], set()) and (r, target[0]) not in plain_returns for v in returned
    )


__all__ = ["wrapper_names"]
