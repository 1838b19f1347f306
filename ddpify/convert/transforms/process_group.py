"""Process group setup at the top of the entry point, and its teardown on the way out."""

from __future__ import annotations

import re
import textwrap

import libcst as cst

from ddpify.analysis.exits import PROGRAM_EXITS
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.edit.plan import BLANK
from ddpify.syntax import code

INIT = """\
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)  # from here on "cuda" is this rank's GPU
# gloo for CPU tensors, nccl for CUDA ones: right whichever device the script picks
backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
if "RANK" in os.environ:
    dist.init_process_group(backend)
else:
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
"""
SETUP = "# One process per GPU: torchrun sets LOCAL_RANK/RANK/WORLD_SIZE; plain `python` runs a world of one.\n" + INIT
DEVICE = 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'

# A module with no entry point of its own sets the group up on first use, and tears it down at exit.
LAZY_SETUP = (
    '''

def init_distributed():
    """Set up the process group once, on first use (this module has no entry point of its own).

    torchrun sets LOCAL_RANK/RANK/WORLD_SIZE; plain `python` runs a world of one. A caller that
    set the group up already keeps its own.
    """
    if dist.is_initialized():
        return
'''
    + textwrap.indent(INIT, "    ")
    + "    atexit.register(dist.destroy_process_group)  # torn down once, when the program ends\n"
)


class ProcessGroup(Transform):
    """Runs last: the setup defines `rank` / `world_size` only when other edits use them."""

    name = "process-group"
    DESCRIPTION = "init_process_group from LOCAL_RANK (gloo for CPU tensors, nccl for CUDA ones) at the top of the entry point"

    def run(self) -> None:
        entry = self.facts.entry
        if entry.kind == "library":
            self._lazy_setup()
            return
        source = SETUP + (DEVICE if "device" in self.plan.uses else "")
        for name in ("rank", "world_size"):
            if name in self.plan.uses:
                source += f"{name} = dist.get_{name}()\n"
        local = self._imported_here(entry.function)
        if local:  # `import os` further down in main(): the name is main()'s own, unbound until then (helper corpus CA, repro 01)
            source = "".join(f"import {name}\n" for name in ("os", "torch") if name in local) + source
        renamed = next((n for n in self.facts.taken if n.endswith("_backend")), None)
        if renamed is not None:  # the script has a `backend` of its own
            source = re.sub(r"\bbackend\b", renamed, source)
        setup = statements(source)
        if entry.kind == "module":
            assert entry.after is not None
            setup[0] = setup[0].with_changes(leading_lines=[BLANK, *setup[0].leading_lines])
            self.plan.insert_after(entry.after, setup)
            anchor: cst.CSTNode = entry.after
        else:
            self.plan.prepend(entry.block, setup, separate=True)
            anchor = entry.block.body[0]
        self.change(anchor, f"process group set up at the top of {entry.label} (gloo for CPU tensors, nccl for CUDA ones)")
        for name in ("os", "torch"):
            self.plan.add_import(name)
        self.plan.add_import("torch.distributed", asname="dist")


    def _imported_here(self, function: cst.FunctionDef | None) -> set[str]:
        """`os` and `torch` when `function` imports them itself: Python makes them its locals."""
        found: set[str] = set()
        for node in self.program.scope_nodes(function) if function is not None else ():
            if type(node) is cst.Import:
                found |= {(a.asname.name.value if a.asname else code(a.name).split(".")[0]) for a in node.names}  # type: ignore[union-attr]
        return found & {"os", "torch"}

    def _lazy_setup(self) -> None:
        """`init_distributed()` at the top of each function that wraps a model or builds a training loader."""
        assert self.facts.entry.after is not None
        self.plan.insert_after(self.facts.entry.after, statements(LAZY_SETUP))
        first_uses = {model.function for model in self.facts.models}
        first_uses |= {plan.function for plan in self.facts.loader_plans}
        for function in sorted((f for f in first_uses if f is not None), key=self.tree.line):
            self.plan.prepend(function.body, statements("init_distributed()\n"))
            self.change(function, f"process group set up on first use, in `{function.name.value}` (no entry point in this file)")
        self.warn(
            None,
            "this file has no entry point: the process group is set up on first use and torn down at exit; "
            "run the script that imports it under torchrun",
        )
        for name in ("atexit", "os", "torch"):
            self.plan.add_import(name)
        self.plan.add_import("torch.distributed", asname="dist")


class Teardown(Transform):
    name = "teardown"
    DESCRIPTION = "destroy_process_group() on the way out of the entry point"

    def run(self) -> None:
        entry = self.facts.entry
        if entry.kind == "library":
            return  # init_distributed() registered the teardown at exit
        teardown = "dist.destroy_process_group()\n"
        block = entry.block
        if entry.kind == "module" and block.body and self.tree.is_main_guard(block.body[-1]):
            # the program ends in its `__main__` block: tear down there, not when the module is imported
            block = block.body[-1].body  # type: ignore[attr-defined]
        body = block.body
        last = body[-1]
        if entry.function is not None:
            for node in self.program.scope_nodes(entry.function):
                if isinstance(node, cst.Return):
                    statement = self.tree.statement(node)
                    self.plan.insert_before(statement, statements(teardown))
                    self.change(statement, "process group destroyed before returning")
        for node in self.program.scope_nodes(entry.function):
            exit_call = None
            if self.tree.is_call_to(node, PROGRAM_EXITS) and isinstance(self.tree.parent(node), cst.Expr):
                exit_call = node  # `sys.exit(0)` when training has converged
            elif type(node) is cst.Raise and self.tree.is_call_to(node.exc, {"builtins.SystemExit"}):
                exit_call = node.exc  # `raise SystemExit(main())`
            statement = self.tree.statement(node) if exit_call is not None else None
            if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
                continue
            runs = [a for a in exit_call.args if any(type(n) is cst.Call for n in self.tree.walk(a.value))]  # type: ignore[union-attr]
            if runs:  # `sys.exit(main())`: the program runs inside the call; its status first, then the teardown
                status = next(n for n in ("exit_code", "status", "return_code") if not self.program.binds(entry.function, n))
                self.plan.insert_before(statement, statements(f"{status} = {code(runs[0].value)}\n" + teardown))
                self.plan.replace(runs[0].value, cst.Name(status))
                self.change(statement, f"`{code(runs[0].value)}` runs first, then the process group is destroyed, then the program exits with its status")
            else:
                self.plan.insert_before(statement, statements(teardown))
                self.change(statement, "process group destroyed before the program exits")
        if not _exits(last) and not self._ends_in_exit(last):
            self.plan.append(block, statements(teardown))
            where = "the __main__ block" if block is not entry.block else entry.label
            self.change(last, f"process group destroyed at the end of {where}")

    def _ends_in_exit(self, statement: cst.BaseStatement) -> bool:
        """`sys.exit(main())` as the last line: the teardown goes before the exit, not after it."""
        return (
            isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and type(statement.body[0]) is cst.Expr
            and self.tree.is_call_to(statement.body[0].value, PROGRAM_EXITS)
        )  # fmt: skip


def _exits(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[-1], (cst.Return, cst.Raise))
