"""A loop that one rank leaves, every rank leaves; a step one rank skips, every rank skips.

`if loss.item() < 0.01: break` decides on this rank's batch: under DDP another rank sees another
batch, keeps training, and its next backward() waits forever for the rank that left. Such a test
is taken by all ranks together: `if any_rank(loss.item() < 0.01):`, where `any_rank` (emitted
once) all-reduces the flag, so every rank leaves when one would have. The same holds for a
`continue` before backward() (`if not torch.isfinite(loss): continue`) and for a time budget
(`if time.time() - start > limit: break`): each rank reads its own clock.
"""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.accumulation import is_optimizer_step
from ddpify.analysis.batches import batch_names, reads
from ddpify.analysis.destinations import private_to_process
from ddpify.analysis.exits import clock_names, continues, leaves, reads_clock, skips
from ddpify.analysis.totals import COLLECTS, keeps_in_place
from ddpify.analysis.loops import TrainLoop
from ddpify.analysis.output import CHECKPOINT
from ddpify.analysis.splits import seeded_before
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import Tree, code, dotted, is_backward, is_grad, method_call, string_value

HELPER = '''

def any_rank(flag):
    """True on every rank when `flag` is true on any rank: a loop that one rank would leave (or a
    step it would skip) on its own numbers, all ranks leave (skip) together; the others would
    wait for it in backward()."""
    flag = torch.tensor(float(bool(flag)))  # a CPU tensor: the process group's gloo part carries it
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
'''


ALL_HELPER = '''

def all_ranks(flag):
    """True on every rank only when `flag` is true on every rank: a loop that goes on while its
    test holds on this rank's own numbers (a time budget) stops on every rank when one rank's
    test fails; the others would wait for it in backward()."""
    flag = torch.tensor(float(bool(flag)))  # a CPU tensor: the process group's gloo part carries it
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
'''


MEAN_HELPER = '''

def rank_mean(value):
    """The mean of `value` over ranks: a decision taken on it (a plateau scheduler lowering the
    learning rate), or a gradient divided by it, is alike on every rank, whose replicas would
    drift apart otherwise."""
    value = torch.tensor(float(value), dtype=torch.float64)  # a CPU tensor: the process group's gloo part carries it
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()
'''
# Draws from a global generator (`if random.random() < 0.5:`).
RANDOM_DRAWS = {
    "random.random", "random.uniform", "random.randint", "random.choice", "numpy.random.rand", "numpy.random.random",
    "numpy.random.uniform", "numpy.random.randint", "torch.rand", "torch.randint",
}  # fmt: skip
# In-place scaling of a gradient (`p.grad.div_(n)`).
GRAD_SCALING = {"div_", "mul_", "mul", "div"}


def _stores_lr(node: cst.Assign | cst.AugAssign) -> bool:
    """`group["lr"] = value` or `group["lr"] *= 0.5`: a learning rate set by hand."""
    targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
    return any(
        type(t) is cst.Subscript and len(t.slice) == 1 and type(t.slice[0].slice) is cst.Index
        and string_value(t.slice[0].slice.value) == "lr"
        for t in targets
    )  # fmt: skip


# Schedulers whose step decides on a value it is given.
PLATEAU = {"torch.optim.lr_scheduler.ReduceLROnPlateau"}


