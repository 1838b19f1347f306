"""`sampler.set_epoch(epoch)` at the top of every epoch, so each epoch shuffles differently.

The epoch may be a `for epoch in range(...)` loop around the loader loop, a `while step <
max_steps` loop that re-iterates the loader (the step counter then seeds the shuffle), or a
loop in a caller of the function that iterates the loader. A loader drawn with `next()` whose
iterator is made again when it runs out (`except StopIteration: it = iter(loader)`), or through a
same-file generator that loops over it (`def cycle(loader): while True: for b in loader: yield
b`), moves its sampler one epoch on each time.
"""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.loops import TrainLoops
from ddpify.convert.analysis import PASSES, EpochStart
from ddpify.syntax import code
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements


class SetEpoch(Transform):
    name = "set-epoch"
    DESCRIPTION = "train_loader.sampler.set_epoch(epoch) at the top of each epoch"

    def run(self) -> None:
        if not self.facts.loader_plans:
            return
        staged: set[tuple[int, str]] = set()  # (function, loader) of an epoch loop already met
        shared = self._loader_shared_by_stages()
        refills = self.facts.refills()
        for start in sorted(self.facts.epoch_starts, key=lambda st: self.tree.order(st.loop)):
            if self._drawn_across_epochs(start, refills):
                continue  # its sampler moves on where its iterator is made again (below)
            stage = (id(self.tree.function(start.loop)), start.loader)
            later_stage = stage in staged
            staged.add(stage)
            if start.epoch is None and not isinstance(start.loop.body, cst.IndentedBlock):
                self.warn(start.loop, f"no epoch counter found for this loop: call `{start.loader}.sampler.set_epoch(epoch)` at the start of each epoch")
                continue
            if not isinstance(start.loop.body, cst.IndentedBlock):
                self.warn(start.loop, f"one-line loop: call `{start.loader}.sampler.set_epoch({start.epoch})` at the start of each epoch")
                continue
            set_epoch = f"{start.loader}.sampler.set_epoch({start.epoch})"
            onward = f"{start.loader}.sampler.set_epoch({start.loader}.sampler.epoch + 1)"  # the sampler counts its own passes
            if start.epoch is None:  # `while not done:` with a step counter only
                set_epoch = f"{onward}  # a new order for each pass (no epoch counter here)"
            elif start.epoch == PASSES:  # `for lr in [1e-3, 1e-2]`: no epoch number to give
                set_epoch = f"{onward}  # a new order for each pass of this loop"
            elif self._runs_again(start.loop, start.loader):  # `train(...)` called for two stages: its epochs start at 0 again
                set_epoch = f"{onward}  # a new order also when this function runs again"
            elif self._starts_over(start):
                set_epoch = f"{onward}  # a new order also in each pass of the loop around"
            elif later_stage:  # a second epoch loop over the same loader (fine-tuning after pretraining): its epochs start at 0 again
                set_epoch = f"{onward}  # a new order: an earlier stage used the first epochs' orders"
            elif id(start.loop) in shared:  # `pretrain(ae, loader)`, then `finetune(head, loader)`: each counts its epochs from 0
                set_epoch = f"{onward}  # a new order: another stage passes over the same loader"
            if start.optional:  # a flag may choose a sampler of the script's own, which has no set_epoch
                self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
                set_epoch = f"if isinstance({start.loader}.sampler, DistributedSampler):\n    {set_epoch}"
            line = statements(set_epoch + "\n")
            rebuilt = self._rebuilt_in(start)
            if rebuilt is not None:  # a loader made anew each epoch (fresh negatives): once it exists
                self.plan.insert_before(rebuilt, line)
            else:
                self.plan.prepend(start.loop.body, line)
            shown = f"{start.loader}.sampler.epoch + 1" if onward in set_epoch else start.epoch
            self.change(start.loop, f"`{start.loader}.sampler.set_epoch({shown})` each epoch, so every epoch shuffles differently")
        self._later_single_passes()
        for call, loader in refills:
            statement = self.tree.statement(call)
            self.plan.insert_before(statement, statements(f"{loader}.sampler.set_epoch({loader}.sampler.epoch + 1)  # a new pass shuffles differently\n"))
            self.change(call, f"`{loader}` is iterated again: its sampler moves to the next epoch first")
        for loop, loader, mixed in self.facts.generator_passes():
            set_epoch = f"{loader}.sampler.set_epoch({loader}.sampler.epoch + 1)  # the next pass shuffles differently"
            if mixed:  # a caller may hand the generator a loader of another kind, with no set_epoch
                self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
                set_epoch = f"if isinstance({loader}.sampler, DistributedSampler):\n    {set_epoch}"
            self.plan.insert_after(loop, statements(set_epoch + "\n"))
            self.change(loop, f"each pass over `{loader}` ends with its sampler moving to the next epoch, so the next pass shuffles differently")

    def _drawn_across_epochs(self, start: EpochStart, refills: list[tuple[cst.Call, str]]) -> bool:
        """`unl_iter = iter(unl)` before the epochs, `next(unl_iter)` in them, and `unl_iter =
        iter(unl)` again on StopIteration (FixMatch's unlabeled loader): its passes do not follow
        the epochs. A set_epoch(epoch) each epoch too set the counter back, and the shuffles of
        its passes repeated (helper corpus CH, repro 04: 6 distinct orders in 11 passes)."""
        if not any(loader == start.loader and any(isinstance(a, cst.ExceptHandler) for a in self.tree.ancestors(call)) for call, loader in refills):
            return False
        function = self.tree.function(start.loop)
        return any(
            self.tree.is_builtin_call(c, "iter") and c.args and code(c.args[0].value) == start.loader and self.tree.order(c) < self.tree.order(start.loop)
            for c in self.program.calls_in(function)
        )

    def _loader_shared_by_stages(self) -> set[int]:
        """The epoch loops of two or more functions that are handed one loader (`pretrain(ae,
        loader)`, then `finetune(head, loader)`): each counts its epochs from 0, so `set_epoch(ep)`
        replayed the first stage's orders in the second (helper corpus CD, repro 03). Either may run
        first: all of them count on from the sampler's own epoch."""
        by_origin: dict[object, list[EpochStart]] = {}
        for start in self.facts.epoch_starts:
            function = self.tree.function(start.loop)
            if function is None or "[" in start.loader:
                continue
            if start.loader.startswith("self.") and start.loader.count(".") == 1 and (cls := self.program.owner_class(function)) is not None:
                # `self.loader` walked by two methods, `warmup()` then `main_phase()` (helper corpus CE, repro 10)
                by_origin.setdefault((id(cls), start.loader), []).append(start)
                continue
            if "." in start.loader or start.loader not in self.program.all_param_names(function):
                continue
            for origin in self.program.origins(cst.Name(start.loader), function):
                by_origin.setdefault(id(origin.node), []).append(start)
        shared: set[int] = set()
        for starts in by_origin.values():
            if len({id(self.tree.function(st.loop)) for st in starts}) > 1:
                shared |= {id(st.loop) for st in starts}
        return shared

    def _later_single_passes(self) -> None:
        """Two stages that each go once over the same loader, with no epoch loop around either
        (pretraining, then fine-tuning): the second pass replayed the first one's order. It
        moves the sampler one epoch on first."""
        seen: set[tuple[int, str]] = set()
        for loop in sorted(self.facts.train_loops, key=lambda lp: self.tree.order(lp.loop)):
            if loop.consumed_by != "for" or type(loop.loop) is not cst.For:
                continue
            key = (id(loop.function), code(loop.loader))
            single = not any(outer is not loop.loop and self.tree.function(outer) is loop.function for outer in self.tree.loops(loop.loop))
            if key in seen and single and not self.program.fact(TrainLoops).zipped_with(loop):
                owner = self.program.sampler_owner(loop.loader, loop.function)
                self.plan.insert_before(self.tree.statement(loop.loop), statements(
                    f"{owner}.sampler.set_epoch({owner}.sampler.epoch + 1)  # another pass over it: a new order\n"
                ))
                self.change(loop.loop, f"`{owner}` is iterated again: its sampler moves to the next epoch first")
            seen.add(key)

    def _runs_again(self, loop: cst.For | cst.While, loader: str) -> bool:
        """The epoch loop is in a same-file function called more than once (or in a loop) whose
        epoch counter starts over each call: `set_epoch(epoch)` would replay the first call's
        orders (two training stages, the transfer-learning tutorial's two runs); the sampler's own
        count goes on instead. Not for a loader the function makes itself (a sweep's trials)."""
        function = self.tree.function(loop)
        if function is None or self.program.assignments(function, loader.split(".")[0].split("[")[0]):
            return False  # a loader made in the function: each call starts a sampler of its own
        return self.program.called_repeatedly(function)

    def _starts_over(self, start: EpochStart) -> bool:
        """`for cycle in range(3): for epoch in range(E): ...` (snapshot ensembles: helper corpus
        CL, repro 04): the epochs start over in each pass of a loop around the one counting them,
        over a loader made before it; `set_epoch(epoch)` replayed the first cycle's orders."""
        loops = [start.loop, *self.tree.loops(start.loop)]
        counting = next((i for i, lp in enumerate(loops) if type(lp) is cst.For and start.epoch in self.program.names_in(lp.target)), None)
        if counting is None and start.epoch is not None:
            # `while cycle < 2: t = 0; while t < period: ...; t += 1` (warm restarts by hand: helper corpus CM, repro 08):
            # the counter is set again in a loop around the one it counts
            function = self.tree.function(start.loop)
            resets = [v for v, i in self.program.assignments(function, start.epoch) if i is None and type(v) is cst.Integer]
            counting = next((i - 1 for i, lp in enumerate(loops) if i > 0 and any(self.tree.inside(v, lp) and not self.tree.inside(v, loops[i - 1]) for v in resets)), None)
        if counting is None:
            return False
        made = [v for v, _ in self.program.assignments(self.tree.function(start.loop), start.loader.split(".")[0].split("[")[0])]
        return any(not any(self.tree.inside(v, outer) for v in made) for outer in loops[counting + 1:])

    def _rebuilt_in(self, start: EpochStart) -> cst.BaseStatement | None:
        """The statement of the epoch loop's body that holds the batch loop, when the loader is
        bound inside the epoch loop (built anew each epoch): set_epoch goes right before it."""
        if start.batches is None:
            return None
        function = self.tree.function(start.loop)
        name = start.loader.split(".")[0]
        if not any(self.tree.inside(value, start.loop.body) for value, _ in self.program.assignments(function, name)):
            return None
        for statement in start.loop.body.body:
            if self.tree.inside(start.batches, statement):
                return statement
        return None
