"""DDP002 backend-without-cpu-fallback."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import (
    INIT_PROCESS_GROUP,
    ensure_import,
    facts,
    position,
)
from ddpify.syntax import code, string_value

NCCL_CONSTANTS = {"torch.distributed.Backend.NCCL", "torch.distributed.distributed_c10d.Backend.NCCL"}


class BackendWithoutCpuFallback(Rule):
    """## What it does
    Flags `init_process_group` with the backend fixed to `"nccl"` (a literal, or a variable
    that only ever holds it) when nothing gives the CPU a backend: no branch choosing
    `"gloo"`, no `if torch.cuda.is_available():` around the call, no check that stops the
    script early when there is no GPU.

    ## Why is this bad?
    NCCL only runs on CUDA devices. On a machine without GPUs (a laptop, a CI runner, a CPU
    node) the script dies in `init_process_group` or at the first collective with
    `ProcessGroupNCCL is only supported with GPUs, no GPUs found!`, and CPU tensors handed to
    an NCCL collective fail with `No backend type associated with device type cpu`. A CPU
    path is what lets the same script be tested with two CPU processes before it goes to
    the cluster.

    ## Example
    ```python
    dist.init_process_group("nccl")
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    ```

    ## Fix safety
    Safe: the `"nccl"` literal becomes `"nccl" if torch.cuda.is_available() else "gloo"`,
    which picks NCCL wherever it picked it before and gloo only where NCCL could not run.

    ## References
    - [torch.distributed backends](https://pytorch.org/docs/stable/distributed.html#backends)
    - [Which backend to use?](https://pytorch.org/docs/stable/distributed.html#which-backend-to-use)
    """

    code = "DDP002"
    name = "backend-without-cpu-fallback"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        if not self.tree.is_call_to(node, INIT_PROCESS_GROUP):
            return
        literals = self._nccl_literals(node)
        if literals and not self._gpu_only_path(node):
            self.report(
                node,
                'backend is always "nccl", which fails on machines without GPUs: use `"nccl" if torch.cuda.is_available() else "gloo"`',
                fix=lambda plan: self._fall_back(plan, literals),
            )

    def _nccl_literals(self, init: cst.Call) -> list[cst.BaseExpression]:
        """The `"nccl"` expressions the backend comes from, when it comes from nothing else."""
        backend = s.arg(init, 0, "backend")
        if backend is None:
            return []  # torch picks nccl for cuda and gloo for cpu itself
        origins = facts(self.script).resolve(backend.value, self.tree.function(init))
        if not origins or not all(self._is_nccl(o.node) for o in origins):
            return []
        return [o.node for o in origins]

    def _is_nccl(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.SimpleString):
            return (string_value(node) or "").lower() == "nccl"
        return isinstance(node, (cst.Attribute, cst.Name)) and self.tree.qname(node) in NCCL_CONSTANTS

    def _gpu_only_path(self, node: cst.CSTNode, seen: set | None = None) -> bool:
        """Under `if torch.cuda.is_available():` (or a test on the device type), after a check
        that stops the script when there is no GPU, or in a function only called that way."""
        child: cst.CSTNode = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test and self._asks_cuda(parent.test):
                return True
            child = parent
        function = self.tree.function(node)
        where = position(self.tree, node)
        for earlier in self.program.scope_nodes(function):
            if position(self.tree, earlier) >= where:
                break
            if isinstance(earlier, cst.Assert) and self._asks_cuda(earlier.test):
                return True
            if isinstance(earlier, cst.If) and self._asks_cuda(earlier.test) and _stops(earlier.body):
                return True
        seen = seen if seen is not None else set()
        if function is None or function in seen:
            return False
        seen.add(function)
        sites = self.program.call_sites(function)
        return bool(sites) and all(self._gpu_only_path(call, seen) for call, _ in sites)

    def _asks_cuda(self, test: cst.CSTNode) -> bool:
        for node in self.tree.walk(test):
            if isinstance(node, cst.Call) and (self.tree.qname(node.func) or "").startswith("torch.cuda."):
                return True
            if string_value(node) == "cuda":  # device.type == "cuda"
                return True
        return False

    def _fall_back(self, plan: Plan, literals: list[cst.BaseExpression]) -> str | None:
        for literal in literals:
            nccl, quote = (code(literal), code(literal)[-1]) if isinstance(literal, cst.SimpleString) else ('"nccl"', '"')
            replacement = f"{nccl} if torch.cuda.is_available() else {quote}gloo{quote}"
            plan.replace(literal, _parenthesized_if_needed(self.tree, literal, replacement))
        if not literals:
            return None
        ensure_import(plan, self.tree, "torch")
        return 'backend falls back to "gloo" when CUDA is not available'


def _stops(body: cst.BaseSuite) -> bool:
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    for statement in statements:
        small = statement.body if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
        for item in small:
            if isinstance(item, (cst.Raise, cst.Return)):
                return True
            if isinstance(item, cst.Expr) and isinstance(item.value, cst.Call):
                name = code(item.value.func)
                if name in {"sys.exit", "exit", "quit", "os._exit"}:
                    return True
    return False


def _parenthesized_if_needed(tree, literal: cst.CSTNode, replacement: str) -> cst.BaseExpression:
    """A conditional expression needs parentheses anywhere but as a whole argument or value."""
    expression = cst.parse_expression(replacement)
    parent = tree.parent(literal)
    if isinstance(parent, (cst.Arg, cst.Assign, cst.AnnAssign, cst.Return, cst.DictElement)):
        return expression
    return expression.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
