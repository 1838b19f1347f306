"""`len(train_loader)` under DDP: report only, nothing is rewritten.

A rank's loader iterates its DistributedSampler's shard, 1/world_size of the dataset. With
the batch size per process, `len(loader)` is world_size times smaller than in one process, so
a number of steps or an LR schedule derived from it counts per-rank steps. With
`--keep-global-batch` the batch shrinks by the same factor and `len(loader)` keeps its value.
The report says which, on the line that derives steps or a schedule from it; averages
(`total / len(loader)`) and progress output are the metrics' and the rank-0 guards' concern.
"""

from __future__ import annotations

import re

import libcst as cst

from ddpify.convert.transforms.base import Transform
from ddpify.syntax import code, dotted

SCHEDULE = re.compile(r"(lr_scheduler|Scheduler$|LR$|schedule)")
STEP_NAMES = re.compile(r"(step|iter|warmup|total|schedul|decay|milestone|epoch|updates|done)", re.IGNORECASE)
OUTPUT = {"builtins.print", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.trange"}


class LoaderLength(Transform):
    name = "loader-length"
    DESCRIPTION = "report how a rank's len(train_loader) changes the steps and schedules derived from it"

    def run(self) -> None:
        loaders = {origin.node for origin in self.facts.train_loaders}
        if not loaders:
            return
        for function in [None, *self.program.all_functions]:
            for call in self.program.calls_in(function):
                if not (self.tree.is_builtin_call(call, "len") and len(call.args) == 1):
                    continue
                if not any(o.node in loaders for o in self.program.origins(call.args[0].value, function)):
                    continue
                subject = self._derives_steps(call, function)
                if subject is not None:
                    self.change(call, self._message(code(call), subject))
        self._dataset_steps()
        self._dataset_paced()

    def _dataset_steps(self) -> None:
        """`num_train_steps = int(len(train_ds) / batch_size * epochs)` for a schedule: the whole
        dataset's batches, of which a rank steps through 1/world_size; a linear decay to it
        stops halfway on 2 ranks. With --keep-global-batch a rank's batches are as many as the
        whole dataset's in one process: nothing to say."""
        if self.options.keep_global_batch:
            return
        for function in [None, *self.program.all_functions]:
            for call in self.program.calls_in(function):
                if not (self.tree.is_builtin_call(call, "len") and len(call.args) == 1) or not self.facts.counts_whole_dataset(call, function):
                    continue
                parent = self.tree.parent(call)
                if not (isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Divide, cst.FloorDivide)) and parent.left is call):
                    continue  # `len(ds) // batch_size`: batches of the whole dataset
                subject = self._derives_steps(call, function)
                if subject is not None:
                    self.warn(call, (
                        f"`{code(parent)}` counts the whole dataset's batches, and {subject} is derived from it; each rank steps through "
                        f"1/world_size of them, so it counts world_size times the steps a rank takes: derive it from `len(loader)` "
                        "(a rank's batches), or divide by the world size"
                    ))

    def _dataset_paced(self) -> None:
        """`alpha += batch_size / len(dataset)` in the training step: a quantity paced by the
        whole dataset's size grows by a rank's batches only, world_size times slower."""
        for loop in self.facts.train_loops:
            for node in self.tree.walk(loop.loop.body):
                if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide)):
                    continue
                lengths = [c for c in self.tree.calls(node.right) if self.facts.counts_whole_dataset(c, loop.function)]
                statement = self.tree.statement(node)
                grows = isinstance(statement, cst.SimpleStatementLine) and any(
                    isinstance(small, cst.AugAssign) or (isinstance(small, cst.Assign) and any(
                        dotted(t.target) is not None and any(isinstance(n, cst.Name) and n.value == dotted(t.target) for n in self.tree.walk(small.value))
                        for t in small.targets))
                    for small in statement.body
                )
                if lengths and grows:
                    self.warn(node, (
                        f"`{code(lengths[0])}` is the whole dataset, but a rank steps through 1/world_size of it per epoch: "
                        f"what grows by `{code(node)}` each step grows world_size times slower than in one process (multiply by the world size, or use `len(loader.sampler)`)"
                    ))

    def _derives_steps(self, call: cst.Call, function: cst.FunctionDef | None) -> str | None:
        """What a step count or schedule derived from `len(loader)` is, as the report names it;
        None for averages, output and plain iteration."""
        child: cst.CSTNode = call
        keyword = None
        for parent in self.tree.ancestors(call):
            if isinstance(parent, cst.Arg) and parent.keyword is not None:
                keyword = parent.keyword.value
            if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Divide) and parent.right is child:
                return None  # an average over the batches
            if isinstance(parent, cst.AugAssign) and isinstance(parent.operator, cst.DivideAssign):
                return None
            if isinstance(parent, cst.FormattedString):
                return None  # output
            if isinstance(parent, cst.Call):
                name = self.tree.qname(parent.func) or dotted(parent.func) or ""
                if name in OUTPUT or name.rsplit(".", 1)[-1] in {"info", "debug", "warning", "log", "format", "set_description"}:
                    return None
                if SCHEDULE.search(name):
                    scheduler = name.rsplit(".", 1)[-1]
                    return f"`{keyword}` of `{scheduler}`" if keyword else f"the `{scheduler}` schedule's length"
                if name in {"builtins.range", "range"}:
                    return None
            if isinstance(parent, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
                names = [n for t in targets if (n := dotted(t)) is not None]
                for target in names:
                    if STEP_NAMES.search(target.rsplit(".", 1)[-1]):
                        return f"`{target}`"
                    schedule = self._schedule_using(target, function)
                    if schedule is not None:
                        return f"`{target}` (and the `{schedule}` schedule built on it)"
                return None
            if isinstance(parent, cst.Comparison) or (isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Modulo)):
                return "the step count it is compared with"
            if isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return None
            child = parent
        return None

    def _schedule_using(self, name: str, function: cst.FunctionDef | None) -> str | None:
        """The scheduler built from `name` in the same function (`OneCycleLR(..., total_steps=total)`)."""
        for call in self.program.calls_in(function):
            called = self.tree.qname(call.func) or dotted(call.func) or ""
            if SCHEDULE.search(called) and any(dotted(n) == name for a in call.args for n in self.tree.walk(a.value) if isinstance(n, (cst.Name, cst.Attribute))):
                return called.rsplit(".", 1)[-1]
        return None

    def _message(self, spelled: str, subject: str) -> str:
        if self.options.keep_global_batch:
            return (
                f"`{spelled}` keeps its value under DDP: each rank reads 1/world_size of the dataset in batches world_size times "
                f"smaller, so {subject} matches one process (if the batch size does not divide by the world size, the "
                "rounded-down batch gives each rank a few more steps per epoch)"
            )
        return (
            f"`{spelled}` counts one rank's batches: its sampler gives each rank 1/world_size of an epoch, so {subject} "
            "is world_size times smaller than in one process, in steps of a world_size times larger global batch (a schedule "
            "over it still spans the same epochs; --keep-global-batch keeps it as in one process)"
        )
