"""Batch size: per process by default (the report says the global batch grows); with
`--keep-global-batch`, divided by the world size at run time so N ranks optimize exactly
what one process did."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform
from ddpify.syntax import code

SIMPLE = (cst.Name, cst.Attribute, cst.Integer, cst.Call, cst.Subscript)


class BatchSize(Transform):
    name = "batch-size"
    DESCRIPTION = "batch size per process, or divided by the world size with --keep-global-batch"

    def run(self) -> None:
        for origin in self.facts.train_loaders:
            call = origin.node
            assert isinstance(call, cst.Call)
            batch = s.arg(call, 1, "batch_size")
            if batch is None:
                if self.options.keep_global_batch and any(a.star == "**" for a in call.args):
                    self.warn(call, "batch_size is passed through **kwargs: divide it by the world size by hand to keep the global batch")
                continue
            value = code(batch.value)
            if not self.options.keep_global_batch:
                self.change(call, f"batch_size={value} is per process: the global batch is {value} x world size (--keep-global-batch keeps it at {value})")
                continue
            world_size = self.world_size(origin.function)
            divided = f"{value} // {world_size}" if isinstance(batch.value, SIMPLE) else f"({value}) // {world_size}"
            self.plan.replace(batch.value, cst.parse_expression(divided))
            self.change(call, f"batch_size divided by the world size: the global batch stays {value}")
