"""Where a loop is left early: `break`, `return`, and a flag its `while` test reads.

`if loss.item() < t: break` is the usual way; `done = True` under `while not done:` and
`stop = True` under `while step < n and not stop:` stop the loop just as well, one test later.
Convert makes such a decision a shared one (StopTogether); lint reports it when it is taken on
one rank's own numbers (DDP402). Both read the exits from here.
"""

from __future__ import annotations

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import Tree


def while_flags(tree: Tree, loop: cst.For | cst.While) -> set[str]:
    """The names a `while` test reads (none for a `for`)."""
    if type(loop) is not cst.While:
        return set()
    return {n.value for n in tree.walk(loop.test) if type(n) is cst.Name}


def stops_by_flag(tree: Tree, program: Program, statement: cst.CSTNode, loop: cst.For | cst.While) -> bool:
    """Whether `statement` (an assignment) sets a flag the test of `loop` reads, in the loop's
    own function: the loop ends at its next test."""
    if type(statement) is not cst.Assign or tree.function(statement) is not tree.function(loop):
        return False
    flags = while_flags(tree, loop)
    return bool(flags) and any(name in flags for t in statement.targets for name in program.names_in(t.target))


def flag_stops(tree: Tree, program: Program, node: cst.CSTNode) -> list[tuple[cst.Assign, cst.While]]:
    """The assignments in `node` that stop a `while` loop around them by its flag, each with
    the loop (the outermost one, when several read the flag)."""
    found = []
    for inner in tree.walk(node):
        if type(inner) is not cst.Assign:
            continue
        for loop in reversed(tree.loops(inner)):
            if stops_by_flag(tree, program, inner, loop):
                found.append((inner, loop))
                break
    return found


def leaves(tree: Tree, program: Program, statement: cst.If, loops: list[cst.For | cst.While]) -> bool:
    """Whether the body of `statement` leaves one of `loops` (which hold it): a `return` of its
    function, a `break` of a loop around the `if` (not of one inside it), or a flag one of
    `loops` (a `while`) stops on."""
    function = tree.function(statement)
    for inner in tree.walk(statement.body):
        if type(inner) is cst.Assign and any(stops_by_flag(tree, program, inner, loop) for loop in loops):
            return True
        if type(inner) is cst.Return and tree.function(inner) is function:
            return True
        if type(inner) is cst.Break and not any(tree.inside(lp, statement.body) for lp in tree.loops(inner)):
            return True
    return False
