"""What the DDP4xx rules share: which values differ from rank to rank, and which were reduced.

Each rank trains on its own shard of the data, so the batch, the loss and anything computed
from them (`loss.item()`, `correct += ...`) are local values: they differ from rank to rank.
A collective (`all_reduce`, `all_gather`, `broadcast`, `reduce`, their `_object` forms, or a
same-file helper that runs one on its argument or on what it returns) makes a value global.

The analysis is per function and flow-insensitive, like `Program`: a name depends on every
name any of its assignments reads. It errs towards "reduced": a name counts as reduced when a
collective ran on it or on anything it is derived from, anywhere in the function (DDP402), or
between the loop and the report (DDP403). Shape reads (`x.size(0)`, `len(x)`, `x.shape`) are
not local: a DistributedSampler gives every rank the same number of samples.

Functions are summarised for their callers: whether they return a local value, return a
reduced one, reduce an argument in place, or return a total accumulated over a sharded loader.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from ddpify import nodes
from ddpify import syntax as s
from ddpify.analysis.exits import CLOCKS, PROGRAM_EXITS, clock_names, flag_stops, skips
from ddpify.analysis.totals import COLLECTS, restarts_inside
from ddpify.lint.script import Script
from ddpify.syntax import BLOCKS, code, dotted, method_call
from ddpify.program import Program

Pos = tuple[int, int]
Function = cst.FunctionDef | None

SHAPE_METHODS = {"size", "dim", "numel", "nelement", "__len__"}
SHAPE_ATTRIBUTES = {"shape", "ndim"}
# Arguments of a collective that are not the data it moves.
COLLECTIVE_OPTIONS = {"op", "group", "async_op", "src", "dst", "group_src", "group_dst", "device", "timeout"}
EXITS = (cst.Break, cst.Continue, cst.Return)
LOGGER_NAMES = {"logger", "log", "_logger", "LOGGER", "LOG"}
METRIC_SINKS = {"add_scalar", "add_scalars", "log_metric", "log_metrics", "set_postfix", "set_postfix_str", "set_description"}
REPORT_CALLS = {"wandb.log", "mlflow.log_metric", "mlflow.log_metrics"}
# Helpers from other modules that reduce, by their name: `utils.reduce_tensor(t)`,
# `meter.all_reduce()`, `accelerator.gather(x)`, `xm.mesh_reduce(...)`.
REDUCER_WORDS = ("reduce", "gather", "broadcast", "sync_", "synchronize")
LIST_ADDS = {"append", "extend"}


def reads(node: cst.CSTNode) -> set[str]:
    """Variables an expression reads: plain names and `self.<attr>`, shape reads left out."""
    out: set[str] = set()
    _reads(node, out)
    return out


def _reads(node: cst.CSTNode, out: set[str], skip=None) -> None:
    """`skip(call)`: calls whose arguments and receiver are not read (reducing calls)."""
    kind = type(node)  # exact types: the node classes tested here have no subclasses, and isinstance on an ABC is slow
    if kind is cst.Name:
        out.add(node.value)  # type: ignore[attr-defined]
        return
    if kind is cst.Attribute:
        if node.attr.value in SHAPE_ATTRIBUTES:
            return
        if type(node.value) is cst.Name and node.value.value == "self":  # type: ignore[attr-defined]
            out.add(f"self.{node.attr.value}")
            return
        _reads(node.value, out, skip)
        return
    if kind is cst.Call:
        found = method_call(node)
        if found and found[1] in SHAPE_METHODS:
            return
        if type(node.func) is cst.Name and node.func.value == "len":  # type: ignore[attr-defined]
            return
        if skip is not None and skip(node):
            return
        _reads(node.func, out, skip)
        for a in node.args:
            _reads(a.value, out, skip)
        return
    if kind is cst.Lambda:
        return
    if kind in COMPREHENSIONS:  # its `for` targets are its own names: what it reads is what they iterate
        inner: set[str] = set()
        for child in nodes.children(node):
            _reads(child, inner, skip)
        out.update(inner - comprehension_targets(node))
        return
    for child in nodes.children(node):
        _reads(child, out, skip)


COMPREHENSIONS = (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)


def comprehension_targets(node: cst.BaseComp | cst.DictComp) -> set[str]:
    """The names the `for` clauses of a comprehension bind (`x`, `y` in `... for x, y in loader`)."""
    bound: set[str] = set()
    clause: cst.CompFor | None = node.for_in
    while clause is not None:
        bound |= Program.names_in(clause.target)
        clause = clause.inner_for_in
    return bound


def _adds_to(value: cst.BaseExpression, key: str) -> bool:
    """`key + ...` or `... + key` (in a chain of additions): the value grows a running total."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return False
    return any(target_keys(side) == [key] or _adds_to(side, key) for side in (value.left, value.right))


