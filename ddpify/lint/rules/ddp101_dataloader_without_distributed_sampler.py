"""DDP101 dataloader-without-distributed-sampler."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import (
    PLAIN_SAMPLERS,
    SELF_SHARDING,
    SELF_SHARDING_PREFIXES,
    facts,
    is_literal,
)
from ddpify.syntax import code, dotted


class DataloaderWithoutDistributedSampler(Rule):
    """## What it does
    Flags the training DataLoader (one iterated by a loop that calls `backward()`, directly
    or through a same-file function) when it has no `DistributedSampler`: no `sampler=`, or
    a plain `RandomSampler` / `SequentialSampler`.

    Not flagged: a sampler or `**kwargs` this file cannot see into (a custom or imported
    sampler may shard), a dataset that is an `IterableDataset` subclass (it has to shard
    itself), and a dataset built from the rank (`split_dataset_by_node(ds, rank, ...)`,
    `Subset(ds, indices[rank::world_size])`, a dataset class that reads the rank).

    ## Why is this bad?
    Without a `DistributedSampler` every rank iterates the whole dataset. An epoch then
    costs N times the compute of one GPU for the same number of distinct samples, and each
    sample is seen N times per epoch, as N times the batch size: the run trains much longer
    for no gain, and with a learning-rate schedule tuned in epochs it trains differently.

    ## Example
    ```python
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for epoch in range(epochs):
        for x, y in loader:
            loss_fn(model(x), y).backward()
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(train_set, shuffle=True)
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss_fn(model(x), y).backward()
    ```

    ## Fix safety
    No fix here: sharding changes the number of steps per epoch and how the batch size and
    learning rate relate to the world size. `ddpify convert` on the single-GPU script adds
    the sampler, moves `shuffle` into it and calls `set_epoch`.

    ## References
    - [torch.utils.data.distributed.DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    - [DDP tutorial: distributing the data](https://pytorch.org/tutorials/beginner/ddp_series_multigpu.html)
    """

    code = "DDP101"
    name = "dataloader-without-distributed-sampler"
    fix = "by convert"

    def visit_Call(self, node: cst.Call) -> None:
        f = facts(self.script)
        if not self.tree.is_call_to(node, s.DATALOADER) or not f.is_trained_on(node):
            return
        origins, complete = f.samplers(node)
        if not complete:
            return
        if not all(is_literal(o.node, "None") or self.tree.is_call_to(o.node, PLAIN_SAMPLERS) for o in origins):
            return
        if any(self._draws_per_rank(o.node, o.function) for o in origins):
            return  # `RandomSampler(ds, replacement=True, generator=<seeded by rank>)`: each rank draws its own
        if self._dataset_shards_itself(node):
            return
        dataset = s.arg(node, 0, "dataset")
        spelled = code(dataset.value) if dataset is not None and dotted(dataset.value) else "dataset"
        self.report(node, f"the training DataLoader has no DistributedSampler: every rank trains on the whole dataset; pass `sampler=DistributedSampler({spelled})`")

    def _draws_per_rank(self, sampler: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """A sampler drawing with replacement from a generator seeded by the rank (what convert
        makes of one): no partition, but every rank draws its own samples."""
        if not isinstance(sampler, cst.Call):
            return False
        replacement = s.arg(sampler, 1, "replacement")
        generator = s.arg(sampler, 3, "generator")
        return (
            replacement is not None
            and is_literal(replacement.value, "True")
            and generator is not None
            and facts(self.script).reads_rank(generator.value, function)
        )

    def _dataset_shards_itself(self, loader: cst.Call) -> bool:
        dataset = s.arg(loader, 0, "dataset")
        if dataset is None:
            return True  # nothing to judge
        f = facts(self.script)
        function = self.tree.function(loader)
        origins = f.resolve(dataset.value, function)
        if not origins:
            return False
        for origin in origins:
            node = origin.node
            if f.reads_rank(node, origin.function):
                return True
            if not isinstance(node, cst.Call):
                continue
            name = self.tree.qname(node.func) or ""
            if name in SELF_SHARDING or name.startswith(SELF_SHARDING_PREFIXES) or name.endswith("IterableDataset"):
                return True
            if any(a.keyword is not None and a.keyword.value == "streaming" and is_literal(a.value, "True") for a in node.args):
                return True  # datasets.load_dataset(..., streaming=True) is iterable
            if isinstance(node.func, cst.Name) and node.func.value in self.program.classes:
                if self._class_shards(self.program.classes[node.func.value], set()):
                    return True
        return False

    def _class_shards(self, cls: cst.ClassDef, seen: set) -> bool:
        """An IterableDataset subclass, or a dataset class that reads the rank."""
        if cls in seen:
            return False
        seen.add(cls)
        for base in cls.bases:
            name = self.tree.qname(base.value) or dotted(base.value) or ""
            if name.endswith("IterableDataset"):
                return True
            if isinstance(base.value, cst.Name) and base.value.value in self.program.classes:
                if self._class_shards(self.program.classes[base.value.value], seen):
                    return True
        f = facts(self.script)
        for method in self.program.methods.get(cls, {}).values():
            if any(f.reads_rank(n, method) for n in self.program.calls_in(method)):
                return True
        return False