class StopTogether(Transform):
    name = "stop"
    DESCRIPTION = "a loop left on one rank's own numbers (`if loss < t: break`) is left by every rank together; a plateau scheduler steps on their mean"

    def run(self) -> None:
        self._local_cache: dict[int, set[str]] = {}  # `_local_names`, by the loop's id (the tree keeps the loops)
        rewritten: set[int] = set()
        means = every = any_rank_used = False
        for loop in self.facts.train_loops:
            means = self._gradients_scaled_per_rank(loop) or means
            self._gradients_read_without_a_step(loop)
            local = self._local_names(loop)  # counters are the same on every rank
            clocks = clock_names(self.tree, self.program, loop.function)
            reduced = self.plan.reduced.get(id(loop.loop), set())  # ReduceMetrics ran: these are shared after the loop
            every = self._while_tests(loop, local, reduced, clocks, rewritten) or every
            exits = self._exits(loop)
            if not exits:
                continue
            hooked = self._kept_by_hooks(loop)
            for node in exits:
                test = node.test
                own = local if self.tree.inside(node, loop.loop.body) else self._after_the_loop(loop, local - reduced)  # a `for`'s `else` runs after the reduction
                if id(node) in rewritten or not (self._per_rank(test, own, clocks) or _reads_dotted(self.tree, test, hooked)):
                    continue
                rewritten.add(id(node))
                outer = self._decided_above(node, loop, local, clocks, rewritten)
                if outer is not None:
                    self.warn(node, (
                        f"`{code(test)}` is this rank's own, and only ranks where `{code(outer.test)}` get to ask it: "
                        "the ranks leave or skip at different steps and hang; decide both on values every rank shares"
                    ))
                    continue
                self.plan.replace(test, cst.parse_expression(f"any_rank({code(test)})"))
                any_rank_used = True
                if self._skips_step(node, loop):
                    effect = "skips the step"
                elif self._steps_under(node, loop):
                    effect = "steps the optimizer"
                elif leaves(self.tree, self.program, node, [loop.loop, *self.tree.loops(loop.loop)]):
                    effect = "leaves the loop"
                elif self._sets_learning_rate(node, loop):
                    effect = "sets the learning rate"
                elif self._saves_privately(node.body, loop.function):
                    effect = "saves into its own folder (the checkpoint it reads back)"
                else:
                    effect = "runs what it guards (a forward and backward through DDP)"
                self.change(node, f"`{code(test)}` is this rank's own: every rank {effect} when any rank would (any_rank)")
        for loop in self.facts.train_loops:
            every, any_rank_used = self._caller_loops_together(loop, rewritten, every, any_rank_used)
        if any_rank_used:
            assert self.facts.imports_end is not None
            self.plan.insert_after(self.facts.imports_end, statements(HELPER))
        if every:
            assert self.facts.imports_end is not None
            self.plan.insert_after(self.facts.imports_end, statements(ALL_HELPER))
        for loop in self.facts.train_loops:
            means = self._returns_together(loop) or means
            means = self._rates_set_together(loop) or means
        if self._plateaus_decide_together() or means:
            assert self.facts.imports_end is not None
            self.plan.insert_after(self.facts.imports_end, statements(MEAN_HELPER))

    def _per_rank(self, test: cst.BaseExpression, local: set[str], clocks: set[str]) -> bool:
        """A test on this rank's batch, on what it collects from it, on its clock, or on a draw
        from a global generator nothing seeds (each process starts from its own seed)."""
        function = self.tree.function(test)
        return (
            reads(self.tree, test, local | clocks | self._draw_names(function))
            or reads_clock(self.tree, test)
            or self._unseeded_draw(test)
            or self._per_rank_helper(test)
        )

    def _unseeded_draw(self, test: cst.BaseExpression) -> bool:
        for call in self.tree.calls(test):
            name = self.tree.qname(call.func) or ""
            if name in RANDOM_DRAWS and not seeded_before(self.tree, self.program, call, self.tree.function(call), name.split(".")[0]):
                return True
        return False

    def _draw_names(self, function: cst.FunctionDef | None) -> set[str]:
        """Names `function` binds from an unseeded draw (`attack = np.random.rand() < p`)."""
        return {
            name
            for node in self.program.scope_nodes(function)
            if type(node) is cst.Assign and self._unseeded_draw(node.value)
            for target in node.targets
            for name in self.program.names_in(target.target)
        }

    def _per_rank_helper(self, test: cst.BaseExpression, depth: int = 2) -> bool:
        """`if out_of_time(): break`, `while not out_of_time():`, `if aug.should_attack():`: a
        same-file function or method whose value reads this rank's clock or an unseeded draw."""
        function = self.tree.function(test)
        called = [target[0] for call in self.tree.calls(test) if (target := self.program.callee(call, function)) is not None]
        called += [prop for n in self.tree.walk(test) if type(n) is cst.Attribute and (prop := self._property(n, function)) is not None]
        for callee in called:  # `timer.out_of_time()`, or the property `timer.out_of_time`
            clocks = clock_names(self.tree, self.program, callee) | self._draw_names(callee)
            for value in self.program.returns(callee):
                if reads(self.tree, value, clocks) or reads_clock(self.tree, value) or self._unseeded_draw(value):
                    return True
                if depth > 0 and self._per_rank_helper(value, depth - 1):
                    return True
        return False

    def _property(self, node: cst.Attribute, function: cst.FunctionDef | None) -> cst.FunctionDef | None:
        """The same-file `@property` an attribute read runs (`timer.out_of_time`)."""
        cls = self.program.instance_of(node.value, function)
        method = self.program.class_methods(cls).get(node.attr.value) if cls is not None else None
        if method is None or not any(type(d.decorator) is cst.Name and d.decorator.value == "property" for d in method.decorators):
            return None
        return method

    def _while_tests(self, loop: TrainLoop, local: set[str], reduced: set[str], clocks: set[str], rewritten: set[int]) -> bool:
        """`while time.time() - t0 < budget:` around the training loop (or as it), `while not
        out_of_time():`, `while not done:` with `done = time.time() > deadline`: each rank reads
        its own clock, one leaves while another starts the next epoch and waits for it in
        backward(). The test becomes `all_ranks(...)`: every rank goes on only while every rank
        would."""
        changed = False
        for outer in [loop.loop, *self.tree.loops(loop.loop)]:
            if type(outer) is not cst.While or id(outer) in rewritten or self.tree.function(outer) is not loop.function:
                continue
            own = local if outer is loop.loop else self._after_the_loop(loop, local - reduced)
            if not self._per_rank(outer.test, own, clocks):
                continue
            self._go_on_together(outer, rewritten)
            changed = True
        return changed

    def _go_on_together(self, loop: cst.While, rewritten: set[int]) -> None:
        """`while <this rank's test>:` becomes `while all_ranks(<test>):`."""
        rewritten.add(id(loop))
        self.plan.replace(loop.test, cst.parse_expression(f"all_ranks({code(loop.test)})"))
        self.change(loop, f"`{code(loop.test)}` is this rank's own: every rank goes on only while every rank would (all_ranks)")

    def _decided_above(self, node: cst.If, loop: TrainLoop, local: set[str], clocks: set[str], rewritten: set[int]) -> cst.If | None:
        """An `if` around `node`, inside the loops, whose own test is this rank's and not taken
        together: only some ranks would reach `any_rank(...)`, and a collective that some ranks
        skip hangs."""
        for parent in self.tree.ancestors(node):
            if parent is loop.loop or parent is loop.function:
                return None
            if type(parent) is cst.If and id(parent) not in rewritten and self._per_rank(parent.test, local, clocks):
                return parent
        return None

    def _skips_step(self, node: cst.If, loop: TrainLoop) -> bool:
        return continues(self.tree, node, loop.loop)

    def _plateaus_decide_together(self) -> bool:
        """`scheduler.step(loss)` on a ReduceLROnPlateau, with this rank's batch's loss: each rank
        would lower its learning rate at its own time. It gets the mean over ranks."""
        done: set[int] = set()
        for loop in self.facts.train_loops:
            scopes: list[cst.CSTNode] = [loop.loop.body, *(outer.body for outer in self.tree.loops(loop.loop) if outer is not loop.loop)]
            local = self._local_names(loop)
            after = self._after_the_loop(loop, local - self.plan.reduced.get(id(loop.loop), set()))  # `epoch_loss = torch.stack(losses).mean().item()`
            for call in self.program.calls_in(loop.function):
                if any(self.tree.inside(call, scope) for scope in scopes):
                    self._plateau_on_the_mean(call, loop.function, local if self.tree.inside(call, loop.loop.body) else after, done)
            # `epoch_loss = run_epoch(...)`, returning `sum(losses) / len(losses)` of this rank's loss tensors, then
            # `sched.step(epoch_loss.item())` in the caller (helper corpus BW, repro 04)
            for site, caller in self.program.call_sites(loop.function) if loop.function is not None else ():
                returned = self._returned_own(loop, site)
                for call in self.program.calls_in(caller) if returned else ():
                    if self.tree.order(call) > self.tree.order(site):
                        self._plateau_on_the_mean(call, caller, returned, done)
        return bool(done)

    def _plateau_on_the_mean(self, call: cst.Call, function: cst.FunctionDef | None, own: set[str], done: set[int]) -> None:
        """`call` steps a ReduceLROnPlateau on a value read from `own` (this rank's): it steps on
        the value's mean over ranks instead (rank_mean)."""
        found = method_call(call)
        if found is None or found[1] != "step" or not call.args or id(call) in done:
            return
        if not any(self.tree.is_call_to(o.node, PLATEAU) for o in self.program.origins(found[0], function)):
            return
        value = call.args[0].value
        if not reads(self.tree, value, own):
            return
        done.add(id(call))
        self.plan.replace(value, cst.parse_expression(f"rank_mean({code(value)})"))
        self.change(call, f"`{code(value)}` is this rank's own: the plateau scheduler steps on its mean over ranks, so every rank lowers its learning rate alike (rank_mean)")

    def _local_names(self, loop: TrainLoop) -> set[str]:
        """Names holding this rank's own numbers in the step: those bound from its batch, and what
        the loop collects or adds up from them (`recent.append(loss.item())`, `total += loss.item()`,
        read before any reduction after the loop). Worked out once per loop (a copy each time)."""
        if id(loop.loop) not in self._local_cache:
            self._local_cache[id(loop.loop)] = self._find_local_names(loop)
        return set(self._local_cache[id(loop.loop)])

    def _find_local_names(self, loop: TrainLoop) -> set[str]:
        local = batch_names(self.tree, self.program, loop.loop)
        exits = {id(node) for node in self._exits(loop)}  # decided together (any_rank): what they set is shared
        grown = True
        while grown:
            grown = False
            for node in self.tree.walk(loop.loop.body):
                target = None
                if type(node) is cst.AugAssign and type(node.target) is cst.Name and reads(self.tree, node.value, local):
                    target = node.target.value
                elif type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name and reads(self.tree, node.value, local):
                    target = node.targets[0].target.value  # `control = cb.on_step_end(control, tr_loss)` from a window total
                elif (found := method_call(node)) and found[1] in COLLECTS and type(found[0]) is cst.Name and reads(self.tree, node, local):
                    target = found[0].value
                elif type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Subscript and reads(self.tree, node.value, local):
                    target = dotted(node.targets[0].target.value)  # `memory[idx] = f.detach()`: a bank of this rank's values (helper corpus BB, repro 01)
                    target = target.split(".")[0] if target is not None else None
                elif (found := method_call(node)) and type(found[0]) is cst.Name and any(reads(self.tree, a, local) for a in node.args) and keeps_in_place(self.program, found, loop.function, totals=True):
                    target = found[0].value  # `memory.index_copy_(0, idx, f)`, `bank.update(f, idx)`
                elif type(node) is cst.If and id(node) not in exits and reads(self.tree, node.test, local):
                    # `if tr_loss < 1.0: control.should_training_stop = True`: what it sets is this rank's decision
                    decided = {name.split(".")[0] for n in self.tree.walk(node.body) if type(n) is cst.Assign for t in n.targets if (name := dotted(t.target))}
                    if decided - local:
                        local |= decided
                        grown = True
                if target is not None and target not in local:
                    local.add(target)
                    grown = True
        return local

    def _after_the_loop(self, loop: TrainLoop, own: set[str]) -> set[str]:
        """`own`, followed through what the loops around the batch loop bind after it, in order:
        a name bound from one of them is this rank's too (`last = loss.item()` at the end of the
        epoch, then `if last > prev:`), a name bound from anything else no longer is (`y =
        val[2]` before a validation loss; the names a comprehension or loop binds over the
        validation loader)."""
        own = set(own)
        outers = [o for o in self.tree.loops(loop.loop) if o is not loop.loop and self.tree.function(o) is loop.function]
        scope = outers[-1].body if outers else loop.function  # a function training one epoch: its body after the loop
        if scope is None:
            return own
        end = self.tree.end_order(loop.loop)
        for node in self.tree.walk(scope):
            if self.tree.order(node) < end:
                continue
            if type(node) is cst.For:
                own -= self.program.names_in(node.target)
            elif type(node) is cst.Assign:
                bound = {name for t in node.targets for name in self.program.names_in(t.target)}
                inner = {name for n in self.tree.walk(node.value) if type(n) is cst.CompFor for name in self.program.names_in(n.target)}
                if reads(self.tree, node.value, own - inner):
                    own |= bound
                else:
                    own -= bound
        return own

    def _exits(self, loop: TrainLoop) -> list[cst.If]:
        """`if` statements that leave the batch loop or an enclosing loop of the same function
        (`break`, `return`, or setting a flag a `while` test of those loops reads: `done = True`
        for `while step < n and not done:`), in the batch loop's body or after it in the
        enclosing loops; and those that skip the rest of a step that synchronizes (`if not
        torch.isfinite(loss): continue` before backward())."""
        loops = [loop.loop, *(outer for outer in self.tree.loops(loop.loop) if outer is not loop.loop)]
        scopes: list[cst.CSTNode] = [lp.body for lp in loops]
        syncs = lambda statement: self.facts.syncs(statement, loop.function)  # noqa: E731
        return [
            node
            for node in self.tree.of_type(cst.If)
            if any(self.tree.inside(node, scope) for scope in scopes)
            and self.tree.function(node) is loop.function
            and (
                leaves(self.tree, self.program, node, loops)
                or (continues(self.tree, node, loop.loop) and skips(self.tree, node, loop.loop, syncs))
                or self._steps_under(node, loop)
                or self._sets_learning_rate(node, loop)
                or self._syncs_under(node, loop, syncs)
                or self._saves_privately(node.body, loop.function)
            )
        ]

    def _syncs_under(self, node: cst.If, loop: TrainLoop, syncs) -> bool:
        """`if random.random() < 0.5: x = fgsm(model, x, y)` in the step: a forward and backward
        through DDP (a collective) that only some ranks run hangs the others. Not when the other
        branch runs as many."""
        if not isinstance(node.body, cst.IndentedBlock) or not self.tree.inside(node, loop.loop.body):
            return False
        taken = sum(1 for statement in node.body.body if syncs(statement))
        if type(node.orelse) is cst.Else and isinstance(node.orelse.body, cst.IndentedBlock):
            other = sum(1 for statement in node.orelse.body.body if syncs(statement))
        else:
            other = 1 if node.orelse is not None and syncs(node.orelse) else 0
        return taken != other  # a forward in each branch (CutMix or not): as many collectives either way

    def _gradients_scaled_per_rank(self, loop: TrainLoop) -> bool:
        """`p.grad /= seen` (or `p.grad.div_(seen)`) after backward(), with `seen` this rank's own
        count (tokens since the last update, with a summed loss): DDP has averaged the gradients,
        so each rank scaled them its own way and the replicas stepped apart. Dividing by the
        mean count over ranks gives what one process summing every rank's batches would:
        `seen` becomes `rank_mean(seen)`, worked out once before a loop over the parameters.
        Any other scaling by this rank's numbers (`p.grad *= k`) is said, not changed."""
        local = self._local_names(loop)
        done: set[int] = set()  # loops over the parameters already given their mean
        changed = False
        for node in self.tree.walk(loop.loop.body):
            if type(node) is cst.AugAssign and is_grad(node.target) and reads(self.tree, node.value, local):
                by, divisor = node.value, node.value if type(node.operator) is cst.DivideAssign else None
            elif (found := method_call(node)) is not None and found[1] in GRAD_SCALING and is_grad(found[0]) and reads(self.tree, node, local):
                by, divisor = node, node.args[0].value if found[1] in ("div_", "div") and len(node.args) == 1 else None  # type: ignore[attr-defined]
            else:
                continue
            if divisor is None:
                self.warn(node, (
                    f"`{code(by)}` scales the gradients DDP averaged by a number of this rank's own batches: each rank scales them its own "
                    "way and the replicas step apart; scale by a value every rank shares (dist.all_reduce it first)"
                ))
                return changed
            changed = True
            over = self._parameter_loop(node, loop, divisor)
            if over is None:
                self.plan.replace(divisor, cst.parse_expression(f"rank_mean({code(divisor)})"))
            else:
                name = self._mean_name(loop.function, divisor)
                if id(over) not in done:
                    done.add(id(over))
                    self.plan.insert_before(over, statements(f"{name} = rank_mean({code(divisor)})  # every rank divides alike\n"))
                self.plan.replace(divisor, cst.Name(name))
            self.change(node, (
                f"`{code(divisor)}` is this rank's own count: the gradients DDP averaged are divided by its mean over ranks "
                "(rank_mean), which is what one process counting every rank's batches divides by"
            ))
        return changed

    def _gradients_read_without_a_step(self, loop: TrainLoop) -> None:
        """EWC's Fisher: backward() per sample and `f += p.grad ** 2`, with no optimizer step. The
        backward goes through DDP, which averages the gradients over ranks before they are read:
        each "per-sample" gradient is a mean of world_size samples' (the Fisher shrinks by about
        1/world_size). Said, not changed: run that pass under `model.no_sync()` and sum its totals."""
        body = loop.loop.body
        if any((found := method_call(c)) is not None and found[1] == "step" for c in self.tree.calls(body)):
            return
        if any(type(c.func) is cst.Attribute and c.func.attr.value == "step" for c in self.program.calls_in(loop.function) if not self.tree.inside(c, body)):
            return  # stepped after the loop (gradient accumulation over the whole pass)
        grad = next((n for n in self.tree.walk(body) if type(n) is cst.Attribute and n.attr.value == "grad" and type(self.tree.parent(n)) is not cst.AssignTarget), None)
        if grad is None or not any(is_backward(c) for c in self.tree.calls(body)):
            return
        self.warn(loop.loop, (
            f"this loop reads gradients (`{code(grad)}`) after each backward() with no optimizer step: through DDP they are "
            "averaged over ranks first, so a per-sample quantity (a Fisher diagonal, a gradient norm per example) mixes world_size "
            "ranks' samples; run the pass under `model.no_sync()` and sum what it adds up over ranks"
        ))

    def _parameter_loop(self, node: cst.CSTNode, loop: TrainLoop, divisor: cst.BaseExpression) -> cst.For | None:
        """The loop over the parameters around `node` in the step (`for p in model.parameters():`),
        when the divisor reads nothing it binds: one mean per step, not one per parameter."""
        for outer in self.tree.loops(node):
            if outer is loop.loop or not self.tree.inside(outer, loop.loop.body):
                return None
            if type(outer) is cst.For and not reads(self.tree, divisor, set(self.program.names_in(outer.target))):
                return outer
        return None

    def _mean_name(self, function: cst.FunctionDef | None, divisor: cst.BaseExpression) -> str:
        stem = divisor.value if type(divisor) is cst.Name else "count"
        return next(n for n in (f"mean_{stem}", f"{stem}_over_ranks", "mean_count_over_ranks") if not self.program.binds(function, n))

    def _caller_loops_together(self, loop: TrainLoop, rewritten: set[int], every: bool, anyone: bool) -> tuple[bool, bool]:
        """The epoch loop in a caller of the function that trains an epoch (`while time.time() - t0
        < budget: train_epoch(...)`, `if budget.expired(): break` in it): the same clocks,
        read where the epochs are counted. Returns whether all_ranks and any_rank were used."""
        if loop.function is None:
            return every, anyone
        kept = self._own_attributes(loop)
        for call, caller in self.program.call_sites(loop.function):
            clocks = clock_names(self.tree, self.program, caller)
            receiver = dotted(call.func.value) if type(call.func) is cst.Attribute else None
            seen = {receiver + attr[4:] for attr in kept} if receiver is not None and receiver != "self" else set()  # `trainer.history`
            handed = self._handed_state(loop, call) | self._returned_own(loop, call)
            for outer in self.tree.loops(call):
                if self.tree.function(outer) is not caller:
                    continue
                seen |= self._bound_from(outer, call, handed)
                if type(outer) is cst.While and id(outer) not in rewritten and self._per_rank(outer.test, set(), clocks):
                    self._go_on_together(outer, rewritten)
                    every = True
                for node in self.tree.walk(outer.body):
                    if type(node) is not cst.If or id(node) in rewritten or self.tree.function(node) is not caller:
                        continue
                    if not leaves(self.tree, self.program, node, [outer]):
                        continue
                    if not (self._per_rank(node.test, set(), clocks) or _reads_dotted(self.tree, node.test, seen)):
                        continue
                    rewritten.add(id(node))
                    self.plan.replace(node.test, cst.parse_expression(f"any_rank({code(node.test)})"))
                    self.change(node, f"`{code(node.test)}` is this rank's own: every rank leaves the loop when any rank would (any_rank)")
                    anyone = True
                    for above in self.tree.ancestors(node):
                        if above is outer:
                            break
                        if type(above) is cst.If and id(above) not in rewritten and _reads_dotted(self.tree, above.test, seen):
                            # `if acc > best: ... else: bad += 1; if bad > patience: break`: every rank must reach the test
                            rewritten.add(id(above))
                            self.plan.replace(above.test, cst.parse_expression(f"any_rank({code(above.test)})"))
                            self.change(above, f"`{code(above.test)}` is this rank's own, and decides which ranks reach a collective test: every rank takes it when any rank would (any_rank)")
        return every, anyone

    def _returned_own(self, loop: TrainLoop, call: cst.Call) -> set[str]:
        """`stats = train_one_epoch(...)`, where the function returns a record of this rank's
        numbers (`stats["loss"] = running_loss / n` in its batch loop, then `return stats`; a
        number it returns is made rank_mean there): the names the caller binds from it."""
        statement = self.tree.parent(call)
        if type(statement) is not cst.Assign or statement.value is not call or loop.function is None:
            return set()
        own = self._after_the_loop(loop, self._local_names(loop) - self.plan.reduced.get(id(loop.loop), set()))
        if not any(reads(self.tree, v, own) and not self._number(v, loop.function) for v in self.program.returns(loop.function)):
            return set()
        return {name for t in statement.targets for name in self.program.names_in(t.target)}

    def _handed_state(self, loop: TrainLoop, call: cst.Call) -> set[str]:
        """What the caller hands the epoch function for it to keep this rank's values in (`bank`
        in `train_epoch(net, bank, ...)`, which stores each batch's features: NPID's memory bank)."""
        assert loop.function is not None
        own = self._local_names(loop)
        return {
            name for param in self.program.param_names(loop.function)
            if param in own and (argument := self.program.argument_for(call, loop.function, param)) is not None and (name := dotted(argument)) is not None
        }

    def _bound_from(self, outer: cst.For | cst.While, call: cst.Call, own: set[str]) -> set[str]:
        """`own`, and the names the loop body binds after `call` from them (`acc = knn_eval(net,
        bank, ...)`), in order."""
        if not own:
            return set()
        own = set(own)
        roots = lambda: {n.split(".")[0] for n in own}  # noqa: E731
        for node in self.tree.walk(outer.body):
            if self.tree.order(node) <= self.tree.order(call):
                continue
            if type(node) is cst.Assign and reads(self.tree, node.value, roots()):
                own |= {name for t in node.targets for name in self.program.names_in(t.target)}
            elif type(node) is cst.If and reads(self.tree, node.test, roots()):
                # `if acc > best: best, bad = acc, 0` / `else: bad += 1`: a count kept on this rank's decision
                own |= {
                    name for n in self.tree.walk(node) if type(n) in (cst.Assign, cst.AugAssign)
                    for t in (n.targets if type(n) is cst.Assign else [n])
                    for name in self.program.names_in(t.target)
                }
        return own

    def _own_attributes(self, loop: TrainLoop) -> set[str]:
        """Attributes a training method keeps this rank's numbers in (`self.last_loss =
        loss.item()`, `self.history.append(self.last_loss)`): a caller deciding on them
        (`if trainer.history[-1] < target: break`) decides per rank."""
        if self.program.owner_class(loop.function) is None:
            return set()
        local = self._after_the_loop(loop, self._local_names(loop) - self.plan.reduced.get(id(loop.loop), set()))
        kept: set[str] = set()
        grown = True
        while grown:
            grown = False
            for node in self.program.scope_nodes(loop.function):
                target = value = None
                if type(node) is cst.Assign and len(node.targets) == 1:
                    target, value = _own_attribute(node.targets[0].target), node.value
                elif (found := method_call(node)) and found[1] in COLLECTS and node.args:  # type: ignore[union-attr]
                    target, value = _own_attribute(found[0]), node.args[0].value  # type: ignore[union-attr]
                if target is None or target in kept:
                    continue
                if reads(self.tree, value, local) or _reads_dotted(self.tree, value, kept):
                    kept.add(target)
                    grown = True
        return kept

    def _kept_by_hooks(self, loop: TrainLoop) -> set[str]:
        """Attributes of `self` holding this rank's numbers, kept by the methods the training
        method calls on `self` (or a subclass's overrides of them): `self.on_batch_end(loss)` adding
        `loss.item()` into `self.sum`, then `on_epoch_end` setting `self.should_stop` from it. A
        test on them after the hook (`if self.should_stop: break`) decides per rank."""
        cls = self.program.owner_class(loop.function)
        if cls is None:
            return set()
        family = self.program.subclasses(cls)
        local = self._local_names(loop)
        calls = [c for c in self.program.calls_in(loop.function) if type(c.func) is cst.Attribute and dotted(c.func.value) == "self"]
        kept: set[str] = set()
        own: dict[cst.FunctionDef, set[str]] = {}
        grown = True
        while grown:
            grown = False
            for call in calls:
                for method in (m for c in family if (m := self.program.methods.get(c, {}).get(call.func.attr.value)) is not None):  # type: ignore[attr-defined]
                    names = own.setdefault(method, set())
                    for argument in call.args:
                        if reads(self.tree, argument.value, local) or _reads_dotted(self.tree, argument.value, kept):
                            param = self.program.parameter_for(call, method, argument.value)
                            if param is not None and param not in names:
                                names.add(param)
                                grown = True
                    for node in self.program.scope_nodes(method):
                        if type(node) not in (cst.Assign, cst.AugAssign):
                            continue
                        tests = [a.test for a in self.tree.ancestors(node) if type(a) is cst.If and self.tree.inside(a, method)]
                        if not any(reads(self.tree, v, names) or _reads_dotted(self.tree, v, kept) for v in (node.value, *tests)):  # type: ignore[attr-defined]
                            continue
                        targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]  # type: ignore[attr-defined]
                        for target in targets:
                            for n in self.tree.walk(target):
                                name = dotted(n) if type(n) in (cst.Name, cst.Attribute) else None
                                if name is None or type(self.tree.parent(n)) is cst.Attribute:
                                    continue  # `self` and `sum` of `self.sum`
                                bucket = kept if name.startswith("self.") and name.count(".") == 1 else names if "." not in name else None
                                if bucket is not None and name not in bucket:
                                    bucket.add(name)
                                    grown = True
        kept |= self._set_by_callbacks(loop, local)
        return kept

    def _set_by_callbacks(self, loop: TrainLoop, local: set[str]) -> set[str]:
        """`cb.on_batch_end(self, loss.item())` over a list of callbacks, whose hook sets
        `trainer.stop_training = True` under a test on what this rank handed it: `self.stop_training`
        is this rank's decision (helper corpus CE, repro 08: one rank left the loop)."""
        kept: set[str] = set()
        for call in self.program.calls_in(loop.function):
            if type(call.func) is not cst.Attribute or dotted(call.func.value) == "self" or not any(dotted(a.value) == "self" for a in call.args):
                continue
            target = self.program.callee(call, loop.function)
            for method in [target[0]] if target is not None else self.program.hook_methods(call):
                holder = next((self.program.parameter_for(call, method, a.value) for a in call.args if dotted(a.value) == "self"), None)
                handed = {p for a in call.args if reads(self.tree, a.value, local) and (p := self.program.parameter_for(call, method, a.value)) is not None}
                if holder is None or not handed:
                    continue
                for node in self.program.scope_nodes(method):
                    if type(node) is not cst.Assign:
                        continue
                    tests = [a.test for a in self.tree.ancestors(node) if type(a) is cst.If and self.tree.inside(a, method)]
                    if not any(reads(self.tree, v, handed) for v in (node.value, *tests)):
                        continue
                    for t in node.targets:
                        name = dotted(t.target) or ""
                        if name.startswith(holder + ".") and name.count(".") == 1:
                            kept.add("self." + name.split(".", 1)[1])
        return kept

    def _sets_rate(self, function: cst.FunctionDef, depth: int = 1) -> bool:
        """It sets a learning rate (`g["lr"] *= 0.5`), itself or through a same-file call."""
        if any(type(n) in (cst.Assign, cst.AugAssign) and _stores_lr(n) for n in self.program.scope_nodes(function)):
            return True
        return depth > 0 and any(
            (inner := self._called(call, function)) is not None and inner is not function and self._sets_rate(inner, depth - 1)
            for call in self.program.calls_in(function)
        )

    def _called(self, call: cst.Call, function: cst.FunctionDef | None) -> cst.FunctionDef | None:
        """The same-file function or method a call runs, `__call__` of an object called
        (`guard(loss.item())`) included."""
        target = self.program.callee(call, function)
        if target is not None:
            return target[0]
        cls = self.program.instance_of(call.func, function) if type(call.func) is cst.Name else None
        return self.program.methods.get(cls, {}).get("__call__") if cls is not None else None

    def _number(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """A Python number: `loss.item()`, `float(...)`, or a name only ever bound to those."""
        found = method_call(expr)
        if found is not None and found[1] == "item" and not expr.args:  # type: ignore[attr-defined]
            return True
        if self.tree.is_builtin_call(expr, "float"):
            return True
        if type(expr) is cst.Name or (type(expr) is cst.Attribute and (dotted(expr) or "").startswith("self.")):
            values = [self.program.element(v, i) for v, i in self.program.assignments(function, dotted(expr) or "")]
            bound = [v for v in values if type(v) not in (cst.Integer, cst.Float) and not (type(v) is cst.Name and v.value == "None")]  # `last = 0.0`, `first = None` before the loop
            return bool(bound) and all(self._number(v, function) for v in bound)
        return False

    def _returns_together(self, loop: TrainLoop) -> bool:
        """`return last` after the batch loop of a training function, `last = loss.item()` this
        rank's own: a caller deciding on it (an early-stopping callback, a rate halved when it
        rose) decides per rank. The function returns its mean over ranks (rank_mean); it runs on
        every rank, as its DDP forwards do."""
        if loop.function is None:
            return False
        local = self._after_the_loop(loop, self._local_names(loop) - self.plan.reduced.get(id(loop.loop), set()))
        changed = False
        for node in self.program.scope_nodes(loop.function):
            if type(node) is not cst.Return or node.value is None or self.tree.inside(node, loop.loop):
                continue
            if self.tree.order(node) < self.tree.order(loop.loop):
                continue
            values = [node.value]
            if type(node.value) in (cst.Dict, cst.Tuple):  # `return {"loss": loss.item(), "acc": acc}`: each number of this rank's
                values = [e.value for e in node.value.elements if type(e) in (cst.DictElement, cst.Element)]  # type: ignore[union-attr]
            elif type(node.value) is cst.Call and type(node.value.func) is cst.Name and node.value.func.value in self.program.classes:
                values = [a.value for a in node.value.args if not a.star]  # a record of this file: `EpochResult(mean, last=loss.item())`
            for value in values:
                if not reads(self.tree, value, local) or not self._number(value, loop.function):
                    continue
                self.plan.replace(value, cst.parse_expression(f"rank_mean({code(value)})"))
                self.change(node, f"`{code(value)}` is this rank's own: `{loop.function.name.value}` returns its mean over ranks (rank_mean), so what its callers decide on it, every rank decides alike")
                changed = True
        return changed

    def _rates_set_together(self, loop: TrainLoop) -> bool:
        """`guard.observe(loss.item())`, `adjust_lr(last)`: a same-file function or method that
        sets the learning rate, handed this rank's own number. It is handed the mean over ranks
        (rank_mean), so every rank sets the same rate."""
        local = self._local_names(loop)
        reduced = self.plan.reduced.get(id(loop.loop), set())
        outers = [outer for outer in self.tree.loops(loop.loop) if outer is not loop.loop and self.tree.function(outer) is loop.function]
        scopes = [loop.loop.body, *(outer.body for outer in outers)]
        end = self.tree.end_order(loop.loop)
        kept = self._own_attributes(loop)
        changed = False
        for call in self.program.calls_in(loop.function):
            after = not outers and loop.function is not None and self.tree.order(call) >= end  # a method training one epoch: after its loop
            if not (after or any(self.tree.inside(call, scope) for scope in scopes)):
                continue
            target = self._called(call, loop.function)
            if target is None:
                continue
            if self._sets_rate(target):
                does = "sets the learning rate"
            elif self._saves_privately(target.body, target):
                does = "decides when to save into this process's own folder"
            else:
                continue
            own = local if self.tree.inside(call, loop.loop.body) else self._after_the_loop(loop, local - reduced)
            for argument in call.args:
                value = argument.value
                if (reads(self.tree, value, own) or _reads_dotted(self.tree, value, kept)) and self._number(value, loop.function):
                    self.plan.replace(value, cst.parse_expression(f"rank_mean({code(value)})"))
                    self.change(call, f"`{code(value)}` is this rank's own: `{code(call.func)}(...)` {does} on its mean over ranks (rank_mean), alike on every rank")
                    changed = True
        return changed

    def _sets_learning_rate(self, node: cst.If, loop: TrainLoop) -> bool:
        """`if loss.item() > prev: g["lr"] *= 0.5` (bold driver), or `if loss.item() < best:
        best_lr = lr` with `g["lr"] = best_lr / 4` after it (a range test or sweep picking a
        rate): the learning rate follows this rank's own numbers, and the ranks train apart."""
        stores = [n for n in self.program.scope_nodes(loop.function) if type(n) in (cst.Assign, cst.AugAssign) and _stores_lr(n)]
        if any(self.tree.inside(n, node.body) for n in stores):
            return True
        for call in self.tree.calls(node.body):  # `bump_lr(optimizer, 5.0)`: a same-file helper setting it
            target = self.program.callee(call, loop.function)
            if target is not None and any(type(n) in (cst.Assign, cst.AugAssign) and _stores_lr(n) for n in self.program.scope_nodes(target[0])):
                return True
        bound = {name for n in self.tree.walk(node.body) if type(n) is cst.Assign for t in n.targets for name in self.program.names_in(t.target)}
        later = [n for n in stores if self.tree.order(n) > self.tree.order(node) and not self.tree.inside(n, node)]
        return bool(bound) and any(reads(self.tree, n.value, bound) for n in later)

    def _saves_privately(self, body: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """`torch.save(model.state_dict(), os.path.join(tmp, "best.pt"))` under a test, where `tmp`
        is this process's own folder (`tempfile.mkdtemp()`): each rank saves and reads back its
        own file, so a save decided on this rank's numbers would reload different weights on
        different ranks."""
        for call in self.tree.calls(body):
            out = self.facts.outputs.of(call, function)
            if out is not None and out.kind == CHECKPOINT and out.destination is not None:
                if private_to_process(self.tree, self.program, out.destination, function):
                    return True
        return False

    def _steps_under(self, node: cst.If, loop: TrainLoop) -> bool:
        """`if seen >= tokens_per_update: optimizer.step()` in the batch loop: an optimizer step
        under a test (a token budget, skipping a batch whose loss is off): one rank stepping
        where another does not leaves the replicas apart."""
        return self.tree.inside(node, loop.loop.body) and any(
            is_optimizer_step(self.tree, self.program, c, loop.function) for c in self.tree.calls(node.body)
        )


def _own_attribute(target: cst.BaseExpression) -> str | None:
    """The attribute of `self` a store goes into: `self.history` of `self.history`, and
    `self.state` of `self.state.history["loss"]` (a nested state object)."""
    node = target
    while type(node) is cst.Subscript or (type(node) is cst.Attribute and not (type(node.value) is cst.Name and node.value.value == "self")):
        node = node.value  # type: ignore[union-attr]
    return dotted(node) if type(node) is cst.Attribute else None


def _reads_dotted(tree: Tree, node: cst.CSTNode, names: set[str]) -> bool:
    """Whether `node` reads one of the dotted `names` (`trainer.history` in `trainer.history[-1]`)."""
    return bool(names) and any(type(n) in (cst.Attribute, cst.Name) and dotted(n) in names for n in tree.walk(node))
