"""DDP402 rank-divergent-exit."""

from __future__ import annotations

import libcst as cst

from ddpify.lint.rule import Rule
from ddpify.lint.rules._divergence import flow
from ddpify.syntax import code


class RankDivergentExit(Rule):
    """## What it does
    Flags an `if` inside a training loop that leaves the loop (`break`, `return`, or a
    `continue` that skips the backward, or a flag the loop's `while` test reads: `done = True`)
    when its test is decided on one rank: a rank check
    (`rank == 0`, `is_main_process()`, `master_process`), or a value local to each rank that
    no collective reduced, such as the loss, the batch of a sharded loader, or `loss.item()`.

    Counters every rank advances alike (`step += 1`, `if step >= max_steps: break`) and values
    every rank computes from the same data (evaluation over an unsharded loader) are not local.

    ## Why is this bad?
    Every training step of a DDP model ends in a gradient all-reduce that all ranks must join.
    When rank 0 alone decides to stop, or each rank decides on its own loss, some ranks leave
    the loop while the others wait in the next `backward()` for peers that never come: the job
    hangs until the NCCL timeout (30 minutes by default) and dies without a useful traceback.
    Skipping a bad batch with `continue` on one rank hangs the same way.

    ## Example
    ```python
    for epoch in range(epochs):
        train_loss = train_one_epoch(model, train_loader)  # this rank's shard only
        if train_loss < target_loss:
            break
    ```

    ## Use instead
    Decide on a value every rank shares: all-reduce it, or let rank 0 decide and broadcast.
    ```python
    for epoch in range(epochs):
        train_loss = torch.tensor(train_one_epoch(model, train_loader), device=device)
        dist.all_reduce(train_loss)
        if train_loss.item() / world_size < target_loss:
            break
    ```

    ## Fix safety
    No fix: which value the ranks should agree on is a decision about the training run.

    ## References
    - [DDP notes: every rank must run the same collectives](https://pytorch.org/docs/stable/notes/ddp.html)
    - [torch.distributed.broadcast](https://pytorch.org/docs/stable/distributed.html#torch.distributed.broadcast)
    - [pytorch/pytorch#54059](https://github.com/pytorch/pytorch/issues/54059): ranks that diverge hang in the next collective
    """

    code = "DDP402"
    name = "rank-divergent-exit"
    fix = "no"

    def visit_Module(self, node: cst.Module) -> None:
        for found in flow(self.script).divergent_exits:
            if isinstance(found.exit, cst.Assign):  # `done = True` under `while not done:`
                keyword, what = code(found.exit), "stops the training loop"
            elif isinstance(found.exit, cst.Call):  # `sys.exit(0)`
                keyword, what = code(found.exit), "ends the program"
            else:
                keyword = type(found.exit).__name__.lower()
                what = EFFECT[keyword]
            if found.local:
                message = (
                    f"`{keyword}` {what} on a per-rank value (`{found.reason}`, never all-reduced): "
                    "ranks diverge and hang; decide on an all-reduced or broadcast value"
                )
            else:
                message = f"`{keyword}` {what} only on ranks where `{found.reason}`: the others hang in the next collective; broadcast the decision"
            self.report(found.statement, message)


EFFECT = {
    "break": "leaves the training loop",
    "return": "leaves the training loop",
    "continue": "skips the rest of the training step",
}
