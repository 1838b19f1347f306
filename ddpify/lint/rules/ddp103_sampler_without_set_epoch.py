"""DDP103 sampler-without-set-epoch."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan, statements
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import facts, is_literal
from ddpify.syntax import code, dotted, method_call, string_value


@dataclass(frozen=True)
class EpochLoop:
    loop: cst.For | cst.While
    receiver: str  # what `.set_epoch(...)` is called on there
    epoch: str | None


class SamplerWithoutSetEpoch(Rule):
    """## What it does
    Flags a shuffling `DistributedSampler` (no `shuffle=False`) that feeds a training
    DataLoader when nothing calls `set_epoch` on it: neither `sampler.set_epoch(epoch)` nor
    `loader.sampler.set_epoch(epoch)`.

    A `set_epoch` call whose receiver this file cannot trace is taken to cover every sampler,
    and a sampler handed to code outside this file is left alone.

    ## Why is this bad?
    `DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and the epoch
    only changes through `set_epoch`. Without it every epoch uses the same permutation, so
    each rank sees the same shard in the same order every epoch: the data is not reshuffled
    across ranks, which quietly costs accuracy, and nothing fails.

    ## Example
    ```python
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        for x, y in loader:
            ...
    ```

    ## Use instead
    ```python
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            ...
    ```

    ## Fix safety
    Safe when exactly one loop encloses the loop over the loader (in its function, or
    around the call of that function) and that loop has an epoch counter: the fix puts
    `sampler.set_epoch(epoch)` (or `loader.sampler.set_epoch(epoch)`) first in its body.
    Otherwise no fix: which loop is the epoch is a guess.

    ## References
    - [DistributedSampler and `set_epoch`](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    - [pytorch/pytorch#31771](https://github.com/pytorch/pytorch/issues/31771): "DistributedSampler can't shuffle the dataset"
    """

    code = "DDP103"
    name = "sampler-without-set-epoch"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        f = facts(self.script)
        if not f.is_sampler_call(node) or not self._shuffles(node) or self._any_untraced_set_epoch:
            return
        loaders = [loader for loader in f.loaders_of(node) if f.is_trained_on(loader)]
        if not loaders or node in self._covered or f.escapes(node):
            return
        epoch_loop = self._epoch_loop(node)
        call = f"{epoch_loop.receiver}.set_epoch({epoch_loop.epoch})" if epoch_loop is not None else "sampler.set_epoch(epoch)"
        self.report(
            node,
            f"DistributedSampler shuffles but `set_epoch` is never called: every epoch uses the same order; call `{call}` at the start of each epoch",
            fix=(lambda plan: self._set_epoch(plan, epoch_loop)) if epoch_loop is not None else None,
        )

    def _shuffles(self, sampler: cst.Call) -> bool:
        seed = s.arg(sampler, 4, "seed")
        if seed is not None and self.tree.loops(sampler) and not isinstance(seed.value, cst.Integer):
            return False  # rebuilt every epoch with a new seed: the order changes without set_epoch
        shuffle = s.arg(sampler, 3, "shuffle")
        if shuffle is None:
            return True
        origins = facts(self.script).resolve(shuffle.value, self.tree.function(sampler))
        return not (origins and all(is_literal(o.node, "False") for o in origins))

    # --- set_epoch calls ---------------------------------------------------------------

    @cached_property
    def _set_epoch_calls(self) -> list[tuple[cst.Call, cst.BaseExpression]]:
        out = []
        for call in self.tree.calls():
            found = method_call(call)
            if found is not None and found[1] == "set_epoch":
                out.append((call, found[0]))
        return out

    def _samplers_reached(self, receiver: cst.BaseExpression, function) -> list[cst.Call] | None:
        """The DistributedSampler calls a `set_epoch` receiver stands for (None: cannot tell)."""
        f = facts(self.script)
        # loader.sampler / loader.batch_sampler.sampler / loader.batch_sampler
        base = receiver
        while isinstance(base, cst.Attribute) and base.attr.value in ("sampler", "batch_sampler"):
            base = base.value
        if base is not receiver:
            found: list[cst.Call] = []
            origins = f.resolve(base, function)
            loaders = [o.node for o in origins if self.tree.is_call_to(o.node, s.DATALOADER)]
            if not loaders:
                return None
            for loader in loaders:
                origins, complete = f.samplers(loader)
                if not complete:
                    return None
                found += [o.node for o in origins if f.is_sampler_call(o.node)]  # type: ignore[misc]
            return found
        origins = f.resolve(receiver, function)
        samplers = [o.node for o in origins if f.is_sampler_call(o.node)]
        loaders = [o.node for o in origins if self.tree.is_call_to(o.node, s.DATALOADER)]
        for loader in loaders:  # a loader-like object with its own set_epoch
            samplers += [o.node for o in f.samplers(loader)[0] if f.is_sampler_call(o.node)]
        return samplers or None  # type: ignore[return-value]

    @cached_property
    def _any_untraced_set_epoch(self) -> bool:
        if any(string_value(n) == "set_epoch" for n in self.tree.of_type(cst.SimpleString)):
            return True  # getattr(sampler, "set_epoch")(epoch), hasattr checks: called somehow
        return any(self._samplers_reached(r, self.tree.function(c)) is None for c, r in self._set_epoch_calls)

    @cached_property
    def _covered(self) -> set[cst.Call]:
        covered: set[cst.Call] = set()
        for call, receiver in self._set_epoch_calls:
            covered.update(self._samplers_reached(receiver, self.tree.function(call)) or [])
        return covered

    # --- fix ---------------------------------------------------------------------------

    def _epoch_loop(self, sampler: cst.Call) -> EpochLoop | None:
        """The one loop around the loop over the sampler's training loader, and how to
        spell the sampler and the epoch there."""
        f = facts(self.script)
        candidates: dict[int, EpochLoop] = {}
        for loader in f.loaders_of(sampler):
            for iteration in f.iterations_of(loader):
                if not iteration.training or not isinstance(iteration.node, cst.For):
                    continue
                for loop in self._enclosing(iteration.node, iteration.function, set()):
                    receiver = self._spelling(sampler, loader, loop)
                    if receiver is None:
                        return None
                    candidates[id(loop)] = EpochLoop(loop, receiver, _epoch_counter(self.tree, loop))
        if len(candidates) != 1:
            return None
        (found,) = candidates.values()
        if found.epoch is None or not isinstance(found.loop.body, cst.IndentedBlock):
            return None
        if any(self.tree.inside(built, found.loop) for built in (sampler, *f.loaders_of(sampler))):
            return None  # built anew in each epoch: the top of the loop is too early
        return found

    def _enclosing(self, node: cst.CSTNode, function, seen: set) -> list[cst.For | cst.While]:
        """The loops around `node`: in its function, or else around the calls of that function."""
        outer = [lp for lp in self.tree.loops(node) if lp is not node]
        if outer:
            return outer
        if function is None or function in seen:
            return []
        seen.add(function)
        found = []
        for call, caller in self.program.call_sites(function):
            found += self._enclosing(call, caller, seen)
        return found

    def _spelling(self, sampler: cst.Call, loader: cst.Call, loop: cst.CSTNode) -> str | None:
        """A name for the sampler, or for its loader plus `.sampler`, that is bound where `loop` runs."""
        function = self.tree.function(loop)
        for target_of, suffix in ((sampler, ""), (loader, ".sampler")):
            for name in self._names_for(target_of, function):
                return name + suffix
        return None

    def _names_for(self, call: cst.Call, function) -> list[str]:
        """Names bound where `function` runs (its locals and parameters, `self.` attributes,
        globals) whose value is `call`."""
        f = facts(self.script)
        scopes = [function] if function is not None else []
        cls = self.program.owner_class(function)
        if cls is not None:
            scopes += list(self.program.methods.get(cls, {}).values())
        candidates: dict[str, None] = {}
        for scope in [*scopes, None]:
            for node in self.program.scope_nodes(scope):
                if isinstance(node, cst.Assign):
                    for target in node.targets:
                        for name in _target_names(target.target):
                            if scope is function or name.startswith("self.") or (scope is None and "." not in name):
                                candidates[name] = None
        if function is not None:
            candidates.update(dict.fromkeys(self.program.all_param_names(function)))
        names = []
        for name in candidates:
            expr = cst.parse_expression(name)
            if any(o.node is call for o in f.resolve(expr, function)):
                names.append(name)
        return names

    def _set_epoch(self, plan: Plan, found: EpochLoop) -> str | None:
        line = f"{found.receiver}.set_epoch({found.epoch})"
        plan.prepend(found.loop.body, statements(line + "\n"))  # type: ignore[arg-type]
        return f"`{line}` at the start of each epoch"


def _target_names(target: cst.BaseExpression) -> list[str]:
    name = dotted(target)
    if name is not None:
        return [name]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    return []


def _epoch_counter(tree, loop: cst.For | cst.While) -> str | None:
    """What numbers the epochs: the loop variable, or a counter the loop increments."""
    counted = sorted(
        {
            name
            for n in tree.walk(loop.body)
            if isinstance(n, cst.AugAssign) and isinstance(n.operator, cst.AddAssign) and (name := dotted(n.target))
        }
    )
    named = next((name for name in counted if "epoch" in name), None)
    if isinstance(loop, cst.For):
        target = loop.target
        if isinstance(target, cst.Name) and target.value != "_":
            return target.value
        if isinstance(target, cst.Tuple) and target.elements and isinstance(target.elements[0].value, cst.Name):
            first = target.elements[0].value.value  # for epoch, lr in enumerate(...)
            return first if first != "_" and code(loop.iter).startswith("enumerate(") else named
        return named
    return named