def target_keys(target: cst.BaseExpression) -> list[str]:
    """Variables an assignment target writes (`loss_sum[0] += ...` writes `loss_sum`)."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Attribute):
        if isinstance(target.value, cst.Name) and target.value.value == "self":
            return [f"self.{target.attr.value}"]
        return target_keys(target.value)
    if isinstance(target, cst.Subscript):
        return target_keys(target.value)
    if isinstance(target, (cst.Tuple, cst.List)):
        return [k for el in target.elements for k in target_keys(el.value)]
    if isinstance(target, cst.StarredElement):
        return target_keys(target.value)
    return []


def loss_names(node: cst.BaseExpression) -> set[str]:
    """The loss in `loss.backward()`, `scaler.scale(loss / k).backward()`, `loss.mean().backward()`."""
    if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
        return set(target_keys(node))
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, (cst.Divide, cst.FloorDivide)):
            return loss_names(node.left)
        return loss_names(node.left) | loss_names(node.right)
    if isinstance(node, cst.Call):
        found = method_call(node)
        if found and found[1] == "scale" and node.args:
            return loss_names(node.args[0].value)
        if found:
            return loss_names(found[0])
        return {n for a in node.args for n in loss_names(a.value)}
    return set()


@dataclass(frozen=True)
class Metric:
    """A total accumulated over a sharded loader (or returned by a function that does that)."""

    name: str
    since: Pos  # reports after this point see the whole total
    source: str  # how it was summed, for messages


@dataclass(frozen=True)
class Report:
    node: cst.CSTNode
    verb: str  # prints / logs / compares / returns
    metric: Metric
    shown: str  # the name or call that carries the total into the report


@dataclass(frozen=True)
class DivergentExit:
    statement: cst.If
    exit: cst.Break | cst.Continue | cst.Return | cst.Assign | cst.Call  # an assignment to a flag its `while` stops on; `sys.exit()`
    local: bool  # decided on a local value (else on the rank)
    reason: str


class Scope:
    """Data flow of one function (None: module level)."""

    def __init__(self, flow: Flow, function: Function) -> None:
        self.flow = flow
        self.function = function
        self.tree = flow.tree
        self.program = flow.program
        self.deps: dict[str, set[str]] = {}
        self.sources: set[str] = set()
        self.collected: list[tuple[str, Pos]] = []
        self.sharded_loops: list[cst.For] = []
        self.returned_metrics: list[Metric] = []  # totals from calls of functions returning one
        self.nodes = self.program.scope_nodes(function)
        for node in self.nodes:
            self._visit(node)

    def pos(self, node: cst.CSTNode) -> Pos:
        start = self.tree.positions[node].start
        return (start.line, start.column)

    def end(self, node: cst.CSTNode) -> Pos:
        if type(self.tree.parent(node)) in BLOCKS:  # a whole statement: what follows starts on a later line
            return (self.tree.last_line(node), sys.maxsize)
        end = self.tree.positions[node].end
        return (end.line, end.column)

    # --- building ----------------------------------------------------------------------

    def _visit(self, node: cst.CSTNode) -> None:
        kind = type(node)  # exact types: every one tested here is a concrete node type
        if kind is cst.Assign:
            for t in node.targets:
                self._assign(t.target, node.value, node)
        elif kind is cst.AnnAssign and node.value is not None:
            self._assign(node.target, node.value, node)
        elif kind is cst.AugAssign or kind is cst.NamedExpr:
            self._assign(node.target, node.value, node)
        elif kind is cst.WithItem and node.asname is not None:
            self._assign(node.asname.name, node.item, node)
        elif kind is cst.For:
            self._assign(node.target, node.iter, node)
            if self.flow.iterates_sharded(node.iter, self.function):
                self.sharded_loops.append(node)
                self.sources.update(target_keys(self.batch_target(node)))
        elif kind is cst.Call:
            self._call(node)

    def _whole_batch_names(self, statement: cst.CSTNode) -> set[str]:
        """The batch names of the loops around `statement` over loaders nothing shards (`for x, y
        in val_loader:`): there they hold the same batch on every rank, whatever the training
        loop bound to the same names (`x`, `y`) holds."""
        names: set[str] = set()
        for loop in self.tree.loops(statement):
            if type(loop) is cst.For and loop is not statement and self._iterates_whole(loop):
                names |= set(target_keys(self.batch_target(loop)))
        return names

    def _iterates_whole(self, loop: cst.For) -> bool:
        loaders = self.program.dataloaders(loop.iter, self.function)
        return bool(loaders) and not any(self.flow.script.is_sharded(o.node) for o in loaders)

    def batch_target(self, loop: cst.For) -> cst.BaseExpression:
        """`i, (x, y)` in `for i, (x, y) in enumerate(loader)`: the batch part, without the index."""
        iterable = loop.iter
        if (
            self.tree.is_builtin_call(iterable, "enumerate")
            and isinstance(loop.target, (cst.Tuple, cst.List))
            and len(loop.target.elements) == 2
        ):
            return loop.target.elements[1].value
        return loop.target

    def _assign(self, target: cst.BaseExpression, value: cst.BaseExpression, statement: cst.CSTNode) -> None:
        if (
            isinstance(target, (cst.Tuple, cst.List))
            and isinstance(value, (cst.Tuple, cst.List))
            and len(target.elements) == len(value.elements)
        ):
            for t, v in zip(target.elements, value.elements):
                self._assign(t.value, v.value, statement)
            return
        keys = target_keys(target)
        read = reads(value) - self._whole_batch_names(statement)
        for key in keys:
            self.deps.setdefault(key, set()).update(read)
        if self._from_sharded_next(value) or self._comprehends_sharded(value):
            self.sources.update(keys)
        for call in self._calls(value):
            callee = self.program.callee(call, self.function)
            if callee is None:
                if self.flow.is_foreign_reducer(call):
                    self.collected += [(key, self.end(statement)) for key in keys]
                continue
            function = callee[0]
            if self.flow.reducing(function):
                self.collected += [(key, self.end(statement)) for key in keys]
            elif self.flow.returns_local(function):
                self.sources.update(keys)
            metric = self.flow.returns_metric(function)
            if metric is not None and not self.flow.reducing(function):
                source = f"a total over this rank's shard returned by `{code(call.func)}(...)`"
                self.returned_metrics += [Metric(key, self.end(statement), source) for key in keys]

    def _comprehends_sharded(self, value: cst.BaseExpression) -> bool:
        """`sum(loss_fn(model(x), y).item() for x, y in train_loader)`: a comprehension over a
        sharded loader makes a value of this rank's shard."""
        return any(
            type(n) is cst.CompFor and self.flow.iterates_sharded(n.iter, self.function)
            for n in self.tree.walk(value)
        )

    def _from_sharded_next(self, value: cst.BaseExpression) -> bool:
        """`x, y = next(train_iter)` with `train_iter = iter(sharded_loader)`."""
        return (
            self.tree.is_builtin_call(value, "next")
            and bool(value.args)  # type: ignore[union-attr]
            and self.flow.iterates_sharded(value.args[0].value, self.function)  # type: ignore[union-attr]
        )

    def _call(self, call: cst.Call) -> None:
        if self.tree.is_call_to(call, s.COLLECTIVES):
            for a in call.args:
                if a.keyword is None or a.keyword.value not in COLLECTIVE_OPTIONS:
                    self.collected += [(name, self.pos(call)) for name in reads(a.value)]
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" and self.tree.qname(call.func) is None:
            self.sources.update(loss_names(call.func.value))
        elif (found := method_call(call)) and found[1] in COLLECTS and type(found[0]) is cst.Name and self.tree.qname(call.func) is None:
            # `recent.append(loss.item())`: the container holds what it is given
            read = set().union(*(reads(a.value) for a in call.args))
            self.deps.setdefault(found[0].value, set()).update(read)
        else:
            callee = self.program.callee(call, self.function)
            if callee is not None:
                for param in self.flow.collecting_params(callee[0]):
                    argument = self.program.argument_for(call, callee[0], param)
                    if argument is not None:
                        self.collected += [(name, self.pos(call)) for name in reads(argument)]
            elif self.flow.is_foreign_reducer(call) and isinstance(self.tree.parent(call), cst.Expr):
                # `reduce_inplace(t)` / `meter.all_reduce()`, result unused: it reduced what it was given
                found = method_call(call)
                given = [a.value for a in call.args] + ([found[0]] if found else [])
                self.collected += [(name, self.pos(call)) for value in given for name in reads(value)]

    def _calls(self, node: cst.CSTNode, skip=None) -> list[cst.Call]:
        """Calls an expression evaluates for its value (shape reads, lambdas and `skip(call)` calls' insides left out)."""
        found: list[cst.Call] = []

        def visit(n: cst.CSTNode) -> None:
            kind = type(n)
            if kind is cst.Lambda:
                return
            if kind is cst.Call:
                m = method_call(n)
                if (m and m[1] in SHAPE_METHODS) or (type(n.func) is cst.Name and n.func.value == "len"):  # type: ignore[attr-defined]
                    return
                found.append(n)
                if skip is not None and skip(n):
                    return
            for child in self.tree.children(n):
                visit(child)

        visit(node)
        return found

    # --- questions ---------------------------------------------------------------------

    def up(self, name: str) -> set[str]:
        """`name` and every name it is derived from."""
        cache = self._up
        if name not in cache:
            seen = {name}
            work = [name]
            while work:
                for dep in self.deps.get(work.pop(), ()):
                    if dep not in seen:
                        seen.add(dep)
                        work.append(dep)
            cache[name] = seen
        return cache[name]

    @cached_property
    def _up(self) -> dict[str, set[str]]:
        return {}

    def down(self, name: str) -> set[str]:
        """`name` and every name derived from it (a tensor built from a total)."""
        return {name} | {key for key in self.deps if name in self.up(key)}

    @cached_property
    def tainted(self) -> set[str]:
        """Names that hold a local value: the batch, the loss, and what is computed from them."""
        found = set(self.sources)
        changed = True
        while changed:
            changed = False
            for key, deps in self.deps.items():
                if key not in found and deps & found:
                    found.add(key)
                    changed = True
        return found

    @cached_property
    def collected_names(self) -> set[str]:
        return {name for name, _ in self.collected}

    def reduced(self, name: str) -> bool:
        """A collective ran on `name` or on a name it is derived from, anywhere in the function."""
        return bool(self.up(name) & self.collected_names)

    def is_reducer(self, call: cst.Call) -> bool:
        """A call whose result is reduced over ranks: a same-file reducing function, or one named so."""
        callee = self.program.callee(call, self.function)
        if callee is not None:
            return self.flow.reducing(callee[0])
        return self.flow.is_foreign_reducer(call)

    def unreduced_reads(self, expr: cst.CSTNode) -> set[str]:
        """`reads(expr)`, leaving out what goes into reducing calls (`reduce_mean(loss)`)."""
        out: set[str] = set()
        _reads(expr, out, skip=self.is_reducer)
        return out

    def local_names(self, expr: cst.CSTNode) -> list[str]:
        """Names in `expr` that hold a local value nothing reduced; calls returning one, spelled."""
        found = [name for name in sorted(self.unreduced_reads(expr)) if name in self.tainted and not self.reduced(name)]
        for call in self._calls(expr, skip=self.is_reducer):
            callee = self.program.callee(call, self.function)
            if callee is not None and self.flow.returns_local(callee[0]) and not self.flow.reducing(callee[0]):
                found.append(f"{code(call.func)}(...)")
        return found

    # --- DDP403: totals over a sharded loader --------------------------------------------

    @cached_property
    def metrics(self) -> list[Metric]:
        """Totals summed (`+=`, or appended to a list) over a sharded loader, from a local value nothing reduced."""
        found: list[Metric] = []
        for loop in self.sharded_loops:
            loader = self.program.loader(loop.iter, self.function)
            shard = f"this rank's shard of `{code(loader) if loader is not None else code(loop.iter)}` only"
            names: list[str] = []
            lists: list[str] = []
            body = {id(n) for n in self.tree.walk(loop.body)}
            for node in self.nodes:
                if id(node) not in body:
                    continue
                if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
                    if self.local_names(node.value):
                        names += target_keys(node.target)
                elif isinstance(node, cst.Assign) and len(node.targets) == 1:
                    keys = target_keys(node.targets[0].target)
                    if len(keys) == 1 and _adds_to(node.value, keys[0]) and self.local_names(node.value):
                        names += keys  # `total = total + loss.item()`, not `x = x.to(device)`
                elif (added := method_call(node)) and added[1] in LIST_ADDS and isinstance(self.tree.parent(node), cst.Expr):
                    # `losses.append(loss.item())`: the list is the total, `sum(losses)` reads it
                    if any(self.local_names(a.value) for a in node.args):  # type: ignore[attr-defined]
                        lists += target_keys(added[0])
            names = [n for n in names if not restarts_inside(self.tree, self.program, loop, self.function, n)]
            lists = [n for n in lists if not restarts_inside(self.tree, self.program, loop, self.function, n)]
            found += [Metric(name, self.end(loop), f"summed over {shard}") for name in dict.fromkeys(names)]
            found += [Metric(name, self.end(loop), f"collected over {shard}") for name in dict.fromkeys(lists)]
        return found + self.returned_metrics

    def unreduced_metric(self, exprs: list[cst.CSTNode], at: Pos) -> tuple[Metric, str] | None:
        """The total `exprs` carry into a report at `at`, if no collective reduced it on the way."""
        for name in sorted(set().union(*(self.unreduced_reads(e) for e in exprs))):
            ups = self.up(name)
            for metric in self.metrics:
                if metric.name in ups and metric.since < at and not self._reduced_between(name, metric, at):
                    return metric, name
        for call in (c for e in exprs for c in self._calls(e, skip=self.is_reducer)):
            callee = self.program.callee(call, self.function)
            if callee is not None and not self.flow.reducing(callee[0]):
                metric = self.flow.returns_metric(callee[0])
                if metric is not None:
                    source = f"a total over this rank's shard returned by `{code(call.func)}(...)`"
                    return Metric(metric.name, self.pos(call), source), f"{code(call.func)}(...)"
        return None

    def _reduced_between(self, name: str, metric: Metric, at: Pos) -> bool:
        related = self.up(name) | self.down(metric.name)
        return any(metric.since < where < at and collected in related for collected, where in self.collected)

    @cached_property
    def reports(self) -> list[Report]:
        """Prints, logs, comparisons and returns of a total after the loop that summed it."""
        if not self.metrics:
            return []
        found: list[Report] = []
        for node in self.nodes:
            kind = type(node)  # exact types: isinstance on LibCST's ABCs is slow, and this visits every node
            if kind is cst.Call:
                verb = self.flow.report_verb(node, self.function)
                if verb is None:
                    continue
                hit = self.unreduced_metric([a.value for a in node.args], self.pos(node))
            elif kind is cst.Comparison:
                if self._in_report_or_assert(node) or any(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons):
                    continue
                verb, hit = "compares", self.unreduced_metric([node], self.pos(node))
            elif kind is cst.Return and node.value is not None:
                verb, hit = "returns", self.unreduced_metric([node.value], self.pos(node))
            else:
                continue
            if hit is not None:
                found.append(Report(node, verb, hit[0], hit[1]))
        return found

    def _in_report_or_assert(self, node: cst.CSTNode) -> bool:
        """A comparison inside a print (reported as the print) or an assert (not a report)."""
        for parent in self.tree.ancestors(node):
            if isinstance(parent, cst.Assert):
                return True
            if isinstance(parent, cst.Call) and self.flow.report_verb(parent, self.function):
                return True
            if isinstance(parent, (cst.BaseStatement, cst.BaseSmallStatement)):
                return False
        return False


