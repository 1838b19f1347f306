"""Every spelling of "the GPU" becomes the rank's own device, with the CPU fallback kept.

`.cuda()`, `.cuda(0)`, `.to("cuda:0")`, `device="cuda"`, `torch.device("cuda", 0)` and GPU ids
all pin every rank to one GPU or break the CPU fallback; they become the rank's device. The
user's own device variable is replaced by the one the process-group setup defines.
`torch.device("cuda" if ... else "cpu")` outside the entry point is left alone: after
`set_device(local_rank)`, "cuda" already means the rank's GPU.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform
from ddpify.syntax import code, dotted, is_gpu_string, string_value

DEVICE_KEYWORDS = {"device", "map_location"}


class Devices(Transform):
    name = "device"
    DESCRIPTION = "GPU spellings become the rank's device (cuda:LOCAL_RANK), CPU fallback kept"

    def run(self) -> None:
        device = self.facts.device
        if device.assignment is not None:
            self.plan.remove(device.assignment)
            self.change(device.assignment, f"`{device.name}` is now set by the process-group setup: this rank's GPU, or the CPU")
        skip = device.assignment
        for function in [None, *self.program.all_functions]:
            for node in self.program.scope_nodes(function):
                if skip is not None and self.tree.inside(node, skip):
                    continue
                if isinstance(node, cst.Call):
                    self._call(node, function)
                elif isinstance(node, (cst.Assign, cst.AnnAssign)):
                    self._assignment(node, function)
                elif isinstance(node, cst.Attribute):
                    self._tensor_type(node, function)
                elif isinstance(node, cst.Comparison) and device.was_string:
                    self._string_comparison(node, function)

    # --- calls ---------------------------------------------------------------------

    def _call(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        name = self.tree.qname(call.func)
        if name in s.SET_DEVICE:
            self._remove_statement(call, "the setup already calls torch.cuda.set_device(local_rank)")
            return
        if name in s.TORCH_DEVICE and self._pins_gpu(call) and not self._is_device_assignment(call, function):
            self.plan.replace(call, cst.parse_expression(self.device(function)))
            self.change(call, "GPU device becomes this rank's device")
            return
        found = s.method_call(call)
        if found is not None and found[1] == "cuda" and self._is_cuda_method(call):
            self._cuda_method(call, function)
        elif found is not None and found[1] == "to":
            self._to_method(call, function)
        for a in call.args:
            if a.keyword is not None and a.keyword.value in DEVICE_KEYWORDS and self._is_gpu(a.value):
                self.plan.replace(a.value, cst.parse_expression(self.device(function)))
                self.change(a, f"`{a.keyword.value}=` GPU becomes this rank's device")
        if self.facts.device.was_string and self.facts.sees_entry_names(function) and (name in s.AUTOCAST or name in s.GRAD_SCALER):
            self._device_type_argument(call)

    def _is_cuda_method(self, call: cst.Call) -> bool:
        # x.cuda(), x.cuda(0), x.cuda(non_blocking=True) - but not torch.cuda.something()
        assert isinstance(call.func, cst.Attribute)
        return dotted(call.func.value) != "torch" and len([a for a in call.args if a.keyword is None]) <= 1

    def _cuda_method(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        device = cst.Arg(cst.parse_expression(self.device(function)))
        keywords = [a for a in call.args if a.keyword is not None and a.keyword.value != "device"]
        args = [device, *keywords]
        args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in args]

        def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
            return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("to")), args=args)

        self.plan.replace(call, rewrite)
        self.change(call, "`.cuda()` becomes `.to(<this rank's device>)`, which also works on CPU")

    def _to_method(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        first = s.arg(call, 0, None)
        if first is not None and self._is_gpu(first.value):
            self.plan.replace(first.value, cst.parse_expression(self.device(function)))
            self.change(call, "`.to(<GPU>)` becomes `.to(<this rank's device>)`")

    def _device_type_argument(self, call: cst.Call) -> None:
        # the device used to be a string; autocast/GradScaler want its type
        target = s.arg(call, 0, "device_type") or s.arg(call, 0, "device")
        if target is not None and dotted(target.value) == self.facts.device.name:
            self.plan.replace(target.value, cst.parse_expression(f"{self.facts.device.name}.type"))
            self.change(call, f"`{self.facts.device.name}` is a torch.device now: pass its `.type`")

    # --- other spellings -------------------------------------------------------------

    def _assignment(self, node: cst.Assign | cst.AnnAssign, function: cst.FunctionDef | None) -> None:
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        if node.value is None:
            return
        # os.environ["CUDA_VISIBLE_DEVICES"] = "0" would hide every other GPU from every rank
        for target in targets:
            if isinstance(target, cst.Subscript) and dotted(target.value) in {"os.environ"}:
                key = target.slice[0].slice
                if isinstance(key, cst.Index) and string_value(key.value) == "CUDA_VISIBLE_DEVICES":
                    self._remove_statement(node, "CUDA_VISIBLE_DEVICES pinned every rank to the same GPUs; torchrun ranks pick their own")
                    return
        # a pure-GPU device variable outside the entry point: keep a CPU fallback
        if not self.facts.sees_entry_names(function) and self._pins_gpu_expr(node.value):
            self.plan.replace(node.value, cst.parse_expression('torch.device("cuda" if torch.cuda.is_available() else "cpu")'))
            self.change(node, "GPU-only device gets a CPU fallback (after set_device, \"cuda\" is this rank's GPU)")

    def _tensor_type(self, node: cst.Attribute, function: cst.FunctionDef | None) -> None:
        # torch.cuda.FloatTensor with no CPU alternative beside it
        if self.tree.qname(node) not in s.CUDA_TENSOR_TYPES:
            return
        parent = self.tree.parent(node)
        if isinstance(parent, cst.IfExp):
            return
        cpu = f"torch.{node.attr.value}"
        self.plan.replace(node, cst.parse_expression(f"({code(node)} if torch.cuda.is_available() else {cpu})"))
        self.change(node, f"`{code(node)}` falls back to `{cpu}` without CUDA")

    def _string_comparison(self, node: cst.Comparison, function: cst.FunctionDef | None) -> None:
        if not self.facts.sees_entry_names(function):
            return
        name = self.facts.device.name
        if dotted(node.left) == name and all(string_value(c.comparator) in {"cuda", "cpu"} for c in node.comparisons):
            self.plan.replace(node.left, cst.parse_expression(f"{name}.type"))
            self.change(node, f"`{name}` is a torch.device now: compare its `.type`")

    # --- helpers ---------------------------------------------------------------------

    def _remove_statement(self, node: cst.CSTNode, reason: str) -> None:
        statement = self.tree.statement(node)
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            parent = self.tree.parent(self.tree.block(statement))
            if isinstance(parent, cst.If) and parent.orelse is None and len(parent.body.body) == 1:
                statement = parent  # `if cuda: torch.cuda.set_device(0)` goes as a whole
            self.plan.remove(statement)
            self.change(statement, reason)
        else:
            self.warn(node, f"left as is: {reason}")

    def _is_device_assignment(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`device = torch.device("cuda" ...)` outside the entry point: handled by `_assignment`."""
        parent = self.tree.parent(call)
        return isinstance(parent, (cst.Assign, cst.AnnAssign)) and not self.facts.sees_entry_names(function)

    def _pins_gpu(self, call: cst.Call) -> bool:
        """torch.device("cuda"), torch.device("cuda:0"), torch.device("cuda", 0)."""
        first = s.arg(call, 0, "type")
        return first is not None and is_gpu_string(first.value)

    def _pins_gpu_expr(self, node: cst.BaseExpression) -> bool:
        return (isinstance(node, cst.Call) and self.tree.qname(node.func) in s.TORCH_DEVICE and self._pins_gpu(node)) or is_gpu_string(node)

    def _is_gpu(self, node: cst.BaseExpression) -> bool:
        """A GPU given as a string or an integer id (torch.device(...) calls are rewritten on their own)."""
        if is_gpu_string(node) or isinstance(node, cst.Integer):
            return True
        name = dotted(node)
        return name is not None and name.rsplit(".", 1)[-1] in {"gpu", "gpu_id", "device_id", "local_rank"}
