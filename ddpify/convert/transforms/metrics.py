"""Metrics accumulated over the sharded training loader are reduced over ranks before use.

Each rank sees 1/N of the training data, so `running_loss` on rank 0 describes rank 0's shard
only. Totals read after the loop are all-reduced: averaged when they are divided by per-rank
counts (`len(train_loader)`, a batch counter), summed when divided by `len(loader.dataset)`.
Python numbers travel in one float64 tensor; tensor totals are reduced in place; lists of
per-step numbers (`losses.append(loss.item())`) are gathered from every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.batches import from_batch, reads
from ddpify.analysis.splits import builds_training_split, training_split_test
from ddpify.analysis.totals import keeps_in_place, made_when_missing, restarts_inside
from ddpify.analysis.loops import TrainLoop, TrainLoops
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.program import Program
from ddpify.syntax import Tree, code, dotted, is_backward, method_call, string_value

# An increment built from these is a Python number (`loss.item()`, `y.size(0)`, `len(y)`).
NUMBER_METHODS = {"item", "size", "numel", "tolist"}
# What reads a tensor after arithmetic on it: `(loss_sum / seen).item()` says `loss_sum` is one.
TENSOR_READS = {"item", "cpu", "numpy", "tolist", "detach", "double", "float"}
NUMBER_BUILTINS = {"len", "float", "int", "sum", "round"}

# count: a Python int of samples (summed); number: a Python float ("number?": maybe a tensor by
# then, so it goes through float()); tensor: reduced in place; list: per-step values, gathered;
# dict: numbers under fixed keys (`lossbin[int(t * 10)] += loss`), reduced key by key ("dict
# count": ints counted up, `losscnt[bin] += 1`, ints again).
# meter: an object of a same-file class whose `update(value, n)` adds to its own totals
# (`self.sum += value * n; self.count += n`): those totals are summed, what update() derives
# from them (`self.avg = self.sum / self.count`) derived again.
# dict keys: numbers under keys the loop meets as it goes (`running = defaultdict(float)`,
# `running[name] += value.item()`): gathered, and added up key by key.
# array: a numpy array of counts or sums (`confusion[t, p] += 1`), reduced in place through a
# tensor that shares its memory.
# list total: a Python list of a fixed length (`inter = [0] * n_classes`, `inter[c] += hits`),
# reduced slot by slot ("list count": ints counted up, ints again).
# Metric objects that reduce over ranks themselves ("torch" covers torchmetrics, whose compute()
# syncs), or are no meters (a progress bar, a dict).
SYNCED_METERS = ("torch", "builtins.", "ignite.", "tqdm", "collections.")
Kind = Literal["count", "number", "number?", "tensor", "list", "series", "cat", "dict", "dict count", "dict keys", "list total", "list count", "meter", "meter dict", "array", "max", "min", "counter"]
NUMPY_ZEROS = {"numpy.zeros", "numpy.zeros_like"}
# a tensor made with one of these holds counts: summed over ranks
INTEGER_DTYPES = {"long", "int", "int64", "int32", "int16", "int8", "uint8"}
BINCOUNT = {"torch.bincount", "numpy.bincount", "torch.histc"}  # histograms: counts of samples
ZEROS = NUMPY_ZEROS | {"torch.zeros", "torch.zeros_like"}
ONES = {"torch.ones", "torch.ones_like"}
# reductions that keep a dimension when given one (`out.sum(0)`, `torch.mean(x, dim=0)`)
REDUCTIONS = {"sum", "mean", "nansum", "nanmean", "std", "var", "prod", "amax", "amin", "count_nonzero", "logsumexp"}
# methods that keep a tensor's shape (`.detach()`, `.cpu()`, `.float()`)
SAME_SHAPE = {"detach", "cpu", "cuda", "float", "double", "half", "to", "clone", "contiguous"}
# calls that make a tensor of the shape asked for (a meter attribute started with one holds a tensor)
TENSOR_MAKERS = {"torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like", "torch.empty", "torch.full", "torch.tensor"}
# in-place adds into a tensor, by method: where the added values are (position, keyword), and
# whether they add only with `accumulate=True` (`hist.scatter_add_(0, y, ones)`)
INPLACE_ADDS = {
    "add_": ((0, "other"), False),
    "scatter_add_": ((2, "src"), False),
    "index_add_": ((2, "source"), False),
    "index_put_": ((1, "values"), True),
    "put_": ((1, "source"), True),
}


class ReduceMetrics(Transform):
    name = "metrics"
    DESCRIPTION = "totals accumulated over the sharded loader are all-reduced before they are reported"

    def run(self) -> None:
        if not self.facts.loader_plans:
            return
        self._count_tensors: set[str] = set()
        self._run_totals: dict[int, tuple[cst.For | cst.While, TrainLoop, list[str]]] = {}
        for loop in self.facts.train_loops:
            self._warn_batch_queues(loop)
            totals = self._accumulators(loop)
            self._warn_objects_fed_by_a_pass(loop, totals, training=True)
            if totals:
                # `run_epoch(model, val_loader)` also evaluates a whole loader through the same loop
                whole = self._also_whole(loop)
                self._reduce(loop, totals, sharded=f"isinstance({self.program.sampler_owner(loop.loader, loop.function)}.sampler, DistributedSampler)" if whole else None)
        for outer, loop, names in self._run_totals.values():
            run = TrainLoop(outer, loop.loader, loop.function)
            totals = {name: kind for name, kind in self._accumulators(run, quiet=True).items() if name in names}  # said for `loop`
            if totals:
                self._reduce(run, totals)
        for loop in self._shard_passes():
            totals = self._accumulators(loop)
            if totals:
                self._reduce(loop, totals, helper=True)
            self._warn_objects_fed_by_a_pass(loop, totals)
        self._comprehensions_over_a_shard()
        self._methods_keeping_a_shard()
        for loop, every_caller_sharded in self._helper_loops():
            totals = self._accumulators(loop)
            if not totals:
                continue
            # a helper some callers hand a whole loader (`check_accuracy(test_loader)`): reduced when the loader it is given is sharded
            sharded = None if every_caller_sharded else f"isinstance({self.program.sampler_owner(loop.loader, loop.function)}.sampler, DistributedSampler)"
            self._reduce(loop, totals, helper=True, sharded=sharded)

    def _comprehensions_over_a_shard(self) -> None:
        """`feats = torch.cat([xb for xb, _ in train_loader])` (a normalizer fit by hand, here or in
        a helper handed the loader): the loader is this rank's shard now, so what it collects covers
        1/world_size of the data, and each rank's differs. Said, not changed: the fix (a loader
        without the sampler, or a gather) is the script's."""
        sharded = self.facts.sharded_loaders
        for node in self.tree.of_type(cst.CompFor):
            function = self.tree.function(node)
            iterable = self.program.unwrap_iterable(node.iter)
            loaders = self.program.dataloaders(iterable, function)
            if not loaders and type(iterable) is cst.Name and function is not None and iterable.value in self.program.param_names(function):
                for call, caller in self.program.call_sites(function):
                    argument = self.program.argument_for(call, function, iterable.value)
                    loaders += self.program.dataloaders(argument, caller) if argument is not None else []
            if not loaders or not all(id(o.node) in sharded for o in loaders):
                continue
            self.warn(node, (
                f"this comprehension goes over `{code(iterable)}`, which is this rank's shard of the data now: what it collects "
                "covers 1/world_size of it and differs per rank (a mean and std fit on it normalize each rank its own way); "
                "read the dataset itself, or a loader without the DistributedSampler"
            ))

    def _methods_keeping_a_shard(self) -> None:
        """`scaler = Scaler().fit(train_loader)`: a method of a same-file class handed the sharded
        training loader, going over it without backward() and adding its batches into the
        object's attributes (`self.total += xb.sum(0)`): they cover this rank's shard only, and
        each rank normalizes its own way. Said, not changed."""
        sharded = self.facts.sharded_loaders
        for function in self.program.all_functions:
            if self.program.owner_class(function) is None or function in self.facts.syncing:
                continue
            params = set(self.program.param_names(function))
            for node in self._passes_without_backward(function, set()):
                iterable = self.program.unwrap_iterable(node.iter)
                if not (type(iterable) is cst.Name and iterable.value in params):
                    continue
                handed = [self.program.argument_for(call, function, iterable.value) for call, _ in self.program.call_sites(function)]
                callers = [caller for _, caller in self.program.call_sites(function)]
                if not any(a is not None and (loaders := self.program.dataloaders(a, c)) and all(id(o.node) in sharded for o in loaders) for a, c in zip(handed, callers)):
                    continue
                kept = next((n for n in self.tree.walk(node.body) if type(n) is cst.AugAssign and (dotted(n.target) or "").startswith("self.")), None)
                if kept is None:
                    continue
                self.warn(node, (
                    f"`{function.name.value}` goes over `{iterable.value}`, the sharded training loader at its call: what it keeps in "
                    f"`{code(kept.target)}` covers this rank's shard only and differs per rank (a normalizer fit on it normalizes "
                    "each rank its own way); reduce it over ranks (dist.all_reduce), or hand it a loader without the DistributedSampler"
                ))
                break

    def _shard_passes(self) -> list[TrainLoop]:
        """Loops without backward() over the sharded training loader in the entry function (or
        the module): a pass before training that counts its classes or takes its mean sees this
        rank's shard only (`for _, y in train_loader: counts += torch.bincount(y)`)."""
        sharded = self.facts.split_loaders
        training = {id(loop.loop) for loop in self.facts.train_loops}
        found = []
        for function in {None, self.facts.entry.function}:
            for node in self._passes_without_backward(function, training):
                if any(self.tree.inside(node, loop.loop) for loop in self.facts.train_loops):
                    continue  # inside a training loop: its own totals are that loop's
                loaders = self.program.dataloaders(node.iter, function)
                if loaders and all(id(o.node) in sharded for o in loaders):
                    found.append(TrainLoop(node, self.program.unwrap_iterable(node.iter), function))
        return found

    def _warn_objects_fed_by_a_pass(self, loop: TrainLoop, totals: dict[str, Kind], training: bool = False) -> None:
        """`stats.push(xb.numpy())` in a pass over the sharded loader, `stats` an object of a
        class of this file made before it and read after it (a normalizer fit by hand): it keeps
        this rank's shard only, in attributes no reduction here can reach. Said, not changed (a
        meter among `totals` is reduced instead)."""
        warned: set[str] = set(totals)
        for call in self.tree.calls(loop.loop.body):
            found = method_call(call)
            if found is None or type(found[0]) is not cst.Name or found[0].value in warned or type(self.tree.parent(call)) is not cst.Expr:
                continue
            name = found[0].value
            made = [v for v in self._initial_values(loop, name) if type(v) is cst.Call]
            if not made or not all(self.program.instance_of(v, loop.function) is not None for v in made):
                continue
            if not any(self._from_batch(loop, a.value) for a in call.args) or not self._read_after(loop, name):
                continue
            warned.add(name)
            example = (
                "a metric computed from it, such as a training mAP, is this rank's; gather what it keeps over ranks "
                "(dist.all_gather_object) before reading it" if training else
                "a mean and std fit on it normalize each rank its own way; reduce its totals over ranks (dist.all_reduce), or read the dataset itself"
            )
            self.warn(call, (
                f"`{code(call.func)}(...)` feeds `{name}` this rank's shard of `{code(loop.loader)}` only: what it holds after "
                f"the pass covers 1/world_size of the data and differs per rank ({example})"
            ))

    def _passes_without_backward(self, function: cst.FunctionDef | None, training: set[int]) -> list[cst.For]:
        """The `for` loops of a scope that are no training loop and call no backward()."""
        return [
            node for node in self.program.scope_nodes(function)
            if type(node) is cst.For and id(node) not in training and not any(is_backward(c) for c in self.tree.calls(node))
        ]  # fmt: skip

    def _helper_loops(self) -> list[tuple[TrainLoop, bool]]:
        """Loops of same-file functions without backward() over a loader parameter that some
        caller fills with the sharded training loader (`check_accuracy(train_loader, model)`),
        and whether every caller does. Only functions that take part in collectives anyway (a
        forward through DDP): their calls already run on every rank, never under a rank guard."""
        sharded = self.facts.split_loaders
        training = {id(loop.loop) for loop in self.facts.train_loops}
        found = []
        for function in self.program.all_functions:
            if (function not in self.facts.syncing and not self._bound_on_every_rank(function)) or self.facts.in_dataset(function):
                continue
            params = set(self.program.param_names(function))
            for node in self._passes_without_backward(function, training):
                iterable = self.program.unwrap_iterable(node.iter)
                if not (isinstance(iterable, cst.Name) and iterable.value in params):
                    continue
                kinds = []
                for call, caller in self.program.call_sites(function):
                    argument = self.program.argument_for(call, function, iterable.value)
                    loaders = self.program.dataloaders(argument, caller) if argument is not None else []
                    kinds.append(bool(loaders) and all(id(o.node) in sharded for o in loaders) and not self._other_split(argument, caller))
                if any(kinds):
                    found.append((TrainLoop(node, iterable, function), all(kinds)))
        return found

    def _bound_on_every_rank(self, function: cst.FunctionDef) -> bool:
        """Every call of `function` is the value of an assignment straight in the entry point's
        body (`mean, std = feature_stats(train_loader)`, a statistics pass before training): it
        runs on every rank, never under a rank guard, so a reduction in it meets every rank."""
        sites = self.program.call_sites(function)
        entry = self.facts.entry
        if not sites or entry.kind == "library":
            return False
        for call, caller in sites:
            statement = self.tree.statement(call)
            if caller is not entry.function or self.tree.block(statement) is not entry.block:
                return False
            line = statement if isinstance(statement, cst.SimpleStatementLine) else None
            if line is None or len(line.body) != 1 or type(line.body[0]) is not cst.Assign or line.body[0].value is not call:
                return False
        return True

    def _also_whole(self, loop: TrainLoop) -> bool:
        """A training loop over a loader parameter that some call hands a loader it does not
        train on (`run_epoch(model, valid_loader)` with no optimizer): that loader stays whole."""
        function = self.tree.function(loop.loop)
        loader = loop.loader
        if function is None or type(loader) is not cst.Name or loader.value not in self.program.all_param_names(function):
            return False
        loops = self.program.fact(TrainLoops)
        return any(not loops.trains_at(call, function, loop) for call, _ in self.program.call_sites(function))

    def _other_split(self, argument: cst.BaseExpression, caller: cst.FunctionDef | None) -> bool:
        """`valid_loader = build_loader("valid")` from a builder whose sampler shards only the
        training split (`shuffle=mode == "train"`): a whole loader, not a shard."""
        for value, where in self._made_by(argument, caller):
            target = self.program.callee(value, where) if isinstance(value, cst.Call) else None
            if target is None:
                continue
            for node in self.tree.calls(target[0]):
                shuffle = s.arg(node, 2, "shuffle") if self.tree.is_call_to(node, s.DATALOADER) else None
                split = training_split_test(shuffle.value, self.program, target[0]) if shuffle is not None else None
                if split is not None and builds_training_split(self.program, target[0], value, split[0]) == (not split[1]):
                    return True
        return False

    def _made_by(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 3) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None]]:
        """The values a name is bound to, each with its scope, also through the callers of the
        function it is a parameter of (`train_ch3(net, train_iter, test_iter)` handed
        `test_iter = load_array(..., is_train=False)` in main(); helper corpus BG, script 05)."""
        if type(expr) is cst.Call:
            return [(expr, function)]  # `fit(net, load_array(64), load_array(32, is_train=False))`
        name = dotted(expr)
        if name is None:
            return []
        found = [(self.program.element(value, index), function) for value, index in self.program.assignments(function, name)]
        if not found and depth > 0 and function is not None and name in self.program.param_names(function):
            for call, caller in self.program.call_sites(function):
                handed = self.program.argument_for(call, function, name)
                found += self._made_by(handed, caller, depth - 1) if handed is not None else []
        return found  # type: ignore[return-value]

    # --- what is accumulated ---------------------------------------------------------

    def _accumulators(self, loop: TrainLoop, quiet: bool = False) -> dict[str, Kind]:
        """Totals built in the loop and read after it, by kind (`quiet`: without the findings on the way)."""
        warn = (lambda node, message: None) if quiet else self.warn
        added: dict[str, list[cst.BaseExpression]] = {}  # name -> increments
        appended: dict[str, list[cst.BaseExpression]] = {}  # name -> appended values
        keyed: dict[str, list[cst.BaseExpression]] = {}  # name -> increments of `name[key] += value`
        updated: set[str] = set()  # `meter.update(loss.item(), n)`
        meter_dicts: set[str] = set()  # `meters[k].update(loss.item(), n)`
        concatenated: dict[str, list[cst.BaseExpression]] = {}  # name -> tensors of `name = torch.cat([name, t])`
        class_totals: set[str] = set()  # `Stats.seen += len(x)`: said, once each
        listed: dict[str, list[cst.BaseExpression]] = {}  # name -> appended values of `name[k].append(v)`, `name.setdefault(k, []).append(v)`
        marked: set[str] = set()  # `seen[u, i] = True`
        stored: set[str] = set()  # `stats[uid] = value`
        extremes: dict[str, tuple[str, list[cst.BaseExpression], list[cst.CSTNode]]] = {}  # name -> ("max" or "min", values, where kept)
        for node in self.tree.walk(loop.loop.body):
            found_extreme = self._extreme(node)
            if found_extreme is not None:
                name, kind, values = found_extreme
                entry = extremes.setdefault(name, (kind, [], []))
                entry[1].extend(values)
                entry[2].append(node)
            if (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and isinstance(node.target, cst.Subscript)
                and isinstance(node.target.value, cst.Name)
            ):
                keyed.setdefault(node.target.value.value, []).append(node.value)  # `losscnt[bin] += 1` counts this rank's samples too
            if (
                type(node) is cst.AugAssign and type(node.operator) is cst.AddAssign and type(node.target) is cst.Attribute
                and type(node.target.value) is cst.Name and node.target.value.value in self.program.classes
                and self._from_batch(loop, node.value) and code(node.target) not in class_totals
            ):
                class_totals.add(code(node.target))
                warn(node, (
                    f"`{code(node.target)}` is a class attribute that keeps adding up this rank's shard: what it reports covers one "
                    "rank's part of the data; reduce it over ranks (dist.all_reduce) before reporting it"
                ))
            if (
                type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Subscript
                and type(node.targets[0].target.value) is cst.Name and type(node.value) in (cst.Name, cst.Integer, cst.Float)
                and code(node.value) in ("True", "1", "1.0") and self._from_batch(loop, node.targets[0].target)
            ):
                marked.add(node.targets[0].target.value.value)  # `seen[u, i] = True`: marks what this rank's batches hold
            elif (
                type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Subscript
                and type(node.targets[0].target.value) is cst.Name and self._from_batch(loop, node.targets[0].target)
                and self._from_batch(loop, node.value)
            ):
                stored.add(node.targets[0].target.value.value)  # `stats[uid] = x.mean().item()`: an entry per sample of this rank
            if type(node) is cst.Assign and len(node.targets) == 1 and (increment := _got_and_added(node)) is not None:
                keyed.setdefault(node.targets[0].target.value.value, []).append(increment)  # type: ignore[attr-defined]
            if (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and isinstance(node.target, cst.Name)
                and not isinstance(node.value, (cst.Integer, cst.Float))  # counters agree on every rank
            ):
                added.setdefault(node.target.value, []).append(node.value)
            for name, value in _assigned_pairs(node):
                increment = _added_to_itself(self.tree, value, name)  # `s = s + xb.sum(0)`: `s += xb.sum(0)`; also `s, ss = ..., ...`
                if increment is not None and not isinstance(increment, (cst.Integer, cst.Float)):
                    added.setdefault(name, []).append(increment)
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                grown = self._concatenated(node.value, node.targets[0].target.value)  # `errs = torch.cat([errs, err])`
                if grown is not None:
                    concatenated.setdefault(node.targets[0].target.value, []).append(grown)
            if type(node) is cst.Call and self.tree.qname(node.func) == "numpy.add.at" and len(node.args) == 3 and type(node.args[0].value) is cst.Name:
                if any(self._from_batch(loop, a.value) for a in node.args[1:]):
                    keyed.setdefault(node.args[0].value.value, []).append(node.args[2].value)  # `np.add.at(cm, (t, p), 1)`: like `cm[t, p] += 1`
            found = method_call(node)
            if found and found[1] in INPLACE_ADDS and type(found[0]) is cst.Name and type(self.tree.parent(node)) is cst.Expr:
                added_in_place = self._added_in_place(loop, node, found[1])  # type: ignore[arg-type]
                if added_in_place is not None:
                    keyed.setdefault(found[0].value, []).append(added_in_place)  # `seen.scatter_add_(0, y, ones)`: like `seen[y] += 1`
            if found and found[1] in ("append", "extend") and isinstance(found[0], cst.Name) and node.args:  # type: ignore[union-attr]
                appended.setdefault(found[0].value, []).append(node.args[0].value)  # type: ignore[union-attr]
            elif found and found[1] in ("append", "extend") and node.args and (holder := _list_holder(found[0])) is not None:  # type: ignore[union-attr]
                listed.setdefault(holder, []).append(node.args[0].value)  # type: ignore[union-attr]
            if found and type(found[0]) is cst.Name and (
                (found[1] == "update" and node.args and self._from_batch(loop, node.args[0].value))  # type: ignore[union-attr]
                or (found[1] == "add" and self._meter_class(loop, found[0].value) is not None)  # d2l's `metric.add(l * n, acc, n)` into an Accumulator
            ):
                updated.add(found[0].value)
            if (
                found and found[1] == "update" and type(found[0]) is cst.Subscript and type(found[0].value) is cst.Name
                and node.args and self._from_batch(loop, node.args[0].value)  # type: ignore[union-attr]
            ):
                meter_dicts.add(found[0].value.value)  # `meters[k].update(v.item(), n)`
            if (
                found and found[1] == "update" and type(found[0]) is cst.Name and node.args and self._from_batch(loop, node.args[0].value)  # type: ignore[union-attr]
                and (walked := self._walked_dict(found[0].value, node)) is not None
            ):
                meter_dicts.add(walked)  # `for t, m in meters.items(): m.update(parts[t].item(), n)` (helper corpus CB, repro 01)
        for name in [n for n in added if (initial := self._initial_values(loop, n)) and all(type(v) is cst.List and not v.elements for v in initial)]:
            for value in added.pop(name):  # `scores = []`, `scores += psnr(out, y).tolist()` (or `+= [v.item()]`): a list extended
                appended.setdefault(name, []).extend([e.value for e in value.elements] if type(value) is cst.List else [value])
        for name in [n for n, values in appended.items() if not any(self._from_batch(loop, v) for v in values)]:
            del appended[name]  # `img_list.append(netG(fixed_noise))`: the same on every rank, no shard's values
        totals: dict[str, Kind] = {}
        windows = {n for found in (added, appended, keyed, listed) for n in found if restarts_inside(self.tree, self.program, loop.loop, loop.function, n)}
        for name in [*added, *appended]:
            if name not in windows and self._across_epochs(loop, name) and self._read_after(loop, name):
                if name in appended and self._step_history(loop, name, appended[name]):
                    continue
                outer = self._read_only_after_the_run(loop, name)
                if outer is not None and name in added:
                    self._run_totals.setdefault(id(outer), (outer, loop, []))[2].append(name)  # reduced once, after the run
                    continue
                warn(loop.loop, f"`{name}` keeps adding up this rank's shard across epochs: reduce or gather it over ranks before reporting it")
        for name in sorted(marked):
            if self._initial_values(loop, name) and self._read_after(loop, name):
                warn(loop.loop, (
                    f"`{name}` marks what this rank's shard holds (`{name}[...] = ...` from its batches): after the loop it covers "
                    "1/world_size of the data and differs per rank (a filter or a decision on it differs too); take the maximum "
                    "over ranks (dist.all_reduce with ReduceOp.MAX, as a uint8 tensor) or build it from the dataset itself"
                ))
        for name in sorted(stored - marked - set(keyed)):
            if self._initial_values(loop, name) and self._read_after(loop, name):
                warn(loop.loop, (
                    f"`{name}` keeps an entry per sample of this rank's shard (`{name}[...] = ...` from its batches): after the loop "
                    "it holds 1/world_size of them, and what is written or reported from it covers one rank; gather it over ranks "
                    "(dist.all_gather_object) first"
                ))
        for name in [n for n, values in added.items() if any(self._clock(v) for v in values)]:
            del added[name]  # `total_time += time.time() - start`: this rank's own wall time, no metric
        for name in [n for n in added if n not in windows and self._declared_global(loop, n) and not self._initial_values(loop, n)]:
            warn(loop.loop, (
                f"`{name}` is a global that keeps adding up this rank's shard (`global {name}`): what it reports covers one rank's "
                "part of the data; reduce it over ranks (dist.all_reduce) before reporting it"
            ))
        for name, values in listed.items():
            if name not in windows and any(self._from_batch(loop, v) for v in values) and self._read_after(loop, name):
                warn(loop.loop, f"`{name}` collects per-step values of each rank's shard in its lists; gather them over ranks before reporting them")
        for found in (added, appended):
            for name in [n for n in found if n in windows]:
                del found[name]  # a window over the last few batches (or a deque that forgets), reported as it goes: no total
        for name, values in added.items():
            initial = self._initial_values(loop, name)
            if initial and self._read_after(loop, name):
                if all(isinstance(v, cst.Integer) for v in initial) and all(map(self._is_count, values)):
                    totals[name] = "count"  # examples seen: a sum over ranks, and an int again
                elif all(isinstance(v, (cst.Integer, cst.Float)) for v in initial):
                    # a Python number, unless an increment is a tensor: `total += loss` makes one
                    if all(map(self._is_number, values)) and not self._used_as_tensor(loop, name):
                        totals[name] = "number"
                    elif self._used_as_tensor(loop, name) or any(keeps_a_dimension(self.tree, v) for v in values):
                        # `correct += (pred == y).sum()`, then `correct.item()`; `feat_sum += out.sum(0)`: a tensor of any shape
                        totals[name] = "tensor"
                    else:
                        totals[name] = "number?"
                elif all(self.tree.is_call_to(v, NUMPY_ZEROS) for v in initial):
                    totals[name] = "array"  # `seen = np.zeros(k)`, `seen += np.bincount(y)`: reduced in place
                else:
                    totals[name] = "tensor"
                    if self._counts(initial, values):
                        self._count_tensors.add(name)  # `per_class += torch.bincount(y)`: summed
        for name, values in keyed.items():
            initial = self._initial_values(loop, name)
            starts = [self._fixed_key_values(v) for v in initial]
            if starts and all(v is not None for v in starts) and name not in windows and self._read_after(loop, name):
                ints = all(isinstance(v, cst.Integer) for start in starts for v in start)  # type: ignore[union-attr]
                counts = ints and all(isinstance(v, cst.Integer) or self._is_count(v) for v in values)
                totals[name] = "dict count" if counts else "dict"
            elif initial and all(self._numbers_list(v) is not None for v in initial) and name not in windows and self._read_after(loop, name):
                # `inter = [0] * n_classes`, `inter[c] += hits.item()`: a list of totals of a fixed length
                ints = all(isinstance(self._numbers_list(v), cst.Integer) for v in initial)
                counts = ints and all(isinstance(v, cst.Integer) or self._is_count(v) for v in values)
                totals[name] = "list count" if counts else "list total"
            elif initial and all(map(self._empty_mapping, initial)) and name not in windows and self._read_after(loop, name):
                if all(isinstance(v, (cst.Integer, cst.Float)) or self._is_number(v) for v in values):  # also `stats["batches"] += 1` (helper corpus CP, repro 02)
                    totals[name] = "dict keys"  # keys met as the loop goes (`running[k] += v.item()`)
            elif initial and all(self.tree.is_call_to(v, ZEROS) for v in initial) and name not in windows and self._read_after(loop, name):
                # `confusion = np.zeros((k, k))`, `confusion[t, p] += 1`: reduced in place
                totals[name] = "array" if all(self.tree.is_call_to(v, NUMPY_ZEROS) for v in initial) else "tensor"
                if totals[name] == "tensor" and self._counts(initial, values):
                    self._count_tensors.add(name)
        for name, (kind, values, kept) in extremes.items():
            initial = self._initial_values(loop, name)
            if not (initial and all(map(_a_number, initial)) and name not in added and self._read_after(loop, name)) or not any(self._from_batch(loop, v) for v in values):
                continue
            if self._set_otherwise(loop, name, kept):
                continue  # started again inside the loop: a window over the last few batches
            others = _kept_beside(name, kept)
            if others:
                warn(loop.loop, (
                    f"`{name}` keeps the running {'maximum' if kind == 'max' else 'minimum'} of this rank's shard, and {', '.join(f'`{o}`' for o in others)} "
                    f"with it: after the loop they cover one rank's part of the data; take the {kind} over ranks with what goes with it "
                    "(dist.all_gather_object) before reporting them"
                ))
                continue
            totals[name] = kind  # type: ignore[assignment]
        for name in sorted(updated, key=lambda n: n):
            if not self._read_after(loop, name):
                continue
            if self._counter(loop, name) is not None:
                totals[name] = "counter"  # `counts = Counter()`, `counts.update(pred.tolist())`: gathered, added up (helper corpus AT, repro 03)
                continue
            if self._meter_class(loop, name) is not None:
                totals[name] = "meter"
                continue
            running = self._running_meter(loop, name)
            if running is not None:
                warn(loop.loop, (
                    f"`{name}` keeps a running statistic in update() (`{code(running)}` reads its own state), not totals: what it "
                    "reports covers this rank's shard only, and a sum over ranks would be no mean; reduce what it is made from by hand"
                ))
                continue
            initial = self._initial_values(loop, name)
            made = initial[0].func if len(initial) == 1 and type(initial[0]) is cst.Call else None
            if made is not None and self.tree.qname(made) is not None and not self.tree.qname(made).startswith(SYNCED_METERS):  # type: ignore[union-attr]
                warn(loop.loop, (
                    f"`{name}` (`{code(made)}(...)`) comes from a module ddpify cannot read here: what it totals through update() covers this "
                    f"rank's shard only; reduce its totals over ranks (dist.all_reduce) before reporting them or deciding on them"
                ))
        for name in sorted(meter_dicts):
            if self._meter_dict_class(loop, name) is not None and self._read_after(loop, name):
                totals[name] = "meter dict"
            elif self._read_after(loop, name) and (made := self._meters_per_key_met(loop, name)) is not None:
                warn(loop.loop, (  # torchvision detection's `defaultdict(SmoothedValue)` (helper corpus BY, repro 01)
                    f"`{name}` (`{code(made)}`) makes a meter for each key the loop meets: what they total covers this rank's shard "
                    "only, and the keys may differ per rank; gather each meter's totals over ranks (dist.all_gather_object) before reporting them"
                ))
        for name, values in concatenated.items():
            if not (self._initial_values(loop, name) and self._read_after(loop, name)) or not any(self._from_batch(loop, v) for v in values):
                continue
            if self._numpy_grown(loop, name) or all(self._on_the_cpu(v) or self._on_the_cpu_by_name(v, loop.function) for v in values):
                totals[name] = "cat"  # tensors on the CPU (or numpy arrays), grown along dim 0: gathered and joined
            else:
                warn(loop.loop, f"`{name}` collects per-step values on each rank's shard; gather them over ranks before reporting them")
        unpaired: list[str] = []
        for name, values in appended.items():
            initial = self._initial_values(loop, name)
            if not (initial and all(isinstance(v, cst.List) and not v.elements for v in initial) and self._read_after(loop, name)):
                continue
            if loop.consumed_by == "next" and all(map(self._is_number, values)):
                totals[name] = "series"  # a step loop: every rank takes as many steps as one process did
            elif all(self._is_number(v) or self._on_the_cpu(v) or self._on_the_cpu_by_name(v, loop.function, loop) for v in values):
                totals[name] = "list"  # numbers, or arrays and tensors on the CPU: gathered as objects
            else:
                warn(loop.loop, f"`{name}` collects per-step values on each rank's shard; gather them over ranks before reporting them")
                unpaired.append(name)
        gathered = [name for name, kind in totals.items() if kind in ("list", "cat")]
        if unpaired and gathered:  # rows and labels collected side by side stay paired: gathered alike, or neither
            for name in gathered:
                del totals[name]
                warn(loop.loop, (
                    f"`{name}` is collected beside {', '.join(f'`{n}`' for n in unpaired)}, which ddpify cannot gather (tensors that may be on a GPU): "
                    f"neither is gathered, so they stay paired; gather them all over ranks (as CPU tensors) before reporting them"
                ))
        return totals

    def _counter(self, loop: TrainLoop, name: str) -> str | None:
        """`name = Counter()` started for the pass: the class as the script spells it."""
        initial = self._initial_values(loop, name)
        if len(initial) == 1 and self.tree.is_call_to(initial[0], {"collections.Counter"}) and not initial[0].args:  # type: ignore[union-attr]
            return code(initial[0].func)  # type: ignore[union-attr]
        return None

    def _meter_class(self, loop: TrainLoop, name: str) -> tuple[Program, cst.ClassDef] | None:
        """The meter class `name` is made from before the loop (each pass of the loop around it
        starts a new one)."""
        initial = self._initial_values(loop, name)
        return self._meter_of(initial[0]) if len(initial) == 1 else None

    def _meter_of(self, made: cst.CSTNode) -> tuple[Program, cst.ClassDef] | None:
        """The class a call makes, when its update() adds to totals of its own: a class of this
        file, or of one of the script's own modules beside it (`from utils import AverageMeter`),
        with the program that defines it."""
        found = self._update_of(made)
        if found is None or not (_meter_totals(found[0], found[2]) or _meter_lists(found[0], found[2])) or _running_statistic(found[0], found[2]) is not None:
            return None  # `self.mean += (v - self.mean) * k / self.n`: no total, a sum over ranks of it is no mean
        return found[0], found[1]

    def _update_of(self, made: cst.CSTNode) -> tuple[Program, cst.ClassDef, cst.FunctionDef] | None:
        """The update() of the class a call makes (of this file or a module beside it)."""
        if type(made) is not cst.Call:
            return None
        func = made.func
        if type(func) is cst.Name and func.value in self.program.classes:
            found: tuple[Program, cst.ClassDef] | None = (self.program, self.program.classes[func.value])
        else:
            found = self.program.companion_class(self.tree.qname(func))
        methods = found[0].class_methods(found[1]) if found is not None else {}
        update = _update_method(methods)
        return (found[0], found[1], update) if found is not None and update is not None else None

    def _running_meter(self, loop: TrainLoop, name: str) -> cst.CSTNode | None:
        """The update() line of a meter class that folds each value into a running statistic
        (`self.mean += (value - self.mean) * k / self.n`, Welford's M2)."""
        initial = self._initial_values(loop, name)
        found = self._update_of(initial[0]) if len(initial) == 1 else None
        return _running_statistic(found[0], found[2]) if found is not None else None

    def _meter_lines(self, loop: TrainLoop, name: str) -> list[str]:
        """The meter's totals summed over ranks (counts as ints again), then what update() derives
        from them alone, assigned again (`meter.avg = meter.sum / meter.count`)."""
        found = self._meter_class(loop, name)
        assert found is not None
        return self._meter_reduction(*found, name, loop.function, self._update_calls(loop, name))

    def _update_calls(self, loop: TrainLoop, name: str) -> list[cst.Call]:
        """`name.update(...)`, `name[k].update(...)` and `m.update(...)` under `for k, m in name.items():` in the loop."""
        found = []
        for call in self.tree.calls(loop.loop.body):
            method = method_call(call)
            if method is None or method[1] not in UPDATES:
                continue
            obj = method[0].value if type(method[0]) is cst.Subscript else method[0]
            if type(obj) is cst.Name and (obj.value == name or self._walked_dict(obj.value, call) == name):
                found.append(call)
        return found

    def _walked_dict(self, meter: str, at: cst.CSTNode) -> str | None:
        """The dict whose values a loop around `at` binds to `meter`: `for k, m in meters.items():`
        or `for m in meters.values():`."""
        for loop in self.tree.loops(at):
            if type(loop) is not cst.For:
                continue
            found = method_call(loop.iter)
            if found is None or type(found[0]) is not cst.Name or found[1] not in ("items", "values"):
                continue
            target = loop.target.elements[-1].value if found[1] == "items" and type(loop.target) is cst.Tuple and loop.target.elements else loop.target
            if type(target) is cst.Name and target.value == meter:
                return found[0].value
        return None

    def _meters_per_key_met(self, loop: TrainLoop, name: str) -> cst.Call | None:
        """`meters = defaultdict(SmoothedValue)` before the loop, a meter class of this file or one beside it."""
        initial = self._initial_values(loop, name)
        made = initial[0] if len(initial) == 1 else None
        if not (type(made) is cst.Call and self.tree.is_call_to(made, {"collections.defaultdict"}) and len(made.args) == 1):
            return None
        return made if self._meter_of(cst.Call(func=made.args[0].value)) is not None else None

    def _meter_dict_class(self, loop: TrainLoop, name: str) -> tuple[Program, cst.ClassDef] | None:
        """`meters = {k: AverageMeter() for k in ["cls", "reg"]}` (or the dict written out) before
        the loop: a meter per fixed key (the same keys, in the same order, on every rank)."""
        initial = self._initial_values(loop, name)
        if len(initial) == 1 and type(initial[0]) is cst.List and initial[0].elements:
            # `[AverageMeter(), AverageMeter()]`: a meter per fixed position
            found = [self._meter_of(e.value) for e in initial[0].elements]
            return found[0] if found[0] is not None and all(f == found[0] for f in found) else None
        if len(initial) == 1 and type(initial[0]) is cst.ListComp:
            return self._meter_of(initial[0].elt)  # `[AverageMeter() for _ in range(2)]`
        if len(initial) == 1 and type(initial[0]) is cst.Dict and initial[0].elements:
            # `{"loss": AverageMeter(), "acc": AverageMeter()}`: fixed keys written out
            elements = initial[0].elements
            if not all(type(e) is cst.DictElement and type(e.key) is cst.SimpleString for e in elements):
                return None
            found = [self._meter_of(e.value) for e in elements]  # type: ignore[union-attr]
            return found[0] if found[0] is not None and all(f == found[0] for f in found) else None
        if len(initial) != 1 or type(initial[0]) is not cst.DictComp:
            return None
        keys = initial[0].for_in.iter  # written out, or a name or config entry bound to keys written out (`CFG["loss_w"]`: helper corpus BZ, repro 03)
        if not self._constant_keys(keys, loop.function):
            return None
        return self._meter_of(initial[0].value)

    def _meter_reduction(self, program: Program, cls: cst.ClassDef, name: str, function: cst.FunctionDef | None, fed: list[cst.Call]) -> list[str]:
        """`fed`: the update() calls of the loop, whose arguments may be tensors with a dimension."""
        methods = program.class_methods(cls)
        update = _update_method(methods)
        assert update is not None
        attributes = _meter_totals(program, update)
        lists = _meter_lists(program, update)
        starts = {}
        for method in (methods.get("__init__"), methods.get("reset")):
            for a in attributes:
                for value, index in program.assignments(method, f"self.{a}") if method is not None else []:
                    starts[a] = program.element(value, index)
        arrays = [a for a in attributes if (start := starts.get(a)) is not None and program.tree.is_call_to(start, NUMPY_ZEROS)]  # `self.buf = np.zeros(n)`
        tensors = [a for a in attributes if a not in arrays and self._meter_tensor(program, update, a, starts.get(a), fed)]
        numbers = [a for a in attributes if a not in tensors and a not in arrays]
        lines = []
        if numbers:
            tensor = self._free(function, f"{name}_totals", f"reduced_{name}")
            lines += [
                f"{tensor} = torch.tensor([{', '.join(f'{name}.{a}' for a in numbers)}], dtype=torch.float64)",
                f"dist.all_reduce({tensor})",
            ]
            counts = _meter_counts(program, update, numbers, fed)
            for i, a in enumerate(numbers):
                value = f"{tensor}[{i}].item()"
                lines.append(f"{name}.{a} = int({value})" if isinstance(starts.get(a), cst.Integer) and a in counts else f"{name}.{a} = {value}")
        lines += [f"dist.all_reduce({name}.{a})  # a tensor: summed in place" for a in tensors]
        lines += [f"dist.all_reduce(torch.from_numpy({name}.{a}))  # in place: the tensor shares the array's memory" for a in arrays]
        for a in lists:  # `self.data = [a + float(b) for a, b in zip(self.data, args)]`: a list of totals
            tensor = self._free(function, f"{name}_{a}", f"reduced_{name}_{a}")
            lines += [f"{tensor} = torch.tensor({name}.{a}, dtype=torch.float64)", f"dist.all_reduce({tensor})", f"{name}.{a} = {tensor}.tolist()"]
        tree = program.tree
        for node in program.scope_nodes(update):
            if type(node) is not cst.Assign or len(node.targets) != 1 or (target := dotted(node.targets[0].target)) is None or not target.startswith("self."):
                continue
            attributes_read = [dotted(n) for n in tree.walk(node.value) if type(n) is cst.Attribute]
            names = {
                n.value for n in tree.walk(node.value)
                if type(n) is cst.Name and not (type(parent := tree.parent(n)) is cst.Attribute and parent.attr is n)
            } - {"self", "max", "min", "float", "int", "round"}  # fmt: skip
            if not names and attributes_read and all(r is not None and r.startswith("self.") and r[5:] in attributes for r in attributes_read):
                lines.append(f"{name}.{target[5:]} = {code(node.value).replace('self.', f'{name}.')}")
        return lines

    def _meter_tensor(self, program: Program, update: cst.FunctionDef, attribute: str, start: cst.CSTNode | None, fed: list[cst.Call]) -> bool:
        """A meter total that holds a tensor: started as one (`self.sum = torch.zeros(dim)`), or
        added to with one that keeps a dimension (`self.sum += f.sum(0)`, or `self.sum += val * n`
        with `meter.update(out.mean(0), n)`). A number packs with the others; a tensor is reduced
        in place (packed, it would not convert to a number)."""
        tree = program.tree
        if start is not None and type(start) is cst.Call and tree.qname(start.func) in TENSOR_MAKERS:
            return True
        if type(start) is cst.Name and start.value == "None":
            return True  # `self.sum = None`, made from the first update's tensor (`v.detach() * n`)
        made = [program.element(v, i) for v, i in program.assignments(update, f"self.{attribute}")]
        if any(type(v) is cst.Call and tree.qname(v.func) in TENSOR_MAKERS for v in made):
            return True  # `if self.mat is None: self.mat = torch.zeros((n, n), ...)` at the first update (torchvision's ConfusionMatrix: helper corpus BN, repro 02)
        increments = [added[1] for n in program.scope_nodes(update) if (added := _added_to(n)) is not None and dotted(added[0]) == f"self.{attribute}"]
        if any(keeps_a_dimension(tree, v) for v in increments):
            return True
        params = [p.name.value for p in update.params.params][1:]  # after self
        vectors = set()
        for call in fed:
            for position, argument in enumerate(call.args):
                if not keeps_a_dimension(self.tree, argument.value):
                    continue
                if argument.keyword is not None:
                    vectors.add(argument.keyword.value)
                elif position < len(params):
                    vectors.add(params[position])
        return any(reads(tree, v, vectors) for v in increments)

    def _step_history(self, loop: TrainLoop, name: str, values: list[cst.BaseExpression]) -> bool:
        """`G_losses = []` before the epochs, `G_losses.append(errG.item())` at each step, read
        once training is over (a plot, a mean): every rank runs as many steps, so the history
        becomes the mean over ranks step by step, gathered once after the outermost loop it grows
        in. Emitted here; False when the shape is not that one (then a warning)."""
        mean = "[sum(step) / len(step) for step in zip(*{g})]"
        records = lambda v: (type(v) is cst.Dict and all(type(e) is cst.DictElement for e in v.elements)) or (  # noqa: E731
            (self.tree.is_builtin_call(v, "dict") or self.tree.is_call_to(v, {"collections.OrderedDict"}))
            and (all(a.keyword is not None for a in v.args) or _key_pairs(v.args))  # `dict(step=s, loss=l)` (helper corpus BW, repro 08; `OrderedDict(...)`, BZ repro 01)
        )
        if values and all(map(records, values)):
            # `history.append({"step": global_step, "loss": loss.item()})`: the floats averaged, the rest (counters) as they are
            mean = "[{{k: sum(d[k] for d in step) / len(step) if isinstance(v, float) else v for k, v in step[0].items()}} for step in zip(*{g})]"
        elif any(type(v) in (cst.Dict, cst.Tuple, cst.List, cst.Set) or self.tree.is_builtin_call(v, "dict") or self.tree.is_call_to(v, {"collections.OrderedDict"}) for v in values) or not all(map(self._is_number, values)):
            return False  # records of another shape: a tuple, a list
        elif any((m := method_call(v)) is not None and m[1] == "tolist" for v in values):
            return False  # `per_sample.detach().cpu().tolist()`: a list a step, not a number (helper corpus CH, repro 05)
        starts = [self.program.element(v, i) for v, i in self.program.assignments(loop.function, name) if self.tree.order(v) < self.tree.order(loop.loop)]
        if len(starts) != 1 or not (isinstance(starts[0], cst.List) and not starts[0].elements):
            return False
        around = [lp for lp in self.tree.loops(loop.loop) if self.tree.function(lp) is loop.function and not self.tree.inside(starts[0], lp)]
        if not around:
            return False
        outer = around[-1]
        end = self.tree.last_line(outer)
        reads = [n for n in self.program.scope_nodes(loop.function) if type(n) is cst.Name and n.value == name and not self._is_target(n)]
        # `print(np.mean(losses[-len(loader):]))` after each epoch's steps (helper corpus CC, repro 03): read
        # in the loop, so gathered there, after each epoch's training loop; the steps gathered before are alike
        # on every rank by then, and stay so
        each_epoch = [n for n in reads if self.tree.inside(n, outer) and self.tree.line(n) > self.tree.last_line(loop.loop)]
        if each_epoch and (len(around) > 1 or self.tree.parent(loop.loop) is not outer.body):
            return False
        if not (each_epoch or any(self.tree.line(n) > end for n in reads)) or not isinstance(self.tree.parent(outer), (cst.IndentedBlock, cst.Module)):
            return False
        function = loop.function
        lines = [
            f"# Each rank recorded its own steps: `{name}` becomes the mean over ranks, step by step.",
            *self._gathered(function, name, mean),
        ]
        self.plan.insert_after(loop.loop if each_epoch else outer, statements("\n".join(lines) + "\n"))
        if each_epoch:
            self.change(loop.loop, f"`{name}` (a value per step, on each rank's shard) is averaged over ranks step by step after each epoch's steps, where it is read")
            return True
        self.change(outer, f"`{name}` (a value per step, on each rank's shard) is averaged over ranks step by step once the loop ends")
        return True

    def _warn_batch_queues(self, loop: TrainLoop) -> None:
        """`queue[ptr:ptr + n] = k` in the training loop, where `queue` is made before it and read
        by the loss (MoCo's queue of negative keys as a plain tensor): each rank stores only its
        own batches' keys, so the ranks train against different queues, refreshed world_size
        times more slowly. Warned about: the fix (gather the keys first) is the script's."""
        start = self.tree.order(loop.loop)
        for node in self.tree.walk(loop.loop.body):
            if self._kept_by_object(loop, node):
                return
            if type(node) is not cst.Assign or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if type(target) is cst.Name and self._kept_window(node.value, target.value):
                held = target  # `mem = torch.cat([mem, emb.detach()])[-K:]`: a queue kept by rebinding (XBM)
            elif type(target) is cst.Subscript and type(target.value) is cst.Name:
                held = target.value
            else:
                continue
            made = [v for v, _ in self.program.assignments(loop.function, held.value) if self.tree.order(v) < start]
            if not made or not any(type(c) is cst.Call and self.tree.qname(c.func) in s.TENSOR_FACTORIES for v in made for c in self.tree.walk(v)):
                continue
            if not self._from_batch(loop, node.value):
                continue
            self.warn(node, (
                f"`{held.value}` keeps values of this rank's batches from step to step (a queue of keys): each rank stores only its "
                f"own shard's, so the ranks train against different `{held.value}`; gather the values over ranks (dist.all_gather) before storing them"
            ))
            return

    def _kept_by_object(self, loop: TrainLoop, node: cst.CSTNode) -> bool:
        """`bank.update(feat, idx)` where a same-file class keeps what it is handed in place
        (`self.memory.index_copy_(...)`) and the step reads `bank` before (`logits = bank(feat)`):
        NPID's memory bank as a module buffer (helper corpus BB, repro 09). Warned, as a queue is."""
        found = method_call(node)
        if found is None or type(found[0]) is not cst.Name or found[1].endswith("_") or not keeps_in_place(self.program, found, loop.function):
            return False
        assert type(node) is cst.Call
        if not any(self._from_batch(loop, a.value) for a in node.args):
            return False
        name = found[0].value
        read = any(
            type(n) is cst.Assign and self.tree.order(n) < self.tree.order(node) and any(type(m) is cst.Name and m.value == name for m in self.tree.walk(n.value))
            for n in self.tree.walk(loop.loop.body)
        )
        if not read:
            return False  # a confusion matrix filled from the batch: a metric, not what the step trains against
        self.warn(node, (
            f"`{name}` keeps values of this rank's batches from step to step (`{code(node.func)}`, a memory bank): each rank stores only "
            f"its own shard's, so the ranks train against different `{name}`; gather the values over ranks (dist.all_gather) before storing them"
        ))
        return True

    def _kept_window(self, value: cst.BaseExpression, name: str) -> bool:
        """`torch.cat([name, new])[-K:]` (or `[:K]`): `name` grown by new values and cut to a size."""
        if type(value) is not cst.Subscript or len(value.slice) != 1 or type(value.slice[0].slice) is not cst.Slice:
            return False
        return self._concatenated(value.value, name) is not None or self._concatenated_first(value.value, name)

    def _concatenated_first(self, value: cst.BaseExpression, name: str) -> bool:
        """`torch.cat([new, name])`: new values put in front."""
        if not self.tree.is_call_to(value, {"torch.cat"}) or not value.args or type(value.args[0].value) not in (cst.List, cst.Tuple):  # type: ignore[union-attr]
            return False
        pieces = value.args[0].value.elements  # type: ignore[union-attr]
        return len(pieces) == 2 and type(pieces[1].value) is cst.Name and pieces[1].value.value == name

    def _extreme(self, node: cst.CSTNode) -> tuple[str, str, list[cst.BaseExpression]] | None:
        """A running maximum or minimum kept in a name: `m = max(m, v)` (or min, either order), or
        `if v > m: m = v`. The name, "max" or "min", and the values (`v`)."""
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name and type(node.value) is cst.Call:
            name = node.targets[0].target.value
            kind = self.tree.qname(node.value.func)
            args = node.value.args
            if kind in ("builtins.max", "builtins.min") and len(args) >= 2 and not any(a.keyword or a.star for a in args):
                sides = [code(a.value) for a in args]
                if sides.count(name) == 1:  # also `lo = min(lo, xb.min().item(), yb.min().item())` (helper corpus CT, repro 01)
                    return name, kind[9:], [a.value for a in args if code(a.value) != name]
            return None
        if type(node) is not cst.If or node.orelse is not None or type(node.test) is not cst.Comparison or len(node.test.comparisons) != 1:
            return None
        left, comparison = node.test.left, node.test.comparisons[0]
        operator = type(comparison.operator)
        if operator not in (cst.GreaterThan, cst.GreaterThanEqual, cst.LessThan, cst.LessThanEqual):
            return None
        greater = operator in (cst.GreaterThan, cst.GreaterThanEqual)
        for kept, value, kind in ((comparison.comparator, left, "max" if greater else "min"), (left, comparison.comparator, "min" if greater else "max")):
            if type(kept) is not cst.Name:
                continue
            lines = getattr(node.body, "body", ())
            if not all(type(line) is cst.SimpleStatementLine and all(type(small) is cst.Assign for small in line.body) for line in lines):
                return None  # `if acc > best: best = acc; torch.save(...)`: a best model kept, no running statistic
            assigned = [small for line in lines for small in line.body if len(small.targets) == 1 and code(small.targets[0].target) == kept.value]
            if assigned and all(code(a.value) == code(value) for a in assigned):
                return kept.value, kind, [value]
        return None

    def _set_otherwise(self, loop: TrainLoop, name: str, kept: list[cst.CSTNode]) -> bool:
        """`name` is bound in the loop other than where it keeps its extreme (`m = 0.0` every 100 steps)."""
        keeping = {id(n) for node in kept for n in self.tree.walk(node) if type(n) is cst.Assign}
        return any(
            self.tree.inside(value, loop.loop.body) and not any(id(a) in keeping for a in self.tree.ancestors(value))
            for value, _ in self.program.assignments(loop.function, name)
        )

    def _from_batch(self, loop: TrainLoop, value: cst.CSTNode) -> bool:
        """Something of this rank's batch, or what another module computed over the sharded
        loader it was handed (`evaluate(model, train_loader)`: unreduced), directly or through
        the last assignment in the loop of a name `value` reads."""
        return from_batch(self.tree, self.program, loop.loop, loop.function, value, also=lambda node: self._over_a_loader(loop, node))

    def _over_a_loader(self, loop: TrainLoop, value: cst.CSTNode) -> bool:
        """`evaluate(model, train_loader)` from another module: a loader handed to it."""
        for node in self.tree.walk(value):
            arg = self.tree.parent(node) if isinstance(node, cst.Name) else None
            call = self.tree.parent(arg) if isinstance(arg, cst.Arg) else None
            if isinstance(call, cst.Call) and self.program.callee(call, loop.function) is None and self.program.dataloaders(node, loop.function):
                return True
        return False

    def _initial_values(self, loop: TrainLoop, name: str) -> list[cst.CSTNode]:
        """The values a total starts from before the loop, when it starts again with every pass of
        the loop around it (an epoch's total): one that keeps growing across epochs would be
        reduced again each epoch, its earlier epochs counted world-size times over."""
        start = self.tree.positions[loop.loop].start.line
        outer = [lp for lp in self.tree.loops(loop.loop) if lp is not loop.loop and self.tree.function(lp) is loop.function]
        values = []
        reset = bool(outer) and self._reset_each_pass(loop, outer[0], name)
        bound = [(v, i) for v, i in self.program.assignments(loop.function, name) if self.tree.line(v) < start]
        if outer and any(self.tree.inside(v, outer[0]) for v, _ in bound):  # `totals = torch.zeros_like(totals)` at the top of each pass
            bound = [(v, i) for v, i in bound if self.tree.inside(v, outer[0])]
        for value, index in bound:
            if self.tree.line(value) >= start:
                continue
            if outer and not self.tree.inside(value, outer[0]) and not reset:
                return []  # set once, before the loop around the training loop: a running history
            values.append(self.program.element(value, index))
        if values and all(type(v) is cst.Name and v.value == "None" for v in values):
            # `sums = None`, then `if sums is None: sums = torch.zeros(...)` at the first batch: that is where it starts
            made = [self.program.element(v, i) for v, i in self.program.assignments(loop.function, name) if self.tree.inside(v, loop.loop) and made_when_missing(self.tree, v, name)]
            return made or values
        return values

    def _reset_each_pass(self, loop: TrainLoop, outer: cst.For | cst.While, name: str) -> bool:
        """`total.zero_()` (or `fill_(0)`) in the loop around the training loop, outside it: made
        once before, started again for every pass, like a total bound at the top of each pass."""
        for call in self.tree.calls(outer.body):
            found = method_call(call)
            if found is None or type(found[0]) is not cst.Name or found[0].value != name or self.tree.inside(call, loop.loop):
                continue  # before the training loop (`totals.fill_(0.0)` at the top of the epoch) or after it
            if found[1] == "zero_" or (found[1] in ("fill_", "mul_") and call.args and code(call.args[0].value) in ("0", "0.0")):
                return True  # `total.zero_()`, `fill_(0.0)`, `mul_(0)`
            if found[1] == "reset" and not call.args:
                return True  # `metric.reset()` of a meter made once before the epochs (helper corpus AW, repro 01)
        return False

    def _empty_mapping(self, value: cst.CSTNode) -> bool:
        """`defaultdict(float)`, `defaultdict(int)`, `{}` or `dict()`: keys come as the loop meets them."""
        if isinstance(value, cst.Dict):
            return not value.elements
        if not isinstance(value, cst.Call):
            return False
        if self.tree.is_builtin_call(value, "dict"):
            return not value.args
        return self.tree.is_call_to(value, {"collections.defaultdict"}) and len(value.args) == 1 and code(value.args[0].value) in ("float", "int")

    def _fixed_key_values(self, value: cst.CSTNode) -> list[cst.BaseExpression] | None:
        """The starting numbers of a dict with the same keys on every rank, in the same order
        (`{i: 0 for i in range(10)}`, `{"real": 0.0, "fake": 0.0}`); None for any other value."""
        numbers = (cst.Integer, cst.Float)
        if isinstance(value, cst.DictComp):
            comp = value.for_in
            fixed = comp.inner_for_in is None and not comp.ifs and self._constant_keys(comp.iter, self.tree.function(value))
            return [value.value] if fixed and isinstance(value.value, numbers) else None
        if type(value) is cst.Call and dotted(value.func) == "dict.fromkeys" and len(value.args) == 2 and isinstance(value.args[1].value, numbers):
            # `dict.fromkeys(TASKS, 0.0)`
            return [value.args[1].value] if self._constant_keys(value.args[0].value, self.tree.function(value)) else None
        if isinstance(value, cst.Dict) and value.elements and all(
            isinstance(e, cst.DictElement) and isinstance(e.key, (cst.Integer, cst.SimpleString)) and isinstance(e.value, numbers)
            for e in value.elements
        ):
            return [e.value for e in value.elements]  # type: ignore[union-attr]
        return None

    def _numbers_list(self, value: cst.CSTNode) -> cst.BaseExpression | None:
        """The starting number of a list of one number per slot, its length fixed alike on every
        rank: `[0] * n`, `[0.0 for _ in range(n)]`."""
        numbers = (cst.Integer, cst.Float)
        if type(value) is cst.BinaryOperation and type(value.operator) is cst.Multiply and type(value.left) is cst.List:
            elements = value.left.elements
            return elements[0].value if len(elements) == 1 and isinstance(elements[0].value, numbers) else None
        if self.tree.is_builtin_call(value, "list") and len(value.args) == 1 and type(value.args[0].value) is cst.GeneratorExp:  # type: ignore[attr-defined]
            value = value.args[0].value  # type: ignore[attr-defined]  # `list(0. for i in range(C))`, the CIFAR tutorial's
        if type(value) in (cst.ListComp, cst.GeneratorExp) and value.for_in.inner_for_in is None and not value.for_in.ifs and self.tree.is_builtin_call(value.for_in.iter, "range"):  # type: ignore[attr-defined]
            return value.elt if isinstance(value.elt, numbers) else None  # type: ignore[attr-defined]
        return None

    def _constant_number(self, value: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """An int literal, or a name bound only to one (in the function, else the module)."""
        if type(value) is cst.Integer:
            return True
        if type(value) is not cst.Name:
            return False
        scope = function if function is not None and self.program.assignments(function, value.value) else None
        values = [self.program.element(v, i) for v, i in self.program.assignments(scope, value.value)]
        return bool(values) and all(type(v) is cst.Integer for v in values)

    def _constant_keys(self, keys: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 2) -> bool:
        """Keys written out, the same in the same order on every rank: `range(10)`, a list, tuple
        or dict literal of numbers and strings (not a set: strings hash per process), its
        `.keys()`, or a name bound only to one (`TASKS = {"a": 2, "b": 3}` at module level)."""
        if self.tree.is_builtin_call(keys, "range"):  # `range(10)`, `range(C)` with `C = 3`
            return all(self._constant_number(a.value, function) for a in keys.args)  # type: ignore[attr-defined]
        constant = (cst.Integer, cst.SimpleString)
        if type(keys) in (cst.List, cst.Tuple):
            return bool(keys.elements) and all(type(e) is cst.Element and isinstance(e.value, constant) for e in keys.elements)  # type: ignore[attr-defined]
        if type(keys) is cst.Dict:
            return bool(keys.elements) and all(type(e) is cst.DictElement and isinstance(e.key, constant) for e in keys.elements)
        found = method_call(keys)
        if found is not None and found[1] == "keys" and not keys.args:  # type: ignore[attr-defined]
            return self._constant_keys(found[0], function, depth)
        if found is not None and found[1] == "split" and all(isinstance(a.value, cst.SimpleString) for a in keys.args):  # type: ignore[attr-defined]
            # `args.terms.split(",")` of parsed options, or of a string written out (helper corpus CB, repro 01)
            root = found[0]
            while type(root) is cst.Attribute:
                root = root.value
            return type(found[0]) is cst.SimpleString or (
                type(found[0]) is cst.Attribute and type(root) is cst.Name and function is not None and self.program.parsed_options(root.value, function)
            )
        if type(keys) is cst.Name and depth > 0:
            scope = function if function is not None and self.program.assignments(function, keys.value) else None
            values = [v for v, i in self.program.assignments(scope, keys.value) if i is None]
            return bool(values) and all(self._constant_keys(v, scope, depth - 1) for v in values)
        if type(keys) is cst.Subscript and type(keys.value) is cst.Name and len(keys.slice) == 1 and depth > 0:
            # `CFG["loss_w"]` of a config dict written out (`CFG = {"loss_w": {"hm": 1.0, "wh": 0.1}}`; helper corpus BY, repro 02)
            key = keys.slice[0].slice.value if type(keys.slice[0].slice) is cst.Index else None
            scope = function if function is not None and self.program.assignments(function, keys.value.value) else None
            values = [v for v, i in self.program.assignments(scope, keys.value.value) if i is None]
            entries = [
                e.value for v in values if type(v) is cst.Dict for e in v.elements
                if type(e) is cst.DictElement and key is not None and string_value(e.key) is not None and string_value(e.key) == string_value(key)
            ]
            return len(values) == 1 and len(entries) == 1 and self._constant_keys(entries[0], scope, depth - 1)
        return False

    def _clock(self, value: cst.BaseExpression) -> bool:
        return any(isinstance(n, cst.Call) and (self.tree.qname(n.func) or "").startswith(("time.", "timeit.", "datetime.")) for n in self.tree.walk(value))

    def _read_only_after_the_run(self, loop: TrainLoop, name: str) -> cst.For | cst.While | None:
        """The outermost loop around the training loop when `name` is read only after it ends
        (`seen_per_class` summed over every epoch, reported once at the end): a total of the
        whole run, reduced once after it."""
        outer = [lp for lp in self.tree.loops(loop.loop) if lp is not loop.loop and self.tree.function(lp) is loop.function]
        if not outer:
            return None
        run = outer[-1]
        end = self.tree.order(run) + sum(1 for _ in self.tree.walk(run))
        reads = [n for n in self.program.scope_nodes(loop.function) if type(n) is cst.Name and n.value == name and not self._is_target(n)]
        later = [n for n in reads if self.tree.order(n) > self.tree.order(loop.loop) and not self.tree.inside(n, loop.loop)]
        return run if later and all(self.tree.order(n) >= end for n in later) else None

    def _across_epochs(self, loop: TrainLoop, name: str) -> bool:
        """Set before the loop around the training loop, and never again in it: a running history."""
        outer = [lp for lp in self.tree.loops(loop.loop) if lp is not loop.loop and self.tree.function(lp) is loop.function]
        if not outer:
            return False
        start = self.tree.positions[loop.loop].start.line
        values = [v for v, _ in self.program.assignments(loop.function, name) if self.tree.line(v) < start]
        return bool(values) and not any(self.tree.inside(v, outer[0]) for v in values) and not self._reset_each_pass(loop, outer[0], name)

    def _declared_global(self, loop: TrainLoop, name: str) -> bool:
        """`global samples_seen` in the function of the loop."""
        return loop.function is not None and any(
            type(node) is cst.Global and any(n.name.value == name for n in node.names) for node in self.program.scope_nodes(loop.function)
        )

    def _read_after(self, loop: TrainLoop, name: str, derived: bool = True) -> bool:
        """The script reads `name` after the loop, or (`derived`) a value computed from it at each
        step (`epoch_loss = running_loss / dataset_size` for a progress bar, returned after the loop)."""
        end = self.tree.last_line(_steps(loop))
        return any(
            isinstance(n, cst.Name) and n.value == name and self.tree.line(n) > end and not self._is_target(n)
            for n in self.program.scope_nodes(loop.function)
        ) or (derived and bool(self._derived_in_loop(loop, {name})))

    def _derived_in_loop(self, loop: TrainLoop, names: set[str]) -> list[cst.SimpleStatementLine]:
        """Lines of the loop's body that compute a value from the totals `names` alone
        (`epoch_loss = running_loss / dataset_size`), read after the loop and bound nowhere else:
        computed again once the totals are reduced (Kaggle's tqdm loops; helper corpus BP, repro 01)."""
        found = []
        added = {n.target.value for n in self.tree.walk(loop.loop.body) if type(n) is cst.AugAssign and type(n.target) is cst.Name}
        for node in self.tree.walk(loop.loop.body):
            if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                continue
            target = node.targets[0].target.value
            read = {n.value for n in self.tree.walk(node.value) if type(n) is cst.Name}
            line = self.tree.parent(node)
            if not read & names or next(iter(self.tree.calls(node.value)), None) is not None or type(line) is not cst.SimpleStatementLine or len(line.body) != 1:
                continue
            if target in names or len(self.program.assignments(loop.function, target)) != 1 or not self._read_after(loop, target, derived=False):
                continue
            if any(r not in names | added and self.program.binds(loop.function, r) for r in read):
                continue  # `acc = correct / x.size(0)`: also a value of the step
            found.append(line)
        return found

    def _added_in_place(self, loop: TrainLoop, call: cst.Call, method: str) -> cst.BaseExpression | None:
        """What an in-place add from this rank's batch adds (`src` of `seen.scatter_add_(0, y,
        src)`, `values` of `cm.index_put_((t, p), values, accumulate=True)`), or None."""
        where, accumulating = INPLACE_ADDS[method]
        if accumulating:
            flag = s.arg(call, None, "accumulate")
            if flag is None or not (type(flag.value) is cst.Name and flag.value.value == "True"):
                return None  # index_put_ without accumulate: it sets, it does not add
        added = s.arg(call, *where)
        if added is None or not any(self._from_batch(loop, a.value) for a in call.args):
            return None
        return added.value

    def _used_as_tensor(self, loop: TrainLoop, name: str) -> bool:
        """`name.double()`, `name.item()`, `(name / seen).item()`...: after the loop the script reads
        it as a tensor (`loss_sum += loss.detach() * x.size(0)`, kept on the device to spare a sync
        per step: helper corpus BL, repro 04)."""
        end = self.tree.last_line(_steps(loop))
        for n in self.program.scope_nodes(loop.function):
            if type(n) is not cst.Name or n.value != name or self.tree.line(n) <= end:
                continue
            child: cst.CSTNode = n
            parent = self.tree.parent(n)
            while type(parent) in (cst.BinaryOperation, cst.UnaryOperation):  # `(loss_sum / seen)`: arithmetic on it, then read
                child, parent = parent, self.tree.parent(parent)
            if type(parent) is cst.Attribute and parent.value is child and (child is n or parent.attr.value in TENSOR_READS):
                return True
        return False

    def _counts(self, initial: list[cst.BaseExpression], values: list[cst.BaseExpression]) -> bool:
        """A tensor of counts: made with an integer dtype (`torch.zeros(k, dtype=torch.long)`),
        or added to only by counts (`torch.bincount(y)`, `+= 1`, `(pred == y).sum()`, a same-file
        helper returning a bincount). Counts are summed over ranks, never averaged."""
        dtypes = [s.arg(v, None, "dtype") for v in initial if type(v) is cst.Call]
        if dtypes and all(d is not None and (dotted(d.value) or string_value(d.value) or "").rsplit(".", 1)[-1] in INTEGER_DTYPES for d in dtypes):
            return True
        return bool(values) and all(self._a_count(v) for v in values)

    def _a_count(self, node: cst.BaseExpression, depth: int = 1) -> bool:
        if type(node) is cst.Integer or self._is_count(node) or self.tree.is_call_to(node, ONES):
            return True  # `torch.ones_like(y)` added at the labels: one per sample
        if type(node) is cst.Name and depth > 0:  # `b = torch.bincount(pred, minlength=k)`, then `hist = b if hist is None else hist + b` (helper corpus CS, repro 03)
            bound = [value for value, index in self.program.assignments(self.tree.function(node), node.value) if index is None]
            return bool(bound) and all(self._a_count(value, depth - 1) for value in bound)
        if any(type(n) is cst.Call and (self.tree.qname(n.func) in BINCOUNT or (method_call(n) or (None, ""))[1] == "bincount") for n in self.tree.walk(node)):
            return True
        found = method_call(node)
        if found is not None and found[1] == "sum" and _a_mask(found[0]):
            return True  # `(pred == y).sum()`
        if depth > 0 and type(node) is cst.Call:
            target = self.program.callee(node, self.tree.function(node))
            returned = self.program.returns(target[0]) if target is not None else []
            return bool(returned) and all(self._a_count(value, depth - 1) for value in returned)
        return False

    def _is_count(self, node: cst.BaseExpression, depth: int = 1) -> bool:
        """`x.size(0)`, `x.shape[0]`, `len(x)`, `x.numel()`: how many samples; and how many hits,
        `int(mask.sum())` or `(pred == y).sum().item()`; an int made from a number of samples
        (`int(0.75 * len(y))`), also through a name bound to one (`n_keep`: helper corpus CO, repro 05)."""
        if _sizes(node):
            return True
        if self.tree.is_builtin_call(node, "int") and node.args and any(_sizes(n) for n in self.tree.walk(node.args[0].value)):  # type: ignore[union-attr]
            return True
        if depth > 0 and type(node) is cst.Name:
            values = [self.program.element(v, i) for v, i in self.program.assignments(self.tree.function(node), node.value)]
            return bool(values) and all(isinstance(v, cst.BaseExpression) and self._is_count(v, depth - 1) for v in values)
        found = method_call(node)
        if found and found[1] == "item" and self.tree.is_call_to(found[0], {"torch.count_nonzero"}):
            return True  # `torch.count_nonzero(pred == y).item()`
        if found and found[1] == "item" and (inner := method_call(found[0])) is not None and inner[1] in ("sum", "count_nonzero") and _a_mask(inner[0]):
            return True  # `(pred == y).sum().item()`
        if self.tree.is_builtin_call(node, "int") and node.args and (inner := method_call(node.args[0].value)) is not None and inner[1] == "sum":  # type: ignore[union-attr]
            return True  # `int(mask.sum())`
        return False

    def _is_number(self, node: cst.BaseExpression, depth: int = 2) -> bool:
        if self._is_count(node):
            return True
        for n in self.tree.walk(node):
            found = method_call(n)
            if found and found[1] in NUMBER_METHODS:
                return True
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in NUMBER_BUILTINS:
                return True
        if depth > 0 and type(node) is cst.Call:  # `losses.append(train_step(batch))`, which returns `loss.item()`
            target = self.program.callee(node, self.tree.function(node))
            returned = self.program.returns(target[0]) if target is not None else []
            return bool(returned) and all(self._is_number(value, depth - 1) for value in returned)
        if depth > 0 and type(node) is cst.Name:  # `smoothed = avg / (1 - beta ** i)`, `avg = ... + loss.item()`
            function = self.tree.function(node)
            values = [self.program.element(v, i) for v, i in self.program.assignments(function, node.value)]
            values = [v for v in values if type(v) not in (cst.Integer, cst.Float)]  # a start (`avg = 0.0`) says nothing
            return bool(values) and all(
                self._is_number(value, depth - 1)
                or any(type(n) is cst.Name and n.value != node.value and self._is_number(n, depth - 1) for n in self.tree.walk(value))
                for value in values
            )
        return False

    def _on_the_cpu(self, node: cst.BaseExpression) -> bool:
        """`logits.argmax(1).numpy()`, `preds.cpu()`, `y.detach().cpu().numpy()`: a value on the CPU,
        which `all_gather_object` carries as it is (a CUDA tensor would unpickle onto another GPU)."""
        found = method_call(node)
        return found is not None and found[1] in ("numpy", "cpu") and not node.args  # type: ignore[union-attr]

    def _concatenated(self, value: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
        """`torch.cat([name, t])` (or a tuple, along dim 0; or numpy's `np.concatenate([name, a])`):
        the tensor `t` that grows `name`; `np.append(name, a)` flattens both, as a concatenation does 1-D arrays."""
        if self.tree.is_call_to(value, {"numpy.append"}):
            args = value.args  # type: ignore[attr-defined]
            if len(args) == 2 and not any(a.keyword or a.star for a in args) and code(args[0].value) == name:
                return args[1].value
            return None
        if not self.tree.is_call_to(value, {"torch.cat", "numpy.concatenate"}) or not value.args:  # type: ignore[union-attr]
            return None
        if any(a.keyword is not None and a.keyword.value in ("dim", "axis") and code(a.value) != "0" for a in value.args) or len(value.args) > 1 and value.args[1].keyword is None and code(value.args[1].value) != "0":  # type: ignore[union-attr]
            return None
        pieces = value.args[0].value  # type: ignore[union-attr]
        if type(pieces) not in (cst.List, cst.Tuple) or len(pieces.elements) != 2:
            return None
        first, second = (e.value for e in pieces.elements)
        return second if type(first) is cst.Name and first.value == name else None

    def _numpy_grown(self, loop: TrainLoop, name: str) -> str | None:
        """`name = np.concatenate([name, a])` in the loop: numpy's concatenate as the script spells it."""
        for node in self.tree.walk(loop.loop.body):
            if type(node) is cst.Assign and len(node.targets) == 1 and code(node.targets[0].target) == name and self.tree.is_call_to(node.value, {"numpy.concatenate", "numpy.append"}):
                return code(node.value.func).rsplit(".", 1)[0] + ".concatenate"  # type: ignore[attr-defined]
        return None

    def _on_the_cpu_by_name(self, node: cst.BaseExpression, function: cst.FunctionDef | None, loop: TrainLoop | None = None) -> bool:
        """A name bound, in the loop's function, only to values on the CPU (`err = (...).cpu()`),
        or a name of the batch the loop's loader gives that nothing moves (`labels.append(y)`
        after `for x, y in loader:`): a DataLoader yields CPU tensors."""
        if type(node) is not cst.Name:
            return False
        values = [self.program.element(v, i) for v, i in self.program.assignments(function, node.value)]
        if not values and loop is not None and type(loop.loop) is cst.For and loop.consumed_by == "for":
            return node.value in self.program.names_in(loop.loop.target)
        return bool(values) and all(self._on_the_cpu(v) for v in values)

    def _is_target(self, name: cst.Name) -> bool:
        parent = self.tree.parent(name)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is name):
            return True
        return isinstance(parent, (cst.Element, cst.Tuple)) and any(isinstance(a, cst.AssignTarget) for a in self.tree.ancestors(name))

    # --- the reduction -----------------------------------------------------------------

    def _reduce(self, loop: TrainLoop, totals: dict[str, Kind], helper: bool = False, sharded: str | None = None) -> None:
        function = loop.function
        of_kind = {kind: [name for name, k in totals.items() if k == kind] for kind in ("count", "number", "number?", "tensor")}
        numbers = [name for name, kind in totals.items() if kind in ("count", "number", "number?")]  # in the script's order
        summed = {name for name in totals if totals[name] in ("meter", "meter dict") or self._summed(loop, name, totals)}
        reduced = numbers + of_kind["tensor"] + [name for name, kind in totals.items() if kind.startswith(("dict", "meter", "list ")) or kind == "array"]
        extremes = [name for name, kind in totals.items() if kind in ("max", "min")]
        how = "sum" if set(reduced) <= summed else "average" if not summed & set(reduced) else "sum or average"
        what = f"{how} the totals" if reduced else "gather the values"
        if extremes:
            what = f"{what}, and take the extremes" if reduced or len(extremes) < len(totals) else "take the extremes"
        # after the loop they are every rank's: reduced, or (under `sharded`) over a whole loader each rank went through
        self.plan.reduced.setdefault(id(loop.loop), set()).update(totals)
        lines = [f"# Each rank {'went over' if helper else 'trained on'} its own shard of the data: {what} over ranks."]
        if numbers:
            tensor = self._free(function, "totals", "reduced_totals", "rank_totals")
            values = ", ".join(f"float({n})" if totals[n] == "number?" else n for n in numbers)
            lines += [f"{tensor} = torch.tensor([{values}], dtype=torch.float64)", f"dist.all_reduce({tensor})"]
            lines += self._unpack(tensor, numbers, totals, summed, function)
        for name in extremes:
            tensor = self._free(function, f"{name}_over_ranks", f"reduced_{name}")
            lines += [
                f"{tensor} = torch.tensor([float({name})], dtype=torch.float64)",
                f"dist.all_reduce({tensor}, op=dist.ReduceOp.{totals[name].upper()})",
                f"{name} = {tensor}.item()",
            ]
        for name in [n for n, kind in totals.items() if kind == "dict keys"]:
            gathered = self._free(function, f"{name}_by_rank", f"gathered_{name}")
            keys = self._free(function, f"{name}_keys", f"keys_of_{name}")
            scale = "" if name in summed else f" / {self.world_size(function)}"
            lines += [
                f"{gathered} = [None] * {self.world_size(function)}",
                f"dist.all_gather_object({gathered}, dict({name}))",
                f"{keys} = dict.fromkeys(key for totals in {gathered} for key in totals)  # every rank's keys, in order",
                f"{name} = {{key: sum(totals.get(key, 0) for totals in {gathered}){scale} for key in {keys}}}",
            ]
        for name in [n for n, kind in totals.items() if kind in ("dict", "dict count")]:
            tensor = self._free(function, f"{name}_totals", f"reduced_{name}")
            values = f"{tensor}.tolist()" if name in summed else f"({tensor} / {self.world_size(function)}).tolist()"
            lines += [
                f"{tensor} = torch.tensor([float(value) for value in {name}.values()], dtype=torch.float64)",
                f"dist.all_reduce({tensor})",
                f"{name} = {{key: int(value) for key, value in zip({name}, {values})}}" if totals[name] == "dict count" and name in summed
                else f"{name} = dict(zip({name}, {values}))",
            ]
        for name in [n for n, kind in totals.items() if kind in ("list total", "list count")]:
            tensor = self._free(function, f"{name}_totals", f"reduced_{name}")
            lines += [f"{tensor} = torch.tensor([float(value) for value in {name}], dtype=torch.float64)", f"dist.all_reduce({tensor})"]
            if name not in summed:
                lines.append(f"{name} = ({tensor} / {self.world_size(function)}).tolist()")
            else:
                lines.append(f"{name} = [int(value) for value in {tensor}.tolist()]" if totals[name] == "list count" else f"{name} = {tensor}.tolist()")
        for name in [n for n, kind in totals.items() if kind == "meter"]:
            lines += self._meter_lines(loop, name)
        for name in [n for n, kind in totals.items() if kind == "meter dict"]:
            found = self._meter_dict_class(loop, name)
            assert found is not None
            meter = self._free(function, "meter", f"{name}_meter")
            if type(self._initial_values(loop, name)[0]) in (cst.List, cst.ListComp):
                lines.append(f"for {meter} in {name}:  # made alike on every rank: reduced in the same order")
            else:
                lines.append(f"for {meter} in {name}.values():  # made from the same keys on every rank: reduced in the same order")
            lines += [f"    {line}" for line in self._meter_reduction(*found, meter, function, self._update_calls(loop, name))]
        for name in [n for n, kind in totals.items() if kind == "array"]:
            lines.append(f"dist.all_reduce(torch.from_numpy({name}))  # in place: the tensor shares the array's memory")
            if name not in summed:
                lines.append(f"{name} = {name} / {self.world_size(function)}")
        for name in of_kind["tensor"]:
            lines.append(f"dist.all_reduce({name})")
            if name not in summed:  # not in place: an integer tensor (a count of hits) divides into floats
                lines.append(f"{name} = {name} / {self.world_size(function)}")
        joins = {
            # a value per step of a step loop (an LR range test's losses, walked with its `lrs` by index)
            "series": "[sum(step) / len(step) for step in zip(*{g})]  # the mean over ranks, step by step",
            "cat": "torch.cat({g})",
            "list": "[value for values in {g} for value in values]",
        }
        for name in [n for n, k in totals.items() if k == "counter"]:
            lines += self._gathered(function, name, f"sum({{g}}, {self._counter(loop, name)}())  # every rank's counts, added up")
        for kind, join in joins.items():
            for name in [n for n, k in totals.items() if k == kind]:
                numpy = self._numpy_grown(loop, name) if kind == "cat" else None
                lines += self._gathered(function, name, join if numpy is None else f"{numpy}({{g}})")
        for derived in self._derived_in_loop(loop, set(totals)):
            lines.append(f"{code(derived).strip()}  # again, from the totals over ranks")  # `epoch_loss = running_loss / dataset_size` (tqdm style)
        listed = ", ".join(f"`{t}`" for t in totals)
        done = "gathered from every rank" if not reduced else f"all-reduced ({how} over ranks)"
        if extremes:
            done = f"{done}, the running maxima and minima taken over ranks" if reduced or len(extremes) < len(totals) else "taken over ranks (max or min)"
        if sharded is not None:
            comment = lines[0].replace("# Each rank", f"# When `{code(loop.loader)}` is sharded, each rank", 1)
            lines = [comment, f"if {sharded}:", *(f"    {line}" for line in lines[1:])]
            self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
            self.change(loop.loop, f"{listed} {done} after the loop when the loader it is given is sharded (a whole loader, such as a test set, is left as it is)")
        else:
            self.change(loop.loop, f"{listed} {done} after the loop: each rank saw only its shard")
        if isinstance(loop.loop.orelse, cst.Else):  # `for ...: ... else:` reports in its `else`: reduced first
            self.plan.prepend(loop.loop.orelse.body, statements("\n".join(lines) + "\n"))
        else:
            self.plan.insert_after(loop.loop, statements("\n".join(lines) + "\n"))

    def _summed(self, loop: TrainLoop, name: str, totals: dict[str, Kind]) -> bool:
        """Sums and counts are summed over ranks; a total divided by a per-rank count (batches,
        `len(loader)`, a constant) is an average and is averaged. `correct / total` sums both,
        whatever `total` counts (samples, or `+= batch_size`)."""
        start = self.tree.order(loop.loop)
        modes = set()
        aliases = {name} | self._values_of(loop, name)
        derived = [n for line in self._derived_in_loop(loop, set(totals)) for n in self.tree.walk(line)]  # computed again after the loop
        for node in self.program.scope_nodes(loop.function) + derived:
            if (self.tree.order(node) <= start or self.tree.inside(node, _steps(loop))) and node not in derived:
                continue  # only what runs after the loop's steps (its `else` too)
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
                divided, denominator = node.left, node.right
                if type(divided) is cst.BinaryOperation and type(divided.operator) is cst.Divide:
                    continue  # `sum_nll / seen / math.log(2)`: a ratio scaled; the ratio itself decides
            elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign):
                divided, denominator = node.target, node.value  # `epoch_loss /= len(train_set)`
            else:
                continue
            if any(isinstance(n, cst.Name) and n.value == name for n in self.tree.walk(denominator)) and any(
                isinstance(n, cst.Name) and n.value in totals and n.value != name for n in self.tree.walk(divided)
            ):
                modes.add("sum")  # `total_loss / total_num`: the count a ratio of totals divides by is summed too
            if _numerator_names(self.tree, divided) & aliases:
                by_total = any(isinstance(n, cst.Name) and n.value in totals for n in self.tree.walk(denominator))
                by_dataset = self.facts.counts_whole_dataset(denominator, loop.function) or self.facts.sizes_data(denominator, loop)
                modes.add("sum" if by_dataset or by_total else "average")
        if not modes:  # an array or tensor of counts (a confusion matrix) is summed
            return totals[name] in ("count", "dict count", "list count", "array") or name in self._count_tensors
        return modes == {"sum"}

    def _values_of(self, loop: TrainLoop, name: str) -> set[str]:
        """The names a loop or comprehension after the training loop binds to a dict's values
        (`for k, v in sums.items()`, `for v in sums.values()`): `v / n` divides a total of it."""
        found: set[str] = set()
        end = self.tree.order(loop.loop)
        for node in self.program.scope_nodes(loop.function):
            if type(node) not in (cst.For, cst.CompFor) or self.tree.order(node) <= end or self.tree.inside(node, _steps(loop)):
                continue
            method = method_call(node.iter)  # type: ignore[attr-defined]
            if method is None or type(method[0]) is not cst.Name or method[0].value != name or method[1] not in ("items", "values"):
                continue
            target = node.target  # type: ignore[attr-defined]
            if method[1] == "items" and type(target) is cst.Tuple and len(target.elements) == 2:
                target = target.elements[1].value
            found |= {n.value for n in self.tree.walk(target) if type(n) is cst.Name}
        return found

    def _unpack(self, tensor: str, numbers: list[str], totals: dict[str, Kind], summed: set[str], function) -> list[str]:
        """The reduced totals back into the script's names: counts as ints, sums or averages."""
        averaged = [n for n in numbers if n not in summed]
        ints = [n for n in numbers if totals[n] == "count"]
        if len(numbers) == 1:
            (name,) = numbers
            value = f"({tensor} / {self.world_size(function)}).item()" if averaged else f"{tensor}.item()"
            return [f"{name} = int({value})" if ints else f"{name} = {value}"]
        if not ints and len(averaged) in (0, len(numbers)):
            divided = f"({tensor} / {self.world_size(function)})" if averaged else tensor
            return [f"{', '.join(numbers)} = {divided}.tolist()"]
        lines = []
        for i, name in enumerate(numbers):
            value = f"{tensor}[{i}].item()" + (f" / {self.world_size(function)}" if name in averaged else "")
            lines.append(f"{name} = int({value})" if name in ints else f"{name} = {value}")
        return lines

    def _gathered(self, function: cst.FunctionDef | None, name: str, join: str) -> list[str]:
        """`name` gathered from every rank as an object, then joined (`join`, with `{g}` for the
        ranks' values) back into `name`."""
        gathered = self._free(function, "gathered", "gathered_values", "all_ranks")
        return [
            f"{gathered} = [None] * {self.world_size(function)}",
            f"dist.all_gather_object({gathered}, {name})",
            f"{name} = " + join.format(g=gathered),
        ]

    def _free(self, function: cst.FunctionDef | None, *names: str) -> str:
        return next(n for n in names if not self.program.binds(function, n))


