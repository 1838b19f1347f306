"""DDP404 accumulation-without-no-sync."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from ddpify.analysis.accumulation import Accumulations, Span
from ddpify.edit import Plan, wrap_micro_steps
from ddpify.lint.rule import Rule
from ddpify.syntax import code


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
            found = self._accumulations.find(backward)
            if found is None:
                continue
            span = self._accumulations.span(found)
            when = f"when `{code(found.step.test)}`" if found.step is not None else "after the micro-step loop"
            model = span.model if isinstance(span, Span) else self._accumulations.model(found)
            self.report(
                backward,
                f"gradient accumulation without `no_sync()`: this backward all-reduces every micro-step, "
                f"but the optimizer steps only {when}; run the others under `{model}.no_sync()`",
                fix=(lambda plan, span=span: self._no_sync(plan, span)) if isinstance(span, Span) else None,
            )

    @cached_property
    def _accumulations(self) -> Accumulations:
        return Accumulations(self.tree, self.program, self.script.forwards_ddp, self.script.syncing_functions)

    def _no_sync(self, plan: Plan, span: Span) -> str | None:
        wrap_micro_steps(plan, span.statements, [(model, span.condition) for model in span.models])
        return f"micro-steps run under `{span.model}.no_sync()` unless `{span.condition}`"
