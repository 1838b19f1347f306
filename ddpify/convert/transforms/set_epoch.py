"""`sampler.set_epoch(epoch)` at the top of every epoch, so each epoch shuffles differently.

The epoch may be a `for epoch in range(...)` loop around the loader loop, a `while step <
max_steps` loop that re-iterates the loader (the step counter then seeds the shuffle), or a
loop in a caller of the function that iterates the loader.
"""

from __future__ import annotations

import libcst as cst

from ddpify.convert.transforms.base import Transform, statements


class SetEpoch(Transform):
    name = "set-epoch"
    DESCRIPTION = "train_loader.sampler.set_epoch(epoch) at the top of each epoch"

    def run(self) -> None:
        if not self.facts.train_loaders:
            return
        for start in self.facts.epoch_starts:
            if start.epoch is None:
                self.warn(start.loop, f"no epoch counter found for this loop: call `{start.loader}.sampler.set_epoch(epoch)` at the start of each epoch")
                continue
            if not isinstance(start.loop.body, cst.IndentedBlock):
                self.warn(start.loop, f"one-line loop: call `{start.loader}.sampler.set_epoch({start.epoch})` at the start of each epoch")
                continue
            self.plan.prepend(start.loop.body, statements(f"{start.loader}.sampler.set_epoch({start.epoch})\n"))
            self.change(start.loop, f"`{start.loader}.sampler.set_epoch({start.epoch})` each epoch, so every epoch shuffles differently")
