"""The trained model is wrapped in DDP(...) once it sits on its device.

Only models whose parameters an optimizer updates are wrapped; a model that is only loaded
or evaluated stays as it is. After the wrap, attribute reads go through `.module`; calls of
custom methods are flagged, because they would skip DDP's forward and its gradient sync.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform, statements
from ddpify.syntax import dotted


class WrapModel(Transform):
    name = "wrap"
    DESCRIPTION = "DDP(model, device_ids=[local_rank]) right after the model is on its device"

    def run(self) -> None:
        for model in self.facts.models:
            function = model.function
            if self.facts.sees_entry_names(function):
                device = self.device(function)
                device_ids = f'[local_rank] if {device}.type == "cuda" else None'
            else:
                device_ids = "[torch.cuda.current_device()] if torch.cuda.is_available() else None"
            self.plan.insert_after(model.anchor, statements(f"{model.ref} = DDP({model.ref}, device_ids={device_ids})\n"))
            self.change(model.anchor, f"`{model.ref}` wrapped in DistributedDataParallel once it is on its device")
            if not model.moved:
                self.warn(model.anchor, f"`{model.ref}` {self._source(model)}is not moved to a device in this file; DDP needs it on this rank's GPU before wrapping")
        self.plan.add_import("torch.nn.parallel", "DistributedDataParallel", "DDP")
        self._uses_after_wrap()

    def _source(self, model) -> str:
        """ "comes from `models.build` (another module) " when an imported callable builds it."""
        for value, _ in self.program.assignments(model.function, model.ref):
            if isinstance(value, cst.Call) and self.program.callee(value, model.function) is None:
                name = self.tree.qname(value.func)
                if name and "." in name and not name.startswith("torch."):
                    return f"comes from `{name}` (another module, out of reach of a one-file rewrite) and "
        return ""

    def _uses_after_wrap(self) -> None:
        for function, refs in self.facts.model_refs.items():
            for node in self.program.scope_nodes(function):
                if not isinstance(node, cst.Attribute) or not self.facts.is_model(node.value, function):
                    continue
                attr = node.attr.value
                if attr in s.WRAPPER_ATTRIBUTES or attr.startswith("__"):
                    continue
                ref = dotted(node.value)
                parent = self.tree.parent(node)
                if isinstance(parent, cst.Call) and parent.func is node:
                    self.warn(
                        node,
                        f"`{ref}.{attr}(...)` is not forward(): DDP has no `{attr}`, and `{ref}.module.{attr}(...)` "
                        "would skip the gradient sync; call it through forward() (left as is)",
                    )
                else:
                    self.plan.replace(node.value, cst.parse_expression(f"{ref}.module"))
                    self.change(node, f"`{ref}.{attr}` read through `.module` (the DDP wrapper has no `{attr}`)")
