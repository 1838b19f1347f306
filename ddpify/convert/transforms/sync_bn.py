"""BatchNorm statistics: per GPU by default (the report says so); `--sync-bn` converts the
model's BatchNorm layers to SyncBatchNorm right before the DDP wrap, after the process group
exists, so that they normalize over the global batch.

SyncBatchNorm runs on CUDA only (its forward refuses CPU tensors), so the conversion is decided
at run time from the device the model is on: the script still runs on CPU and under gloo.
"""

from __future__ import annotations

import libcst as cst

from ddpify.convert.analysis import TrainedModel
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import code

CONVERT = """\
if next({model}.parameters()).is_cuda:  # SyncBatchNorm runs on GPUs only
    {model} = {nn}.SyncBatchNorm.convert_sync_batchnorm({model})  # BatchNorm statistics over the global batch
"""
CONVERT_EACH = (
    "{ref} = [{nn}.SyncBatchNorm.convert_sync_batchnorm({model}) if next({model}.parameters()).is_cuda else {model} "
    "for {model} in {ref}]  # BatchNorm statistics over the global batch (GPUs only)\n"
)


class SyncBatchNorm(Transform):
    name = "sync-bn"
    DESCRIPTION = "SyncBatchNorm before the wrap with --sync-bn; otherwise the report says BatchNorm statistics are per GPU"

    def run(self) -> None:
        for model in self.facts.models:
            for custom in model.custom_norms:
                self.warn(
                    model.anchor,
                    f"`{custom}` is a normalization class of this file that does not derive from torch's _BatchNorm, so "
                    "SyncBatchNorm.convert_sync_batchnorm leaves it as it is: statistics it takes over the batch stay per GPU",
                )
            if model.batch_norms is None:
                if self.options.sync_bn:
                    self.warn(
                        model.anchor,
                        f"could not tell whether `{model.ref}` has BatchNorm layers (its class is not in this file): not converted "
                        f"to SyncBatchNorm; call torch.nn.SyncBatchNorm.convert_sync_batchnorm({model.ref}) before the DDP wrap if it does",
                    )
                continue
            if not model.batch_norms:
                if self.options.sync_bn and not model.custom_norms:
                    self.change(model.anchor, f"`{model.ref}` has no BatchNorm layers: --sync-bn changes nothing")
                continue
            layers = ", ".join(f"`{name}`" for name in model.batch_norms[:3])
            if not self.options.sync_bn:
                self.change(
                    model.anchor,
                    f"`{model.ref}` has BatchNorm layers ({layers}): their statistics are per GPU, over each rank's batch "
                    "(--sync-bn computes them over the global batch)",
                )
                continue
            self._convert(model, layers)

    def _convert(self, model: TrainedModel, layers: str) -> None:
        nn = "nn" if self._nn_alias() else "torch.nn"
        if model.element is not None:
            source = CONVERT_EACH.format(ref=model.ref, model=model.element, nn=nn)
        else:
            source = CONVERT.format(model=model.ref, nn=nn)
        self.plan.insert_after(model.anchor, statements(source))
        self.plan.add_import("torch")
        self.change(
            model.anchor,
            f"BatchNorm layers of `{model.ref}` ({layers}) converted to SyncBatchNorm before the DDP wrap when it is on a GPU: "
            "statistics over the global batch (SyncBatchNorm has no CPU kernel: on CPU they stay per process)",
        )

    def _nn_alias(self) -> bool:
        """Whether the script imports torch.nn as `nn` (`import torch.nn as nn`, `from torch import nn`)."""
        for statement in self.tree.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, cst.Import):
                    if any(code(a.name) == "torch.nn" and a.asname is not None and code(a.asname.name) == "nn" for a in small.names):
                        return True
                elif isinstance(small, cst.ImportFrom) and small.module is not None and code(small.module) == "torch":
                    if not isinstance(small.names, cst.ImportStar) and any(code(a.name) == "nn" and a.asname is None for a in small.names):
                        return True
        return False