def _numerator_names(tree: Tree, expr: cst.CSTNode) -> set[str]:
    """The names `expr` reads, less those it divides by (`seen` of `sum_nll / seen`): in `sum_nll /
    seen / math.log(2)`, `seen` is a denominator, not what is averaged."""
    if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Divide:
        return _numerator_names(tree, expr.left)
    if type(expr) is cst.Name:
        return {expr.value}
    return set().union(*(_numerator_names(tree, child) for child in tree.children(expr))) if tree.children(expr) else set()


def _a_mask(node: cst.BaseExpression) -> bool:
    """A boolean mask: a comparison, or comparisons joined by `&`, `|`, `~` (`(pred == c) & (y == c)`)."""
    if type(node) is cst.Comparison:
        return True
    if type(node) is cst.BinaryOperation and type(node.operator) in (cst.BitAnd, cst.BitOr):
        return _a_mask(node.left) and _a_mask(node.right)
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.BitInvert:
        return _a_mask(node.expression)
    return False


def _sizes(node: cst.BaseExpression) -> bool:
    """`f.size(0)`, `len(f)`, `f.shape[0]`, `f.numel()`: a number of samples, an int."""
    found = method_call(node)
    if found is not None and found[1] in ("size", "numel"):
        return True
    if type(node) is cst.Subscript and type(node.value) is cst.Attribute and node.value.attr.value == "shape":
        return True
    return type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "len"


