"""Where a loop is left early: `break`, `return`, and a flag its `while` test reads.

`if loss.item() < t: break` is the usual way; `done = True` under `while not done:` and
`stop = True` under `while step < n and not stop:` stop the loop just as well, one test later.
Convert makes such a decision a shared one (StopTogether); lint reports it when it is taken on
one rank's own numbers (DDP402). Both read the exits from here.
"""

from __future__ import annotations

from collections.abc import Callable

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


# Calls that end the program.
PROGRAM_EXITS = {"sys.exit", "builtins.exit", "builtins.quit", "os._exit"}


def leaves(tree: Tree, program: Program, statement: cst.If, loops: list[cst.For | cst.While]) -> bool:
    """Whether the body of `statement` leaves one of `loops` (which hold it): a `return` of its
    function, a `break` of a loop around the `if` (not of one inside it), a flag one of `loops`
    (a `while`) stops on, or the program's end (`sys.exit()`, a `raise`)."""
    function = tree.function(statement)
    for inner in tree.walk(statement.body):
        if type(inner) is cst.Assign and any(stops_by_flag(tree, program, inner, loop) for loop in loops):
            return True
        if type(inner) is cst.Return and tree.function(inner) is function:
            return True
        if type(inner) is cst.Raise or tree.is_call_to(inner, PROGRAM_EXITS):
            return True  # `sys.exit(0)` or `raise ...` on one rank: the others wait for it in backward()
        if type(inner) is cst.Break and not any(tree.inside(lp, statement.body) for lp in tree.loops(inner)):
            return True
    return False


def skips(tree: Tree, statement: cst.CSTNode, loop: cst.For | cst.While, runs: Callable[[cst.CSTNode], bool]) -> bool:
    """Whether a `continue` under `statement` skips a statement that `runs` accepts later in
    the same iteration of `loop` (a backward(), a collective)."""
    child: cst.CSTNode = statement
    for parent in tree.ancestors(statement):
        if parent is loop:
            return False
        if type(parent) is cst.IndentedBlock:
            body = list(parent.body)
            later = body[body.index(child) + 1 :] if child in body else []
            if any(runs(st) for st in later):
                return True
        child = parent
    return False


def continues(tree: Tree, statement: cst.If, loop: cst.For | cst.While) -> bool:
    """Whether the body of `statement` goes on to the next iteration of `loop` (`continue`)."""
    for inner in tree.walk(statement.body):
        if type(inner) is cst.Continue:
            loops = tree.loops(inner)
            if loops and loops[0] is loop:
                return True
    return False


# Clocks: each rank reads its own, so a time budget (`if time.time() - start > limit: break`)
# runs out at a different step on each rank.
CLOCKS = {
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "datetime.datetime.now", "datetime.datetime.utcnow",
}  # fmt: skip


def reads_clock(tree: Tree, node: cst.CSTNode) -> bool:
    return any(tree.is_call_to(call, CLOCKS) for call in tree.calls(node))


def clock_names(tree: Tree, program: Program, function: cst.FunctionDef | None) -> set[str]:
    """Names `function` (or the module) binds from a clock reading, directly or through
    other such names (`elapsed = time.time() - start`)."""
    assignments = [
        node
        for scope in ({function, None} if function is not None else {None})
        for node in program.scope_nodes(scope)
        if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign) and node.value is not None
    ]
    found: set[str] = set()
    grown = True
    while grown:
        grown = False
        for node in assignments:
            if reads_clock(tree, node.value) or any(type(n) is cst.Name and n.value in found for n in tree.walk(node.value)):
                targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
                for target in targets:
                    for name in program.names_in(target):
                        if name not in found:
                            found.add(name)
                            grown = True
    return found
