"""DDP105 split-without-generator."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.splits import unseeded_splits
from ddpify.edit import Plan, add_keyword
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import (
    TRAIN_TEST_SPLIT,
    ensure_import,
    facts,
    is_literal,
    position,
)


class SplitWithoutGenerator(Rule):
    """## What it does
    Flags `torch.utils.data.random_split` without `generator=` and sklearn's
    `train_test_split` without `random_state=`, in a script that seeds its random number
    generators per rank (`torch.manual_seed(seed + rank)`, `set_seed(args.seed +
    dist.get_rank())`), and a split whose generator or `random_state` is itself derived
    from the rank.

    A split right after a seed that is the same on every rank, in the same function, is not
    flagged.

    ## Why is this bad?
    Without its own generator, `random_split` draws from the global generator, and
    `train_test_split` from NumPy's. Seeded per rank, these differ across ranks, so each
    rank draws a different train/validation split: samples one rank trains on are in
    another rank's validation set. Validation metrics come out optimistic, and the
    "validation" set is not held out from the model at all.

    ## Example
    ```python
    torch.manual_seed(args.seed + rank)  # different augmentation per rank
    train_set, val_set = random_split(dataset, [0.9, 0.1])
    ```

    ## Use instead
    ```python
    train_set, val_set = random_split(dataset, [0.9, 0.1], generator=torch.Generator().manual_seed(0))
    ```

    ## Fix safety
    Safe: the split gets `generator=torch.Generator().manual_seed(0)` (`random_state=0` for
    `train_test_split`), the same on every rank. The split itself changes from run to run no
    longer; pick another constant to get another split. No fix when the generator given is
    derived from the rank.

    ## References
    - [torch.utils.data.random_split](https://pytorch.org/docs/stable/data.html#torch.utils.data.random_split)
    - [sklearn.model_selection.train_test_split](https://scikit-learn.org/stable/modules/generated/sklearn.model_selection.train_test_split.html)
    - [PyTorch reproducibility](https://pytorch.org/docs/stable/notes/randomness.html)
    """

    code = "DDP105"
    name = "split-without-generator"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        keyword = self._keyword(node)
        if keyword is None:
            return
        f = facts(self.script)
        function = self.tree.function(node)
        given = s.arg(node, 2 if keyword == "generator" else None, keyword)
        if given is not None and not is_literal(given.value, "None"):
            if f.reads_rank(given.value, function):
                self.report(node, f"`{keyword}=` is derived from the rank: each rank draws its own train/validation split; seed it the same on every rank")
            return
        fixed = "generator=torch.Generator().manual_seed(0)" if keyword == "generator" else "random_state=0"
        if f.per_rank_seeds and not self._seeded_alike_before(node):
            why = "in a script seeded per rank"
        elif keyword == "generator" and any(node is c for c in unseeded_splits(self.tree, self.program)):
            why = "and nothing seeded before it (each process's generator starts from its own random seed)"
        else:
            return
        self.report(
            node,
            f"split without a fixed `{keyword}=` {why}: each rank draws its own train/validation split; pass `{fixed}`",
            fix=lambda plan: self._fix_seed(plan, node, keyword),
        )

    def _keyword(self, call: cst.Call) -> str | None:
        if self.tree.is_call_to(call, s.RANDOM_SPLIT):
            return "generator"
        if self.tree.is_call_to(call, TRAIN_TEST_SPLIT):
            return "random_state"
        return None

    def _seeded_alike_before(self, split: cst.Call) -> bool:
        """The last seed before the split, in its function, is the same on every rank."""
        f = facts(self.script)
        where = position(self.tree, split)
        seeds = [
            c
            for c in self.program.calls_in(self.tree.function(split))
            if f.is_seed_call(c) and position(self.tree, c) < where
        ]
        return bool(seeds) and not f.seeds_per_rank(seeds[-1])

    def _fix_seed(self, plan: Plan, split: cst.Call, keyword: str) -> str | None:
        given = s.arg(split, 2 if keyword == "generator" else None, keyword)
        value = "torch.Generator().manual_seed(0)" if keyword == "generator" else "0"
        if given is not None:
            if not is_literal(given.value, "None"):
                return None
            plan.replace(given.value, cst.parse_expression(value))
        else:
            plan.replace(split, add_keyword(keyword, value))
        if keyword == "generator":
            ensure_import(plan, self.tree, "torch")
        return f"split with `{keyword}={value}`, the same on every rank"
