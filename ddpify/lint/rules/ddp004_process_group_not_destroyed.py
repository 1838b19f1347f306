"""DDP004 process-group-not-destroyed."""

from __future__ import annotations

import libcst as cst

from ddpify.edit import Plan, statements
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import DESTROY, facts
from ddpify.syntax import code, dotted


class ProcessGroupNotDestroyed(Rule):
    """## What it does
    Flags `init_process_group` in a script that never calls
    `dist.destroy_process_group()` (nor registers it, e.g. with `atexit`).

    Only inits that run when the script runs count (module code and the functions it calls
    or spawns): a helper module whose `setup()` is called from elsewhere is left alone, and
    so is a script that uses a framework that tears the group down itself.

    ## Why is this bad?
    A process group left open at exit holds its NCCL communicators and the TCP store until
    the interpreter tears them down in an unspecified order. Since 2.4 PyTorch warns
    (`process group has NOT been destroyed before we destruct ProcessGroupNCCL`), and the
    exit can hang or crash on some ranks, which launchers report as a failed job even though
    training finished.

    ## Example
    ```python
    def main():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        train()
    ```

    ## Use instead
    ```python
    def main():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        train()
        dist.destroy_process_group()
    ```

    ## Fix safety
    Safe: `destroy_process_group()` is added at the end of the entry function (before each of
    its `return`s), at the end of a worker started with `torch.multiprocessing.spawn`, or
    after the last statement of the block that starts the work when the setup is a helper
    called from module level. When the init does not always run (`if args.distributed:`),
    the teardown goes under `if dist.is_initialized():`. No fix when a `return` sits on one
    line with its `if`.

    ## References
    - [torch.distributed: Shutdown](https://pytorch.org/docs/stable/distributed.html#shutdown)
    - [Getting started with DDP](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html) (`cleanup()`)
    - [pytorch/pytorch#122358](https://github.com/pytorch/pytorch/pull/122358): documents `destroy_process_group` and why it matters
    """

    code = "DDP004"
    name = "process-group-not-destroyed"
    fix = "safe"

    def visit_Module(self, node: cst.Module) -> bool:
        f = facts(self.script)
        if f.uses_framework or self._destroys():
            return False
        for init in f.init_calls:  # the first init that runs is enough
            if self.tree.function(init) in f.reachable:
                self.report(
                    init,
                    "`init_process_group` without `destroy_process_group()` on the way out: call it when training ends",
                    fix=lambda plan, init=init: self._tear_down(plan, init),
                )
                break
        return False

    def _destroys(self) -> bool:
        """Any call or reference (`atexit.register(dist.destroy_process_group)`) counts."""
        leaves = {name.rpartition(".")[2] for name in DESTROY}
        aliases = leaves | {
            a.asname.name.value
            for a in self.tree.of_type(cst.ImportAlias)
            if a.asname is not None and isinstance(a.asname.name, cst.Name) and (dotted(a.name) or "").rpartition(".")[2] in leaves
        }
        candidates = [n for n in self.tree.of_type(cst.Attribute) if n.attr.value in leaves]
        candidates += [n for n in self.tree.of_type(cst.Name) if n.value in aliases]
        return any(self.tree.qname(n) in DESTROY for n in candidates)

    # --- fix ---------------------------------------------------------------------------

    def _tear_down(self, plan: Plan, init: cst.Call) -> str | None:
        block, function, path = self._exit_block(init)
        if block is None:
            return None
        returns = [n for n in self.program.scope_nodes(function) if isinstance(n, cst.Return)] if function is not None else []
        statements_before = []
        for ret in returns:
            statement = self.tree.statement(ret)
            if not isinstance(statement, cst.SimpleStatementLine):
                return None  # `if ...: return` on one line
            statements_before.append(statement)
        teardown = self._teardown(init, plan, conditional=any(self._conditional(n) for n in path))
        for statement in statements_before:
            plan.insert_before(statement, statements(teardown))
        last = block.body[-1]
        if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], (cst.Return, cst.Raise))):
            plan.append(block, statements(teardown))
        where = f"{function.name.value}()" if function is not None and block is function.body else "the script"
        return f"`{teardown.strip().splitlines()[-1].strip()}` added at the end of {where}"

    def _teardown(self, init: cst.Call, plan, conditional: bool) -> str:
        """`dist.destroy_process_group()` spelled the way the script spells the init, under
        `if dist.is_initialized():` when the init does not always run."""
        func = init.func
        if isinstance(func, cst.Attribute):
            prefix = f"{code(func.value)}."
        else:
            prefix = ""
            plan.add_import("torch.distributed", "destroy_process_group")
            if conditional:
                plan.add_import("torch.distributed", "is_initialized")
        destroy = f"{prefix}destroy_process_group()\n"
        return f"if {prefix}is_initialized():\n    {destroy}" if conditional else destroy

    def _exit_block(self, init: cst.Call):
        """Where the run ends: the end of the entry function, or of the module-level block
        that calls the setup helper, or of the block that holds a module-level init; and the
        calls on the way from there to the init."""
        path: list[cst.CSTNode] = [init]
        function = self.tree.function(init)
        seen = set()
        while function is not None and function not in seen:
            seen.add(function)
            sites = self.program.call_sites(function)
            if len(sites) != 1 or self._passed_as_value(function):
                return _body(function), function, path  # spawned workers tear down themselves
            call, caller = sites[0]
            if caller is None:
                block, statement = self._top_level(call)
                if block.body[-1] is statement:
                    return _body(function), function, path  # `main()` is the last thing the script does
                return block, None, [*path, call]  # a setup helper: the work follows it in this block
            path.append(call)
            function = caller
        if function is not None:
            return None, None, path
        return self._top_level(init)[0], None, path

    def _passed_as_value(self, function: cst.FunctionDef) -> bool:
        """`mp.spawn(worker, ...)`, `Process(target=worker)`: the function runs in other processes."""
        name = function.name.value
        for node in self.tree.walk():
            if isinstance(node, cst.Name) and node.value == name and node is not function.name:
                parent = self.tree.parent(node)
                if not (isinstance(parent, cst.Call) and parent.func is node):
                    return True
        return False

    def _conditional(self, node: cst.CSTNode) -> bool:
        """Whether `node` may not run when its scope runs (the other branch initializing too does not count)."""
        child = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.Module)):
                return False
            if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test:
                other = parent.orelse if child is parent.body else parent.body
                if other is None or not self._initializes(other):
                    return True
            if isinstance(parent, (cst.While, cst.For, cst.ExceptHandler)) or (
                isinstance(parent, cst.BooleanOperation) and child is parent.right
            ):
                return True
            child = parent
        return False

    def _initializes(self, node: cst.CSTNode) -> bool:
        f = facts(self.script)
        function = self.tree.function(node)
        for call in self.tree.calls(node):
            if call in f.all_inits:
                return True
            target = self.program.callee(call, function)
            if target is not None and target[0] in f.initializing:
                return True
        return False

    def _top_level(self, node: cst.CSTNode) -> tuple[cst.IndentedBlock | cst.Module, cst.CSTNode]:
        """The module, or the `__main__` block, and its statement that holds `node`."""
        chain = [node, *self.tree.ancestors(node)]
        statement = chain[-2]  # the child of the Module
        if self.tree.is_main_guard(statement) and isinstance(statement.body, cst.IndentedBlock):
            return statement.body, chain[-4]  # Module > If > IndentedBlock > statement
        return self.tree.module, statement


def _body(function: cst.FunctionDef) -> cst.IndentedBlock | None:
    return function.body if isinstance(function.body, cst.IndentedBlock) else None
