"""Totals a loop adds up, and which of them describe the whole pass of the loop."""

from __future__ import annotations

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import Tree


def restarts_inside(tree: Tree, program: Program, loop: cst.For | cst.While, function: cst.FunctionDef | None, name: str) -> bool:
    """`running_loss = 0.0` inside the loop that adds to it (`if i % 100 == 99: print(...);
    running_loss = 0.0`): a window over this rank's last few batches, reported as it goes like
    a batch's loss, not a total over the rank's shard; one process reported the same window."""
    for value, index in program.assignments(function, name):
        if not tree.inside(value, loop.body):
            continue
        if index is not None and isinstance(value, (cst.Tuple, cst.List)):
            if index >= len(value.elements):
                continue
            value = value.elements[index].value
        if not any(type(n) is cst.Name and n.value == name for n in tree.walk(value)):
            return True  # not `total = total + x`
    return bounded(tree, program, function, name)


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
