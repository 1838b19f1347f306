"""The script keeps choosing its device; only "the GPU" is bound to this rank's GPU.

The setup calls `torch.cuda.set_device(local_rank)`, after which `"cuda"`, `torch.device("cuda")`
and `.cuda()` mean this rank's GPU. So the script's own device logic (`--no-cuda`, `use_cuda`,
`--device`, mps branches, a later `device = ...`) stays as it is, and only what names one GPU for
every rank changes: `"cuda:0"`, `f"cuda:{args.gpu}"`, `torch.device("cuda", 0)`, `.cuda(0)`,
`.to(0)`, `torch.cuda.set_device(0)` and `CUDA_VISIBLE_DEVICES` pinning.

A script that never asks whether CUDA is there (`.cuda()` everywhere) gets a CPU fallback for
its GPU calls, so that it also runs as a world of one on a machine without a GPU.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import code, dotted, string_value

DEVICE_KEYWORDS = {"device", "map_location"}
# For a script with no CPU path: "cuda" is resolved when used, so after set_device(local_rank).
MODULE_DEVICE = '\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # this rank\'s GPU, or the CPU\n'
GPU_ID_NAMES = {"gpu", "gpu_id", "gpu_ids", "device_id", "local_rank", "cuda_device"}


class Devices(Transform):
    name = "device"
    DESCRIPTION = "GPU indices become the rank's GPU (set_device(local_rank)); the script's own device choice is kept"

    def run(self) -> None:
        self.warned_devices: set[str] = set()
        self._walk()
        self.finish()

    def _walk(self) -> None:
        """Every call, string, assignment (and attribute, for CUDA-only scripts) of the file, in
        source order: class bodies, default arguments and lambdas included."""
        kinds = [cst.Call, cst.SimpleString, cst.FormattedString, cst.Assign, cst.AnnAssign]
        if self.facts.device.cuda_only:
            kinds += [cst.Attribute, cst.Param]
        for node in self.tree.of_type(*kinds):
            kind = type(node)
            if kind is cst.Call:
                self._call(node, self.tree.function(node))
            elif kind is cst.SimpleString or kind is cst.FormattedString:
                self._gpu_string(node)
            elif kind is cst.Assign or kind is cst.AnnAssign:
                self._visible_devices(node)
            elif kind is cst.Param:
                self._device_default(node)
            else:
                self._tensor_type(node)

    # --- calls ---------------------------------------------------------------------

    def _call(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        name = self.tree.qname(call.func)
        if name in s.SET_DEVICE:
            self._remove_statement(call, "the setup already calls torch.cuda.set_device(local_rank)")
            return
        if name in s.TORCH_DEVICE:
            index = s.arg(call, 1, "index")
            first = s.arg(call, 0, "type")
            if index is not None and first is not None and string_value(first.value) == "cuda":
                self.plan.replace(call, lambda updated: updated.with_changes(args=[updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]))
                self.change(call, 'torch.device("cuda", N) becomes torch.device("cuda"): this rank\'s GPU')
            return
        found = s.method_call(call)
        if found is not None and found[1] == "cuda" and self._is_cuda_method(call):
            self._cuda_method(call, function)
        elif found is not None and found[1] == "to":
            first = s.arg(call, 0, None)
            imported = self.tree.qname(first.value) if first is not None and isinstance(first.value, cst.Attribute) else None
            if imported is not None and not imported.startswith("torch.") and imported not in self.warned_devices:
                self.warned_devices.add(imported)
                self.warn(call, f'`{code(first.value)}` comes from another module: it must be "cuda" (this rank\'s GPU once set_device(local_rank) ran), not "cuda:N", or every rank uses GPU N')
            if first is not None and self._is_gpu_id(first.value):
                self.plan.replace(first.value, cst.SimpleString('"cuda"'))
                self.change(call, '`.to(<GPU id>)` becomes `.to("cuda")`: this rank\'s GPU')
        if self.facts.device.cuda_only:
            for a in call.args:
                if a.keyword is not None and a.keyword.value in DEVICE_KEYWORDS and string_value(a.value) == "cuda":
                    self.plan.replace(a.value, cst.parse_expression(self._fallback(function, call)))
                    self.change(a, f'`{a.keyword.value}="cuda"` falls back to the CPU without a GPU')

    def _device_default(self, param: cst.Param) -> None:
        """`def __init__(self, device="cuda")` in a CUDA-only script: the default falls back to
        the CPU too (it is evaluated where the function is defined)."""
        if param.name.value in DEVICE_KEYWORDS and param.default is not None and string_value(param.default) == "cuda":
            function = self.tree.function(self.tree.function(param) or param)  # the scope the `def` runs in
            self.plan.replace(param.default, cst.parse_expression(self._fallback(function, param)))
            self.change(param, f'`{param.name.value}="cuda"` falls back to the CPU without a GPU')

    def _is_cuda_method(self, call: cst.Call) -> bool:
        # x.cuda(), x.cuda(0), x.cuda(non_blocking=True) - but not torch.cuda.something()
        assert isinstance(call.func, cst.Attribute)
        return dotted(call.func.value) != "torch" and len([a for a in call.args if a.keyword is None]) <= 1

    def _cuda_method(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        keywords = [a for a in call.args if a.keyword is not None and a.keyword.value != "device"]
        pinned = len(keywords) != len(call.args)
        if self.facts.device.cuda_only:
            # A script with no CPU path: `.to(device)` runs on this rank's GPU, or on the CPU.
            device = cst.Arg(cst.parse_expression(self._fallback(function, call)))
            args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in (device, *keywords)]

            def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
                return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("to")), args=args)

            self.plan.replace(call, rewrite)
            self.change(call, "`.cuda()` becomes `.to(device)`: this rank's GPU, or the CPU without one")
        elif pinned:
            args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in keywords]
            self.plan.replace(call, lambda updated: updated.with_changes(args=args))
            self.change(call, "`.cuda(N)` becomes `.cuda()`: this rank's GPU")

    def _fallback(self, function: cst.FunctionDef | None, at: cst.CSTNode) -> str:
        """The device a CUDA-only call moves to: the script's device variable, else `device`,
        which the setup defines (or the module, for code outside the entry point or before it)."""
        name = self.device(function)
        if name is not None:
            return name
        if self.facts.sees_entry_names(function, at):
            self.plan.uses.add("device")  # the setup defines one
        else:
            self.plan.uses.add("module device")
        return "device"

    def finish(self) -> None:
        if "module device" in self.plan.uses:
            assert self.facts.imports_end is not None
            self.plan.insert_after(self.facts.imports_end, statements(MODULE_DEVICE))
            self.plan.uses.discard("device")  # the entry point sees the module's

    # --- other spellings -------------------------------------------------------------

    def _gpu_string(self, node: cst.SimpleString | cst.FormattedString) -> None:
        """"cuda:0", f"cuda:{gpu}" and `"cuda:%d" % gpu` name one GPU for every rank: "cuda" is this rank's."""
        whole = self.tree.gpu_string(node)
        if whole is None:
            return
        quote = node.start[-1] if isinstance(node, cst.FormattedString) else node.quote
        self.plan.replace(whole, cst.SimpleString(f"{quote}cuda{quote}"))
        self.change(node, '"cuda:N" becomes "cuda": this rank\'s GPU after set_device(local_rank)')

    def _visible_devices(self, node: cst.Assign | cst.AnnAssign) -> None:
        # os.environ["CUDA_VISIBLE_DEVICES"] = "0" would hide every other GPU from every rank
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            if isinstance(target, cst.Subscript) and dotted(target.value) == "os.environ":
                key = target.slice[0].slice
                if isinstance(key, cst.Index) and string_value(key.value) == "CUDA_VISIBLE_DEVICES":
                    self._remove_statement(node, "CUDA_VISIBLE_DEVICES pinned every rank to the same GPUs; torchrun ranks pick their own")

    def _tensor_type(self, node: cst.Attribute) -> None:
        # torch.cuda.FloatTensor in a script with no CPU path
        if self.tree.qname(node) not in s.CUDA_TENSOR_TYPES or isinstance(self.tree.parent(node), cst.IfExp):
            return
        cpu = f"torch.{node.attr.value}"
        self.plan.replace(node, cst.parse_expression(f"({s.code(node)} if torch.cuda.is_available() else {cpu})"))
        self.change(node, f"`{s.code(node)}` falls back to `{cpu}` without CUDA")

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

    def _is_gpu_id(self, node: cst.BaseExpression) -> bool:
        """A GPU given as an integer id: `0`, `args.gpu`."""
        if isinstance(node, cst.Integer):
            return True
        name = dotted(node)
        return name is not None and name.rsplit(".", 1)[-1] in GPU_ID_NAMES
