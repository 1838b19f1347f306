"""A driver: a script that trains nothing itself but hands the work to a class or function of
the script's own module beside it, which does (stargan's main.py: `Solver(loaders, config)`,
then `solver.train()`). That module is the one to convert: with no entry point of its own, it
sets the process group up where it is first needed. The driver then runs on every rank as it
is, save for two things: its output (a print of the config, a log line) is rank 0's alone, and
the folders it makes with `os.makedirs` are made race-free (`exist_ok=True`: every rank makes
them, and the second one would fail on the first one's folder). Before the group exists, the
rank comes from the environment torchrun sets.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.output import LOGGING, PRINT, Outputs
from ddpify.edit import add_keyword
from ddpify.edit.plan import Plan
from ddpify.program import Program
from ddpify.syntax import code, is_backward

CONDITION = 'int(os.environ.get("RANK", 0)) == 0'
MAKEDIRS = {"os.makedirs"}


def trainer_elsewhere(program: Program) -> tuple[cst.Call, str] | None:
    """The first call of a class or function of the script's own module that trains (a
    `backward()` in its methods, or in it), with that module's name."""
    tree = program.tree
    for call in tree.calls():
        name = tree.qname(call.func)
        found = program.companion_class(name)
        if found is not None:
            other, cls = found
            if any(is_backward(c) for method in other.class_methods(cls).values() for c in other.calls_in(method)):
                return call, name.rsplit(".", 1)[0]  # type: ignore[union-attr]
        function = program.companion_function(name)
        if function is not None and any(is_backward(c) for c in function[0].calls_in(function[1])):
            return call, name.rsplit(".", 1)[0]  # type: ignore[union-attr]
    return None


def convert_driver(program: Program, plan: Plan) -> bool:
    """Rank 0's output and race-free folders; False when there is nothing to change."""
    found = trainer_elsewhere(program)
    if found is None:
        return False
    call, module = found
    tree = program.tree
    outputs = Outputs(tree, program)
    changed = False
    for statement in tree.of_type(cst.SimpleStatementLine):
        if len(statement.body) != 1 or type(statement.body[0]) is not cst.Expr or program.owner_class(tree.function(statement)) is not None:
            continue
        value = statement.body[0].value
        function = tree.function(statement)
        out = outputs.of(value, function)
        if out is None or out.kind not in (PRINT, LOGGING):
            continue
        if any(program.callee(c, function) is not None or program.companion_class(tree.qname(c.func)) for c in tree.calls(value) if c is not value):
            continue  # `print(solver.evaluate())`: what it prints may take every rank
        plan.guard(statement, CONDITION)
        plan.change(statement, "rank-0", f"{out.kind} only on rank 0 (the rank from the environment: the process group is set up in {module}.py)")
        changed = True
    for made in tree.calls():
        if tree.is_call_to(made, MAKEDIRS) and s.arg(made, 2, "exist_ok") is None:
            plan.replace(made, add_keyword("exist_ok", "True"))
            plan.change(made, "rank-0", f"`{code(made.func)}(...)` with exist_ok=True: every rank makes the folder, and the second would fail on the first one's")
            changed = True
    if not changed:
        return False
    plan.add_import("os")
    plan.warn(call, (
        f"the training runs in `{code(call.func)}` ({module.replace('.', '/')}.py): convert that module (it then sets the process group up "
        "where it is first needed); this driver runs on every rank, its output on rank 0"
    ))
    return True
