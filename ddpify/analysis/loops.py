"""The training loops and the loaders they train on.

A training loop is the loop whose steps call backward(): the innermost `for` over a DataLoader
around the call (or around a call of the same-file function that makes it), or the step loop
that draws batches with `next(...)` from an iterator over a loader, `itertools.cycle(loader)`,
or a same-file generator over one. A loader built in another module or handed in by a caller
counts when its name says it is one (`train_loader`). Convert shards these loaders and starts
their epochs (`set_epoch`); lint asks whether a DataLoader is trained on (DDP101, DDP103). Both
read them from here, computed once per file (`Program.fact(TrainLoops)`).
"""

from __future__ import annotations

import ast

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import libcst as cst

from ddpify.program import ITERABLE_WRAPPERS, Origin, Program
from ddpify.syntax import code, dotted, is_backward

ITERATORS = {"builtins.iter", "itertools.cycle"}


@dataclass
class TrainLoop:
    loop: cst.For | cst.While  # the loop whose steps call backward()
    loader: cst.BaseExpression  # the loader as consumed: iterated by `loop`, or wrapped by iter()/cycle()
    function: cst.FunctionDef | None  # where `loader` is spelled
    consumed_by: Literal["for", "next"] = "for"  # `for batch in loader`, or `next(...)` per step
    external: bool = False  # the loader is built outside this file (a parameter, another module's helper)


