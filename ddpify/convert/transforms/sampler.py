"""The training DataLoader gets a DistributedSampler; `shuffle` moves into the sampler.

Only loaders iterated by a loop that calls `backward()` are sharded. Evaluation loaders stay
whole, so every rank computes the same metrics and takes the same early-stopping and
best-checkpoint decisions.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.loops import TrainLoops
from ddpify.analysis.splits import SHARED_DRAWS, SHUFFLED_FOLDS, is_frame_sample, runs_per_pass, seeded_before, shuffled_from_the_global_generator, training_split_test, unseeded_data, unseeded_draws
from ddpify.convert.analysis import LoaderPlan
from ddpify.convert.transforms.base import Transform
from ddpify.edit import add_keyword, appended, keyword, statements
from ddpify.syntax import code, dotted

DATASET_NAMES = ("train_dataset", "train_set", "train_data")
SHAPE_METHODS = {"reshape", "view", "expand", "repeat"}

# Emitted once into a script whose training loader is built in another module.
RECREATE_HELPER = '''

def distributed_loader(loader):
    """`loader` made again with a DistributedSampler, so that each rank iterates its own part of
    the dataset; its batch size, workers, collate function and the rest are kept."""
    if loader is None or isinstance(getattr(loader, "sampler", None), DistributedSampler):
        return loader  # None where the script has no such loader on this path, or one made again already
    if not isinstance(loader, torch.utils.data.DataLoader):
        raise TypeError(f"expected the training DataLoader, got a {type(loader).__name__}")
    shuffle = isinstance(loader.sampler, torch.utils.data.RandomSampler)
    if not shuffle and not isinstance(loader.sampler, torch.utils.data.SequentialSampler):
        raise ValueError(f"cannot split a DataLoader with a {type(loader.sampler).__name__} by rank")
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=DistributedSampler(loader.dataset, shuffle=shuffle),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    )
'''


SUBSET = {"torch.utils.data.Subset", "torch.utils.data.dataset.Subset"}
PERMUTATIONS = {"torch.randperm", "numpy.random.permutation", "numpy.random.choice", "random.sample"}


class Sampler(Transform):
    name = "sampler"
    DESCRIPTION = "DistributedSampler for the training DataLoader (shuffle moved into it, drop_last kept)"

    def run(self) -> None:
        self._hoisted: set[tuple[cst.FunctionDef | None, str]] = set()  # dataset names given out, by scope
        for plan in self.facts.loader_plans:
            if plan.how == "generator":
                self._per_rank_generator(plan)
            elif plan.how == "subset":
                self._split_subset(plan)
            elif plan.how == "recreate":
                self._recreate(plan)
            elif plan.how == "stream":
                self.change(plan.call, "the training DataLoader reads an IterableDataset that splits its stream by rank itself: no sampler")
                self.warn(plan.call, (
                    "the IterableDataset splits its stream by rank itself: every rank must get as many batches, or the one "
                    "with more waits in backward() for the others (drop each rank's remainder past the shortest part)"
                ))
            else:
                self._shard(plan)
                self._one_item(plan)
        for draw in unseeded_draws(self.tree, self.program):
            self._same_draw_on_every_rank(draw)
        self._whole_loaders_shuffled_alike()
        self._subsets_drawn_per_pass()
        self._training_set_drawn_per_pass()
        self._data_drawn_per_rank()
        if any(plan.how == "recreate" for plan in self.facts.loader_plans):
            assert self.facts.imports_end is not None
            self.plan.insert_after(self.facts.imports_end, statements(RECREATE_HELPER))
            self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")

    def _whole_loaders_shuffled_alike(self) -> None:
        """A loader every rank reads whole (validation) that shuffles from the global generator,
        unseeded (or seeded per rank): each rank batched it its own way, so a mean of batch means
        differed per rank, and an early stop on it left one rank waiting (helper corpus R). A
        generator of its own, seeded alike, shuffles alike on every rank, a new order each pass."""
        planned = {id(plan.call) for plan in self.facts.loader_plans if plan.call is not None}
        for call in shuffled_from_the_global_generator(self.tree, self.program, planned, seeded_alike=not self.options.seed_per_rank):
            self.plan.replace(call, add_keyword("generator", "torch.Generator().manual_seed(0)"))
            self.plan.add_import("torch")
            self.change(call, (
                "this loader is read whole on every rank and shuffled from torch's global generator, which starts from its own "
                "seed in each process: a generator of its own, seeded alike, gives every rank the same batches (a decision on "
                "their results agrees)"
            ))

    def _subsets_drawn_per_pass(self) -> None:
        """`idx = torch.randperm(len(val_ds))[:25]` each epoch for `Subset(val_ds, idx)`, from a
        global generator nothing seeds: each rank validates on its own subset, and a decision on
        the result (a plateau scheduler, an early stop) differs per rank (helper corpus S). Said:
        a generator seeded once before the loop, alike on every rank, keeps a new subset per pass."""
        for call in self.tree.calls():
            if self.tree.qname(call.func) not in SUBSET or len(call.args) < 2 or not runs_per_pass(self.tree, self.program, call):
                continue
            function = self.tree.function(call)
            indices = call.args[1].value
            names = [n for n in self.tree.walk(indices) if type(n) is cst.Name]  # `idx.tolist()`: where `idx` comes from
            values = [indices, *(o.node for n in [indices, *names] for o in self.program.origins(n, function))]
            draws = [
                c for o in values for c in self.tree.calls(o)
                if self.tree.qname(c.func) in PERMUTATIONS and s.arg(c, None, "generator") is None and runs_per_pass(self.tree, self.program, c)
            ]
            if not draws or seeded_before(self.tree, self.program, draws[0], function, (self.tree.qname(draws[0].func) or "").split(".")[0]):
                continue
            self.warn(draws[0], (
                f"`{code(draws[0])}` draws this pass's subset from the global generator, which nothing seeds: each rank picks its own "
                "samples, and a decision on their result differs per rank; draw it from a generator seeded alike on every rank "
                "before the loop (torch.Generator().manual_seed(0), np.random.default_rng(0))"
            ))
            return

    def _one_item(self, plan: LoaderPlan) -> None:
        """`DataLoader([graph], batch_size=None)`, full-graph training served as a dataset of one
        item (a PyG habit: helper corpus CU, repro 04): the DistributedSampler pads each rank's
        shard with that item, so every rank trains on the whole graph and the ranks do one GPU's
        work; the report said each rank gets its share. Said: the split is the script's to make."""
        dataset = s.arg(plan.call, 0, "dataset") if plan.call is not None else None
        if dataset is None or type(dataset.value) not in (cst.List, cst.Tuple) or len(dataset.value.elements) != 1:  # type: ignore[attr-defined]
            return
        self.warn(plan.call, (
            f"`{code(dataset.value)}` is a dataset of one item: the DistributedSampler pads every rank's shard with it, so each rank "
            "trains on the same item and the ranks do the work of one; split what the item holds by rank (a graph's training "
            "nodes or edges), or train it on one GPU"
        ))

    def _training_set_drawn_per_pass(self) -> None:
        """Active learning (helper corpus CO, repro 03): `random.shuffle(unlabeled)` each cycle,
        `subset = unlabeled[:60]`, the items picked from it added to `labeled`, and the next
        cycle's training loader built over `labeled`. Drawn from a global generator nothing
        seeds, each rank picked its own items, and the ranks trained on different sets (some
        samples twice, others never). Said, not changed: which seed, or which rank's picks, is the
        script's choice."""
        warned: set[int] = set()
        for plan in self.facts.loader_plans:
            loops = self.tree.loops(plan.call) if plan.call is not None else []
            if not loops or id(loops[-1]) in warned:
                continue
            outer, function = loops[-1], self.tree.function(plan.call)  # type: ignore[arg-type]
            feeds = {n.value for a in plan.call.args for n in self.tree.walk(a.value) if type(n) is cst.Name}  # type: ignore[union-attr]
            writes = [(self._written(small), small) for small in self.tree.walk(outer) if isinstance(small, (cst.Assign, cst.AugAssign, cst.Expr))]
            grown = True
            while grown:  # what the loader's arguments are made from, in this loop, through names it rebinds or changes
                grown = False
                for written, small in writes:
                    if written & feeds and not (read := {n.value for n in self.tree.walk(small) if type(n) is cst.Name}) <= feeds:
                        feeds |= read
                        grown = True
            for written, small in writes:
                draws = [
                    c for c in self.tree.calls(small)
                    if self.tree.qname(c.func) in SHARED_DRAWS | {"random.choice", "random.choices"}
                    and not any(a.keyword is not None and a.keyword.value in ("generator", "random_state") for a in c.args)
                ]  # fmt: skip
                if not draws or not written & feeds:
                    continue
                library = (self.tree.qname(draws[0].func) or "").split(".", 1)[0]
                if seeded_before(self.tree, self.program, draws[0], function, library):
                    continue
                warned.add(id(outer))
                self.warn(draws[0], (
                    f"`{code(draws[0])}` decides what the training loader of each pass (line {self.tree.line(plan.call)}) is built from, "
                    f"and draws from {library}'s global generator, which nothing seeds and which starts from its own seed in each "
                    "process: every rank picks its own items and trains on its own set; seed it alike on every rank before the loop, "
                    "or have every rank take rank 0's picks (dist.broadcast_object_list)"
                ))
                break

    def _written(self, small: cst.CSTNode) -> set[str]:
        """The names a statement binds or changes: `a = ...`, `a += ...`, `a.extend(...)`, `random.shuffle(a)`."""
        if type(small) is cst.Assign:
            return {n.value for t in small.targets for n in self.tree.walk(t.target) if type(n) is cst.Name}
        if type(small) is cst.AugAssign and type(small.target) is cst.Name:
            return {small.target.value}
        if type(small) is cst.Expr and type(call := small.value) is cst.Call:
            found = s.method_call(call)
            if found is not None and type(found[0]) is cst.Name and found[1] in ("append", "extend", "insert", "add", "update", "remove"):
                return {found[0].value}
            if self.tree.qname(call.func) in ("random.shuffle", "numpy.random.shuffle") and call.args and type(call.args[0].value) is cst.Name:
                return {call.args[0].value.value}
        return set()

    def _data_drawn_per_rank(self) -> None:
        """`X = torch.randn(512, 10)` with no seed before it, for the training data set: each
        process draws its own data, so the ranks shard, train on and validate different data
        sets (their decisions on it differ too). Said, not changed: which seed is the script's."""
        draws: dict[int, cst.Call] = {}
        for plan in self.facts.loader_plans:
            dataset = s.arg(plan.call, 0, "dataset") if plan.call is not None else None
            if dataset is not None:
                draws.update((id(d), d) for d in unseeded_data(self.tree, self.program, dataset.value, plan.function))
        if not draws:
            return
        first, *more = sorted(draws.values(), key=self.tree.order)
        library = (self.tree.qname(first.func) or "").split(".", 1)[0]
        others = sorted({self.tree.line(d) for d in more} - {self.tree.line(first)})
        lines = f" (and at line{'s' if len(others) > 1 else ''} {', '.join(map(str, others))})" if others else ""
        self.warn(first, (
            f"the training data is drawn here{lines} from {library}'s global generator, which nothing seeds before it and which "
            "starts from a random seed in each process: every rank makes its own data set; seed it alike on every rank "
            f"before this line (`{'torch.manual_seed(0)' if library == 'torch' else 'np.random.seed(0)'}`)"
        ))

    def _same_draw_on_every_rank(self, draw: cst.Call) -> None:
        """A split of the data drawn from a generator of its own, seeded alike on every rank."""
        name = "pandas.DataFrame.sample" if is_frame_sample(draw) else self.tree.qname(draw.func) or ""
        spelled = code(draw.func)
        library = "numpy" if name.startswith(("numpy.", "sklearn.", "pandas.")) else name.split(".", 1)[0]
        why = (
            f"nothing seeds {library}'s global generator before it, which starts from a random seed in each process, so every rank "
            "would draw its own split and the ranks' shards would overlap"
        )
        if name in s.RANDOM_SPLIT or name == "torch.randperm":
            self.plan.replace(draw, add_keyword("generator", "torch.Generator().manual_seed(0)"))
            self.plan.add_import("torch")
            self.change(draw, f"{spelled} gets a generator of its own: {why}")
        elif name in ("sklearn.model_selection.train_test_split", "sklearn.utils.shuffle", "pandas.DataFrame.sample") or name in SHUFFLED_FOLDS:
            self.plan.replace(draw, add_keyword("random_state", "0"))
            self.change(draw, f"{spelled} gets random_state=0: {why}")
        elif name.startswith("numpy.random.") and spelled.endswith(name[len("numpy"):]) and spelled != name[len("numpy.") :]:
            module = spelled[: -len(name[len("numpy"):])]  # `np`
            method = name.rsplit(".", 1)[-1]
            self.plan.replace(draw.func, cst.parse_expression(f"{module}.random.default_rng(0).{method}"))
            self.change(draw, f"{spelled} draws from a generator of its own, seeded alike on every rank: {why}")
        elif name.startswith("random.") and spelled == name:
            self.plan.replace(draw.func, cst.parse_expression(f"random.Random(0).{name.rsplit('.', 1)[-1]}"))
            self.change(draw, f"{spelled} draws from a generator of its own, seeded alike on every rank: {why}")
        else:
            self.warn(draw, f"`{spelled}(...)` draws the data split from the global generator: {why}; seed it alike on every rank")

    def _recreate(self, plan: LoaderPlan) -> None:
        assert plan.loader is not None and plan.anchor is not None
        loader = code(plan.loader)
        recreated = statements(f"{loader} = distributed_loader({loader})  # built elsewhere: now sharded by rank\n")
        if type(plan.anchor) is cst.IndentedBlock:  # the body of the loop that binds it: at its top, before a set_epoch there
            self.plan.prepend(plan.anchor, recreated)
        elif plan.after:
            self.plan.insert_after(plan.anchor, recreated)
        else:
            self.plan.insert_before(plan.anchor, recreated)
        self.change(plan.anchor, f"`{loader}` is built outside this file: made again with a DistributedSampler before it is used")
        if self.options.keep_global_batch:
            self.warn(plan.anchor, f"`{loader}` is built outside this file: divide its batch size by the world size there to keep the global batch")

    def _shard(self, plan: LoaderPlan) -> None:
        call = plan.call
        if plan.batched:
            assert plan.sampler is not None
            source = code(s.arg(plan.sampler, 0, "data_source").value)  # type: ignore[union-attr]
            shuffle_code = "True" if self.tree.qname(plan.sampler.func) in s.RANDOM_SAMPLER else "False"
            self.plan.replace(plan.sampler, cst.parse_expression(f"DistributedSampler({source}, shuffle={shuffle_code})"))
            self.change(call, f"training DataLoader sharded across ranks: its BatchSampler batches a DistributedSampler in place of `{code(plan.sampler)}`")
            self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
            return
        dataset = s.arg(call, 0, "dataset")
        if dataset is None:
            self.warn(call, "the training DataLoader has no dataset argument ddpify can read: not sharded")
            return
        dataset_code = code(dataset.value)
        if not _pure(dataset.value):
            if self._in_comprehension(call):
                self.warn(call, f"the training DataLoader is built in a comprehension from `{dataset_code}`, which ddpify would have to evaluate twice: not sharded; give it a DistributedSampler over the same dataset")
                return
            dataset_code = self._hoist(call, dataset, plan.function)
        used = s.arg(call, 3, "sampler")
        if used is not None:  # RandomSampler(dataset), SequentialSampler(dataset), or a name that is None
            if plan.sampler is not None:
                shuffle_code = "True" if self.tree.qname(plan.sampler.func) in s.RANDOM_SAMPLER else "False"
            else:
                shuffle = s.arg(call, 2, "shuffle")
                shuffle_code = code(shuffle.value) if shuffle is not None else "False"
                if shuffle is not None:  # a DataLoader takes a sampler or shuffle, not both
                    self.plan.replace(call, _without(shuffle))
            self.plan.replace(used.value, cst.parse_expression(f"DistributedSampler({dataset_code}, shuffle={shuffle_code}{self._seed(call, plan.function)})"))
            self.change(call, f"training DataLoader sharded across ranks: `{code(used.value)}` becomes a DistributedSampler")
            self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
            return
        shuffle = s.arg(call, 2, "shuffle")
        shuffle_code = code(shuffle.value) if shuffle is not None else "False"
        moved = "shuffle moved into the sampler" if shuffle is not None else "no shuffle, as before"
        spread = next((a for a in call.args if a.star == "**"), None)
        if shuffle is None and spread is not None:
            shuffle_code = self._pop_shuffle(call, spread, plan.function)
            moved = f"shuffle taken out of **{code(spread.value)} into the sampler"
        sampler = keyword("sampler", f"DistributedSampler({dataset_code}, shuffle={shuffle_code}{self._seed(call, plan.function)})")
        # `shuffle=mode == "train"` in a builder function: it makes the evaluation loaders too, which
        # are not sharded (a dict of loaders per phase is: its phase loop reduces every phase's totals)
        split = training_split_test(shuffle.value, self.program, plan.function) if shuffle is not None and not self._in_comprehension(call) else None
        if split is not None:
            mode = code(split[0]) if split[1] else f"not ({code(split[0])})"
            sampler = keyword("sampler", f"DistributedSampler({dataset_code}, shuffle=True) if {mode} else None")
            moved = f"only when `{mode}`: the same call builds the loaders that evaluate, which see all the data"
        self.plan.replace(call, _with_sampler(shuffle, sampler))
        self.change(call, f"training DataLoader sharded across ranks with DistributedSampler ({moved})")
        self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
        self._keep_full_batches(call)

    def _seed(self, call: cst.Call, function: cst.FunctionDef | None) -> str:
        """`, seed=42` for a loader that shuffled from `generator=torch.Generator().manual_seed(42)`
        (inline, or a generator bound once and seeded): the sampler now shuffles, from its own
        seed (0 unless given), and a sweep over seeds would otherwise see one order of the data."""
        given = s.arg(call, None, "generator")
        generator = given.value if given is not None else None
        if type(generator) is cst.Name:
            bound = self.program.bound_once(function, generator.value)
            seeded = [
                c for c in self.program.calls_in(function)
                if (m := s.method_call(c)) is not None and m[1] == "manual_seed" and dotted(m[0]) == generator.value and c.args
            ]  # `g = torch.Generator(); g.manual_seed(seed)`
            # not `g.manual_seed(SEED + epoch)` at the top of each epoch (helper corpus CH, repro 01): its seed is
            # not there yet where the loader is made, and the sampler's set_epoch gives each epoch its order
            seeded = [c for c in seeded if self.tree.order(c) < self.tree.order(call) and all(self.tree.inside(call, lp) for lp in self.tree.loops(c))]
            if type(bound) is cst.Call and self.tree.qname(bound.func) == "torch.Generator" and len(seeded) == 1:
                return f", seed={code(seeded[0].args[0].value)}"
            generator = bound  # type: ignore[assignment]
        found = s.method_call(generator) if generator is not None else None
        if found is not None and found[1] == "manual_seed" and type(found[0]) is cst.Call and self.tree.qname(found[0].func) == "torch.Generator":
            return f", seed={code(generator.args[0].value)}" if generator.args else ""  # type: ignore[union-attr]
        # `for seed in [0, 1, 2]: torch.manual_seed(seed); loader = DataLoader(..., shuffle=True)`: each member of a
        # seed ensemble shuffled in its own order; the sampler's default seed gave them all one (helper corpus CL, repro 05)
        loops = self.tree.loops(call)
        for seeded in self.program.calls_in(function):
            if (
                self.tree.is_call_to(seeded, {"torch.manual_seed"}) and seeded.args and self.tree.order(seeded) < self.tree.order(call)
                and any(self.tree.inside(seeded, lp) for lp in loops)
                and any(type(n) is cst.Name and n.value in self.program.names_in(lp.target) for lp in loops if type(lp) is cst.For for n in self.tree.walk(seeded.args[0].value))
            ):
                return f", seed={code(seeded.args[0].value)}"
        return self._member_seed(call, function)

    def _member_seed(self, call: cst.Call, function: cst.FunctionDef | None) -> str:
        """`def train_member(seed, ds): torch.manual_seed(seed); dl = DataLoader(ds, shuffle=True)`
        called once per member of a seed ensemble (in a loop or a comprehension): each member
        shuffled in its own order, as `seed=seed` keeps; also through a same-file helper seeding
        from what it is handed (`set_seed(seed)`; helper corpus CM, repro 05 and script 08)."""
        if function is None or not self.program.called_repeatedly(function):
            return ""
        params = set(self.program.param_names(function))
        for seeded in self.program.calls_in(function):
            if self.tree.order(seeded) > self.tree.order(call) or not seeded.args or not self.tree.in_loops_of(seeded, call):
                continue  # after the loader is made, or in a loop of its own (a reseed per epoch)
            given = seeded.args[0].value
            if type(given) is not cst.Name or given.value not in params or self.program.assignments(function, given.value):
                continue
            target = self.program.callee(seeded, function)
            seeds = self.tree.is_call_to(seeded, {"torch.manual_seed"}) or (
                target is not None and (names := self.program.param_names(target[0])) and any(
                    self.tree.is_call_to(c, {"torch.manual_seed"}) and c.args and code(c.args[0].value) == names[0] for c in self.program.calls_in(target[0])
                )
            )  # fmt: skip
            if seeds:
                return f", seed={given.value}"
        return ""

    def _keep_full_batches(self, call: cst.Call) -> None:
        """`x.reshape(batch_size, -1)`, `x.view(batch_size, ...)`: the script assumes full batches,
        which a shard of the data need not give: the last, short batch of each rank is dropped."""
        if s.arg(call, 9, "drop_last") is not None:
            return
        for loop in self.facts.train_loops:
            for node in self.tree.walk(loop.loop.body):
                if (
                    isinstance(node, cst.BinaryOperation)
                    and isinstance(node.operator, cst.FloorDivide)
                    and self.facts.counts_whole_dataset(node.left, loop.function)
                    and self._stops_loop(node)
                ):
                    self.plan.replace(call, add_keyword("drop_last", "True"))
                    self.change(call, (
                        f"drop_last=True: the loop skips the short last batch by counting `{code(node)}` batches (line {self.tree.line(node)}), "
                        "which is the whole dataset's count, not this rank's: the shard's short batch is dropped instead"
                    ))
                    return
        batch = s.arg(call, 1, "batch_size")
        if batch is None or isinstance(batch.value, cst.Integer):
            return
        size = code(batch.value)
        sized = self._parameter_sized_by(size)
        if sized is not None:
            self.plan.replace(call, add_keyword("drop_last", "True"))
            self.change(call, (
                f"drop_last=True: `{code(sized)}` (line {self.tree.line(sized)}) makes a parameter as large as a batch of `{size}`, "
                "so every batch must be full (a rank's shard need not divide into full batches where the whole dataset did)"
            ))
            return
        for node in self._training_calls():
            found = s.method_call(node)
            shaped = found is not None and found[1] in SHAPE_METHODS  # a batch reshaped; noise drawn by it is no batch
            first = s.arg(node, 0, None)
            if shaped and first is not None and code(first.value) == size:
                self.plan.replace(call, add_keyword("drop_last", "True"))
                self.change(call, f"drop_last=True: the script shapes tensors by `{size}` (line {self.tree.line(node)}), so every batch must be full")
                return

    def _stops_loop(self, node: cst.CSTNode) -> bool:
        """`node` is in the test of an `if` that breaks out of the loop."""
        for parent in self.tree.ancestors(node):
            if isinstance(parent, cst.If):
                return self.tree.inside(node, parent.test) and any(isinstance(n, cst.Break) for n in self.tree.walk(parent.body))
            if isinstance(parent, (cst.BaseStatement, cst.BaseSmallStatement)):
                return False
        return False

    def _parameter_sized_by(self, size: str) -> cst.Call | None:
        """`nn.Parameter(torch.randn(args.batch_size, 1, dim))`, `register_buffer(..., torch.zeros(batch_size))`:
        a model's parameter or buffer shaped by the batch size (vision_transformer's class token)."""
        last = size.rsplit(".", 1)[-1]
        for node in self.tree.calls():
            found = s.method_call(node)
            if self.tree.qname(node.func) not in s.PARAMETER and not (found is not None and found[1] == "register_buffer"):
                continue
            for inner in self.tree.calls(node):
                first = s.arg(inner, 0, None) if inner is not node else None
                spelled = code(first.value) if first is not None else ""
                if first is not None and (spelled == size or ("batch" in last and spelled.rsplit(".", 1)[-1] == last)):
                    return node
        return None

    def _training_calls(self) -> list[cst.Call]:
        """Calls the training loops make, in their bodies and in the same-file functions those
        call: where the training batches are. A `view(batch_size, ...)` in an evaluation
        function over an unsharded loader says nothing about the training batches."""
        found: list[cst.Call] = []
        seen: set[cst.FunctionDef] = set()
        work: list[tuple[cst.CSTNode, cst.FunctionDef | None]] = [(loop.loop.body, loop.function) for loop in self.facts.train_loops]
        while work:
            root, function = work.pop()
            for call in self.tree.calls(root):
                found.append(call)
                target = self.program.callee(call, function)
                if target is not None and target[0] not in seen:
                    seen.add(target[0])
                    work.append((target[0].body, target[0]))
        return found

    def _per_rank_generator(self, plan: LoaderPlan) -> None:
        """Draws with replacement (or by weight) keep their distribution; each rank draws its own."""
        sampler = plan.sampler
        assert sampler is not None
        function = self.tree.function(sampler)
        if s.arg(sampler, None, "generator") is not None:
            self.warn(sampler, "the training sampler has its own generator: seed it differently on each rank, or every rank draws the same samples")
            return
        seed = f"torch.initial_seed() + {self.rank(function)}"
        edits = [add_keyword("generator", f"torch.Generator().manual_seed({seed})")]
        share = None if self._drawn_by_next(plan) else self._draws_per_rank(sampler, function)
        if share is not None:
            edits.append(share)
        self.plan.replace(sampler, lambda updated: _apply(updated, edits))
        self.change(sampler, "the sampler draws with replacement: each rank draws its own samples from a generator seeded by rank")
        if plan.none is not None and plan.none_sampler is not None:
            self.plan.replace(plan.none, cst.parse_expression(plan.none_sampler))
            self.plan.add_import("torch.utils.data.distributed", "DistributedSampler")
            self.change(plan.none, f"without that sampler the training DataLoader is sharded: `None` becomes `{plan.none_sampler}`")

    def _drawn_by_next(self, plan: LoaderPlan) -> bool:
        """Batches drawn with next() as a stream (makemore's `num_samples=int(1e10)`): no epoch ends."""
        return any(
            loop.consumed_by == "next" and any(o.node is plan.call for o in self.program.dataloaders(loop.loader, loop.function))
            for loop in self.program.fact(TrainLoops).draws
        )

    def _draws_per_rank(self, sampler: cst.Call, function: cst.FunctionDef | None):
        """An epoch of draws split between the ranks, as a DistributedSampler splits a dataset:
        `num_samples` (or the dataset's length it defaults to) over world_size, rounded up; each
        rank drawing the whole count made every epoch world_size times longer."""
        weighted = self.tree.is_call_to(sampler, {"torch.utils.data.WeightedRandomSampler", "torch.utils.data.sampler.WeightedRandomSampler"})
        count = s.arg(sampler, 1 if weighted else 2, "num_samples")
        if count is None:
            source = s.arg(sampler, 0, "data_source")
            if weighted or source is None:
                return None
            total = f"len({code(source.value)})"
            keyword = "num_samples"
        else:
            total, keyword = code(count.value), None
        share = f"math.ceil({total} / {self.world_size(function)})"
        self.plan.add_import("math")
        self.change(sampler, f"each rank draws its share of an epoch ({share}): together they draw {total}, as one process did")
        if keyword is not None:
            return add_keyword(keyword, share)
        value = count.value
        return lambda updated: updated.deep_replace(_find_equal(updated, value), cst.parse_expression(share))

    def _split_subset(self, plan: LoaderPlan) -> None:
        sampler = plan.sampler
        assert sampler is not None
        indices = s.arg(sampler, 0, "indices")
        if indices is None:
            self.warn(sampler, "SubsetRandomSampler without indices ddpify can read: not split by rank")
            return
        function = self.tree.function(sampler)
        text = code(indices.value)
        if any(isinstance(n, cst.Call) for n in self.tree.walk(indices.value)) or self._in_comprehension(sampler):
            name = next((n for n in ("subset_indices", "sampled_indices") if not self.program.binds(function, n)), "subset_indices_")
            self.plan.insert_before(self.tree.statement(sampler), statements(f"{name} = {text}\n"))
            base = name
        else:
            base = text if isinstance(indices.value, (cst.Name, cst.Attribute, cst.Subscript)) else f"({text})"
        rank, world = self.rank(function), self.world_size(function)
        # every rank takes as many indices as the others: a rank with one more batch would wait for the others at its gradient all-reduce
        split = f"{base}[{rank} : len({base}) - len({base}) % {world} : {world}]"
        self.plan.replace(indices.value, cst.parse_expression(split))
        self.change(sampler, (
            "the subset's indices are split by rank, the same number for each (the last len % world_size are left out, as "
            "DistributedSampler(drop_last=True) does): ranks with different numbers of batches would hang at the gradient all-reduce"
        ))

    def _pop_shuffle(self, call: cst.Call, spread: cst.Arg, function: cst.FunctionDef | None) -> str:
        """`DataLoader(ds, **kwargs)` may carry shuffle=True: take it out for the sampler."""
        name = next(n for n in ("shuffle", "train_shuffle", "shuffle_train") if not self.program.binds(function, n))
        kwargs = code(spread.value)
        statement = self.tree.statement(call)
        self.plan.insert_before(statement, statements(f'{name} = {kwargs}.pop("shuffle", False)  # the sampler shuffles now\n'))
        return name

    def _in_comprehension(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, (cst.ListComp, cst.DictComp, cst.SetComp, cst.GeneratorExp, cst.Lambda)) for a in self.tree.ancestors(node))

    def _hoist(self, call: cst.Call, dataset: cst.Arg, function: cst.FunctionDef | None) -> str:
        """`DataLoader(TensorDataset(x, y), ...)`: name the dataset so the sampler can see it."""
        taken = self._hoisted
        candidates = list(DATASET_NAMES)
        assign = self.tree.parent(call)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and type(assign.targets[0].target) is cst.Name:
            loader = assign.targets[0].target.value  # `val_loader = DataLoader(...)`: `val_dataset`
            for suffix in ("_loader", "loader", "_dl", "_iter"):
                prefix = loader[: -len(suffix)].rstrip("_") if loader.endswith(suffix) else ""
                if prefix and prefix not in ("data", "train"):
                    candidates.insert(0, f"{prefix}_dataset")
                    break
            else:
                if len(loader) > 3 and not any(word in loader for word in ("load", "data", "train")):
                    candidates.insert(0, f"{loader}_dataset")  # `unlabeled = DataLoader(...)`: `unlabeled_dataset`
        name = next((n for n in candidates if not self.program.binds(function, n) and (function, n) not in taken), "sampled_dataset")
        taken.add((function, name))
        statement = self.tree.statement(call)
        self.plan.insert_before(statement, statements(f"{name} = {code(dataset.value)}\n"))
        self.plan.replace(dataset.value, cst.Name(name))
        return name