def _assigned_pairs(node: cst.CSTNode) -> list[tuple[str, cst.BaseExpression]]:
    """The plain names an assignment binds with their values: `s = v`, and `s, ss = v, w` element
    by element (Program's reading of assignment targets)."""
    if type(node) is not cst.Assign or len(node.targets) != 1:
        return []
    return [
        (name, Program.element(node.value, index))  # type: ignore[misc]
        for name, index in Program.targets(node.targets[0].target)
        if "." not in name and (index is None or type(node.value) is cst.Tuple)
    ]


def _grown_branch(value: cst.BaseExpression, name: str) -> cst.BaseExpression:
    """Of `x if name is None else name + x` (or the `is not None` order), the branch that adds to
    `name`: a total made at its first update; any other value as it is."""
    if type(value) is cst.IfExp and type(value.test) is cst.Comparison and name:
        if code(value.test) == f"{name} is None":
            return value.orelse
        if code(value.test) == f"{name} is not None":
            return value.body
    return value


def _added_to_itself(tree: Tree, value: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
    """What `name = name + x` (or `x + name`, `torch.add(name, x)`) adds: `x`; not a running
    average, whose step reads `name` again (`avg = avg + (x - avg) / n`)."""
    value = _grown_branch(value, name)  # `sums = x if sums is None else sums + x`: a total made at its first batch (helper corpus CP, repro 08)
    if type(value) is cst.Call and tree.qname(value.func) == "torch.add" and len(value.args) == 2 and not any(a.keyword for a in value.args):
        left, right = value.args[0].value, value.args[1].value
    elif type(value) is cst.BinaryOperation and type(value.operator) is cst.Add:
        left, right = value.left, value.right
    else:
        return None
    if type(left) is cst.Name and left.value == name:
        added = right
    elif type(right) is cst.Name and right.value == name:
        added = left
    else:
        return None
    return None if reads(tree, added, {name}) else added


def keeps_a_dimension(tree: Tree, node: cst.BaseExpression) -> bool:
    """A tensor reduced along one dimension, not to a number (`out.detach().sum(0)`,
    `torch.mean(x, dim=0)`, `f.sum(0).cpu()`): a total of it is a vector."""
    while (found := method_call(node)) is not None and found[1] in SAME_SHAPE:
        node = found[0]
    if type(node) is not cst.Call:
        return False
    found = method_call(node)
    if found is not None and found[1] in REDUCTIONS and not (tree.qname(node.func) or "").startswith(("torch.", "numpy.")):
        return bool(node.args) and (node.args[0].keyword is None or node.args[0].keyword.value in ("dim", "axis"))
    name = tree.qname(node.func) or ""
    if name.startswith("torch.") and name[6:] in REDUCTIONS:
        return len(node.args) > 1 and (node.args[1].keyword is None or node.args[1].keyword.value in ("dim", "axis"))
    return False


def _meter_totals(program: Program, update: cst.FunctionDef) -> list[str]:
    """The attributes update() adds to (`self.sum += val * n`, or `self.sum = self.sum + val * n`), in its order."""
    found = []
    for node in program.scope_nodes(update):
        if (added := _added_to(node)) is not None and (target := dotted(added[0])) is not None:
            if target.startswith("self.") and target.count(".") == 1 and target[5:] not in found:
                found.append(target[5:])
    return found


# The method a meter or totals class is fed through: `meter.update(v, n)`, d2l's `metric.add(*args)`.
UPDATES = ("update", "add")


def _update_method(methods: dict[str, cst.FunctionDef]) -> cst.FunctionDef | None:
    return next((methods[name] for name in UPDATES if name in methods), None)


def _meter_lists(program: Program, update: cst.FunctionDef) -> list[str]:
    """The list attributes update() adds to slot by slot: d2l's Accumulator, `self.data = [a +
    float(b) for a, b in zip(self.data, args)]`."""
    found = []
    tree = program.tree
    for node in program.scope_nodes(update):
        if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.value) is not cst.ListComp:
            continue
        target, comp = dotted(node.targets[0].target) or "", node.value
        if not target.startswith("self.") or target.count(".") != 1 or comp.for_in.inner_for_in is not None or comp.for_in.ifs:
            continue
        zipped = comp.for_in.iter
        if not (type(zipped) is cst.Call and tree.qname(zipped.func) == "builtins.zip" and zipped.args and dotted(zipped.args[0].value) == target):
            continue
        names = [n.value for n in tree.walk(comp.for_in.target) if type(n) is cst.Name]
        if type(comp.elt) is cst.BinaryOperation and type(comp.elt.operator) is cst.Add and dotted(comp.elt.left) == names[0] and target[5:] not in found:
            found.append(target[5:])
    return found


