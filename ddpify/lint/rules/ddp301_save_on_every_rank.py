"""DDP301 save-on-every-rank."""

from __future__ import annotations

import libcst as cst

from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import devices_and_output, guard_fix


class SaveOnEveryRank(Rule):
    """## What it does
    Flags `torch.save` and other writes to a shared path (`open(path, "w")`, `json.dump`,
    `np.save`, `plt.savefig`, `df.to_csv`, `save_pretrained`, ...) that every rank runs: not
    under a rank guard (`if rank == 0:`, `if dist.get_rank() == 0:`, `if is_main_process():`,
    after `if rank != 0: return`), neither where the call is nor around every call of the helper
    that holds it. Paths that name the rank (`f"ckpt_rank{rank}.pt"`), in-memory buffers and
    temporary files are fine, and so are a Dataset's writes of its own files (it also runs in
    DataLoader workers; its download belongs on rank 0 first, where the Dataset is built).

    ## Why is this bad?
    Every process writes the same file at the same time. On a shared filesystem the writes
    interleave or truncate one another: the checkpoint is corrupt, or a rank reads a file
    another rank is still writing (`PytorchStreamReader failed reading zip archive`). At best
    it is N times the I/O for one file.

    ## Example
    ```python
    for epoch in range(epochs):
        train_one_epoch(model, loader)
        torch.save(model.module.state_dict(), "checkpoint.pt")
    ```

    ## Use instead
    ```python
    for epoch in range(epochs):
        train_one_epoch(model, loader)
        if rank == 0:
            torch.save(model.module.state_dict(), "checkpoint.pt")
    ```

    ## Fix safety
    Safe unless the statement also runs a collective or a DDP forward: the statement is put
    under the script's own rank-0 test when one is in scope (`rank == 0`, `is_main_process()`,
    `args.local_rank in [-1, 0]`), else `dist.get_rank() == 0`. A statement that does more than
    write (an assignment, a collective) is left alone.

    ## References
    - [PyTorch DDP tutorial: save checkpoints on one process](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints)
    - [torch.save](https://pytorch.org/docs/stable/generated/torch.save.html)
    """

    code = "DDP301"
    name = "save-on-every-rank"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        facts = devices_and_output(self.script)
        function = self.tree.function(node)
        if self.script.program.in_dataset(function):
            return  # a Dataset writing its own files: downloads are made rank 0 first by its caller
        write = facts.write_destination(node, function)
        if write is None:
            return
        what, destination = write
        if facts.is_private_destination(destination, function) or facts.guarded_everywhere(node):
            return
        statement = self.tree.statement(node)
        self.report(
            node,
            f"`{what}(...)` runs on every rank: concurrent writes to one file; write on rank 0 only",
            fix=(lambda plan: guard_fix(facts, plan, node)) if facts.output_only(statement, function) else None,
        )

