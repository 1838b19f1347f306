"""`nn.DataParallel` goes away: DDP replaces it (one process per GPU instead of one thread each)."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform
from ddpify.syntax import dotted


class RemoveDataParallel(Transform):
    name = "data-parallel"
    DESCRIPTION = "nn.DataParallel removed in favour of DistributedDataParallel"

    def run(self) -> None:
        for call in self.tree.calls():
            if not self.tree.is_call_to(call, s.DATA_PARALLEL) or not call.args:
                continue
            inner = call.args[0].value
            parent = self.tree.parent(call)
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and dotted(parent.targets[0].target) == dotted(inner):
                self.plan.remove(self._removable(call))
            else:
                self.plan.replace(call, inner)
            self.change(call, "nn.DataParallel removed: DistributedDataParallel runs one process per GPU instead")
            name = self.tree.qname(call.func) or ""
            module, _, obj = name.rpartition(".")
            if isinstance(call.func, cst.Name):
                self.plan.drop_import_if_unused(module, obj)

    def _removable(self, call: cst.Call) -> cst.CSTNode:
        """The statement to drop; `if torch.cuda.device_count() > 1: model = nn.DataParallel(model)` goes whole."""
        statement = self.tree.statement(call)
        if isinstance(statement, cst.If):  # one-line `if ...: model = nn.DataParallel(model)`
            return statement
        owner = self.tree.parent(self.tree.block(statement))
        if isinstance(owner, cst.If) and owner.orelse is None and len(owner.body.body) == 1:
            return owner
        return statement
