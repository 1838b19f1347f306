"""`nn.DataParallel` goes away: DDP replaces it (one process per GPU instead of one thread each)."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.transforms.base import Transform
from ddpify.syntax import code, dotted, string_value


FUNCTIONAL = {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}


class RemoveDataParallel(Transform):
    name = "data-parallel"
    DESCRIPTION = "nn.DataParallel removed in favour of DistributedDataParallel"

    def run(self) -> None:
        removed = False
        for call in self.tree.calls():
            if self.tree.is_call_to(call, FUNCTIONAL) and len(call.args) >= 2:
                self._functional(call)
                continue
            if not self.tree.is_call_to(call, s.DATA_PARALLEL) or not call.args:
                continue
            inner = call.args[0].value
            parent = self.tree.parent(call)
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and dotted(parent.targets[0].target) == dotted(inner):
                self.plan.remove(self._removable(call))
            else:
                self.plan.replace(call, inner)
            self.change(call, "nn.DataParallel removed: DistributedDataParallel runs one process per GPU instead")
            removed = True
            self._loads_take_old_checkpoints(inner, self.tree.function(call))
            self._never_data_parallel(inner)
            name = self.tree.qname(call.func) or ""
            module, _, obj = name.rpartition(".")
            if isinstance(call.func, cst.Name):
                self.plan.drop_import_if_unused(module, obj)
        if removed:
            self._one_gpu_per_process()

    def _one_gpu_per_process(self) -> None:
        """`args.n_gpu = torch.cuda.device_count()` (run_glue's layout) sized the batch for
        DataParallel's GPUs: `per_gpu_batch_size * n_gpu`, split over them. A DDP process drives one
        GPU, so the count it keeps is one (none without CUDA), as transformers' scripts set it
        under local_rank; with every GPU counted each rank would load n_gpu times its batch."""
        for node in self.tree.of_type(cst.Assign):
            if len(node.targets) != 1 or not (type(node.value) is cst.Call and self.tree.is_call_to(node.value, {"torch.cuda.device_count"})):
                continue
            self.plan.replace(node.value, lambda updated: cst.parse_expression(f"min({code(updated)}, 1)"))
            self.change(node, (
                f"`{code(node.targets[0].target)}` counts the GPUs this process drives: one under DDP (each rank has its own), "
                "so batch sizes and tests sized by it for nn.DataParallel stay per GPU"
            ))
        for call in self.tree.calls():
            if self.tree.is_call_to(call, {"torch.cuda.device_count"}) and (self._scales(call) or self._counted_into_a_name(call)):
                self.plan.replace(call, lambda updated: cst.parse_expression(f"min({code(updated)}, 1)"))
                self.change(call, (
                    "the GPU count that scales this value is the one this process drives, one under DDP: "
                    "a batch sized per GPU for nn.DataParallel stays per GPU on each rank"
                ))

    def _counted_into_a_name(self, call: cst.Call) -> bool:
        """`n_dev = torch.cuda.device_count() or 1`, `n_gpu = max(1, torch.cuda.device_count())`: a
        count bound to a name through `or` or `max`/`min`/`int` (the bare call is rewritten above)."""
        node: cst.CSTNode = call
        parent = self.tree.parent(node)
        moved = False
        while True:
            if type(parent) is cst.BooleanOperation and type(parent.operator) is cst.Or:
                node, parent, moved = parent, self.tree.parent(parent), True
            elif type(parent) is cst.Arg and any(self.tree.is_builtin_call(grand := self.tree.parent(parent), f) for f in ("max", "min", "int")):
                node, parent, moved = grand, self.tree.parent(grand), True
            else:
                break
        return moved and type(parent) is cst.Assign and parent.value is node and len(parent.targets) == 1

    def _scales(self, call: cst.Call) -> bool:
        """`per_gpu * max(1, torch.cuda.device_count())`: the count multiplies (or divides) a value
        written inline, such as a batch size, through `max`/`min`/`int` at most."""
        node: cst.CSTNode = call
        parent = self.tree.parent(node)
        while type(parent) is cst.Arg and any(self.tree.is_builtin_call(grand := self.tree.parent(parent), f) for f in ("max", "min", "int")):
            node, parent = grand, self.tree.parent(grand)
        return type(parent) is cst.BinaryOperation and type(parent.operator) in (cst.Multiply, cst.FloorDivide, cst.Divide)

    def _never_data_parallel(self, model: cst.BaseExpression) -> None:
        """`a if isinstance(net, nn.DataParallel) else b`: `net` is never a DataParallel now. Past
        the DDP wrap the expression is `a` (`net.module`, the plain model: helper corpus AU,
        repro 01c saved `module.` keys through `b`); before it, `b`. The same for
        `a if hasattr(net, "module") else b`, always true past the wrap."""
        ref = dotted(model)
        for node in self.tree.of_type(cst.IfExp):
            test = node.test
            if self.tree.is_builtin_call(test, "isinstance") and len(test.args) == 2:  # type: ignore[union-attr]
                obj, kind = test.args[0].value, test.args[1].value  # type: ignore[union-attr]
                if dotted(obj) != ref or self.tree.qname(kind) not in s.DATA_PARALLEL:
                    continue
                if self._past_the_wrap(ref, node):
                    self.plan.replace(node, lambda updated: updated.body)  # type: ignore[attr-defined]
                    self.change(node, f"`{code(test)}` held for the wrapped model: `{ref}` is wrapped in DDP here, so its first branch stays")
                else:
                    self.plan.replace(node, lambda updated: updated.orelse)  # type: ignore[attr-defined]
                    self.change(node, f"`{code(test)}` is never true once nn.DataParallel is gone: its other branch stays")
            elif self.tree.is_builtin_call(test, "hasattr") and len(test.args) == 2 and string_value(test.args[1].value) == "module":  # type: ignore[union-attr]
                if dotted(test.args[0].value) == ref and self._past_the_wrap(ref, node):  # type: ignore[union-attr]
                    self.plan.replace(node, lambda updated: updated.body)  # type: ignore[attr-defined]
                    self.change(node, f"`{code(test)}` is always true once `{ref}` is wrapped in DDP: its first branch stays")

    def _past_the_wrap(self, ref: str | None, node: cst.CSTNode) -> bool:
        """`node` comes after the DDP wrap of `ref` in the same function, where `ref` surely holds the wrapper."""
        function = self.tree.function(node)
        wrapped = [m for m in self.facts.models if m.ref == ref and m.function is function and m.optional is None and m.element is None]
        return bool(wrapped) and self.tree.order(node) > self.tree.order(wrapped[0].anchor) and not self.facts.may_be_plain(ref, node)  # type: ignore[arg-type]

    def _loads_take_old_checkpoints(self, model: cst.BaseExpression, function: cst.FunctionDef | None) -> None:
        """The script saved `model.state_dict()` through DataParallel: `module.`-prefixed keys. Its
        loads into the model, plain now, strip that prefix, so a run started before the conversion
        resumes (a checkpoint the converted script saves has none: nothing to strip)."""
        ref = dotted(model)
        if ref is None:
            return
        refs = self.program.propagate([(ref, function)])
        for scope, names in refs.items():
            for call in self.program.calls_in(scope):
                found = s.method_call(call)
                if not (found and found[1] == "load_state_dict" and dotted(found[0]) in names and call.args):
                    continue
                state = call.args[0]
                if state.keyword is not None or state.star:
                    continue
                self.plan.replace(state.value, lambda updated: cst.parse_expression(
                    f'{{key.removeprefix("module."): value for key, value in {code(updated)}.items()}}'
                ))
                self.change(call, (
                    "the state dict loses a leading `module.` from its keys: checkpoints this script saved through "
                    "nn.DataParallel have it, the plain model's keys do not"
                ))

    def _functional(self, call: cst.Call) -> None:
        """`nn.parallel.data_parallel(self.main, x, range(ngpu))` in a forward: the module on this
        rank's GPU alone (`self.main(x)`); a rank's model lives on one GPU, the one it owns."""
        module, inputs = call.args[0], call.args[1]
        if module.keyword is not None or inputs.keyword is not None or module.star or inputs.star:
            self.warn(call, "nn.parallel.data_parallel spreads one rank's forward over several GPUs: call the module directly")
            return
        value = inputs.value
        args = [cst.Arg(el.value) for el in value.elements] if isinstance(value, cst.Tuple) else [cst.Arg(value)]
        self.plan.replace(call, cst.Call(func=module.value, args=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in args]))
        self.change(call, "nn.parallel.data_parallel replaced by a plain call of the module: each rank runs on its own GPU")

    def _removable(self, call: cst.Call) -> cst.CSTNode:
        """The statement to drop; `if torch.cuda.device_count() > 1: model = nn.DataParallel(model)` goes
        whole, with the prints that announce it."""
        statement = self.tree.statement(call)
        if isinstance(statement, cst.If):  # one-line `if ...: model = nn.DataParallel(model)`
            return statement
        owner = self.tree.parent(self.tree.block(statement))
        if isinstance(owner, cst.If) and owner.orelse is None and all(st is statement or s.only_prints(st) for st in owner.body.body):
            return owner  # `print(f"Using {n} GPUs with DataParallel")` beside it: it would describe what is gone
        return statement
