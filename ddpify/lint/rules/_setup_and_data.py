"""Facts shared by the setup rules (DDP0xx) and the data rules (DDP1xx).

Computed once per `Script` and cached beside it:

- value resolution that also looks through `a if c else b`, `a or b` and dotted names
  assigned in the scope (`args.rank = ...`), which `Program.origins` leaves alone;
- where the process group is set up: init calls, the same-file functions that run one, and
  the scopes that run when the script runs (called or spawned from module level);
- which rank a device index comes from (global `RANK` or the node-local `LOCAL_RANK`);
- the DataLoaders, where they are iterated (training loop, evaluation, other), their
  samplers and `**kwargs`, and which loaders each DistributedSampler feeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.ranks import (
    GLOBAL_GET_RANK,
    GLOBAL_RANK_ENV,
    GLOBAL_RANK_NAMES,
    LOCAL_GET_RANK,
    LOCAL_RANK_ENV,
    LOCAL_RANK_NAMES,
)
from ddpify.analysis.loops import TrainLoops
from ddpify.analysis.splits import is_seed_call
from ddpify.edit import Plan
from ddpify.lint.script import Script
from ddpify.program import Origin
from ddpify.syntax import Tree, dotted, method_call, string_value

INIT_PROCESS_GROUP = s.INIT_PROCESS_GROUP | {"torch.distributed.distributed_c10d.init_process_group"}
# Other calls that set up the default process group.
OTHER_INITS = {
    "torch.distributed.device_mesh.init_device_mesh",
    "torch.distributed.rpc.init_rpc",
    "deepspeed.init_distributed",
    "deepspeed.comm.init_distributed",
}
DESTROY = s.DESTROY_PROCESS_GROUP | {"torch.distributed.distributed_c10d.destroy_process_group"}
IS_INITIALIZED = {"torch.distributed.is_initialized", "torch.distributed.distributed_c10d.is_initialized"}
# Calls that need the default process group (DDP001).
NEEDS_GROUP = (
    GLOBAL_GET_RANK
    | s.COLLECTIVES
    | s.DDP
    | s.DISTRIBUTED_SAMPLER
    | {"torch.distributed.get_world_size", "torch.distributed.distributed_c10d.get_world_size", "torch.distributed.new_group"}
)
SPAWN = {
    "torch.multiprocessing.spawn",
    "torch.multiprocessing.start_processes",
    "torch.multiprocessing.spawn.spawn",
    "torch.multiprocessing.spawn.start_processes",
}
PLAIN_SAMPLERS = {
    "torch.utils.data.RandomSampler",
    "torch.utils.data.sampler.RandomSampler",
    "torch.utils.data.SequentialSampler",
    "torch.utils.data.sampler.SequentialSampler",
}
TRAIN_TEST_SPLIT = {"sklearn.model_selection.train_test_split", "sklearn.model_selection._split.train_test_split"}
# Datasets that shard themselves across ranks (or cannot take a sampler at all).
SELF_SHARDING = {"datasets.distributed.split_dataset_by_node"}
SELF_SHARDING_PREFIXES = ("webdataset.", "torchdata.")
ENV_READS = {"os.getenv", "os.environ.get"}
# Frameworks and runners that set up (and tear down) the process group for the script.
FRAMEWORK_ROOTS = set(s.DISTRIBUTED_FRAMEWORKS) | {"ray", "ignite", "composer", "mmengine", "mmcv", "detectron2"}

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...)
SHUFFLE_POSITION = 2
SAMPLER_POSITION = 3


RankKind = Literal["global", "local"]


# --- small syntax helpers -------------------------------------------------------------


def position(tree: Tree, node: cst.CSTNode) -> tuple[int, int]:
    """Where `node` starts, for ordering: its line, then its place in preorder (source order
    among nodes on one line, an expression before its parts), so that the statement need not
    be rendered for its column."""
    return (tree.line(node), tree.order(node))


def is_literal(node: cst.CSTNode, value: str) -> bool:
    """`True`, `False` or `None`."""
    return isinstance(node, cst.Name) and node.value == value


def env_var(tree: Tree, node: cst.CSTNode) -> str | None:
    """The variable read by `os.environ["X"]`, `os.environ.get("X", ...)` or `os.getenv("X")`."""
    if isinstance(node, cst.Subscript) and tree.qname(node.value) == "os.environ" and len(node.slice) == 1:
        index = node.slice[0].slice
        return string_value(index.value) if isinstance(index, cst.Index) else None
    if isinstance(node, cst.Call) and tree.qname(node.func) in ENV_READS and node.args:
        return string_value(node.args[0].value)
    return None


def without_argument(call: cst.Call, keyword: str) -> cst.Call:
    """`call` without its `keyword=` argument, the remaining commas kept in the call's style."""
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword), None)
    if index is None:
        return call
    removed = args.pop(index)
    if index == len(args) and args:  # the last one went: the new last keeps its comma style
        args[-1] = args[-1].with_changes(comma=removed.comma)
    return call.with_changes(args=args)


