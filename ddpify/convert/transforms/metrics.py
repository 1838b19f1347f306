"""Metrics accumulated over the sharded training loader are reduced over ranks before use.

Each rank sees 1/N of the training data, so `running_loss` on rank 0 describes rank 0's shard
only. Totals read after the loop are all-reduced: averaged when they are divided by per-rank
counts (`len(train_loader)`, a batch counter), summed when divided by `len(loader.dataset)`.
"""

from __future__ import annotations

import libcst as cst

from ddpify.convert.analysis import TrainLoop
from ddpify.convert.transforms.base import Transform, statements
from ddpify.syntax import code


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

    def _accumulators(self, loop: TrainLoop) -> list[str]:
        function = loop.function
        start = self.tree.positions[loop.loop].start.line
        end = self.tree.positions[loop.loop].end.line
        names: list[str] = []
        for node in self.tree.walk(loop.loop.body):
            if (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and isinstance(node.target, cst.Name)
                and not isinstance(node.value, (cst.Integer, cst.Float))  # counters agree on every rank
            ):
                names.append(node.target.value)
        found = []
        for name in dict.fromkeys(names):
            initialized = any(self.tree.line(value) < start for value, _ in self.program.assignments(function, name))
            read_after = any(
                isinstance(n, cst.Name) and n.value == name and self.tree.line(n) > end and not self._is_target(n)
                for n in self.program.scope_nodes(function)
            )
            if initialized and read_after:
                found.append(name)
        return found

    def _is_target(self, name: cst.Name) -> bool:
        parent = self.tree.parent(name)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is name):
            return True
        return isinstance(parent, (cst.Element, cst.Tuple)) and any(isinstance(a, cst.AssignTarget) for a in self.tree.ancestors(name))

    def _reduce(self, loop: TrainLoop, totals: list[str]) -> None:
        function = loop.function
        end = self.tree.positions[loop.loop].end.line
        per_dataset = f"len({code(loop.loader)}.dataset)"
        summed = any(
            isinstance(n, cst.Call) and self.tree.line(n) > end and code(n) == per_dataset
            for n in self.program.scope_nodes(function)
        )
        tensor = next(n for n in ("totals", "reduced_totals", "rank_totals") if not self.program.binds(function, n))
        reduced = tensor if summed else f"({tensor} / {self.world_size(function)})"
        unpack = f"{totals[0]} = {reduced}.item()" if len(totals) == 1 else f"{', '.join(totals)} = {reduced}.tolist()"
        how = "sum" if summed else "average"
        source = (
            f"# Each rank trained on its own shard of the data: {how} the totals over ranks.\n"
            f"{tensor} = torch.tensor([{', '.join(totals)}], dtype=torch.float64, device={self.device(function)})\n"
            f"dist.all_reduce({tensor})\n"
            f"{unpack}\n"
        )
        self.plan.insert_after(loop.loop, statements(source))
        listed = ", ".join(f"`{t}`" for t in totals)
        self.change(loop.loop, f"{listed} all-reduced after the loop ({how} over ranks): each rank saw only its shard")
