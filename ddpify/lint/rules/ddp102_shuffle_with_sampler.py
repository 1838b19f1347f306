"""DDP102 shuffle-with-sampler."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan, add_keyword
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import (
    SAMPLER_POSITION,
    SHUFFLE_POSITION,
    facts,
    is_literal,
    without_argument,
)
from ddpify.syntax import code, dotted


class ShuffleWithSampler(Rule):
    """## What it does
    Flags a DataLoader given `shuffle=True` together with a `sampler=` (or a
    `batch_sampler=`) that is not always `None`, also when one of them comes through
    `**kwargs`.

    ## Why is this bad?
    A sampler decides the order itself, so DataLoader refuses the pair with
    `ValueError: sampler option is mutually exclusive with shuffle`. The usual way in is
    `sampler = DistributedSampler(ds) if distributed else None` next to a `shuffle=True` left
    from the single-GPU script: every single-GPU test passes and the job crashes as soon as
    it runs on more than one GPU.

    ## Example
    ```python
    sampler = DistributedSampler(train_set) if distributed else None
    loader = DataLoader(train_set, batch_size=64, shuffle=True, sampler=sampler)
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(train_set, shuffle=True) if distributed else None
    loader = DataLoader(train_set, batch_size=64, shuffle=(sampler is None), sampler=sampler)
    ```

    ## Fix safety
    Safe. When the sampler is always set, `shuffle=True` is removed from the DataLoader, and
    a `DistributedSampler` built in the same function gets `shuffle=True` written out (its
    default) so the intent stays visible. When the sampler may be `None`, `shuffle=True`
    becomes `shuffle=(sampler is None)`, which keeps shuffling on the path without a sampler.
    No fix when `shuffle` comes through `**kwargs`.

    ## References
    - [torch.utils.data.DataLoader](https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader)
    - [DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    """

    code = "DDP102"
    name = "shuffle-with-sampler"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        if not self.tree.is_call_to(node, s.DATALOADER):
            return
        found = self._conflict(node)
        if found is None:
            return
        shuffle, sampler_kind, direct = found
        advice = "drop `shuffle` and let the sampler shuffle"
        sampler = s.arg(node, SAMPLER_POSITION if sampler_kind == "sampler" else SAMPLER_POSITION + 1, sampler_kind)
        if sampler is not None and dotted(sampler.value) and self._may_be_none(sampler.value, self.tree.function(node)):
            advice = f"use `shuffle=({code(sampler.value)} is None)`"
        fix = (lambda plan: self._drop_shuffle(plan, node, shuffle, sampler_kind)) if direct and shuffle is not None else None
        self.report(node, f"`shuffle=True` with `{sampler_kind}=`: DataLoader raises ValueError when the sampler is set; {advice}", fix=fix)

    def _conflict(self, loader: cst.Call) -> tuple[cst.Arg | None, str, bool] | None:
        """The explicit shuffle argument (None when it comes through **kwargs), which sampler
        argument conflicts with it, and whether both are written in the call."""
        f = facts(self.script)
        function = self.tree.function(loader)
        shuffles, _ = f.loader_argument(loader, SHUFFLE_POSITION, "shuffle")
        if not any(self._is_true(v, function) for v in shuffles):
            return None
        shuffle = s.arg(loader, SHUFFLE_POSITION, "shuffle")
        direct_shuffle = shuffle is not None and self._is_true(shuffle.value, function)
        for position, kind in ((SAMPLER_POSITION, "sampler"), (SAMPLER_POSITION + 1, "batch_sampler")):
            values, _ = f.loader_argument(loader, position, kind)
            if any(self._may_be_set(v, function) for v in values):
                direct = direct_shuffle and s.arg(loader, position, kind) is not None
                return (shuffle if direct_shuffle else None), kind, direct
        return None

    def _is_true(self, value: cst.BaseExpression, function) -> bool:
        if is_literal(value, "True"):
            return True
        if not isinstance(value, cst.Name):
            return False
        origins = facts(self.script).resolve(value, function)
        return bool(origins) and all(is_literal(o.node, "True") for o in origins)

    def _may_be_set(self, value: cst.BaseExpression, function) -> bool:
        if is_literal(value, "None"):
            return False
        origins = facts(self.script).resolve(value, function)
        return not origins or not all(is_literal(o.node, "None") for o in origins)

    def _may_be_none(self, value: cst.BaseExpression, function) -> bool:
        return any(is_literal(o.node, "None") for o in facts(self.script).resolve(value, function))

    # --- fix ---------------------------------------------------------------------------

    def _drop_shuffle(self, plan: Plan, loader: cst.Call, shuffle: cst.Arg, kind: str) -> str | None:
        function = self.tree.function(loader)
        sampler = s.arg(loader, SAMPLER_POSITION if kind == "sampler" else SAMPLER_POSITION + 1, kind)
        assert sampler is not None
        origins = facts(self.script).resolve(sampler.value, function)
        if self._may_be_none(sampler.value, function):
            if dotted(sampler.value) is None:
                return None
            plan.replace(shuffle.value, cst.parse_expression(f"({code(sampler.value)} is None)"))
            return f"shuffle only without a sampler: `shuffle=({code(sampler.value)} is None)`"
        if shuffle.keyword is None:
            plan.replace(shuffle.value, cst.Name("False"))  # positional: keep the others in place
        else:
            plan.replace(loader, lambda updated: without_argument(updated, "shuffle"))  # type: ignore[arg-type]
        for origin in origins:
            if (
                facts(self.script).is_sampler_call(origin.node)
                and origin.function is function
                and s.arg(origin.node, 3, "shuffle") is None  # type: ignore[arg-type]
            ):
                plan.replace(origin.node, add_keyword("shuffle", "True"))
        return "`shuffle=True` removed from the DataLoader; the sampler shuffles"
