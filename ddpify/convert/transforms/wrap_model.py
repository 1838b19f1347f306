"""The trained model is wrapped in DDP(...) once it sits on its device.

Only models whose parameters an optimizer updates are wrapped; a model that is only loaded
or evaluated stays as it is. After the wrap, attribute reads and calls of the model's own methods go through `.module`
(the analysis refuses scripts whose training runs through such a method: that would skip DDP's
forward and its gradient sync).
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import dotted


class WrapModel(Transform):
    name = "wrap"
    DESCRIPTION = "DDP(model) once the model is on its device and its weights are final"

    def run(self) -> None:
        for model in self.facts.models:
            # No device_ids: DDP uses the device the model is on, whichever the script picked.
            unused = model.unused_parameters
            if model.element is not None:
                flag = ", find_unused_parameters=True" if unused else ""
                wrap = f"{model.ref} = [DDP({model.element}{flag}) for {model.element} in {model.ref}]\n"
                self.plan.insert_after(model.anchor, statements(wrap))
                self.change(model.anchor, f"each model in `{model.ref}` wrapped in DistributedDataParallel" + (f" (find_unused_parameters=True: {unused})" if unused else ""))
                continue
            if unused:
                self.plan.insert_after(model.anchor, statements(f"{model.ref} = DDP({model.ref}, find_unused_parameters=True)\n"))
                self.change(model.anchor, f"find_unused_parameters=True: {unused}")
            else:
                self.plan.insert_after(model.anchor, statements(f"{model.ref} = DDP({model.ref})\n"))
                if unused is None and not (model.class_name or "").startswith(("torch.", "torchvision.", "timm.")):
                    built = f"`{model.class_name}`" if model.class_name else "a class that is not in this file"
                    self.warn(
                        model.anchor,
                        f"`{model.ref}` is built by {built}: if its forward leaves some parameters without a gradient "
                        "in a step, pass find_unused_parameters=True to DDP",
                    )
            self.change(model.anchor, f"`{model.ref}` wrapped in DistributedDataParallel once it is on its device and its weights are final")
        self.plan.add_import("torch.nn.parallel", "DistributedDataParallel", "DDP")
        self._uses_after_wrap()

    def _uses_after_wrap(self) -> None:
        for function, refs in self.facts.model_refs.items():
            for node in self.program.scope_nodes(function):
                if not isinstance(node, cst.Attribute) or not self.facts.is_model(node.value, function):
                    continue
                attr = node.attr.value
                if attr in s.WRAPPER_ATTRIBUTES or attr.startswith("__"):
                    continue
                ref = dotted(node.value)
                self.plan.replace(node.value, cst.parse_expression(f"{ref}.module"))
                parent = self.tree.parent(node)
                if isinstance(parent, cst.Call) and parent.func is node:
                    # The analysis refused scripts that train through such a method.
                    self.change(node, f"`{ref}.{attr}(...)` called on the plain model (`.module`): DDP has no `{attr}`, and this call does not train")
                else:
                    self.change(node, f"`{ref}.{attr}` read through `.module` (the DDP wrapper has no `{attr}`)")
