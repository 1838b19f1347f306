"""The training DataLoader gets a DistributedSampler; `shuffle` moves into the sampler.

Only loaders iterated by a loop that calls `backward()` are sharded. Evaluation loaders stay
whole, so every rank computes the same metrics and takes the same early-stopping and
best-checkpoint decisions.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform, appended, keyword, statements
from ddpify.syntax import code

DATASET_NAMES = ("train_dataset", "train_set", "train_data")


class Sampler(Transform):
    name = "sampler"
    DESCRIPTION = "DistributedSampler for the training DataLoader (shuffle moved into it, drop_last kept)"

    def run(self) -> None:
        if not self.facts.train_loaders:
            self.warn(None, "no DataLoader feeds the training loop: every rank trains on the data it builds itself")
        for origin in self.facts.train_loaders:
            call = origin.node
            assert isinstance(call, cst.Call)
            if s.arg(call, 3, "sampler") or s.arg(call, 4, "batch_sampler"):
                self.warn(call, "the training DataLoader already has a sampler: not sharded (give each rank its own part of the data)")
                continue
            dataset = s.arg(call, 0, "dataset")
            if dataset is None:
                self.warn(call, "the training DataLoader has no dataset argument ddpify can read: not sharded")
                continue
            dataset_code = code(dataset.value)
            if not isinstance(dataset.value, (cst.Name, cst.Attribute)):
                dataset_code = self._hoist(call, dataset, origin.function)
            shuffle = s.arg(call, 2, "shuffle")
            shuffle_code = code(shuffle.value) if shuffle is not None else "False"
            moved = "shuffle moved into the sampler" if shuffle is not None else "no shuffle, as before"
            spread = next((a for a in call.args if a.star == "**"), None)
            if shuffle is None and spread is not None:
                shuffle_code = self._pop_shuffle(call, spread, origin.function)
                moved = f"shuffle taken out of **{code(spread.value)} into the sampler"
            sampler = keyword("sampler", f"DistributedSampler({dataset_code}, shuffle={shuffle_code})")
            self.plan.replace(call, _with_sampler(shuffle, sampler))
            self.change(call, f"training DataLoader sharded across ranks with DistributedSampler ({moved})")
            self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")

    def _pop_shuffle(self, call: cst.Call, spread: cst.Arg, function: cst.FunctionDef | None) -> str:
        """`DataLoader(ds, **kwargs)` may carry shuffle=True: take it out for the sampler."""
        name = next(n for n in ("shuffle", "train_shuffle", "shuffle_train") if not self.program.binds(function, n))
        kwargs = code(spread.value)
        statement = self.tree.statement(call)
        self.plan.insert_before(statement, statements(f'{name} = {kwargs}.pop("shuffle", False)  # the sampler shuffles now\n'))
        return name

    def _hoist(self, call: cst.Call, dataset: cst.Arg, function: cst.FunctionDef | None) -> str:
        """`DataLoader(TensorDataset(x, y), ...)`: name the dataset so the sampler can see it."""
        name = next((n for n in DATASET_NAMES if not self.program.binds(function, n)), "sampled_dataset")
        statement = self.tree.statement(call)
        self.plan.insert_before(statement, statements(f"{name} = {code(dataset.value)}\n"))
        self.plan.replace(dataset.value, cst.Name(name))
        return name


def _with_sampler(shuffle: cst.Arg | None, sampler: cst.Arg):
    """Put the sampler where `shuffle` was, or after the last argument."""

    def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        args = list(updated.args)
        index = next((i for i, a in enumerate(args) if _is_shuffle(a, i)), None) if shuffle is not None else None
        if index is None:
            return updated.with_changes(args=appended(updated, sampler))
        args[index] = sampler.with_changes(comma=args[index].comma)
        return updated.with_changes(args=args)

    return rewrite


def _is_shuffle(a: cst.Arg, index: int) -> bool:
    if a.keyword is not None:
        return a.keyword.value == "shuffle"
    return index == 2 and not a.star
