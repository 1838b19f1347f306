"""Totals a loop adds up, and which of them describe the whole pass of the loop."""

from __future__ import annotations

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import Tree, dotted, method_call, unchained


def restarts_inside(tree: Tree, program: Program, loop: cst.For | cst.While, function: cst.FunctionDef | None, name: str) -> bool:
    """`running_loss = 0.0` inside the loop that adds to it (`if i % 100 == 99: print(...);
    running_loss = 0.0`): a window over this rank's last few batches, reported as it goes like
    a batch's loss, not a total over the rank's shard; one process reported the same window."""
    for value, index in program.assignments(function, name):
        if not tree.inside(value, loop.body) or made_when_missing(tree, value, name):
            continue
        if index is not None and isinstance(value, (cst.Tuple, cst.List)):
            if index >= len(value.elements):
                continue
            value = value.elements[index].value
        if not any(type(n) is cst.Name and n.value == name for n in tree.walk(value)):
            return True  # not `total = total + x`
    return bounded(tree, program, function, name)


def made_when_missing(tree: Tree, value: cst.CSTNode, name: str) -> bool:
    """`if sums is None: sums = torch.zeros(k, z.size(1))`: a total made at its first batch, once
    its shape is known (helper corpus CN, repro 01), not started again; also beside the one the
    test names (`if feat_sum is None:` making `outer_sum` too: BI, repro 02)."""
    test = next((a.test for a in tree.ancestors(value) if type(a) is cst.If), None)
    made = {t.target.value for a in tree.ancestors(value) if type(a) is cst.Assign for t in a.targets if type(t.target) is cst.Name}
    return (
        name in made and type(test) is cst.Comparison and type(test.left) is cst.Name and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) is cst.Is and type(test.comparisons[0].comparator) is cst.Name
        and test.comparisons[0].comparator.value == "None"
    )  # fmt: skip


def bounded(tree: Tree, program: Program, function: cst.FunctionDef | None, name: str) -> bool:
    """`recent = deque(maxlen=5)`: a window that forgets by itself, whatever the loop does."""
    values = [value for value, index in program.assignments(function, name) if index is None]
    return bool(values) and all(
        tree.is_call_to(value, DEQUE) and any(a.keyword is not None and a.keyword.value == "maxlen" or (a.keyword is None and i == 1) for i, a in enumerate(value.args))
        for value in values
    )


DEQUE = {"collections.deque"}
# Methods that collect a value into a container (`recent.append(loss.item())`).
COLLECTS = {"append", "appendleft", "extend", "add", "insert"}


def keeps_in_place(program: Program, found: tuple[cst.BaseExpression, str], function: cst.FunctionDef | None, totals: bool = False) -> bool:
    """`obj.method(...)` keeps what it is handed in `obj`: a tensor's in-place method
    (`memory.index_copy_(0, idx, f)`), or a method of a same-file class that changes its own
    state in place (a memory bank's `update`, writing `self.memory.index_copy_(...)` or
    `self.memory[i] = v`; helper corpus BB, repros 01 and 09), or, with `totals`, adds to its own
    totals or windows (a meter's `self.correct += ...`, `self.window.append(v)`: what a decision
    on it reads is this rank's own)."""
    obj, name = found
    if type(obj) is not cst.Name:
        return False
    if _in_place(name):
        return program.binds(function, obj.value)
    classes = {program.instance_of(unchained(o.node), o.function) for o in program.origins(obj, function)}  # also a parameter: what callers hand
    cls = classes.pop() if len(classes) == 1 else None
    method = program.class_methods(cls).get(name) if cls is not None else None
    if method is None:
        return False
    for node in program.scope_nodes(method):
        if totals and type(node) is cst.AugAssign and (dotted(node.target) or "").startswith("self."):
            return True  # a meter's `self.correct += ...` (helper corpus CD, repro 02)
        if totals and (kept := method_call(node)) is not None and kept[1] in COLLECTS and (dotted(kept[0]) or "").startswith("self."):
            return True  # a smoothed meter's `self.window.append(v)` (helper corpus CE, repro 01)
        if type(node) in (cst.Assign, cst.AugAssign):
            targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
            if any(type(t) is cst.Subscript and (dotted(t.value) or "").startswith("self.") for t in targets):
                return True
        elif (inner := method_call(node)) and _in_place(inner[1]) and (dotted(inner[0]) or "").startswith("self."):
            return True
    return False


def _in_place(method: str) -> bool:
    """`index_copy_`, `mul_`: a tensor method that changes the tensor itself."""
    return method.endswith("_") and not method.startswith("_")
