"""DDP005 device-from-global-rank."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import ensure_import, facts, quote_of
from ddpify.syntax import code, string_value


class DeviceFromGlobalRank(Rule):
    """## What it does
    Flags a GPU index taken from the global rank: `torch.cuda.set_device(rank)`,
    `torch.device("cuda", rank)` / `torch.device(f"cuda:{rank}")`, and
    `DDP(model, device_ids=[rank], output_device=rank)`, where the value comes from
    `dist.get_rank()`, the `RANK` environment variable, or a name such as `global_rank`.

    Not flagged: `LOCAL_RANK`, `local_rank`, `rank % torch.cuda.device_count()`, and the
    process index that `torch.multiprocessing.spawn` passes to its worker, which is a
    per-node index.

    ## Why is this bad?
    The global rank runs from 0 to N*G-1 across N nodes of G GPUs, while device indices on
    each node run from 0 to G-1. On one node the two coincide, so the script works in every
    test; on the second node rank G asks for `cuda:G` and fails with `CUDA error: invalid
    device ordinal`, or, with more GPUs than processes, several ranks share a GPU.

    ## Example
    ```python
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = DDP(model.to(rank), device_ids=[rank])
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    ```

    ## Fix safety
    Safe: the global rank is replaced by the script's `local_rank` variable when one is in
    scope, else by `int(os.environ["LOCAL_RANK"])`, which `torchrun` sets on every rank and
    which equals the global rank on a single node.

    ## References
    - [torchrun environment variables](https://pytorch.org/docs/stable/elastic/run.html#environment-variables)
    - [torch.cuda.set_device](https://pytorch.org/docs/stable/generated/torch.cuda.set_device.html)
    - [DistributedDataParallel `device_ids`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    """

    code = "DDP005"
    name = "device-from-global-rank"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        found = self._global_indices(node)
        if found:
            self.report(
                node,
                f"GPU index `{code(found[0])}` is the global rank: on the second node it names a GPU that does not exist; use the local rank (LOCAL_RANK)",
                fix=lambda plan: self._use_local_rank(plan, found),
            )

    def _global_indices(self, call: cst.Call) -> list[cst.BaseExpression]:
        function = self.tree.function(call)
        return [index for index in self._indices(call) if facts(self.script).rank_kind(index, function) == "global"]

    def _indices(self, call: cst.Call) -> list[cst.BaseExpression]:
        """The expressions a call takes a GPU index from."""
        tree = self.tree
        if tree.is_call_to(call, s.SET_DEVICE):
            device = s.arg(call, 0, "device")
            return [device.value] if device is not None else []
        if tree.is_call_to(call, s.TORCH_DEVICE):
            first = s.arg(call, 0, "type")
            index = s.arg(call, 1, "index")
            if first is None:
                return []
            if index is not None and string_value(first.value) == "cuda":
                return [index.value]
            if isinstance(first.value, (cst.Name, cst.Attribute, cst.Call)) and index is None:
                return [first.value]  # torch.device(rank): an int names a CUDA device
            return _indices_in_device_string(first.value)
        if tree.is_call_to(call, s.DDP):
            out = []
            ids = s.arg(call, 1, "device_ids")
            values = [ids.value] if ids is not None else []
            if values and isinstance(values[0], cst.IfExp):  # [rank] if cuda else None
                values = [values[0].body, values[0].orelse]
            for value in values:
                if isinstance(value, (cst.List, cst.Tuple)):
                    out += [e.value for e in value.elements]
            output = s.arg(call, 2, "output_device")
            if output is not None:
                out.append(output.value)
            return out
        return []

    def _use_local_rank(self, plan: Plan, indices: list[cst.BaseExpression]) -> str | None:
        for index in indices:
            local = facts(self.script).local_rank_spelling(index)
            if local is None:
                quote = quote_of(index, self.tree)
                local = f"int(os.environ[{quote}LOCAL_RANK{quote}])"
                ensure_import(plan, self.tree, "os")
            plan.replace(index, cst.parse_expression(local))
        return "the GPU index comes from the local rank" if indices else None


def _indices_in_device_string(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`f"cuda:{rank}"`, `"cuda:%d" % rank`, `"cuda:{}".format(rank)`, `"cuda:" + str(rank)`."""
    if isinstance(node, cst.FormattedString):
        text = "".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText))
        if text.startswith("cuda"):
            return [p.expression for p in node.parts if isinstance(p, cst.FormattedStringExpression)]
        return []
    if isinstance(node, cst.BinaryOperation) and (string_value(node.left) or "").startswith("cuda"):
        if isinstance(node.operator, (cst.Modulo, cst.Add)):
            right = node.right
            if isinstance(right, cst.Tuple):
                return [e.value for e in right.elements]
            if isinstance(node.operator, cst.Add):  # "cuda:" + str(rank): the index is inside str()
                inner = right.args[0].value if isinstance(right, cst.Call) and code(right.func) == "str" and right.args else None
                return [inner] if inner is not None else []
            return [right]
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
        if (string_value(node.func.value) or "").startswith("cuda"):
            return [a.value for a in node.args]
    return []