class Flow:
    """The per-script analysis, built once and shared by the DDP4xx rules."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.tree = script.tree
        self.program = script.program
        self._scopes: dict[Function, Scope] = {}
        self._clocks: dict[Function, set[str]] = {}
        self._busy: set[tuple[str, Function]] = set()
        self._memo: dict[tuple[str, Function], object] = {}

    def scope(self, function: Function) -> Scope:
        if function not in self._scopes:
            self._busy.add(("scope", function))
            try:
                self._scopes[function] = Scope(self, function)
            finally:
                self._busy.discard(("scope", function))
        return self._scopes[function]

    def _summary(self, kind: str, function: cst.FunctionDef, compute, default):
        """A memoized fact about `function`; `default` while it is being worked out (recursion)."""
        key = (kind, function)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy or ("scope", function) in self._busy:
            return default
        self._busy.add(key)
        try:
            value = compute()
        finally:
            self._busy.discard(key)
        self._memo[key] = value
        return value

    # --- function summaries -------------------------------------------------------------

    def reducing(self, function: cst.FunctionDef) -> bool:
        """It returns a value a collective ran on (`t = x.clone(); dist.all_reduce(t); return t`)."""

        def compute() -> bool:
            scope = self.scope(function)
            return any(any(scope.reduced(name) for name in reads(value)) for value in self.program.returns(function))

        return self._summary("reducing", function, compute, False)

    def collecting_params(self, function: cst.FunctionDef) -> set[str]:
        """Parameters it runs a collective on in place (`def sync(t): dist.all_reduce(t)`)."""

        def compute() -> set[str]:
            scope = self.scope(function)
            return {p for p in self.program.param_names(function) if p in scope.collected_names and p not in scope.deps}

        return self._summary("collecting", function, compute, set())

    def returns_local(self, function: cst.FunctionDef) -> bool:
        """It returns a local value (the loss of a step, a total over its shard) nothing reduced."""

        def compute() -> bool:
            scope = self.scope(function)
            return any(scope.local_names(value) for value in self.program.returns(function))

        return self._summary("local", function, compute, False)

    def returns_metric(self, function: cst.FunctionDef) -> Metric | None:
        """It returns a total accumulated over a sharded loader that nothing reduced."""

        def compute() -> Metric | None:
            scope = self.scope(function)
            return next((r.metric for r in scope.reports if r.verb == "returns"), None)

        return self._summary("metric", function, compute, None)

    # --- loaders and reports ---------------------------------------------------------------

    def is_foreign_reducer(self, call: cst.Call) -> bool:
        """A call of a function from another module that reduces, by its name."""
        if self.tree.is_call_to(call, s.COLLECTIVES):
            return False
        spelled = dotted(call.func)
        if spelled is None or self.program.callee(call, self.tree.function(call)) is not None:
            return False
        last = spelled.rsplit(".", 1)[-1].lower()
        return any(word in last for word in REDUCER_WORDS)

    def iterates_sharded(self, iterable: cst.BaseExpression, function: Function) -> bool:
        return any(self.script.is_sharded(o.node) for o in self.program.dataloaders(iterable, function))

    def report_verb(self, call: cst.Call, function: Function) -> str | None:
        """`prints` / `logs` for print, logging, loggers, SummaryWriter, wandb, tqdm postfix."""
        if self.tree.is_builtin_call(call, "print"):
            return "prints"
        name = self.tree.qname(call.func)
        if name in s.LOGGING_EMIT or name in REPORT_CALLS:
            return "logs"
        found = method_call(call)
        if found is None:
            return None
        receiver, method = found
        if method in METRIC_SINKS:
            return "logs"
        if method in s.LOGGER_METHODS:
            spelled = dotted(receiver)
            if spelled is not None and (spelled.rsplit(".", 1)[-1] in LOGGER_NAMES or "logger" in spelled.lower()):
                return "logs"
            if isinstance(receiver, cst.Name) and any(
                self.tree.is_call_to(o.node, s.GET_LOGGER) or (self.tree.call_name(o.node) or "").startswith("wandb.")
                for o in self.program.origins(receiver, function)
            ):
                return "logs"
        return None

    # --- DDP402: exits decided on one rank ------------------------------------------------

    @cached_property
    def training_loops(self) -> set[cst.CSTNode]:
        return set(self.script.training_loops)

    def syncs(self, node: cst.CSTNode, function: Function) -> bool:
        """It runs a collective, a DDP forward or a backward (directly or through a same-file call)."""
        return any(self.script.is_collective_call(call, function) for call in self.tree.calls(node))

    @cached_property
    def divergent_exits(self) -> list[DivergentExit]:
        found: dict[cst.If, DivergentExit] = {}
        exits: list[tuple[cst.CSTNode, cst.For | cst.While | None]] = [(node, None) for node in self.tree.of_type(*EXITS)]
        exits += [(flag, loop) for flag, loop in flag_stops(self.tree, self.program, self.tree.module) if loop in self.training_loops]
        exits += [(call, None) for call in self.tree.calls_to(PROGRAM_EXITS)]  # `sys.exit(0)`: like a return
        for node, loop in exits:
            hit = self._divergent_exit(node, loop)
            if hit is not None and hit.statement not in found:
                found[hit.statement] = hit
        return sorted(found.values(), key=lambda d: self.tree.positions[d.statement].start.line)

    def _divergent_exit(self, exit: cst.CSTNode, flagged: cst.For | cst.While | None) -> DivergentExit | None:
        """The `if` that takes `exit` on one rank's say; `flagged`: the `while` loop that `exit`,
        an assignment to its flag, stops."""
        loops = self.tree.loops(exit)
        if flagged is not None:
            stop = flagged
        elif isinstance(exit, (cst.Return, cst.Call)):
            training = [loop for loop in loops if loop in self.training_loops]
            if not training:
                return None
            stop = training[-1]
        else:
            if not loops or loops[0] not in self.training_loops:
                return None
            stop = loops[0]
        function = self.tree.function(exit)
        child: cst.CSTNode = exit
        for parent in self.tree.ancestors(exit):
            if parent is stop:
                return None
            if isinstance(parent, cst.If) and child is not parent.test:
                reason = self._divergence(parent.test, function)
                if reason is not None and not self._every_branch_exits(parent, exit):
                    if isinstance(exit, cst.Continue) and not self._skips_sync(parent, stop, function):
                        return None
                    return DivergentExit(parent, exit, reason[0], reason[1])
            child = parent
        return None

    def _divergence(self, test: cst.BaseExpression, function: Function) -> tuple[bool, str] | None:
        if self.script.is_rank_condition(test, function):
            return False, code(test)
        local = self.scope(function).local_names(test)
        if local:
            return True, local[0]
        # each rank's own clock (`time.time() - start > budget`), unless a reducer is handed it
        shared = [call.args for call in self.tree.calls(test) if self._reduces_call(call, function)]
        clocks = [
            code(n) if type(n) is cst.Call else n.value
            for n in self.tree.walk(test)
            if (self.tree.is_call_to(n, CLOCKS) or (type(n) is cst.Name and n.value in self._clock_names(function)))
            and not any(self.tree.inside(n, a) for args in shared for a in args)
        ]
        return (True, clocks[0]) if clocks else None

    def _reduces_call(self, call: cst.Call, function: Function) -> bool:
        """`any_rank(flag)`: a same-file function that returns a reduced value, or a reducer by its name."""
        callee = self.program.callee(call, function)
        return self.reducing(callee[0]) if callee is not None else self.is_foreign_reducer(call)

    def _clock_names(self, function: Function) -> set[str]:
        if function not in self._clocks:
            self._clocks[function] = clock_names(self.tree, self.program, function)
        return self._clocks[function]

    def _every_branch_exits(self, statement: cst.If, exit: cst.CSTNode) -> bool:
        """`if rank == 0: ...; break` / `else: break`: every rank leaves."""
        if statement.orelse is None:
            return False
        kind = type(exit)
        branches = [statement.body, statement.orelse]
        return all(any(isinstance(n, kind) for n in self.tree.walk(b)) for b in branches)

    def _skips_sync(self, statement: cst.If, loop: cst.For | cst.While, function: Function) -> bool:
        """Whether `continue` under `statement` skips a sync point later in the iteration."""
        return skips(self.tree, statement, loop, lambda later: self.syncs(later, function))


def flow(script: Script) -> Flow:
    """The shared analysis of `script`, built on first use."""
    return script.shared(Flow)
