"""Metrics accumulated over the sharded training loader are reduced over ranks before use.

Each rank sees 1/N of the training data, so `running_loss` on rank 0 describes rank 0's shard
only. Totals read after the loop are all-reduced: averaged when they are divided by per-rank
counts (`len(train_loader)`, a batch counter), summed when divided by `len(loader.dataset)`.
Python numbers travel in one float64 tensor; tensor totals are reduced in place.
"""

from __future__ import annotations

import libcst as cst

from ddpify.convert.analysis import TrainLoop
from ddpify.convert.transforms.base import Transform, statements
from ddpify.syntax import code, method_call

# An increment built from these is a Python number (`loss.item()`, `y.size(0)`, `len(y)`).
NUMBER_METHODS = {"item", "size", "numel", "tolist"}
NUMBER_BUILTINS = {"len", "float", "int", "sum", "round"}


class ReduceMetrics(Transform):
    name = "metrics"
    DESCRIPTION = "totals accumulated over the sharded loader are all-reduced before they are reported"

    def run(self) -> None:
        if not self.facts.train_loaders:
            return
        for loop in self.facts.train_loops:
            totals = self._accumulators(loop)
            if totals:
                self._reduce(loop, totals)

    def _accumulators(self, loop: TrainLoop) -> dict[str, bool]:
        """Totals summed in the loop and read after it: name -> whether it is a Python number."""
        function = loop.function
        start = self.tree.positions[loop.loop].start.line
        end = self.tree.positions[loop.loop].end.line
        increments: dict[str, list[cst.BaseExpression]] = {}
        for node in self.tree.walk(loop.loop.body):
            if (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and isinstance(node.target, cst.Name)
                and not isinstance(node.value, (cst.Integer, cst.Float))  # counters agree on every rank
            ):
                increments.setdefault(node.target.value, []).append(node.value)
        found: dict[str, bool] = {}
        for name, values in increments.items():
            initial = [
                value.elements[index].value if index is not None and isinstance(value, (cst.Tuple, cst.List)) else value
                for value, index in self.program.assignments(function, name)
                if self.tree.line(value) < start
            ]
            read_after = any(
                isinstance(n, cst.Name) and n.value == name and self.tree.line(n) > end and not self._is_target(n)
                for n in self.program.scope_nodes(function)
            )
            if initial and read_after:
                found[name] = all(isinstance(v, (cst.Integer, cst.Float)) for v in initial) and all(self._is_number(v) for v in values)
        return found

    def _is_number(self, node: cst.BaseExpression) -> bool:
        for n in self.tree.walk(node):
            found = method_call(n)
            if found and found[1] in NUMBER_METHODS:
                return True
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in NUMBER_BUILTINS:
                return True
        return False

    def _is_target(self, name: cst.Name) -> bool:
        parent = self.tree.parent(name)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is name):
            return True
        return isinstance(parent, (cst.Element, cst.Tuple)) and any(isinstance(a, cst.AssignTarget) for a in self.tree.ancestors(name))

    def _reduce(self, loop: TrainLoop, totals: dict[str, bool]) -> None:
        function = loop.function
        end = self.tree.positions[loop.loop].end.line
        per_dataset = f"len({code(loop.loader)}.dataset)"
        summed = any(
            isinstance(n, cst.Call) and self.tree.line(n) > end and code(n) == per_dataset
            for n in self.program.scope_nodes(function)
        )
        how = "sum" if summed else "average"
        lines = [f"# Each rank trained on its own shard of the data: {how} the totals over ranks."]
        numbers = [name for name, is_number in totals.items() if is_number]
        if numbers:
            tensor = next(n for n in ("totals", "reduced_totals", "rank_totals") if not self.program.binds(function, n))
            reduced = tensor if summed else f"({tensor} / {self.world_size(function)})"
            unpack = f"{numbers[0]} = {reduced}.item()" if len(numbers) == 1 else f"{', '.join(numbers)} = {reduced}.tolist()"
            lines += [
                f"{tensor} = torch.tensor([{', '.join(numbers)}], dtype=torch.float64, device={self.device(function)})",
                f"dist.all_reduce({tensor})",
                unpack,
            ]
        for name in (name for name, is_number in totals.items() if not is_number):
            lines.append(f"dist.all_reduce({name})")
            if not summed:
                lines.append(f"{name} /= {self.world_size(function)}")
        self.plan.insert_after(loop.loop, statements("\n".join(lines) + "\n"))
        listed = ", ".join(f"`{t}`" for t in totals)
        self.change(loop.loop, f"{listed} all-reduced after the loop ({how} over ranks): each rank saw only its shard")
