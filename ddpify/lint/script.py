"""What lint rules know about a DDP script, computed once per file and shared by every rule.

- whether the file is distributed at all (RULES.md "Conventions": others get no findings);
- rank guards in their usual spellings: `rank == 0`, `dist.get_rank() == 0`,
  `local_rank in (-1, 0)`, `args.local_rank == 0`, `is_main_process()`, `master_process`,
  `if rank != 0: return`, and names assigned from any of these;
- collectives: torch.distributed collectives, forwards of DDP-wrapped models, and same-file
  functions that run either (transitively);
- the DDP-wrapped models, followed through parameters and `self`, the same-file classes of
  the modules they hold, and which methods of those classes run the forward;
- sharded loaders (a DistributedSampler) and the loops that train (call `backward()`).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import TypeVar

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis import sync
from ddpify.analysis.ranks import GET_RANK, MAIN_PROCESS_NAMES, RANK_ENV, RANK_NAMES
from ddpify.analysis.wrappers import wrapper_names
from ddpify.program import Program
from ddpify.syntax import Tree, code, dotted, string_value

EXITS = (cst.Return, cst.Continue, cst.Break, cst.Raise)
# Module methods that return the module itself (`Net().to(device)` is a `Net`).
# Text every distributed file contains (`Script.distributed` needs a torch.distributed or
# DistributedSampler/DistributedDataParallel name, or a RANK/WORLD_SIZE string): a file without
# any is not parsed at all.
DISTRIBUTED_TEXT = re.compile(r"[Dd]istributed|RANK|WORLD_SIZE")
T = TypeVar("T")


class Script:
    """One parsed file and the DDP facts rules ask about."""

    def __init__(self, tree: Tree, path: str) -> None:
        self.tree = tree
        self.path = path
        self.program = Program(tree)
        self._shared: dict[type, object] = {}

    def shared(self, factory: type[T]) -> T:
        """One `factory(self)` per script: analyses that several rules share are built once."""
        if factory not in self._shared:
            self._shared[factory] = factory(self)
        return self._shared[factory]  # type: ignore[return-value]

    # --- is this a distributed script? ---------------------------------------------

    @cached_property
    def distributed(self) -> bool:
        """Imports or uses torch.distributed, DDP or DistributedSampler, or reads RANK/LOCAL_RANK."""
        tree = self.tree
        if any(_is_distributed_name(name) for node in tree.of_type(cst.Import, cst.ImportFrom) for name in _imported_names(node)):
            return True
        if any(string_value(node) in RANK_ENV | {"WORLD_SIZE"} for node in tree.of_type(cst.SimpleString)):
            return True
        return any(_is_distributed_name(tree.qname(node) or "") for node in tree.of_type(cst.Attribute, cst.Name))

    # --- ranks -----------------------------------------------------------------------

    def is_rank_expr(self, node: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """An expression whose value differs from rank to rank (`args.rank % ngpus` too)."""
        if isinstance(node, cst.BinaryOperation):
            return self.is_rank_expr(node.left, function) or self.is_rank_expr(node.right, function)
        if isinstance(node, cst.Call):
            if self.tree.qname(node.func) in GET_RANK:
                return True
            if self.tree.is_builtin_call(node, "int") and node.args:
                return self.is_rank_expr(node.args[0].value, function)
            return self._reads_rank_env(node)
        if isinstance(node, cst.Subscript):
            return self._reads_rank_env(node)
        name = dotted(node)
        if name is None:
            return False
        if name.rsplit(".", 1)[-1] in RANK_NAMES:
            return True
        return self._assigned_from(name, function, self.is_rank_expr)

    def _reads_rank_env(self, node: cst.CSTNode) -> bool:
        return any(isinstance(n, cst.SimpleString) and string_value(n) in RANK_ENV for n in self.tree.walk(node))

    def is_rank_condition(self, node: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """A test that is true on some ranks and false on others."""
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            return self.is_rank_condition(node.expression, function)
        if isinstance(node, cst.BooleanOperation):
            return self.is_rank_condition(node.left, function) or self.is_rank_condition(node.right, function)
        if isinstance(node, cst.Comparison):
            sides = [node.left, *(c.comparator for c in node.comparisons)]
            if not any(self.is_rank_expr(side, function) for side in sides):
                return False
            # `local_rank != -1` asks "distributed or not", which every rank answers alike
            constants = [side for side in sides if not self.is_rank_expr(side, function)]
            return not all(_is_minus_one(c) for c in constants)
        if isinstance(node, cst.Call):
            name = dotted(node.func)
            if name is not None and name.rsplit(".", 1)[-1] in MAIN_PROCESS_NAMES:
                return True
            target = self.program.callee(node, function)
            if target is not None:
                return any(self.is_rank_condition(value, target[0]) for value in self.program.returns(target[0]))
            return False
        name = dotted(node)
        if name is None:
            return False
        if name.rsplit(".", 1)[-1] in MAIN_PROCESS_NAMES:
            return True
        return self._assigned_from(name, function, self.is_rank_condition)

    def _assigned_from(self, name: str, function: cst.FunctionDef | None, predicate) -> bool:
        scopes = [function, None] if function is not None else [None]
        if name.startswith("self.") and function is not None:
            cls = self.program.owner_class(function)
            scopes = list(self.program.methods.get(cls, {}).values()) if cls else []
        for scope in scopes:
            for value, index in self.program.assignments(scope, name):
                if index is None and isinstance(value, cst.BaseExpression) and value is not None:
                    key = (id(value), predicate.__name__)
                    if key in self._busy:
                        continue
                    self._busy.add(key)
                    try:
                        if predicate(value, scope):
                            return True
                    finally:
                        self._busy.discard(key)
        return False

    @cached_property
    def _busy(self) -> set:
        return set()

    def rank_guard(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The rank condition that lets only some ranks reach `node`, if any.

        Conditions count in `if`/`elif`/`else`, `while`, conditional expressions, `and`/`or`
        short-circuits, and early exits (`if rank != 0: return`) earlier in an enclosing block.
        """
        function = self.tree.function(node)
        child: cst.CSTNode = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(parent, (cst.If, cst.While)) and child is not parent.test and self.is_rank_condition(parent.test, function):
                return parent.test
            if isinstance(parent, cst.IfExp) and child is not parent.test and self.is_rank_condition(parent.test, function):
                return parent.test
            if isinstance(parent, cst.BooleanOperation) and child is parent.right and self.is_rank_condition(parent.left, function):
                return parent.left
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                exit_guard = self._early_exit_before(parent, child, function)
                if exit_guard is not None:
                    return exit_guard
            child = parent
        return None

    def _early_exit_before(self, block, statement, function) -> cst.CSTNode | None:
        """`if rank != 0: return` earlier in `block` than `statement` (the first such exit of
        each block is found once)."""
        key = id(block)
        found = self._exits_cache.get(key)
        if found is None:
            found = (len(block.body), None)
            for index, earlier in enumerate(block.body):
                if isinstance(earlier, cst.If) and self.is_rank_condition(earlier.test, function) and _ends_in_exit(earlier.body):
                    found = (index, earlier.test)
                    break
            self._exits_cache[key] = found
        index, test = found
        if test is None:
            return None
        return test if any(earlier is statement for earlier in block.body[index + 1 :]) else None

    @cached_property
    def _exits_cache(self) -> dict[int, tuple[int, cst.CSTNode | None]]:
        return {}

    def is_guarded(self, node: cst.CSTNode) -> bool:
        return self.rank_guard(node) is not None

    # --- DDP models and collectives ----------------------------------------------------

    @cached_property
    def ddp_wraps(self) -> list[cst.Call]:
        return [c for c in self.tree.calls() if self.tree.is_call_to(c, s.DDP)]

    @cached_property
    def ddp_refs(self) -> dict[cst.FunctionDef | None, set[str]]:
        """Names that denote a DDP-wrapped model, per function (None: module level)."""
        seeds, wrapped_at = [], {}
        for call in self.ddp_wraps:
            parent = self.tree.parent(call)
            if isinstance(parent, cst.Assign):
                function = self.tree.function(call)
                for t in parent.targets:
                    if (name := dotted(t.target)) is not None:
                        seeds.append((name, function))
                        wrapped_at.setdefault((name, function), self.tree.statement(call))
        return wrapper_names(self.tree, self.program, seeds, wrapped_at)

    def is_ddp_model(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        name = dotted(node) if isinstance(node, cst.BaseExpression) else None
        return name is not None and name in self.ddp_refs.get(function, set())

    def module_classes(self, wrapper: cst.BaseExpression, function: cst.FunctionDef | None) -> set[cst.ClassDef]:
        """Same-file classes of the module a DDP wrapper holds (`model = DDP(Net().to(device))`),
        followed through assignments, parameters, `self` attributes and `.to()`/`.cuda()` chains."""
        return self._classes_of(wrapper, function, set())

    def _classes_of(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, seen: set[int]) -> set[cst.ClassDef]:
        if id(expr) in seen:
            return set()
        seen.add(id(expr))
        found = set()
        for origin in self.program.origins(expr, function):
            value = s.unchained(origin.node)
            if value is not origin.node:  # `model.cuda()`: where `model` comes from
                found |= self._classes_of(value, origin.function, seen)
            elif value in self.ddp_wraps:
                inner = s.arg(value, 0, "module")  # type: ignore[arg-type]
                if inner is not None:
                    found |= self._classes_of(inner.value, origin.function, seen)
            elif isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in self.program.classes:
                found.add(self.program.classes[value.func.value])
        return found

    def forward_methods(self, cls: cst.ClassDef) -> set[str]:
        """Methods of a same-file model class that run its forward: they call `self(...)` or
        `self.forward(...)` (not under `no_grad`), directly or through other methods of the class."""
        if cls not in self._forward_methods:
            methods = self.program.class_methods(cls)
            found: set[str] = set()
            changed = True
            while changed:
                changed = False
                for name, method in methods.items():
                    if name in found or name == "forward":
                        continue
                    if any(_runs_forward(c, found) and not self.tree.grad_disabled(c) for c in self.program.calls_in(method)):
                        found.add(name)
                        changed = True
            self._forward_methods[cls] = found
        return self._forward_methods[cls]

    @cached_property
    def _forward_methods(self) -> dict[cst.ClassDef, set[str]]:
        return {}

    def is_collective_call(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """A call that synchronizes the ranks (`ddpify.analysis.sync`): a torch.distributed
        collective, a DDP forward, a backward, or a same-file function that runs one."""
        return sync.call_syncs(self.tree, self.program, call, function, self.forwards_ddp, self.syncing_functions)

    def forwards_ddp(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """The call runs the forward of a DDP-wrapped model."""
        return self.is_ddp_model(call.func, function)

    @cached_property
    def syncing_functions(self) -> set[cst.FunctionDef]:
        """Same-file functions that (transitively) synchronize the ranks."""
        return sync.syncing_functions(self.tree, self.program, self.forwards_ddp)

    def collectives_in(self, node: cst.CSTNode) -> list[cst.Call]:
        function = self.tree.function(node) if not isinstance(node, cst.FunctionDef) else node
        return [c for c in self.tree.calls(node) if self.is_collective_call(c, function)]

    # --- data and training -------------------------------------------------------------

    @property
    def backward_calls(self) -> list[cst.Call]:
        return self.program.backward_calls

    @property
    def training_loops(self) -> list[cst.For | cst.While]:
        return self.program.training_loops

    @property
    def training_functions(self) -> set[cst.FunctionDef]:
        return self.program.training_functions

    def sampler_of(self, loader: cst.Call) -> cst.BaseExpression | None:
        argument = s.arg(loader, 3, "sampler")
        return argument.value if argument is not None else None

    def is_distributed_sampler(self, node: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        return any(self.tree.is_call_to(o.node, s.DISTRIBUTED_SAMPLER) for o in self.program.origins(node, function))

    def is_sharded(self, loader: cst.Call) -> bool:
        """A DataLoader whose sampler is a DistributedSampler."""
        sampler = self.sampler_of(loader)
        return sampler is not None and self.is_distributed_sampler(sampler, self.tree.function(loader))

    def calls(self, names: set[str]) -> list[cst.Call]:
        return self.tree.calls_to(names)


def _runs_forward(call: cst.Call, forward_methods: set[str]) -> bool:
    """`self(...)`, `self.forward(...)`, or `self.m(...)` for a method `m` known to run them."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value == "self"
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return func.attr.value == "forward" or func.attr.value in forward_methods
    return False


def _imported_names(node: cst.Import | cst.ImportFrom) -> list[str]:
    if isinstance(node, cst.Import):
        return [code(a.name) for a in node.names]
    module = code(node.module) if node.module is not None else ""
    if isinstance(node.names, cst.ImportStar):
        return [module]
    return [module, *(f"{module}.{code(a.name)}" for a in node.names)]


def _is_distributed_name(name: str) -> bool:
    return name.startswith(("torch.distributed", "torch.utils.data.distributed")) or name in s.DDP or name in s.DISTRIBUTED_SAMPLER


def _is_minus_one(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
        and node.expression.value == "1"
    )


def _ends_in_exit(body: cst.BaseSuite) -> bool:
    if isinstance(body, cst.SimpleStatementSuite):
        return isinstance(body.body[-1], EXITS)
    last = body.body[-1] if body.body else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], EXITS)
