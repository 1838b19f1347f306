"""DDP403 unreduced-metric."""

from __future__ import annotations

import libcst as cst

from ddpify.lint.rule import Rule
from ddpify.lint.rules._divergence import flow


class UnreducedMetric(Rule):
    """## What it does
    Flags a print, a log call or a comparison of a total that was summed (`+=`, or collected
    with `losses.append(...)`) over a sharded loader (one with a `DistributedSampler`) and
    never reduced on the way: no `dist.all_reduce`, `all_gather`, `reduce` or `*_object`
    collective on it, or on a tensor built from it, between the loop and the report. Totals
    a same-file function returns unreduced are followed into its callers.

    Printing the current batch's loss inside the loop is not flagged: that is no total; nor is
    a window restarted inside the loop (`running_loss = 0.0` every 100 batches), which one
    process reported the same way.

    ## Why is this bad?
    With a `DistributedSampler` each rank sees 1/N of the data, so `running_loss` or
    `correct` on rank 0 describe rank 0's shard, not the dataset. The printed loss is noisy,
    the accuracy is measured on a fraction of the validation set, and a "best checkpoint"
    chosen by comparing it is chosen on rank 0's shard (and differently on every rank).

    ## Example
    ```python
    running_loss = 0.0
    for x, y in train_loader:  # DataLoader(..., sampler=DistributedSampler(train_set))
        ...
        running_loss += loss.item()
    if rank == 0:
        print(f"loss {running_loss / len(train_loader):.4f}")
    ```

    ## Use instead
    ```python
    totals = torch.tensor([running_loss], dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    if rank == 0:
        print(f"loss {totals.item() / (len(train_loader) * world_size):.4f}")
    ```
    `ddpify convert` writes this reduction for the totals of the training loop.

    ## Fix safety
    No fix: whether a total is summed or averaged over ranks depends on what it counts.

    ## References
    - [torch.distributed.all_reduce](https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_reduce)
    - [DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    - [PyTorch ImageNet example: `AverageMeter.all_reduce`](https://github.com/pytorch/examples/blob/main/imagenet/main.py)
    """

    code = "DDP403"
    name = "unreduced-metric"
    fix = "no"

    def visit_Module(self, node: cst.Module) -> None:
        analysis = flow(self.script)
        decided = [d.statement.test for d in analysis.divergent_exits]  # DDP402 reports those
        functions = [None, *self.program.all_functions]
        for function in functions:
            for report in analysis.scope(function).reports:
                if report.verb == "returns":
                    continue
                if any(self.tree.inside(report.node, test) for test in decided):
                    continue
                metric = report.metric
                carried = f"`{report.shown}`" if report.shown == metric.name else f"`{report.shown}` (from `{metric.name}`)"
                remedy = "all-gather it" if metric.source.startswith("collected") else "all-reduce it"
                self.report(report.node, f"{report.verb} {carried}, {metric.source}: {remedy} first")
