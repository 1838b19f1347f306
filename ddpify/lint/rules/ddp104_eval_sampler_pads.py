"""DDP104 eval-sampler-pads."""

from __future__ import annotations

import libcst as cst

from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import facts


class EvalSamplerPads(Rule):
    """## What it does
    Flags a `DistributedSampler` whose DataLoaders are only used for evaluation: iterated
    under `torch.no_grad()` / `torch.inference_mode()` or after `model.eval()`, and never by
    a loop that calls `backward()`, in a script that trains.

    Scripts that only run inference are not flagged: sharding the data is their point.

    ## Why is this bad?
    To give every rank the same number of samples, `DistributedSampler` pads the dataset
    with repeats of its first samples up to a multiple of the world size (or drops the tail
    with `drop_last=True`), and it shuffles unless told not to. Metrics gathered from the
    shards then count some samples twice (or miss some), so accuracy and loss change with
    the number of GPUs, and best-checkpoint or early-stopping decisions drift with them.

    ## Example
    ```python
    val_loader = DataLoader(val_set, batch_size=256, sampler=DistributedSampler(val_set))

    @torch.no_grad()
    def evaluate(model, loader): ...
    ```

    ## Use instead
    Evaluate the whole set on every rank (or on rank 0 with the plain `model.module`):
    ```python
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False)
    ```
    or shard without padding (a sampler that splits `range(len(val_set))` into
    `indices[rank::world_size]`) and `all_reduce` the sums and counts.

    ## Fix safety
    No fix: whether to evaluate everything on every rank or to shard without padding and
    reduce the results is a trade-off for the author.

    ## References
    - [DistributedSampler (padding and `drop_last`)](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    - [pytorch/pytorch#25162](https://github.com/pytorch/pytorch/issues/25162): "Incorrect Validation Accuracy Due to Distributed Sampler"
    """

    code = "DDP104"
    name = "eval-sampler-pads"
    fix = "no"

    def visit_Call(self, node: cst.Call) -> None:
        f = facts(self.script)
        if not f.is_sampler_call(node) or not self.script.training_loops:
            return
        loaders = f.loaders_of(node)
        if loaders and all(f.is_evaluation_only(loader) for loader in loaders):
            self.report(node, "DistributedSampler on an evaluation loader pads with repeated samples: metrics change with the world size; evaluate the whole set or shard without padding")