class TrainLoops:
    """The training loops of one file and the DataLoaders they train on."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.tree = program.tree
        self._unfed: list[cst.Call] = []

    @cached_property
    def draws(self) -> list[TrainLoop]:
        """Each loader a training loop draws from, one TrainLoop each: a step loop may draw from
        two with next() (FixMatch's labeled and unlabeled batches)."""
        found: dict[tuple[cst.For | cst.While, str], TrainLoop] = {}
        for call in self.program.backward_calls:
            drawn = self._loader_loops(call, self.tree.function(call), set())
            for loop in drawn:
                found.setdefault((loop.loop, code(loop.loader)), loop)
            if not drawn:
                self._unfed.append(call)
        return list(found.values())

    @cached_property
    def unfed(self) -> list[cst.Call]:
        """The `backward()` calls no DataLoader feeds: batches the script makes itself
        (`X[torch.randint(0, n, (bs,))]`), or none (a full batch)."""
        self.draws
        return self._unfed

    @cached_property
    def loops(self) -> list[TrainLoop]:
        """The training loops, one TrainLoop each (with the first loader it draws from)."""
        found: dict[cst.For | cst.While, TrainLoop] = {}
        for loop in self.draws:
            found.setdefault(loop.loop, loop)
        return list(found.values())

    def consumed(self, loop: TrainLoop) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None]]:
        """Every loader `loop` draws from, each with the function it is spelled in: its own, the
        ones zipped with it, and the others its steps draw from with next()."""
        found = [(loop.loader, loop.function), *((other, loop.function) for other in self.zipped_with(loop))]
        found += [(other.loader, other.function) for other in self.draws if other.loop is loop.loop and other is not loop]
        return found

    @cached_property
    def loaders(self) -> list[Origin]:
        """The DataLoader calls the training loops draw from (zipped ones too), first use first;
        through a loader parameter, only what the calls that train pass (`trains_at`)."""
        loaders: dict[cst.CSTNode, Origin] = {}
        for loop in self.draws:
            for loader, function in self.consumed(loop):
                for origin in self.trained_loaders(loop, loader, function):
                    loaders.setdefault(origin.node, origin)
        return list(loaders.values())

    def trained_loaders(self, loop: TrainLoop, loader: cst.BaseExpression, function: cst.FunctionDef | None) -> list[Origin]:
        """The DataLoader calls `loader` comes from when `loop` trains on it: a parameter of the
        loop's function counts only at the calls that train (`run_epoch(model, val_loader)`
        with no optimizer evaluates)."""
        program = self.program
        if type(loader) is not cst.Name or function is None or loader.value not in program.all_param_names(function):
            return program.dataloaders(loader, function)
        found = []
        for call, caller in program.call_sites(function):
            argument = program.argument_for(call, function, loader.value)
            if argument is not None and self.trains_at(call, function, loop):
                found += program.dataloaders(argument, caller)
        return found

    def trains_at(self, call: cst.Call, function: cst.FunctionDef, loop: TrainLoop) -> bool:
        """Whether `loop` (in `function`) runs its training steps when `call` calls `function`:
        not under no_grad, and not where every backward of the loop sits under a test of a
        parameter that the call's arguments make false (`if optimizer is not None:` with no
        optimizer passed, `if train:` with `train=False`, `if phase == "train":`)."""
        if self.tree.grad_disabled(call):
            return False
        steps = self._steps(loop.loop, function)
        return not steps or any(not self._ruled_out(step, call, function) for step in steps)

    def _ruled_out(self, node: cst.CSTNode, call: cst.Call, function: cst.FunctionDef) -> bool:
        """An `if` around `node` in `function` whose test the call's arguments decide against it."""
        for ancestor in self.tree.ancestors(node):
            if ancestor is function:
                return False
            if type(ancestor) is cst.If:
                value = self._test_value(ancestor.test, call, function)
                if value is not None and value != self.tree.inside(node, ancestor.body):
                    return True
        return False

    def _test_value(self, test: cst.BaseExpression, call: cst.Call, function: cst.FunctionDef, depth: int = 2) -> bool | None:
        """The value of a test of one parameter at `call` (None: unknown), also through a flag the
        function binds once from it (`training = optimizer is not None`, then `if training:`)."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._test_value(test.expression, call, function, depth)
            return None if inner is None else not inner
        if type(test) is cst.Name and depth > 0 and test.value not in self.program.all_param_names(function):
            bound = self.program.assignments(function, test.value)
            if len(bound) == 1 and bound[0][1] is None and type(bound[0][0]) in (cst.Comparison, cst.UnaryOperation, cst.Name):
                return self._test_value(bound[0][0], call, function, depth - 1)
            return None
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            operator, right = type(test.comparisons[0].operator), test.comparisons[0].comparator
            left, other = self._argument_value(test.left, call, function), _literal(right)
            if left is _UNKNOWN or other is _UNKNOWN:
                return None
            if operator in (cst.Is, cst.Equal):
                return left == other
            if operator in (cst.IsNot, cst.NotEqual):
                return left != other
            return None
        value = self._argument_value(test, call, function)
        return None if value is _UNKNOWN else bool(value)

    def _argument_value(self, expr: cst.BaseExpression, call: cst.Call, function: cst.FunctionDef) -> object:
        """The literal a parameter holds at `call` (its default when the call leaves it out);
        _UNKNOWN for anything else (a name may hold anything)."""
        if type(expr) is not cst.Name or expr.value not in self.program.all_param_names(function):
            return _UNKNOWN
        argument = self.program.argument_for(call, function, expr.value)
        if argument is None and not any(a.star for a in call.args):  # `*args` / `**kwargs` may pass it
            argument = self.program.default(function, expr.value)
        return _UNKNOWN if argument is None else _literal(argument)

    def zipped_with(self, loop: TrainLoop) -> list[cst.BaseExpression]:
        """The other loaders a training loop draws from in step with its own: `for (xl, yl), (xu,)
        in zip(labeled_loader, unlabeled_loader)` trains on both, so both are sharded."""
        if loop.consumed_by != "for" or type(loop.loop) is not cst.For:
            return []
        node = loop.loop.iter
        while type(node) is cst.Call and node.args and self.tree.qname(node.func) in ITERABLE_WRAPPERS:
            if self.tree.qname(node.func) == "builtins.zip":
                others = [self._through_generator(a.value, loop.function) for a in node.args[1:] if not a.star]
                return [found for other in others if (found := self.program.loader(other, loop.function)) is not None]
            node = node.args[0].value
        return []

    def _through_generator(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> cst.BaseExpression:
        """`forever(lab_loader)`, a same-file generator that yields from the loader it is handed:
        the loader."""
        if type(expr) is cst.Call and expr.args and self.yields_from_argument(expr, function):
            return expr.args[0].value
        return expr

    def external_loader(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> cst.BaseExpression | None:
        """A loader built outside this file (a parameter its callers pass in from another module, a
        helper of another module): its name must say it is a loader, since nothing here shows it."""
        program = self.program
        expr = program.unwrap_iterable(expr)
        for _ in range(3):  # `pbar = tqdm(dataloader)`: the loader is what the wrapper wraps
            origins = program.origins(expr, function)
            wrapped = [o.node for o in origins if program.unwrap_iterable(o.node) is not o.node]
            if len(origins) != 1 or not wrapped or origins[0].function is not function:
                break
            expr = program.unwrap_iterable(wrapped[0])
        name = dotted(expr)
        if name is None:
            return None
        names = [name]
        for origin in program.origins(expr, function):
            node = origin.node
            if isinstance(node, cst.Call) and program.callee(node, origin.function) is None:
                names.append(self.tree.qname(node.func) or code(node.func))
            elif dotted(node) is None:
                return None  # built here from something that is no DataLoader
        return expr if any(map(_names_a_loader, names)) else None

    def yields_from_argument(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`def cycle(loader): while True: for data in loader: yield data`: a same-file generator
        that draws from its first argument."""
        target = self.program.callee(call, function)
        if target is None:
            return False
        generator = target[0]
        names = self.program.param_names(generator)
        if not names:
            return False
        return any(dotted(self.program.unwrap_iterable(iterable)) == names[0] for _, iterable in self._passes(generator))

    def own_loader_generator(self, call: cst.Call, function: cst.FunctionDef | None) -> tuple[cst.FunctionDef, cst.BaseExpression] | None:
        """`inf_train_gen()`: a same-file generator, handed nothing, whose `for` over a loader it
        reads itself (a global `train_loader`) yields its batches; the generator and that loader."""
        target = self.program.callee(call, function)
        if target is None or call.args:
            return None
        generator = target[0]
        return next(((generator, iterable) for _, iterable in self._passes(generator) if self.program.loader(iterable, generator) is not None), None)

    def generator_passes(self, loop: TrainLoop) -> list[tuple[cst.CSTNode, cst.FunctionDef, cst.BaseStatement]]:
        """`batches = cycle(train_loader)` drawn with next(): each call that hands the loader to a
        same-file generator (`yields_from_argument`), the generator, and its `for` over the loader
        or its `yield from` the loader (one pass of the loader each time round its `while True`).
        Also for a `for` over such a generator that repeats its passes (`for x in infinite(loader):`,
        stopped by a step count; helper corpus BT, repro 01)."""
        if loop.consumed_by not in ("next", "for"):
            return []
        iterated = self.program.unwrap_iterable(loop.loop.iter) if type(loop.loop) is cst.For else None
        if loop.consumed_by == "for" and type(iterated) is not cst.Call:
            return []
        spelled = code(loop.loader)
        found = []
        own = self.own_loader_generator(iterated, loop.function) if loop.consumed_by == "for" else None  # type: ignore[arg-type]
        if own is not None:  # `for x in self._batches():` over a generator reading the loader itself, pass after pass
            found += [
                (loop.loop, own[0], node) for node, iterable in self._passes(own[0])
                if code(self.program.unwrap_iterable(iterable)) == spelled and bool(self.tree.loops(node))
            ]  # fmt: skip
        if loop.function is not None:  # the generator reads the loader itself (`inf_train_gen()`)
            found += [
                (loop.loop, loop.function, node) for node, iterable in self._passes(loop.function)
                if code(self.program.unwrap_iterable(iterable)) == spelled
            ]  # fmt: skip
        for call in self.program.calls_in(loop.function):
            if not (call.args and code(call.args[0].value) == spelled and self.yields_from_argument(call, loop.function)):
                continue
            if loop.consumed_by == "for" and call is not iterated:
                continue
            generator = self.program.callee(call, loop.function)[0]  # type: ignore[index]
            name = self.program.param_names(generator)[0]
            found += [
                (call, generator, node) for node, iterable in self._passes(generator)
                if dotted(self.program.unwrap_iterable(iterable)) == name
                and (loop.consumed_by == "next" or bool(self.tree.loops(node)))
            ]  # fmt: skip
        return found

    def _passes(self, generator: cst.FunctionDef) -> list[tuple[cst.BaseStatement, cst.BaseExpression]]:
        """A generator's passes over what it iterates, each with that iterable: its `for` loops
        whose bodies yield, and its `yield from loader` statements."""
        found: list[tuple[cst.BaseStatement, cst.BaseExpression]] = []
        for node in self.program.scope_nodes(generator):
            if type(node) is cst.For and any(type(n) is cst.Yield for n in self.tree.walk(node.body)):
                found.append((node, node.iter))
            elif type(node) is cst.Yield and type(node.value) is cst.From and type(self.tree.parent(node)) is cst.Expr:
                found.append((self.tree.statement(node), node.value.item))
        return found

    def _loader_loops(self, node: cst.CSTNode, function: cst.FunctionDef | None, seen: set) -> list[TrainLoop]:
        loops = self.tree.loops(node)
        for loop in loops:
            if isinstance(loop, cst.For):
                iterable = loop.iter
                if type(iterable) is cst.Call and self.tree.qname(iterable.func) == "builtins.zip" and iterable.args:
                    first = self._through_generator(iterable.args[0].value, function)  # `zip(forever(lab), unl)`
                    iterable = first if first is not iterable.args[0].value else iterable
                else:
                    # `for x, y in batches(loader)`, also inside a wrapper: `enumerate(itertools.islice(repeat(loader), n))` (helper corpus BT, repro 03)
                    iterable = self._through_generator(self.program.unwrap_iterable(iterable), function)
                    own = self.own_loader_generator(iterable, function) if type(iterable) is cst.Call else None
                    if own is not None:  # `for x in self._batches():`, a generator reading `self.loader` itself (helper corpus BT, repro 02)
                        iterable = own[1]
                loader = self.program.loader(iterable, function)
                if loader is not None:  # and the loaders its steps draw from with next() (FixMatch's labeled batch)
                    drawn = self._next_loaders(loop.body, function, depth=2, before=self._steps(loop, function))
                    return [TrainLoop(loop, loader, function), *(TrainLoop(loop, other, where, "next", external) for other, where, external in drawn)]
        if loops:  # batches drawn with next() in the step loop, maybe inside a same-file helper
            drawn = self._next_loaders(loops[0].body, function, depth=2)
            if drawn:
                return [TrainLoop(loops[0], loader, where, "next", external) for loader, where, external in drawn]
            for outer in loops[1:]:  # a window drawn before its micro-steps: `batches = [next(it) for _ in range(k)]`, `for x, y in batches:`
                drawn = self._next_loaders(outer.body, function, depth=2, before=self._steps(outer, function))
                if drawn:
                    return [TrainLoop(outer, loader, where, "next", external) for loader, where, external in drawn]
            for loop in loops:
                if isinstance(loop, cst.For) and (external := self.external_loader(loop.iter, function)) is not None:
                    return [TrainLoop(loop, external, function, "for", True)]
        if function is None or function in seen:
            return []
        seen.add(function)
        found = []
        for call, caller in self.program.call_sites(function):
            found += self._loader_loops(call, caller, seen)
        return found

    def _steps(self, loop: cst.For | cst.While, function: cst.FunctionDef | None) -> list[cst.Call]:
        """The calls in a loop's body that run its training step: `backward()`, or a same-file
        function that reaches one (`train_step(x, y, u)`)."""
        trains = self.program.training_functions
        return [
            c for c in self.tree.calls(loop.body)
            if is_backward(c) or ((target := self.program.callee(c, function)) is not None and target[0] in trains)
        ]  # fmt: skip

    def _feeds(self, draw: cst.Call, steps: list[cst.Call]) -> bool:
        """A draw of the loop's body that comes before one of its steps, under no test that the
        step is not under too: the batch the step trains on (FixMatch's labeled batch), not a
        sample drawn now and then after the step (`if i % 100 == 0: next(iter(val_loader))`)."""
        tests = [a for a in self.tree.ancestors(draw) if type(a) is cst.If]
        return any(
            self.tree.order(draw) < self.tree.order(step) and all(self.tree.inside(step, test) for test in tests)
            for step in steps
        )

    def _next_loaders(
        self, node: cst.CSTNode, function: cst.FunctionDef | None, depth: int, before: list[cst.Call] | None = None
    ) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None, bool]]:
        """Loaders that `next(...)` calls under `node` draw from (`next(iter(loader))`, an
        iterator kept in a variable, `itertools.cycle(loader)`), following same-file calls; not
        under no_grad. With `before` (the steps of a loop over another loader), only the draws
        that feed those steps."""
        found = []
        for call in self.tree.calls(node):
            if before is not None and not self._feeds(call, before):
                continue
            drawn = self.tree.is_builtin_call(call, "next") or (self.tree.qname(call.func) == "itertools.islice" and len(call.args) >= 2)
            if drawn and call.args:  # `next(it)`, or a window of it: `list(itertools.islice(it, k))`
                if self.tree.grad_disabled(call):
                    continue  # a validation batch drawn under no_grad between training steps
                for origin in self.program.origins(call.args[0].value, function):
                    wrapped = origin.node
                    own = self.own_loader_generator(wrapped, origin.function) if type(wrapped) is cst.Call else None
                    if own is not None:  # `def inf_train_gen(): while True: for x in train_loader: yield x`
                        generator, iterable = own
                        loader = self.program.loader(iterable, generator)
                        if loader is not None:
                            found.append((loader, generator, False))
                        continue
                    if isinstance(wrapped, cst.Call) and wrapped.args and (
                        self.tree.qname(wrapped.func) in ITERATORS or self.yields_from_argument(wrapped, origin.function)
                    ):
                        loader = self.program.loader(wrapped.args[0].value, origin.function)
                        if loader is not None:
                            found.append((loader, origin.function, False))
                        elif (external := self.external_loader(wrapped.args[0].value, origin.function)) is not None:
                            found.append((external, origin.function, True))
            elif depth > 0:
                target = self.program.callee(call, function)
                if target is not None and not self.tree.grad_disabled(target[0].body):
                    found += self._next_loaders(target[0].body, target[0], depth - 1)  # the draws there feed what `call` feeds
        return found


_UNKNOWN = object()


def _literal(expr: cst.BaseExpression) -> object:
    """None, True, False, a number or a string written in the source; else _UNKNOWN."""
    if type(expr) is cst.Name and expr.value in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[expr.value]
    if type(expr) in (cst.SimpleString, cst.Integer):
        try:
            return ast.literal_eval(expr.value)
        except (ValueError, SyntaxError):
            return _UNKNOWN
    return _UNKNOWN


def _names_a_loader(name: str) -> bool:
    """`train_loader`, `dataloader`, `train_dl`, `get_loader`, `dataset.train`."""
    parts = name.lower().split(".")
    last = parts[-1]
    named = "loader" in last or last.endswith("_dl") or last == "dl"
    return named or (len(parts) > 1 and last in {"train", "training"} and "data" in parts[-2])