def _added_to(node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(target, increment) of `t += v` or `t = t + v`, also made at the first update (`t = v if t
    is None else t + v`: a Meter whose sum starts as None, helper corpus CS, repro 03)."""
    if type(node) is cst.AugAssign and type(node.operator) is cst.AddAssign:
        return node.target, node.value
    if type(node) is not cst.Assign or len(node.targets) != 1:
        return None
    target = node.targets[0].target
    value = _grown_branch(node.value, dotted(target) or "")
    if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add and dotted(value.left) is not None and dotted(value.left) == dotted(target):
        return target, value.right
    return None


def _running_statistic(program: Program, update: cst.FunctionDef) -> cst.CSTNode | None:
    """An increment in update() that reads the object's own state (`self.mean += (v - self.mean)
    * k / self.n`, or `self.avg = self.avg + (v - self.avg) * k / self.n`): a running statistic,
    which no sum over ranks reproduces."""
    cls = program.owner_class(update)
    changing = {  # what the object changes after it is made (`self.mat`), not what `__init__` fixes (`self.n`, helper corpus BY, repro 05)
        target
        for method in (program.class_methods(cls).values() if cls is not None else [update])
        if method.name.value != "__init__"
        for node in program.scope_nodes(method)
        if type(node) in (cst.Assign, cst.AugAssign)
        for stored in ([t.target for t in node.targets] if type(node) is cst.Assign else [node.target])  # type: ignore[union-attr]
        if (target := dotted(stored)) is not None
    }
    for node in program.scope_nodes(update):
        if (added := _added_to(node)) is None or not (dotted(added[0]) or "").startswith("self."):
            continue
        if any(type(n) is cst.Attribute and dotted(n) in changing for n in program.tree.walk(added[1])):
            return node
    return None


def _meter_counts(program: Program, update: cst.FunctionDef, attributes: list[str], fed: Sequence[cst.Call] = ()) -> set[str]:
    """The totals update() counts with whole numbers: `self.count += n` (n defaults to an int, or
    every `fed` call hands it a size, `meter.update(loss, len(y))`) or `+= 1`; `self.sum += val *
    n` is a float even when it starts from 0."""
    defaults = {p.name.value for p in update.params.params if isinstance(p.default, cst.Integer)}
    params = [p.name.value for p in update.params.params][1:]  # after self
    for i, name in enumerate(params):
        handed = [a.value for call in fed for a in (s.arg(call, i, name),) if a is not None]
        if fed and len(handed) == len(fed) and all(isinstance(v, cst.Integer) or _sizes(v) for v in handed):
            defaults.add(name)
    counts = set()
    for a in attributes:
        increments = [added[1] for node in program.scope_nodes(update) if (added := _added_to(node)) is not None and dotted(added[0]) == f"self.{a}"]
        if increments and all(isinstance(v, cst.Integer) or (type(v) is cst.Name and v.value in defaults) or _sizes(v) for v in increments):
            counts.add(a)
    return counts


def _list_holder(obj: cst.BaseExpression) -> str | None:
    """`logs` of `logs["loss"].append(v)` and of `logs.setdefault("loss", []).append(v)`: a dict of lists."""
    if type(obj) is cst.Subscript and type(obj.value) is cst.Name:
        return obj.value.value
    found = method_call(obj)
    if found is not None and found[1] == "setdefault" and type(found[0]) is cst.Name:
        return found[0].value
    return None


def _steps(loop: TrainLoop) -> cst.CSTNode:
    """What runs at each step: the loop's body (a `for ... else:` runs its `else` after them)."""
    return loop.loop.body if isinstance(loop.loop.orelse, cst.Else) else loop.loop


def _got_and_added(node: cst.Assign) -> cst.BaseExpression | None:
    """`totals[k] = totals.get(k, 0.0) + v.item()` (detection-style loss dicts): `totals[k] +=`
    spelled for a key that may be new; the value added."""
    target = node.targets[0].target
    value = node.value
    if type(target) is not cst.Subscript or type(target.value) is not cst.Name or type(value) is not cst.BinaryOperation or type(value.operator) is not cst.Add:
        return None
    for got, added in ((value.left, value.right), (value.right, value.left)):
        found = method_call(got)
        if found is not None and found[1] == "get" and type(found[0]) is cst.Name and found[0].value == target.value.value:
            return added
    return None


def _kept_beside(name: str, kept: list[cst.CSTNode]) -> list[str]:
    """Names the `if v > m:` that keeps a running extreme also sets (`worst = i`): they go with
    the rank's own extreme, which a reduction alone would part them from."""
    others: list[str] = []
    for node in kept:
        if type(node) is not cst.If:
            continue
        for line in node.body.body:  # type: ignore[union-attr]
            for small in getattr(line, "body", ()):
                if type(small) is cst.Assign:
                    others += [n for t in small.targets if (n := code(t.target)) != name and n not in others]
    return others


def _a_number(node: cst.CSTNode) -> bool:
    """`0`, `-1.0`, `float("inf")`, `-math.inf`: where a running maximum or minimum starts."""
    if type(node) is cst.UnaryOperation:
        node = node.expression
    if type(node) in (cst.Integer, cst.Float):
        return True
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "float" and len(node.args) == 1:
        return string_value(node.args[0].value) in ("inf", "-inf", "+inf", "Inf", "-Inf")
    return code(node) in ("math.inf", "np.inf", "numpy.inf")


def _key_pairs(args: Sequence[cst.Arg]) -> bool:
    """`OrderedDict([("epoch", e), ("loss", l)])`: one list of (string, value) pairs (helper corpus CB, repro 02)."""
    if len(args) != 1 or args[0].keyword is not None or type(args[0].value) not in (cst.List, cst.Tuple):
        return False
    pairs = args[0].value.elements  # type: ignore[attr-defined]
    return bool(pairs) and all(
        type(p.value) is cst.Tuple and len(p.value.elements) == 2 and type(p.value.elements[0].value) is cst.SimpleString for p in pairs
    )