def binds_module_name(tree: Tree, name: str) -> bool:
    """Whether module-level imports bind `name` (`import os`, `import torch.nn` binds `torch`)."""
    for node in tree.walk():
        if isinstance(node, cst.Import):
            for alias in node.names:
                bound = alias.asname.name if alias.asname is not None else None
                if isinstance(bound, cst.Name) and bound.value == name:
                    return True
                if alias.asname is None and (dotted(alias.name) or "").split(".")[0] == name:
                    return True
    return False


def ensure_import(plan: Plan, tree: Tree, module: str) -> None:
    if not binds_module_name(tree, module):
        plan.add_import(module)


def quote_of(node: cst.CSTNode, tree: Tree) -> str:
    """The quote to use for a string written inside `node`: the other one inside an f-string."""
    for parent in [node, *tree.ancestors(node)]:
        if isinstance(parent, cst.FormattedString):
            return "'" if '"' in parent.start else '"'
    return '"'


# --- per-script facts -------------------------------------------------------------------

def facts(script: Script) -> Facts:
    """The shared facts of `script`, built on first use."""
    return script.shared(Facts)


@dataclass(frozen=True)
class Iteration:
    """A place a DataLoader is iterated: a `for`, a comprehension, or `next(...)`."""

    node: cst.CSTNode
    loader: cst.Call
    function: cst.FunctionDef | None
    training: bool  # the loop calls backward(), directly or through same-file functions
    evaluating: bool  # under no_grad/inference_mode, or after `model.eval()`


@dataclass(frozen=True)
class Kwargs:
    """What a `**kwargs` spread passes: keys and their values, or unknown."""

    known: bool
    values: dict[str, list[cst.BaseExpression]]


