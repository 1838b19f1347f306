"""Metrics accumulated over the sharded training loader are reduced over ranks before use.

Each rank sees 1/N of the training data, so `running_loss` on rank 0 describes rank 0's shard
only. Totals read after the loop are all-reduced: averaged when they are divided by per-rank
counts (`len(train_loader)`, a batch counter), summed when divided by `len(loader.dataset)`.
Python numbers travel in one float64 tensor; tensor totals are reduced in place; lists of
per-step numbers (`losses.append(loss.item())`) are gathered from every rank.
"""

from __future__ import annotations

from typing import Literal

import libcst as cst

from ddpify import syntax as s
from ddpify.convert.analysis import TrainLoop
from ddpify.convert.transforms.base import Transform, statements
from ddpify.syntax import code, method_call

# An increment built from these is a Python number (`loss.item()`, `y.size(0)`, `len(y)`).
NUMBER_METHODS = {"item", "size", "numel", "tolist"}
NUMBER_BUILTINS = {"len", "float", "int", "sum", "round"}

Kind = Literal["number", "tensor", "list"]


class ReduceMetrics(Transform):
    name = "metrics"
    DESCRIPTION = "totals accumulated over the sharded loader are all-reduced before they are reported"

    def run(self) -> None:
        if not self.facts.loader_plans:
            return
        for loop in self.facts.train_loops:
            totals = self._accumulators(loop)
            if totals:
                self._reduce(loop, totals)

    # --- what is accumulated ---------------------------------------------------------

    def _accumulators(self, loop: TrainLoop) -> dict[str, Kind]:
        """Totals built in the loop and read after it, by kind."""
        added: dict[str, list[cst.BaseExpression]] = {}  # name -> increments
        appended: dict[str, list[cst.BaseExpression]] = {}  # name -> appended values
        for node in self.tree.walk(loop.loop.body):
            if (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and isinstance(node.target, cst.Name)
                and not isinstance(node.value, (cst.Integer, cst.Float))  # counters agree on every rank
            ):
                added.setdefault(node.target.value, []).append(node.value)
            found = method_call(node)
            if found and found[1] == "append" and isinstance(found[0], cst.Name) and node.args:  # type: ignore[union-attr]
                appended.setdefault(found[0].value, []).append(node.args[0].value)  # type: ignore[union-attr]
        totals: dict[str, Kind] = {}
        for name, values in added.items():
            initial = self._initial_values(loop, name)
            if initial and self._read_after(loop, name):
                numbers = all(isinstance(v, (cst.Integer, cst.Float)) for v in initial) and all(map(self._is_number, values))
                totals[name] = "number" if numbers else "tensor"
        for name, values in appended.items():
            initial = self._initial_values(loop, name)
            if not (initial and all(isinstance(v, cst.List) and not v.elements for v in initial) and self._read_after(loop, name)):
                continue
            if all(map(self._is_number, values)):
                totals[name] = "list"
            else:
                self.warn(loop.loop, f"`{name}` collects per-step values on each rank's shard; gather them over ranks before reporting them")
        return totals

    def _initial_values(self, loop: TrainLoop, name: str) -> list[cst.CSTNode]:
        start = self.tree.positions[loop.loop].start.line
        return [
            value.elements[index].value if index is not None and isinstance(value, (cst.Tuple, cst.List)) else value
            for value, index in self.program.assignments(loop.function, name)
            if self.tree.line(value) < start
        ]

    def _read_after(self, loop: TrainLoop, name: str) -> bool:
        end = self.tree.positions[loop.loop].end.line
        return any(
            isinstance(n, cst.Name) and n.value == name and self.tree.line(n) > end and not self._is_target(n)
            for n in self.program.scope_nodes(loop.function)
        )

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

    # --- the reduction -----------------------------------------------------------------

    def _reduce(self, loop: TrainLoop, totals: dict[str, Kind]) -> None:
        function = loop.function
        end = self.tree.positions[loop.loop].end.line
        per_dataset = {f"len({code(loop.loader)}.dataset)"}
        for origin in self.facts.train_loaders:  # the dataset the training loader samples, by name
            dataset = s.arg(origin.node, 0, "dataset") if isinstance(origin.node, cst.Call) else None
            if dataset is not None and isinstance(dataset.value, (cst.Name, cst.Attribute)):
                per_dataset.add(f"len({code(dataset.value)})")
        summed = any(
            isinstance(n, cst.Call) and self.tree.line(n) > end and code(n) in per_dataset
            for n in self.program.scope_nodes(function)
        )
        how = "sum" if summed else "average"
        of_kind = {kind: [name for name, k in totals.items() if k == kind] for kind in ("number", "tensor", "list")}
        what = f"{how} the totals" if of_kind["number"] or of_kind["tensor"] else "gather the values"
        lines = [f"# Each rank trained on its own shard of the data: {what} over ranks."]
        numbers = of_kind["number"]
        if numbers:
            tensor = self._free(function, "totals", "reduced_totals", "rank_totals")
            reduced = tensor if summed else f"({tensor} / {self.world_size(function)})"
            unpack = f"{numbers[0]} = {reduced}.item()" if len(numbers) == 1 else f"{', '.join(numbers)} = {reduced}.tolist()"
            lines += [
                f"{tensor} = torch.tensor([{', '.join(numbers)}], dtype=torch.float64)",
                f"dist.all_reduce({tensor})",
                unpack,
            ]
        for name in of_kind["tensor"]:
            lines.append(f"dist.all_reduce({name})")
            if not summed:
                lines.append(f"{name} /= {self.world_size(function)}")
        for name in of_kind["list"]:
            gathered = self._free(function, "gathered", "gathered_values", "all_ranks")
            lines += [
                f"{gathered} = [None] * {self.world_size(function)}",
                f"dist.all_gather_object({gathered}, {name})",
                f"{name} = [value for values in {gathered} for value in values]",
            ]
        self.plan.insert_after(loop.loop, statements("\n".join(lines) + "\n"))
        listed = ", ".join(f"`{t}`" for t in totals)
        done = "gathered from every rank" if not numbers and not of_kind["tensor"] else f"all-reduced ({how} over ranks)"
        self.change(loop.loop, f"{listed} {done} after the loop: each rank saw only its shard")

    def _free(self, function: cst.FunctionDef | None, *names: str) -> str:
        return next(n for n in names if not self.program.binds(function, n))