def _pure(expr: cst.BaseExpression) -> bool:
    """A name, an attribute or a subscript by a name or a literal (`datasets[x]`): evaluating it
    again for the sampler gives the same dataset."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return True
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        index = expr.slice[0].slice.value
        return _pure(expr.value) and isinstance(index, (cst.Name, cst.SimpleString, cst.Integer))
    return False


def _with_sampler(shuffle: cst.Arg | None, sampler: cst.Arg):
    """Put the sampler where `shuffle` was, or after the last argument."""

    def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        args = list(updated.args)
        index = next((i for i, a in enumerate(args) if _is_shuffle(a, i)), None) if shuffle is not None else None
        if index is None:
            return updated.with_changes(args=appended(updated, sampler))
        args[index] = sampler.with_changes(comma=args[index].comma)
        return updated.with_changes(args=args)

    return rewrite


def _without(argument: cst.Arg):
    """Drop one argument of a call (matched by keyword or position), keeping the layout of the rest."""

    def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        args = list(updated.args)
        index = next(i for i, a in enumerate(args) if _is_shuffle(a, i))
        dropped = args.pop(index)
        if index > 0:  # the previous argument takes the dropped one's comma (and its line break)
            args[index - 1] = args[index - 1].with_changes(comma=dropped.comma)
        return updated.with_changes(args=args)

    return rewrite


def _is_shuffle(a: cst.Arg, index: int) -> bool:
    if a.keyword is not None:
        return a.keyword.value == "shuffle"
    return index == 2 and not a.star


def _apply(node: cst.CSTNode, edits) -> cst.CSTNode:
    for edit in edits:
        node = edit(node)
    return node


def _find_equal(root: cst.CSTNode, original: cst.CSTNode) -> cst.CSTNode:
    """The node of `root` (an updated copy) that is `original` or renders like it."""
    for arg in getattr(root, "args", ()):
        if arg.value is original or arg.value.deep_equals(original):
            return arg.value
    return original
