"""Gradient accumulation: backward() on every micro-step, the optimizer stepping on some.

`Accumulations.find(backward)` says whether a backward is a micro-step of such a loop (an
`if (i + 1) % k == 0: optimizer.step()` after it in the loop, or an inner `for micro in
range(k)` loop followed by the step), and `span(found)` which statements, from the model's
forward to that backward, one `with model.no_sync()` can hold, and the test under which the
micro-step syncs instead (the step's condition, or `micro == k - 1`; and the loop's last step
when the optimizer also steps after the loop, on the leftover micro-steps). Convert's GradientSync writes
that `with`; lint's DDP404 reports the backward and offers the same edit as its fix. Which
calls forward the distributed model is the caller's parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.analysis.sync import ForwardsModel
from ddpify.program import Program
from ddpify.syntax import Tree, code, method_call

# Attributes that turn DDP's gradient sync off for a micro-step.
NO_SYNC = {"no_sync", "require_backward_grad_sync"}
SCHEDULER_PREFIX = "torch.optim.lr_scheduler."


@dataclass(frozen=True)
class Accumulation:
    backward: cst.Call
    loop: cst.For | cst.While
    step: cst.If | None  # the `if i % k == 0:` that steps the optimizer (None: an inner micro-step loop)


@dataclass(frozen=True)
class Span:
    """What one `with model.no_sync()` holds: the forward..backward statements of a micro-step."""

    statements: list[cst.BaseStatement]
    condition: str  # the step's test: the micro-step that updates syncs
    models: tuple[str, ...]  # the distributed models the micro-step forwards, as spelled, first forward first

    @property
    def model(self) -> str:
        return self.models[0]


class Accumulations:
    def __init__(
        self, tree: Tree, program: Program, forwards_model: ForwardsModel, syncing: set[cst.FunctionDef]
    ) -> None:
        self.tree = tree
        self.program = program
        self.forwards_model = forwards_model
        self.syncing = syncing

    def find(self, backward: cst.Call) -> Accumulation | None:
        """The accumulation loop `backward` is a micro-step of, unless it already uses no_sync."""
        loops = self.tree.loops(backward)
        if not loops:
            return None
        loop = loops[0]
        function = self.tree.function(backward)
        if not self._forwards(loop, function) or self._mentions_no_sync(loop, function):
            return None
        if any(self._mentions_no_sync(w, function) for w in self.tree.ancestors(backward) if isinstance(w, cst.With)):
            return None
        step = self._modulo_step(loop, backward, function)
        if step is not None:
            return Accumulation(backward, loop, step)
        if len(loops) > 1 and self._micro_step_loop(loop, loops[1], function):
            return Accumulation(backward, loop, None)
        return None

    def span(self, found: Accumulation) -> Span | str:
        """The statements one `with` can hold, or why there are none."""
        step = found.step
        function = self.tree.function(found.backward)
        last = self.tree.statement(found.backward)
        block = self.tree.parent(last)
        if not isinstance(block, cst.IndentedBlock):
            return "the backward shares its line with other statements"
        body = list(block.body)
        end = body.index(last)
        forwards = [
            (i, c) for i, st in enumerate(body[: end + 1]) for c in self.tree.calls(st) if self.forwards_model(c, function)
        ]
        nested = False
        if not forwards and step is not None:
            # `out = model(x)` in the loop, `if optimizer is not None: loss.backward()` (one loop
            # that also evaluates): the `with` holds the forward through that `if`, step and all
            holder = self.tree.parent(block)
            outer = self.tree.parent(holder) if type(holder) is cst.If else None
            if isinstance(outer, cst.IndentedBlock) and self.tree.loops(holder)[:1] == [found.loop]:
                body, last = list(outer.body), holder
                end = body.index(last)
                forwards = [
                    (i, c) for i, st in enumerate(body[:end]) for c in self.tree.calls(st) if self.forwards_model(c, function)
                ]
                nested = bool(forwards)
        if step is None:
            return self._inner_loop_span(found, body[forwards[0][0] : end + 1] if forwards else [], forwards)
        if not forwards or (not nested and any(self.tree.inside(step, st) for st in body[forwards[0][0] : end + 1])):
            return "forward and backward are in different blocks; wrap them in `model.no_sync()` on micro-steps by hand"
        start = forwards[0][0]
        span = body[start : end + 1]
        # the condition must mean the same before the forward as at the step
        rest = body[end + 1 :]
        holder = next((i for i, st in enumerate(rest) if self.tree.inside(step, st)), len(rest))
        tested = {n.value for n in self.tree.walk(step.test) if isinstance(n, cst.Name)}
        if tested & self._assigned(span + rest[:holder]):
            return "the step condition changes after the forward; wrap the micro-steps in `model.no_sync()` by hand"
        condition = code(step.test)
        if self._flushed_after(found.loop, function):
            # `if len(loader) % k: optimizer.step()` after the loop steps the leftover micro-steps:
            # the last one must sync too, or each rank steps its own gradients
            last = self._last_step_test(found.loop)
            if last is None:
                return (
                    "the optimizer also steps after the loop (the leftover micro-steps), and the loop's last "
                    "step cannot be told here: the micro-steps keep syncing; sync the last one too if you wrap them in `model.no_sync()`"
                )
            condition = f"{condition} or {last}"
        return Span(span, condition, _callees(forwards))

    def _flushed_after(self, loop: cst.For | cst.While, function) -> bool:
        """An optimizer step after `loop`, in the statements that follow it in its block."""
        block = self.tree.parent(loop)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return False
        later = list(block.body)[list(block.body).index(loop) + 1 :]
        return any(self._is_optimizer_step(c, function) for st in later for c in self.tree.calls(st))

    def _last_step_test(self, loop: cst.For | cst.While) -> str | None:
        """`i + 1 == len(loader)` for `for i, batch in enumerate(loader)` (`i == len(loader)` when
        counting from 1): true on the loop's last step. None for any other loop."""
        if type(loop) is not cst.For or type(loop.iter) is not cst.Call or self.tree.qname(loop.iter.func) != "builtins.enumerate":
            return None
        target = loop.target
        counter = target.elements[0].value if type(target) is cst.Tuple and target.elements else None
        args = loop.iter.args
        if type(counter) is not cst.Name or not args or args[0].keyword is not None or args[0].star:
            return None
        start = args[1].value if len(args) > 1 else None
        if counter.value in self._assigned(list(loop.body.body)):  # type: ignore[attr-defined]
            return None
        iterable = code(args[0].value)
        if start is None:
            return f"{counter.value} + 1 == len({iterable})"
        if type(start) is cst.Integer and start.value == "1":
            return f"{counter.value} == len({iterable})"
        return None

    def _inner_loop_span(self, found: Accumulation, span: list[cst.BaseStatement], forwards: list) -> Span | str:
        """`for micro in range(k):` holding forward..backward: every micro-step but the last
        (`micro == k - 1`) runs under no_sync."""
        by_hand = "the micro-steps are an inner loop; run all but its last iteration under `model.no_sync()` by hand"
        loop = found.loop
        if not (isinstance(loop, cst.For) and isinstance(loop.target, cst.Name) and span and self.tree.parent(span[0]) is loop.body):
            return by_hand
        count = _range_count(loop.iter)
        if count is None or not isinstance(count, (cst.Name, cst.Attribute, cst.Integer)):
            return by_hand
        counter = loop.target.value
        read = {n.value for n in self.tree.walk(count) if isinstance(n, cst.Name)}
        if (read | {counter}) & self._assigned(list(loop.body.body)):  # type: ignore[attr-defined]
            return by_hand
        last = str(int(count.value) - 1) if isinstance(count, cst.Integer) else f"{code(count)} - 1"
        return Span(span, f"{counter} == {last}", _callees(forwards))

    def model(self, found: Accumulation) -> str:
        """How the micro-step's forward spells the model (for messages)."""
        function = self.tree.function(found.backward)
        forward = next((c for c in self.tree.calls(found.loop) if self.forwards_model(c, function)), None)
        return code(forward.func) if forward is not None else "model"

    # --- detection -----------------------------------------------------------------------

    def _modulo_step(self, loop: cst.CSTNode, backward: cst.Call, function) -> cst.If | None:
        """`if (i + 1) % k == 0: optimizer.step()` in the loop after the backward, which is outside its stepping branch."""
        steps = [c for c in self.tree.calls(loop.body) if self._is_optimizer_step(c, function)]  # type: ignore[attr-defined]
        if not steps:
            return None
        for node in self.tree.walk(loop.body):  # type: ignore[attr-defined]
            if not isinstance(node, cst.If) or not self._has_modulo(node.test):
                continue
            branches = [node.body] + ([node.orelse] if node.orelse is not None else [])
            stepping = [b for b in branches if any(self.tree.inside(c, b) for c in steps)]
            if not stepping or any(self.tree.inside(backward, b) for b in stepping):
                continue
            if self.tree.order(node) < self.tree.order(backward):
                # `if i > 0 and i % k == 0: step()` before this batch's backward: the step's test names
                # the micro-step after the one that must sync, so no no_sync (every backward syncs)
                continue
            if len(stepping) == 2:
                continue  # `if i % 2: opt_g.step() else: opt_d.step()`: some optimizer steps every time
            if all(any(self.tree.inside(c, b) for b in stepping) for c in steps):
                return node
        return None

    def _micro_step_loop(self, inner: cst.CSTNode, outer: cst.CSTNode, function) -> bool:
        """`for micro in range(k): ... backward()` followed by `optimizer.step()` in the outer loop."""
        if any(self._is_optimizer_step(c, function) for c in self.tree.calls(inner)):
            return False
        block = self.tree.parent(inner)
        if not isinstance(block, cst.IndentedBlock) or not self.tree.inside(block, outer):
            return False
        later = list(block.body)[list(block.body).index(inner) + 1 :]
        return any(self._is_optimizer_step(c, function) for st in later for c in self.tree.calls(st))

    def _has_modulo(self, test: cst.BaseExpression) -> bool:
        return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo) for n in self.tree.walk(test))

    def _is_optimizer_step(self, call: cst.Call, function) -> bool:
        return is_optimizer_step(self.tree, self.program, call, function)

    def _forwards(self, loop: cst.CSTNode, function) -> bool:
        for call in self.tree.calls(loop):
            if self.forwards_model(call, function):
                return True
            target = self.program.callee(call, function)
            if target is not None and target[0] in self.syncing:
                return True
        return False

    def _mentions_no_sync(self, node: cst.CSTNode, function, depth: int = 0) -> bool:
        """`model.no_sync()` or `require_backward_grad_sync` in `node`, through names and same-file helpers."""
        if depth > 3:
            return False
        is_with = type(node) is cst.With
        for n in self.tree.walk(node):
            kind = type(n)
            if kind is cst.Attribute and n.attr.value in NO_SYNC:
                return True
            if kind is cst.Name and is_with:
                for value, _ in self.program.assignments(function, n.value):
                    if self._mentions_no_sync(value, function, depth + 1):
                        return True
            if kind is cst.Call and is_with:
                target = self.program.callee(n, function)
                if target is not None and self._mentions_no_sync(target[0].body, target[0], depth + 1):
                    return True
        return False

    def _assigned(self, statements: list[cst.BaseStatement]) -> set[str]:
        names = set()
        for st in statements:
            for n in self.tree.walk(st):
                if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
                    targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                    for t in targets:
                        names |= {x.value for x in self.tree.walk(t) if isinstance(x, cst.Name)}
        return names


def _range_count(iterable: cst.BaseExpression) -> cst.BaseExpression | None:
    """`k` of `range(k)` or `range(0, k)`."""
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range"):
        return None
    args = iterable.args
    if len(args) == 1 and args[0].keyword is None and not args[0].star:
        return args[0].value
    if len(args) == 2 and isinstance(args[0].value, cst.Integer) and args[0].value.value == "0":
        return args[1].value
    return None


def is_optimizer_step(tree: Tree, program: Program, call: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
    """`optimizer.step()` or `scaler.step(optimizer)`; not a learning-rate scheduler's step."""
    found = method_call(call)
    if found is None or found[1] != "step":
        return False
    receiver = found[0]
    if "sched" in code(receiver).lower():
        return False
    return not any((tree.call_name(o.node) or "").startswith(SCHEDULER_PREFIX) for o in program.origins(receiver, function))


def _callees(forwards: list[tuple[int, cst.Call]]) -> tuple[str, ...]:
    """Each model a micro-step forwards, once (two students trained together need both under no_sync)."""
    return tuple(dict.fromkeys(code(call.func) for _, call in forwards))
