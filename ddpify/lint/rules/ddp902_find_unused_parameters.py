"""DDP902 find-unused-parameters."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify import syntax as s
from ddpify.lint.rule import Rule
from ddpify.lint.rules._divergence import flow, reads
from ddpify.syntax import code, dotted, method_call

MODULE_BASES = {"torch.nn.Module", "torch.nn.modules.module.Module"}
# Calls that return the module they are given (or a copy of it).
PASS_THROUGH_METHODS = {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "to_empty"}
PASS_THROUGH_CALLS = {
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm",
}
RANDOM_PREFIXES = ("torch.rand", "torch.bernoulli", "random.", "numpy.random.")
BRANCHES = (cst.If, cst.IfExp, cst.While, cst.Try, cst.Match, cst.Break, cst.Continue)


@dataclass(frozen=True)
class Skip:
    """A data-dependent branch of a forward that leaves some parameters without a gradient."""

    cls: cst.ClassDef
    test: cst.BaseExpression
    attribute: str


class FindUnusedParameters(Rule):
    """## What it does
    Checks `find_unused_parameters` of each `DistributedDataParallel(...)` against the forward
    of the wrapped model, when its class is defined in the same file. Info, off by default.

    - `find_unused_parameters=True` on a model whose forward has no branches and uses every
      submodule it defines: the option only costs time.
    - `find_unused_parameters` off (the default) on a model whose forward branches on its
      input, or on a random draw, and calls different submodules in the two branches.

    Models from other modules, indexing submodules by a variable, multiple outputs, or a
    forward under `torch.no_grad()` are left alone: the rule cannot tell what they use.

    ## Why is this bad?
    With `find_unused_parameters=True`, DDP walks the autograd graph after every forward to
    find parameters that will get no gradient; when there are none, that traversal is pure
    overhead (and it disables some bucketing optimizations).

    With it off, DDP waits in the backward for a gradient of every parameter. When one branch
    skips a submodule, its gradients never come: the next iteration fails with "Expected to
    have finished reduction in the prior iteration before starting a new one", or the job
    hangs, but only on the steps whose data takes that branch.

    ## Example
    ```python
    class Net(nn.Module):
        def forward(self, x):
            if x.mean() > 0:
                return self.positive_head(x)
            return self.negative_head(x)

    model = DDP(Net().to(device), device_ids=[local_rank])
    ```

    ## Use instead
    ```python
    model = DDP(Net().to(device), device_ids=[local_rank], find_unused_parameters=True)
    ```
    or make every branch use the same parameters. Drop `find_unused_parameters=True` from
    models that always use all of them.

    ## Fix safety
    No fix: only a run can confirm which parameters a forward leaves unused.

    ## References
    - [DistributedDataParallel: `find_unused_parameters`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    - [DDP notes: internal design](https://pytorch.org/docs/stable/notes/ddp.html#internal-design)
    - [pytorch/pytorch#43259](https://github.com/pytorch/pytorch/issues/43259): "Expected to have finished reduction in the prior iteration"
    """

    code = "DDP902"
    name = "find-unused-parameters"
    default = False
    fix = "no"

    def visit_Call(self, node: cst.Call) -> None:
        if not self.tree.is_call_to(node, s.DDP):
            return
        option = s.arg(node, None, "find_unused_parameters")
        static = s.arg(node, None, "static_graph")
        module = s.arg(node, 0, "module")
        if module is None or (static is not None and code(static.value) != "False"):
            return
        flag = code(option.value) if option is not None else "False"
        if flag not in ("True", "False"):
            return
        classes = self._classes(module.value, self.tree.function(node))
        if not classes:
            return
        if flag == "True":
            if all(self._uses_everything(cls, set()) for cls in classes):
                names = ", ".join(f"`{c.name.value}`" for c in classes)
                self.report(
                    node,
                    f"`find_unused_parameters=True`, but {names} uses every parameter in each forward (no branches): "
                    "drop it, it costs a graph traversal per step",
                )
            return
        for cls in classes:
            skip = self._skip(cls, set())
            if skip is not None:
                line = self.tree.line(skip.test)
                self.report(
                    node,
                    f"`{skip.cls.name.value}.forward` skips `self.{skip.attribute}` when `{code(skip.test)}` (line {line}): "
                    "without `find_unused_parameters=True` DDP fails on the next step",
                )
                return

    # --- which classes are wrapped ---------------------------------------------------------

    def _classes(self, expr: cst.BaseExpression, function, depth: int = 0) -> list[cst.ClassDef] | None:
        """The same-file nn.Module classes `expr` is an instance of; None when any origin is unknown."""
        if depth > 4:
            return None
        found: list[cst.ClassDef] = []
        for origin in self.program.origins(expr, function):
            value = origin.node
            while (m := method_call(value)) and m[1] in PASS_THROUGH_METHODS:
                value = m[0]
            if self.tree.is_call_to(value, s.DDP):
                continue  # `model = DDP(model)`: the other assignment of the same name
            if self.tree.is_call_to(value, PASS_THROUGH_CALLS) and value.args:  # type: ignore[union-attr]
                inner = self._classes(value.args[0].value, origin.function, depth + 1)  # type: ignore[union-attr]
                if inner is None:
                    return None
                found += inner
                continue
            if origin.node is not value:  # `Net().to(device)`: the receiver is a new expression
                inner = self._classes(value, origin.function, depth + 1)
                if inner is None:
                    return None
                found += inner
                continue
            cls = self._class_called(value)
            if cls is None:
                return None
            found.append(cls)
        return list(dict.fromkeys(found))

    def _class_called(self, value: cst.CSTNode) -> cst.ClassDef | None:
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            cls = self.program.classes.get(value.func.value)
            if cls is not None and self._is_module(cls):
                return cls
        return None

    def _is_module(self, cls: cst.ClassDef) -> bool:
        return any(self.tree.qname(base.value) in MODULE_BASES for base in cls.bases)

    # --- what a forward uses -------------------------------------------------------------------

    def _methods(self, cls: cst.ClassDef) -> list[cst.FunctionDef]:
        """`forward` and the methods of the class it calls through `self`, transitively."""
        methods = self.program.methods.get(cls, {})
        if "forward" not in methods:
            return []
        found = [methods["forward"]]
        for method in found:
            for call in self.program.calls_in(method):
                if isinstance(call.func, cst.Attribute) and dotted(call.func.value) == "self":
                    callee = methods.get(call.func.attr.value)
                    if callee is not None and callee not in found:
                        found.append(callee)
        return found

    def _attributes(self, cls: cst.ClassDef) -> dict[str, str]:
        """Attributes `__init__` assigns a module or parameter to: name -> `torch`, `parameter`, `local` or `unknown`."""
        init = self.program.methods.get(cls, {}).get("__init__")
        found: dict[str, str] = {}
        if init is None:
            return found
        params = self.program.all_param_names(init)
        for node in self.program.scope_nodes(init):
            if not isinstance(node, cst.Assign):
                continue
            for target in node.targets:
                name = dotted(target.target)
                if name is None or not name.startswith("self.") or name.count(".") != 1:
                    continue
                kind = self._kind(node.value, params)
                if kind is not None:
                    found[name[5:]] = kind
        return found

    def _kind(self, value: cst.BaseExpression, params: set[str]) -> str | None:
        if isinstance(value, cst.Name):
            return "unknown" if value.value in params else None
        if not isinstance(value, cst.Call):
            return None
        name = self.tree.qname(value.func) or ""
        if name in s.PARAMETER:
            return "parameter"
        if self._class_called(value) is not None:
            return "local"
        if name.startswith("torch.nn."):
            inner = [c for c in self.tree.calls(value) if c is not value]
            if any(self._class_called(c) is not None or not (self.tree.qname(c.func) or "").startswith("torch.") for c in inner):
                return "unknown"  # nn.Sequential(Block(), ...): judged as unknown rather than followed
            return "torch"
        return "unknown"

    def _submodule_classes(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        init = self.program.methods.get(cls, {}).get("__init__")
        if init is None:
            return []
        return [c for call in self.program.calls_in(init) if (c := self._class_called(call)) is not None]

    def _uses_everything(self, cls: cst.ClassDef, seen: set) -> bool:
        """No branch, one output, and every submodule and parameter `__init__` defines is used."""
        if cls in seen:
            return True
        seen.add(cls)
        methods = self._methods(cls)
        if not methods:
            return False
        attributes = self._attributes(cls)
        used: set[str] = set()
        for method in methods:
            for node in self.tree.walk(method.body):
                if isinstance(node, BRANCHES) or isinstance(node, cst.With):
                    return False  # a branch, or `with torch.no_grad():`
                if isinstance(node, cst.Return) and isinstance(node.value, (cst.Tuple, cst.List, cst.Dict)):
                    return False  # several outputs: the loss may use only some
                if isinstance(node, cst.Call):
                    m = method_call(node)
                    if (m and m[1] in ("detach", "detach_", "requires_grad_")) or (isinstance(node.func, cst.Name) and node.func.value == "getattr"):
                        return False
                if isinstance(node, cst.Subscript) and dotted(node.value) and dotted(node.value).startswith("self."):  # type: ignore[union-attr]
                    if not all(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Integer) for e in node.slice):
                        return False  # `self.heads[task]`: which head depends on the input
                name = dotted(node) if isinstance(node, cst.Attribute) else None
                if name is not None and name.startswith("self.") and name.count(".") == 1:
                    used.add(name[5:])
        if any(kind == "unknown" for attr, kind in attributes.items() if attr in used):
            return False
        if set(attributes) - used:
            return False  # a submodule the forward never calls gets no gradient
        return all(self._uses_everything(sub, seen) for sub in self._submodule_classes(cls))

    # --- data-dependent branches --------------------------------------------------------------

    def _skip(self, cls: cst.ClassDef, seen: set) -> Skip | None:
        if cls in seen:
            return None
        seen.add(cls)
        attributes = self._attributes(cls)
        if not attributes:
            return None
        for method in self._methods(cls):
            data = self._data_names(method)
            for node in self.tree.walk(method.body):
                if not isinstance(node, (cst.If, cst.IfExp)) or not self._data_dependent(node.test, data):
                    continue
                taken, other = self._branches(node)
                unconditional = self._used_outside(method, node, attributes)
                skipped = ((taken ^ other) & set(attributes)) - unconditional
                if skipped:
                    return Skip(cls, node.test, sorted(skipped)[0])
        for sub in self._submodule_classes(cls):
            found = self._skip(sub, seen)
            if found is not None:
                return found
        return None

    def _data_names(self, method: cst.FunctionDef) -> set[str]:
        """The method's tensor inputs (parameters without a default) and names computed from them."""
        p = method.params
        inputs = {q.name.value for q in (*p.posonly_params, *p.params) if q.default is None and q.name.value != "self"}
        scope = flow(self.script).scope(method)
        return {name for name in scope.deps if scope.up(name) & inputs} | inputs

    def _data_dependent(self, test: cst.BaseExpression, data: set[str]) -> bool:
        comparisons = [n for n in self.tree.walk(test) if isinstance(n, cst.Comparison)]
        if any(isinstance(c.operator, (cst.Is, cst.IsNot)) for n in comparisons for c in n.comparisons):
            return False  # `mask is None`: decided by the caller, not the data
        if any(isinstance(n, cst.Call) and (self.tree.qname(n.func) or "").startswith(RANDOM_PREFIXES) for n in self.tree.walk(test)):
            return True
        return bool(reads(test) & data)

    def _branches(self, node: cst.If | cst.IfExp) -> tuple[set[str], set[str]]:
        """Attributes used in each branch; after `if ...: return`, the rest of the block is the other branch."""
        if isinstance(node, cst.IfExp):
            return self._self_attributes(node.body), self._self_attributes(node.orelse)
        taken = self._self_attributes(node.body)
        if node.orelse is not None:
            return taken, self._self_attributes(node.orelse)
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else node.body.body
        last = body[-1] if body else None
        returns = isinstance(last, cst.Return) or (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return))
        block = self.tree.parent(node)
        if returns and isinstance(block, cst.IndentedBlock):
            rest = list(block.body)[list(block.body).index(node) + 1 :]
            return taken, set().union(*(self._self_attributes(st) for st in rest))
        return taken, set()

    def _used_outside(self, method: cst.FunctionDef, branch: cst.CSTNode, attributes: dict[str, str]) -> set[str]:
        """Attributes the class's forward uses outside `branch` and outside any `if`."""
        used: set[str] = set()
        for m in self._methods(self.tree.enclosing_class(method)):  # type: ignore[arg-type]
            for node in self.tree.walk(m.body):
                name = dotted(node) if isinstance(node, cst.Attribute) else None
                if name is None or not name.startswith("self.") or name[5:] not in attributes:
                    continue
                if self.tree.inside(node, branch) or any(isinstance(a, (cst.If, cst.IfExp)) for a in self._ancestors_in(node, m)):
                    continue
                used.add(name[5:])
        return used

    def _ancestors_in(self, node: cst.CSTNode, method: cst.FunctionDef) -> list[cst.CSTNode]:
        found = []
        for parent in self.tree.ancestors(node):
            if parent is method:
                break
            found.append(parent)
        return found

    def _self_attributes(self, node: cst.CSTNode) -> set[str]:
        return {
            name[5:]
            for n in self.tree.walk(node)
            if isinstance(n, cst.Attribute) and (name := dotted(n)) is not None and name.startswith("self.") and name.count(".") == 1
        }
