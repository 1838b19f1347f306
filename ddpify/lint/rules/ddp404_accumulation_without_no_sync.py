"""DDP404 accumulation-without-no-sync."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.edit import Plan, wrap_micro_steps
from ddpify.lint.rule import Rule
from ddpify.syntax import code, method_call

# Attributes that turn DDP's gradient sync off for a micro-step.
NO_SYNC = {"no_sync", "require_backward_grad_sync"}
SCHEDULER_PREFIX = "torch.optim.lr_scheduler."


@dataclass(frozen=True)
class Accumulation:
    backward: cst.Call
    loop: cst.For | cst.While
    step: cst.If | None  # the `if i % k == 0:` that steps the optimizer (None: an inner micro-step loop)


@dataclass(frozen=True)
class Wrap:
    statements: list[cst.BaseStatement]
    condition: str
    model: str


class AccumulationWithoutNoSync(Rule):
    """## What it does
    Flags the `backward()` of a gradient-accumulation loop on a DDP model that never uses
    `no_sync()`: backward runs on every micro-step while `optimizer.step()` (or
    `scaler.step(optimizer)`) runs only under a modulo test such as `if (i + 1) % accum == 0:`,
    or only after an inner loop of micro-steps.

    ## Why is this bad?
    DDP all-reduces the gradients in every `backward()`. When the optimizer steps once every K
    micro-steps, K-1 of those K all-reduces move gradients that are only added to again:
    the communication of the step is K times what it needs to be, and on slow links it is
    most of the step time. The result is the same, only slower.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        with contextlib.nullcontext() if (i + 1) % accum_steps == 0 else model.no_sync():
            loss = criterion(model(x), y) / accum_steps
            loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Fix safety
    Partial: when the forward and the backward are in one block and the step condition does
    not change in between, `--fix` wraps them in
    `with contextlib.nullcontext() if <step condition> else model.no_sync():`, which syncs on
    exactly the micro-steps that step. Gradients are the same; only the skipped all-reduces go.
    Loops of another shape are reported without a fix.

    ## References
    - [`DistributedDataParallel.no_sync`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync)
    - [Hugging Face: gradient accumulation with DDP](https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation)
    """

    code = "DDP404"
    name = "accumulation-without-no-sync"
    fix = "partial"

    def visit_Module(self, node: cst.Module) -> None:
        if not self.script.ddp_wraps:
            return
        for backward in self.script.backward_calls:
            found = self._accumulation(backward)
            if found is None:
                continue
            wrap = self._wrap(found)
            when = f"when `{code(found.step.test)}`" if found.step is not None else "after the micro-step loop"
            model = wrap.model if wrap is not None else self._model(found)
            self.report(
                backward,
                f"gradient accumulation without `no_sync()`: this backward all-reduces every micro-step, "
                f"but the optimizer steps only {when}; run the others under `{model}.no_sync()`",
                fix=(lambda plan, wrap=wrap: self._no_sync(plan, wrap)) if wrap is not None else None,
            )

    # --- detection -----------------------------------------------------------------------

    def _accumulation(self, backward: cst.Call) -> Accumulation | None:
        loops = self.tree.loops(backward)
        if not loops:
            return None
        loop = loops[0]
        function = self.tree.function(backward)
        if not self._forwards_ddp(loop, function) or self._mentions_no_sync(loop, function):
            return None
        if any(self._mentions_no_sync(w, function) for w in self.tree.ancestors(backward) if isinstance(w, cst.With)):
            return None
        step = self._modulo_step(loop, backward, function)
        if step is not None:
            return Accumulation(backward, loop, step)
        if len(loops) > 1 and self._micro_step_loop(loop, loops[1], function):
            return Accumulation(backward, loop, None)
        return None

    def _modulo_step(self, loop: cst.CSTNode, backward: cst.Call, function) -> cst.If | None:
        """`if (i + 1) % k == 0: optimizer.step()` in the loop, with backward outside its stepping branch."""
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

    def _model(self, found: Accumulation) -> str:
        function = self.tree.function(found.backward)
        forward = next((c for c in self.tree.calls(found.loop) if self.script.is_ddp_model(c.func, function)), None)
        return code(forward.func) if forward is not None else "model"

    def _has_modulo(self, test: cst.BaseExpression) -> bool:
        return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo) for n in self.tree.walk(test))

    def _is_optimizer_step(self, call: cst.Call, function) -> bool:
        """`optimizer.step()` or `scaler.step(optimizer)`; not a learning-rate scheduler's step."""
        found = method_call(call)
        if found is None or found[1] != "step":
            return False
        receiver = found[0]
        spelled = code(receiver).lower()
        if "sched" in spelled:
            return False
        return not any((self.tree.call_name(o.node) or "").startswith(SCHEDULER_PREFIX) for o in self.program.origins(receiver, function))

    def _forwards_ddp(self, loop: cst.CSTNode, function) -> bool:
        for call in self.tree.calls(loop):
            if self.script.is_ddp_model(call.func, function):
                return True
            target = self.program.callee(call, function)
            if target is not None and target[0] in self.script.syncing_functions:
                return True
        return False

    def _mentions_no_sync(self, node: cst.CSTNode, function, depth: int = 0) -> bool:
        """`model.no_sync()` or `require_backward_grad_sync` in `node`, through names and same-file helpers."""
        if depth > 3:
            return False
        for n in self.tree.walk(node):
            if isinstance(n, cst.Attribute) and n.attr.value in NO_SYNC:
                return True
            if isinstance(n, cst.Name) and isinstance(node, cst.With):
                for value, _ in self.program.assignments(function, n.value):
                    if self._mentions_no_sync(value, function, depth + 1):
                        return True
            if isinstance(n, cst.Call) and isinstance(node, cst.With):
                target = self.program.callee(n, function)
                if target is not None and self._mentions_no_sync(target[0].body, target[0], depth + 1):
                    return True
        return False

    # --- the partial fix -----------------------------------------------------------------

    def _wrap(self, found: Accumulation) -> Wrap | None:
        """The statements from the forward to the backward, when one `with` can hold them."""
        step = found.step
        if step is None:
            return None
        function = self.tree.function(found.backward)
        last = self.tree.statement(found.backward)
        block = self.tree.parent(last)
        if not isinstance(block, cst.IndentedBlock):
            return None
        body = list(block.body)
        end = body.index(last)
        forwards = [
            (i, c)
            for i, st in enumerate(body[: end + 1])
            for c in self.tree.calls(st)
            if self.script.is_ddp_model(c.func, function)
        ]
        if not forwards:
            return None
        start, forward = forwards[0]
        span = body[start : end + 1]
        if any(self.tree.inside(step, st) for st in span):
            return None
        # the condition must mean the same before the forward as at the step
        rest = body[end + 1 :]
        holder = next((i for i, st in enumerate(rest) if self.tree.inside(step, st)), len(rest))
        tested = {n.value for n in self.tree.walk(step.test) if isinstance(n, cst.Name)}
        if tested & self._assigned(span + rest[:holder]):
            return None
        return Wrap(span, code(step.test), code(forward.func))

    def _assigned(self, statements: list[cst.BaseStatement]) -> set[str]:
        names = set()
        for st in statements:
            for n in self.tree.walk(st):
                if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
                    targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                    for t in targets:
                        names |= {x.value for x in self.tree.walk(t) if isinstance(x, cst.Name)}
        return names

    def _no_sync(self, plan: Plan, wrap: Wrap) -> str | None:
        wrap_micro_steps(plan, wrap.statements, wrap.model, wrap.condition)
        return f"micro-steps run under `{wrap.model}.no_sync()` unless `{wrap.condition}`"