class Facts:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.tree = script.tree
        self.program = script.program
        self._samplers: dict[int, tuple[list[Origin], bool]] = {}
        self._edits: dict[cst.FunctionDef | None, dict[str, list[cst.CSTNode]]] = {}

    def resolve(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> list[Origin]:
        return self.program.resolve(expr, function)

    # --- which rank ----------------------------------------------------------------------

    def rank_kind(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> RankKind | None:
        """Whether an expression holds the global rank or the node-local rank (None: neither, or unknown)."""
        return self._rank_kind(expr, function, set())

    def _rank_kind(self, expr, function, seen) -> RankKind | None:
        if id(expr) in seen:
            return None
        seen.add(id(expr))
        tree = self.tree
        variable = env_var(tree, expr)
        if variable is not None:
            return "global" if variable in GLOBAL_RANK_ENV else "local" if variable in LOCAL_RANK_ENV else None
        if isinstance(expr, cst.Call):
            name = tree.qname(expr.func)
            if name in GLOBAL_GET_RANK:
                return "global"
            if name in LOCAL_GET_RANK:
                return "local"
            if (tree.is_builtin_call(expr, "int") or tree.is_builtin_call(expr, "str")) and expr.args:
                return self._rank_kind(expr.args[0].value, function, seen)
            return None
        if isinstance(expr, cst.BinaryOperation):
            # `rank % torch.cuda.device_count()` is the index on this node
            return "local" if isinstance(expr.operator, cst.Modulo) else None
        name = dotted(expr)
        if name is None:
            return None
        last = name.rsplit(".", 1)[-1]
        if last in LOCAL_RANK_NAMES:
            return "local"
        if isinstance(expr, cst.Name) and function is not None and self._is_spawned_index(function, expr.value):
            return "local"
        kinds = {self._rank_kind(o.node, o.function, seen) for o in self.resolve(expr, function) if o.node is not expr}
        if "local" in kinds:
            return "local"
        if "global" in kinds:
            return "global"
        return "global" if last in GLOBAL_RANK_NAMES else None

    def _is_spawned_index(self, function: cst.FunctionDef, name: str) -> bool:
        """`mp.spawn(worker, ...)` calls `worker(i, ...)` with the process index on this node."""
        params = self.program.param_names(function)
        return bool(params) and params[0] == name and function in self.spawned

    @cached_property
    def spawned(self) -> set[cst.FunctionDef]:
        found = set()
        for call in self.script.calls(SPAWN):
            target = s.arg(call, 0, "fn")
            if target is not None and isinstance(target.value, cst.Name) and target.value.value in self.program.functions:
                found.add(self.program.functions[target.value.value])
        return found

    def local_rank_spelling(self, node: cst.CSTNode) -> str | None:
        """A name holding the local rank that code at `node` can use, if the script has one."""
        function = self.tree.function(node)
        if function is not None:
            if self.program.binds(function, "local_rank"):
                return "local_rank" if self._defined_before(function, "local_rank", node) else None
            if function in self.spawned:
                return self.program.param_names(function)[0]
        if self.program.binds(None, "local_rank") and self._defined_before(None, "local_rank", node):
            return "local_rank"
        return None

    def _defined_before(self, scope, name: str, node: cst.CSTNode) -> bool:
        if scope is not None and name in self.program.all_param_names(scope):
            return True
        if scope is not self.tree.function(node):
            return True  # a global read from a function: defined by the time it runs
        where = position(self.tree, node)
        for n in self.program.scope_nodes(scope):
            if isinstance(n, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                if any(name in _names(t) for t in targets) and position(self.tree, n) < where:
                    return True
        return False

    # --- process group setup ------------------------------------------------------------

    @cached_property
    def init_calls(self) -> list[cst.Call]:
        """`init_process_group(...)` calls, in source order."""
        return self.script.calls(INIT_PROCESS_GROUP)

    @cached_property
    def all_inits(self) -> list[cst.Call]:
        return self.script.calls(INIT_PROCESS_GROUP | OTHER_INITS)

    @cached_property
    def initializing(self) -> set[cst.FunctionDef]:
        """Same-file functions that (transitively) set up the process group."""
        inits = set(self.all_inits)
        return self.program.reaching(lambda call, _function: call in inits)

    def init_points(self, scope: cst.FunctionDef | None) -> list[cst.Call]:
        """Calls in `scope` that set up the process group, directly or through a same-file function."""
        if scope in self._init_points:
            return self._init_points[scope]
        points = []
        inits = set(self.all_inits)
        for call in self.program.calls_in(scope):
            if call in inits:
                points.append(call)
                continue
            target = self.program.callee(call, scope)
            if target is not None and target[0] in self.initializing:
                points.append(call)
        self._init_points[scope] = points
        return points

    @cached_property
    def _init_points(self) -> dict[cst.FunctionDef | None, list[cst.Call]]:
        return {}

    @cached_property
    def reachable(self) -> set[cst.FunctionDef | None]:
        """Scopes that run when the script runs: the module, functions it calls, spawns or
        passes on as callbacks, transitively."""
        seen: set[cst.FunctionDef | None] = set()
        work: list[cst.FunctionDef | None] = [None]
        while work:
            scope = work.pop()
            if scope in seen:
                continue
            seen.add(scope)
            for call in self.program.calls_in(scope):
                target = self.program.callee(call, scope)
                if target is not None:
                    work.append(target[0])
                for a in call.args:
                    if isinstance(a.value, cst.Name) and a.value.value in self.program.functions:
                        if not (scope is not None and self.program.binds(scope, a.value.value)):
                            work.append(self.program.functions[a.value.value])
        return seen

    @cached_property
    def uses_framework(self) -> bool:
        """Accelerate, Lightning, DeepSpeed...: they set up (and tear down) the group themselves."""
        for node in self.tree.of_type(cst.Import, cst.ImportFrom):
            if isinstance(node, cst.Import):
                roots = [(dotted(a.name) or "").split(".")[0] for a in node.names]
            elif isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
                roots = [(dotted(node.module) or "").split(".")[0]]
            else:
                continue
            if any(root in FRAMEWORK_ROOTS for root in roots):
                return True
        return False

    def under_is_initialized(self, node: cst.CSTNode) -> bool:
        """`x if dist.is_initialized() else 0`, `if dist.is_initialized():`, or a function that asks first."""
        function = self.tree.function(node)
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.If, cst.IfExp, cst.While)) and self._asks_initialized(parent.test):
                return True
            if isinstance(parent, cst.BooleanOperation) and self._asks_initialized(parent.left):
                return True
            if isinstance(parent, cst.Try) and parent.handlers:
                return True
            if parent is function:
                break
        # `if not dist.is_initialized(): return 0` earlier in the function
        return function is not None and any(self.tree.is_call_to(c, IS_INITIALIZED) for c in self.program.calls_in(function))  # every call, nested ones too

    def _asks_initialized(self, node: cst.CSTNode) -> bool:
        return any(self.tree.is_call_to(c, IS_INITIALIZED) for c in self.tree.calls(node))

    # --- seeds ---------------------------------------------------------------------------

    def is_seed_call(self, call: cst.Call) -> bool:
        """`torch.manual_seed(...)`, `np.random.seed(...)`, `set_seed(...)`: not a method of a local object."""
        return is_seed_call(self.tree, call)

    def seeds_per_rank(self, call: cst.Call) -> bool:
        """`torch.manual_seed(seed + rank)`, `set_seed(args.seed + dist.get_rank())`..."""
        function = self.tree.function(call)
        return any(self.reads_rank(a.value, function) for a in call.args)

    def reads_rank(self, node: cst.CSTNode, function: cst.FunctionDef | None, seen: set | None = None) -> bool:
        """Whether an expression's value depends on the rank, following the names it reads."""
        seen = seen if seen is not None else set()
        if id(node) in seen:
            return False
        seen.add(id(node))
        for n in self.tree.walk(node):
            if isinstance(n, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and self.script.is_rank_expr(n, function):
                return True
            if isinstance(n, cst.Name) and len(seen) < 200:
                for origin in self.resolve(n, function):
                    if origin.node is not n and self.reads_rank(origin.node, origin.function, seen):
                        return True
        return False

    @cached_property
    def per_rank_seeds(self) -> list[cst.Call]:
        return [c for c in self.tree.calls() if self.is_seed_call(c) and self.seeds_per_rank(c)]

    # --- loaders -------------------------------------------------------------------------

    @cached_property
    def loaders(self) -> list[cst.Call]:
        return self.script.calls(s.DATALOADER)

    @cached_property
    def train_loops(self) -> TrainLoops:
        return self.program.fact(TrainLoops)

    @cached_property
    def iterations(self) -> list[Iteration]:
        training = {id(loop.loop) for loop in self.train_loops.loops if loop.consumed_by == "for"}
        drawing = [loop.loop for loop in self.train_loops.draws if loop.consumed_by == "next"]
        found: list[Iteration] = []
        for node in self.tree.of_type(cst.For, cst.CompFor, cst.Call):
            if isinstance(node, (cst.For, cst.CompFor)):
                iterable = node.iter
                trains = id(node) in training
            elif isinstance(node, cst.Call) and self.tree.is_builtin_call(node, "next") and node.args:
                iterable = node.args[0].value
                trains = any(self.tree.inside(node, loop) for loop in drawing)
            else:
                continue
            function = self.tree.function(node)
            for origin in self.program.dataloaders(iterable, function):
                found.append(Iteration(node, origin.node, function, trains, self._evaluating(node, function, set())))  # type: ignore[arg-type]
        return found

    def iterations_of(self, loader: cst.Call) -> list[Iteration]:
        return [i for i in self.iterations if i.loader is loader]

    def is_trained_on(self, loader: cst.Call) -> bool:
        """A training loop draws from it (analysis/loops.py), on every rank (a loop only rank 0
        runs does not count)."""
        found = self.train_loops
        return any(
            not self.script.is_guarded(loop.loop)
            and any(
                origin.node is loader
                for consumed, function in found.consumed(loop)
                for origin in found.trained_loaders(loop, consumed, function)
            )
            for loop in found.loops
        )

    def is_evaluation_only(self, loader: cst.Call) -> bool:
        """Iterated, never by a loop that trains, and every loop over it evaluates."""
        loops = [i for i in self.iterations_of(loader) if not isinstance(i.node, cst.Call)]
        return bool(loops) and not self.is_trained_on(loader) and all(i.evaluating for i in loops)

    def _evaluating(self, node: cst.CSTNode, function: cst.FunctionDef | None, seen: set) -> bool:
        tree = self.tree
        if tree.grad_disabled(node):
            return True
        if isinstance(node, cst.For) and self._evaluates_inside(node.body):
            return True  # `for batch in loader: model.eval(); with torch.no_grad(): ...`
        # the last `model.eval()` / `model.train()` before the loop says which mode it runs in
        where = position(tree, node)
        mode = None
        for call in self.program.calls_in(function):
            found = method_call(call)
            if found is None or position(tree, call) >= where:
                continue
            if found[1] == "eval" and not call.args:
                mode = "eval"
            elif found[1] == "train" and len(call.args) <= 1:
                mode = "eval" if call.args and is_literal(call.args[0].value, "False") else "train"
        if mode is not None:
            return mode == "eval"
        if function is None or function in seen:
            return False
        seen.add(function)
        sites = self.program.call_sites(function)
        return bool(sites) and all(self._evaluating(call, caller, seen) for call, caller in sites)

    def _evaluates_inside(self, body: cst.CSTNode) -> bool:
        for n in self.tree.walk(body):
            if isinstance(n, cst.With) and any(self.tree.disables_grad(item.item) for item in n.items):
                return True
            found = method_call(n)
            if found is not None and found[1] == "eval" and not n.args:  # type: ignore[union-attr]
                return True
        return False

    def kwargs(self, spread: cst.BaseExpression, function: cst.FunctionDef | None, before: cst.CSTNode) -> Kwargs:
        """The keys a `**spread` passes at `before`: dict literals and `dict(...)`, with the
        `update`, `[key] =`, `pop` and `del` the scope applies to them before that point."""
        values: dict[str, list[cst.BaseExpression]] = {}
        origins = self.resolve(spread, function)
        if not origins:
            return Kwargs(False, {})
        for origin in origins:
            node = origin.node
            if isinstance(node, cst.Dict):
                for element in node.elements:
                    key = string_value(element.key) if isinstance(element, cst.DictElement) else None
                    if key is None:
                        return Kwargs(False, {})
                    values.setdefault(key, []).append(element.value)
            elif self.tree.is_builtin_call(node, "dict") and all(a.keyword is not None for a in node.args):
                for a in node.args:
                    values.setdefault(a.keyword.value, []).append(a.value)  # type: ignore[union-attr]
            else:
                return Kwargs(False, {})
        name = dotted(spread)
        if name is None:
            return Kwargs(True, values)
        where = position(self.tree, before)
        for node in self._dict_edits(function).get(name, ()):
            if position(self.tree, node) >= where:
                continue
            found = method_call(node)
            if found is not None:
                method = found[1]
                if method == "update":
                    assert isinstance(node, cst.Call)
                    for a in node.args:
                        if a.keyword is not None:
                            values.setdefault(a.keyword.value, []).append(a.value)
                        else:
                            inner = self.kwargs(a.value, function, node)
                            if not inner.known:
                                return Kwargs(False, {})
                            for key, vals in inner.values.items():
                                values.setdefault(key, []).extend(vals)
                elif method in ("pop", "__delitem__") and isinstance(node, cst.Call) and node.args:
                    key = string_value(node.args[0].value)
                    if key is None:
                        return Kwargs(False, {})
                    values.pop(key, None)
                elif method in ("setdefault",):
                    return Kwargs(False, {})
            elif isinstance(node, cst.Assign):
                for target in node.targets:
                    key = self._subscript_key(target.target, name)
                    if key is not None:
                        values.setdefault(key, []).append(node.value)
            elif isinstance(node, cst.Del):
                key = self._subscript_key(node.target, name)
                if key is not None:
                    values.pop(key, None)
        return Kwargs(True, values)

    def _dict_edits(self, function: cst.FunctionDef | None) -> dict[str, list[cst.CSTNode]]:
        """Per dotted name, the statements of a scope that may change the dict it names:
        method calls on it, `name[...] = ...` and `del name[...]`, in source order."""
        if function not in self._edits:
            edits: dict[str, list[cst.CSTNode]] = {}
            for node in self.program.scope_nodes(function):
                kind = type(node)
                if kind is cst.Call:
                    found = method_call(node)
                    objects = [found[0]] if found is not None else []
                elif kind is cst.Assign:
                    objects = [t.target.value for t in node.targets if type(t.target) is cst.Subscript]
                elif kind is cst.Del:
                    objects = [node.target.value] if type(node.target) is cst.Subscript else []
                else:
                    continue
                for name in {dotted(o) for o in objects} - {None}:
                    edits.setdefault(name, []).append(node)
            self._edits[function] = edits
        return self._edits[function]

    @staticmethod
    def _subscript_key(target: cst.BaseExpression, name: str) -> str | None:
        if isinstance(target, cst.Subscript) and dotted(target.value) == name and len(target.slice) == 1:
            index = target.slice[0].slice
            return string_value(index.value) if isinstance(index, cst.Index) else None
        return None

    def loader_argument(self, loader: cst.Call, position_: int, keyword: str) -> tuple[list[cst.BaseExpression], bool]:
        """The values a DataLoader gets for an argument, given directly or through `**kwargs`,
        and whether that is all of them (False: some `**spread` is unknown)."""
        function = self.tree.function(loader)
        found = s.arg(loader, position_, keyword)
        values = [found.value] if found is not None else []
        complete = True
        for a in loader.args:
            if a.star == "**":
                spread = self.kwargs(a.value, function, loader)
                complete = complete and spread.known
                values += spread.values.get(keyword, [])
        return values, complete

    def samplers(self, loader: cst.Call) -> tuple[list[Origin], bool]:
        """Where a loader's sampler comes from (through `BatchSampler(sampler, ...)` too), and
        whether every source is known. No sources and complete: the loader has no sampler."""
        if id(loader) not in self._samplers:
            self._samplers[id(loader)] = self._find_samplers(loader)
        return self._samplers[id(loader)]

    def _find_samplers(self, loader: cst.Call) -> tuple[list[Origin], bool]:
        function = self.tree.function(loader)
        values, complete = self.loader_argument(loader, SAMPLER_POSITION, "sampler")
        batch_values, batch_complete = self.loader_argument(loader, SAMPLER_POSITION + 1, "batch_sampler")
        complete = complete and batch_complete
        origins: list[Origin] = []
        for value in values:
            found = self.resolve(value, function)
            complete = complete and bool(found)
            origins += found
        for value in batch_values:
            found = self.resolve(value, function)
            complete = complete and bool(found)
            for origin in found:
                inner = s.arg(origin.node, 0, "sampler") if self.tree.is_call_to(origin.node, s.BATCH_SAMPLER) else None
                if inner is not None:
                    resolved = self.resolve(inner.value, origin.function)
                    complete = complete and bool(resolved)
                    origins += resolved
                else:
                    origins.append(origin)
        return origins, complete

    def loaders_of(self, sampler: cst.Call) -> list[cst.Call]:
        """The DataLoaders a `DistributedSampler(...)` call feeds."""
        return [loader for loader in self.loaders if any(o.node is sampler for o in self.samplers(loader)[0])]

    def is_sampler_call(self, node: cst.CSTNode) -> bool:
        return self.tree.is_call_to(node, s.DISTRIBUTED_SAMPLER)

    def escapes(self, node: cst.CSTNode) -> bool:
        """Whether a value is handed to code this file cannot see (a call other than a
        DataLoader, a BatchSampler or a same-file function), directly or through its name."""
        function = self.tree.function(node)
        names: list[tuple[cst.BaseExpression, cst.FunctionDef | None]] = [(node, function)]  # type: ignore[list-item]
        parent = self.tree.parent(node)
        if isinstance(parent, cst.Assign):
            names += [(t.target, function) for t in parent.targets if dotted(t.target)]
        for target, scope in names:
            wanted = dotted(target) if target is not node else None
            for call in self.tree.calls():
                if self.tree.is_call_to(call, s.DATALOADER | s.BATCH_SAMPLER):
                    continue
                if self.program.callee(call, self.tree.function(call)) is not None:
                    continue
                if (self.tree.qname(call.func) or "").startswith("builtins."):
                    continue
                for a in call.args:
                    if a.value is node or (wanted is not None and dotted(a.value) == wanted):
                        return True
        return False


def _names(target: cst.BaseExpression) -> set[str]:
    name = dotted(target)
    if name is not None:
        return {name}
    if isinstance(target, (cst.Tuple, cst.List)):
        out: set[str] = set()
        for element in target.elements:
            out |= _names(element.value)
        return out
    return set()

