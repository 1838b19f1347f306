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
        self._in_batch_comparisons()
        for origin in self.facts.train_loaders:
            call = origin.node
            assert isinstance(call, cst.Call)
            batch = s.arg(call, 1, "batch_size")
            if batch is None:
                if self.options.keep_global_batch and any(a.star == "**" for a in call.args):
                    self.warn(call, "batch_size is passed through **kwargs: divide it by the world size by hand to keep the global batch")
                continue
            value = code(batch.value)
            if value == "None":  # `batch_size=None`: a dataset of batches made beforehand (buckets by length)
                self.change(call, "batch_size=None: the dataset's items are batches already, and each rank gets its share of them")
                if self.options.keep_global_batch:
                    self.warn(call, "batch_size=None: the dataset makes the batches, so --keep-global-batch cannot shrink them; make them world-size times smaller there to keep the global batch")
                continue
            if not self.options.keep_global_batch:
                self.change(call, f"batch_size={value} is per process: the global batch is {value} x world size (--keep-global-batch keeps it at {value})")
                continue
            world_size = self.world_size(origin.function)
            divided = f"{value} // {world_size}" if isinstance(batch.value, SIMPLE) else f"({value}) // {world_size}"
            self.plan.replace(batch.value, cst.parse_expression(divided))
            self.change(call, f"batch_size divided by the world size: the global batch stays {value}")

    def _in_batch_comparisons(self) -> None:
        """A loss that compares each sample with the others of its batch (SimCLR's NT-Xent,
        CLIP, triplet mining: `sim = z @ z.t()` with `torch.arange` targets) now sees only this
        rank's batch: world_size times fewer negatives, another objective. Warned about once."""
        for function in [None, *self.program.all_functions]:
            # not under no_grad: mining or evaluating with a similarity matrix trains nothing (AG 05)
            nodes = [n for n in self.program.scope_nodes(function) if type(n) in (cst.Call, cst.BinaryOperation) and not self.tree.grad_disabled(n)]
            products = [n for n in nodes if self._compares_rows(n)]
            distances = [n for n in nodes if self._distances_within(n)]  # batch-hard triplet mining
            products = products if any(self.tree.is_call_to(n, BATCH_INDEX) for n in nodes) else []
            products += distances
            if products and self._in_training(function):
                self.warn(products[0], (
                    f"`{code(products[0])}` compares each sample with the rest of its batch: each rank now sees only its "
                    "own batch (world_size times fewer negatives, another objective); gather the embeddings from every "
                    "rank with gradients (torch.distributed.nn.functional.all_gather) to keep the objective"
                ))
                return

    def _in_training(self, function: cst.FunctionDef | None) -> bool:
        """The comparison is part of what trains: in a function that trains, or that the training
        code calls (a loss helper), or at module level next to the training loop."""
        trains = self.program.training_functions
        return function is None or function in trains or any(caller in trains or caller is None for _, caller in self.program.call_sites(function))

    def _distances_within(self, node: cst.CSTNode) -> bool:
        """`torch.cdist(emb, emb)`: every sample's distance to every other of its batch."""
        if not self.tree.is_call_to(node, {"torch.cdist"}) or len(node.args) < 2:  # type: ignore[union-attr]
            return False
        first, second = node.args[0].value, node.args[1].value  # type: ignore[union-attr]
        return type(first) is cst.Name and type(second) is cst.Name and first.value == second.value

    def _compares_rows(self, node: cst.CSTNode) -> bool:
        """`a @ b.t()`, `a @ b.T`, `torch.mm(a, b.t())`, `torch.matmul(a, b.transpose(0, 1))` with
        `a` and `b` plain names (embeddings, not a layer's weights)."""
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.MatrixMultiply:
            left, right = node.left, node.right
        elif self.tree.is_call_to(node, MATMUL) and len(node.args) == 2:  # type: ignore[union-attr]
            left, right = node.args[0].value, node.args[1].value  # type: ignore[union-attr]
        elif (found := s.method_call(node)) is not None and found[1] in ("mm", "matmul") and len(node.args) == 1:  # type: ignore[union-attr]
            left, right = found[0], node.args[0].value  # type: ignore[union-attr]  # `q.mm(d.t())`
        elif self.tree.is_call_to(node, PAIRWISE) and len(node.args) >= 2:  # type: ignore[union-attr]
            left, right = node.args[0].value, node.args[1].value  # type: ignore[union-attr]  # `F.linear(q, d)`, `torch.cdist(q, d)`
            return type(left) is cst.Name and type(right) is cst.Name
        elif self.tree.is_call_to(node, {"torch.einsum"}) and len(node.args) == 3:  # type: ignore[union-attr]
            spec = s.string_value(node.args[0].value)  # type: ignore[union-attr]  # `torch.einsum("id,jd->ij", q, d)`
            return spec is not None and _pairs_rows(spec) and all(type(a.value) is cst.Name for a in node.args[1:])  # type: ignore[union-attr]
        else:
            return False
        return type(left) is cst.Name and _transposed_name(right)


# Calls that build per-sample targets or masks over a batch (`torch.arange(n)`, `torch.eye(n)`).
BATCH_INDEX = {"torch.arange", "torch.eye"}
MATMUL = {"torch.mm", "torch.matmul"}
# Every row of one set against every row of another: `F.linear(q, d)` is `q @ d.T`.
PAIRWISE = {"torch.nn.functional.linear", "torch.cdist"}


def _pairs_rows(spec: str) -> bool:
    """An einsum that pairs every row of its first operand with every row of its second:
    `id,jd->ij`, `bd,kd->bk` (the shared index summed away, one index of each kept)."""
    inputs, _, output = spec.replace(" ", "").partition("->")
    operands = inputs.split(",")
    if len(operands) != 2 or len(output) != 2 or any(len(o) != 2 for o in operands):
        return False
    (a, shared), (b, other) = operands
    return shared == other and a != b and output == a + b


def _transposed_name(node: cst.BaseExpression) -> bool:
    """`b.T`, `b.t()`, `b.transpose(0, 1)` of a plain name."""
    if type(node) is cst.Attribute and node.attr.value == "T":
        return type(node.value) is cst.Name
    if type(node) is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name:
        method = node.func.attr.value
        if method == "t" and not node.args:
            return True
        if method == "transpose" and [code(a.value) for a in node.args] in (["0", "1"], ["1", "0"]):
            return True
    return False
