"""Gradient accumulation: skip DDP's all-reduce on the micro-steps that do not update.

Without `no_sync()`, every micro-step's backward all-reduces the gradients and (K-1)/K of
that traffic is wasted. The forward and backward of each micro-step go under
`model.no_sync()` unless the step's own condition says the optimizer steps now. What counts
as a micro-step, and which statements the `with` holds, is `ddpify.analysis.accumulation`,
which lint's DDP404 reads too.
"""

from __future__ import annotations

from ddpify.analysis.accumulation import Accumulations, Span
from ddpify.convert.transforms.base import Transform
from ddpify.edit import wrap_micro_steps
from ddpify.syntax import is_backward


class GradientSync(Transform):
    name = "no-sync"
    DESCRIPTION = "model.no_sync() on gradient-accumulation micro-steps that do not step the optimizer"

    def run(self) -> None:
        accumulations = Accumulations(self.tree, self.program, self.facts.forwards_model, self.facts.syncing)
        seen = set()
        for loop in self.facts.train_loops:
            for backward in (c for c in self.tree.calls(loop.loop.body) if is_backward(c)):
                found = accumulations.find(backward)
                if found is None or found.loop in seen:
                    continue
                seen.add(found.loop)
                span = accumulations.span(found)
                if not isinstance(span, Span):
                    self.warn(found.step or backward, f"gradient accumulation: {span}")
                    continue
                conditions = [
                    (model, span.condition + (f" or not isinstance({model}, DDP)" if self.facts.may_be_plain(model, span.statements[0]) else ""))
                    for model in span.models  # `or not isinstance(...)`: it may hold the plain model here
                ]
                wrap_micro_steps(self.plan, span.statements, conditions)
                under = ", ".join(f"`{model}.no_sync()`" for model in span.models)
                self.change(span.statements[0], f"micro-steps run under {under} until `{span.condition}`: one all-reduce per optimizer step")
