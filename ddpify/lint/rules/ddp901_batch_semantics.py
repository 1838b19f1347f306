"""DDP901 batch-semantics."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.lint.rule import Rule
from ddpify.syntax import code, dotted, string_value

# Names that hold the number of processes, as scripts spell it.
WORLD_SIZE_NAMES = {
    "world_size",
    "ws",
    "num_replicas",
    "nprocs",
    "nproc",
    "num_processes",
    "n_procs",
    "world",
    "num_gpus",
    "n_gpus",
    "ngpus",
    "ngpus_per_node",
    "num_devices",
    "n_devices",
}
WORLD_SIZE_CALLS = {"torch.distributed.get_world_size", "torch.cuda.device_count", "torch.accelerator.device_count"}
SCHEDULER_PREFIX = "torch.optim.lr_scheduler."


class BatchSemantics(Rule):
    """## What it does
    Flags the training DataLoader when neither its `batch_size` nor any optimizer's learning
    rate refers to the world size: no `world_size`, `dist.get_world_size()` or `WORLD_SIZE` in
    their expressions or in the names they are computed from. Info, off by default.

    ## Why is this bad?
    Under DDP, `batch_size` is per process: with N processes one optimizer step averages the
    gradients of N * batch_size samples. A script converted from one GPU keeps its learning
    rate but now takes N times fewer, N times larger steps. That can be what you want (scale
    the learning rate with the batch, the "linear scaling rule") or not (divide the batch by
    N to keep the single-GPU run), but it should be decided, not inherited.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, sampler=DistributedSampler(dataset))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ```

    ## Use instead
    Keep the global batch of the single-GPU run:
    ```python
    loader = DataLoader(dataset, batch_size=64 // world_size, sampler=DistributedSampler(dataset))
    ```
    or scale the learning rate with it:
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * world_size)
    ```

    ## Fix safety
    No fix: which of the two is right depends on the experiment. `ddpify convert
    --keep-global-batch` divides the batch size when converting.

    ## References
    - [Goyal et al., Accurate, Large Minibatch SGD (linear scaling rule)](https://arxiv.org/abs/1706.02677)
    - [PyTorch DDP notes](https://pytorch.org/docs/stable/notes/ddp.html)
    - [DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    """

    code = "DDP901"
    name = "batch-semantics"
    default = False
    fix = "no"

    def __init__(self, script) -> None:
        super().__init__(script)
        self._update_index: dict[cst.FunctionDef | None, dict[str | None, list[cst.BaseExpression]]] = {}

    def visit_Module(self, node: cst.Module) -> None:
        if self._learning_rate_scaled():
            return
        for loader in self._training_loaders():
            batch = self._batch_size(loader)
            if batch is None or self._refers_to_world_size(batch, self.tree.function(loader)):
                continue
            shown = self._shown(batch, loader)
            self.report(
                loader,
                f"each step trains on world size x {shown} samples: "
                "neither the batch size nor the learning rate refers to the world size; scale one on purpose",
            )

    # --- what is trained on --------------------------------------------------------------

    def _training_loaders(self) -> list[cst.Call]:
        found: dict[cst.Call, None] = {}
        for loop in self.script.training_loops:
            if isinstance(loop, cst.For):
                for origin in self.program.dataloaders(loop.iter, self.tree.function(loop)):
                    found.setdefault(origin.node, None)  # type: ignore[arg-type]
        return list(found)

    def _batch_size(self, loader: cst.Call) -> cst.BaseExpression | None:
        """`batch_size=`, or the `**kwargs` dictionaries it may come from; None: no batch size to judge."""
        if s.arg(loader, None, "batch_sampler") is not None:
            return None
        argument = s.arg(loader, 1, "batch_size")
        if argument is not None:
            return argument.value
        starred = [a.value for a in loader.args if a.star == "**"]
        return starred[0] if starred else None

    def _shown(self, batch: cst.BaseExpression, loader: cst.Call) -> str:
        """`args.batch_size`, looked up in the `**kwargs` dictionary when it comes from one."""
        if any(a.value is batch and a.star == "**" for a in loader.args):
            for origin in self.program.origins(batch, self.tree.function(loader)):
                if isinstance(origin.node, cst.Dict):
                    for element in origin.node.elements:
                        if isinstance(element, cst.DictElement) and string_value(element.key) == "batch_size":
                            return f"`{code(element.value)}`"
            return f"the `batch_size` in `**{code(batch)}`"
        return f"`{code(batch)}`"

    # --- world size ------------------------------------------------------------------------

    def _learning_rate_scaled(self) -> bool:
        """An optimizer built with, or a param group set to, a learning rate that refers to the world size."""
        for call in self.tree.calls():
            name = self.tree.call_name(call) or ""
            if name.startswith(s.OPTIMIZER_PREFIX) and not name.startswith(SCHEDULER_PREFIX):
                lr = s.arg(call, 1, "lr")
                if lr is not None and self._refers_to_world_size(lr.value, self.tree.function(call)):
                    return True
        for node in self.tree.of_type(cst.Assign, cst.AugAssign):
            if isinstance(node, (cst.Assign, cst.AugAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                sets_lr = any(
                    isinstance(t, cst.Subscript) and any(string_value(e.slice.value) == "lr" for e in t.slice if isinstance(e.slice, cst.Index))
                    for t in targets
                )
                if sets_lr and self._refers_to_world_size(node.value, self.tree.function(node)):
                    return True
        return False

    def _refers_to_world_size(self, expr: cst.CSTNode, function, seen: set | None = None) -> bool:
        """The expression, or a name it is computed from (followed through assignments and calls), reads the world size."""
        seen = set() if seen is None else seen
        if id(expr) in seen or len(seen) > 200:
            return False
        seen.add(id(expr))
        names: list[cst.BaseExpression] = []
        for node in self.tree.walk(expr):
            if isinstance(node, cst.Call) and self.tree.qname(node.func) in WORLD_SIZE_CALLS:
                return True
            if isinstance(node, cst.Call) and (dotted(node.func) or "").endswith("get_world_size"):
                return True
            if isinstance(node, cst.SimpleString) and string_value(node) == "WORLD_SIZE":
                return True
            spelled = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
            if spelled is None:
                continue
            last = spelled.rsplit(".", 1)[-1].lower()
            if last in WORLD_SIZE_NAMES or "world_size" in last:
                return True
            if isinstance(node, cst.Name) or spelled.startswith("self."):
                names.append(node)  # type: ignore[arg-type]
        for name in names:
            for origin in self.program.origins(name, function):
                if origin.node is not name and self._refers_to_world_size(origin.node, origin.function, seen):
                    return True
            for updated in self._updates(name, function):
                if self._refers_to_world_size(updated, function, seen):
                    return True
        return False

    def _updates(self, name: cst.BaseExpression, function) -> list[cst.BaseExpression]:
        """`batch_size //= world_size`, `kwargs.update(...)`: values that change `name` in place."""
        if function not in self._update_index:
            index: dict[str | None, list[cst.BaseExpression]] = {}
            for node in self.program.scope_nodes(function):
                if type(node) is cst.AugAssign:
                    index.setdefault(dotted(node.target), []).append(node.value)
                elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                    if node.func.attr.value in ("update", "setdefault", "__setitem__"):
                        index.setdefault(dotted(node.func.value), []).extend(a.value for a in node.args)
            self._update_index[function] = index
        return self._update_index[function].get(dotted(name), [])
