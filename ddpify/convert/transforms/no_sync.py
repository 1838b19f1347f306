"""Gradient accumulation: skip DDP's all-reduce on the micro-steps that do not update.

Without `no_sync()`, every micro-step's backward all-reduces the gradients and (K-1)/K of
that traffic is wasted. The forward and backward of each micro-step go under
`model.no_sync()` unless the step's own condition says the optimizer steps now.
"""

from __future__ import annotations

import libcst as cst

from ddpify.convert.analysis import TrainLoop
from ddpify.convert.transforms.base import Transform
from ddpify.edit import wrap_micro_steps
from ddpify.syntax import code, is_backward, method_call


class GradientSync(Transform):
    name = "no-sync"
    DESCRIPTION = "model.no_sync() on gradient-accumulation micro-steps that do not step the optimizer"

    def run(self) -> None:
        for loop in self.facts.train_loops:
            step = self._accumulation_step(loop)
            if step is not None:
                self._wrap(loop, step)

    def _accumulation_step(self, loop: TrainLoop) -> cst.If | None:
        """`if (i + 1) % k == 0: optimizer.step()` after a backward() on every step. A block that
        runs its own backward() too (a GAN's generator every n_critic steps) is no accumulation."""
        for node in self.tree.walk(loop.loop.body):
            if isinstance(node, cst.If) and any(
                isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo) for n in self.tree.walk(node.test)
            ):
                calls = list(self.tree.calls(node.body))
                if any((found := method_call(c)) and found[1] == "step" for c in calls) and not any(map(is_backward, calls)):
                    return node
        return None

    def _wrap(self, loop: TrainLoop, step: cst.If) -> None:
        function = loop.function
        forwards = [c for c in self.tree.calls(loop.loop.body) if self.facts.forwards_model(c, function)]
        backwards = [c for c in self.tree.calls(loop.loop.body) if is_backward(c)]
        if not forwards or not backwards:
            return
        last = self.tree.statement(backwards[-1])
        block = self.tree.block(last)
        first = next((st for st in block.body if self.tree.inside(forwards[0], st)), None)
        if first is None or self.tree.inside(step, first) or block.body.index(first) > block.body.index(last):
            self.warn(step, "gradient accumulation: forward and backward are in different blocks; wrap them in `model.no_sync()` on micro-steps by hand")
            return
        body = list(block.body)
        span = body[body.index(first) : body.index(last) + 1]
        rest = body[body.index(last) + 1 :]
        holder = next((i for i, st in enumerate(rest) if self.tree.inside(step, st)), 0)
        tested = {n.value for n in self.tree.walk(step.test) if isinstance(n, cst.Name)}
        assigned = {n.value for st in span + rest[:holder] for n in self.tree.walk(st) if isinstance(n, cst.Name) and self._assigned(n)}
        if tested & assigned:
            self.warn(step, "gradient accumulation: the step condition changes after the forward; wrap the micro-steps in `model.no_sync()` by hand")
            return
        model = code(forwards[0].func)
        condition = code(step.test)
        wrap_micro_steps(self.plan, span, model, condition)
        self.change(first, f"micro-steps run under `{model}.no_sync()` until `{condition}`: one all-reduce per optimizer step")

    def _assigned(self, name: cst.Name) -> bool:
        parent = self.tree.parent(name)
        return isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is name)
