"""Seeds: a fixed seed makes every rank draw the same dropout masks and augmentations. By
default the report says so; `--seed-per-rank` seeds the generators the script seeded again,
offset by the rank, right before training starts.

By then the model is built and wrapped (DDP broadcast rank 0's weights, so they stay the same
everywhere) and the datasets are made. The DistributedSampler shuffles from its own `seed`
argument, not from the global generator, so every rank keeps drawing the same permutation and
the shards stay disjoint. What could still go wrong is a draw that must agree across ranks
after the new seeds (a `random_split`, a permutation of the data): then the seeds are left
alone, with a warning naming the line.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.splits import OWN_GENERATOR, SHARED_DRAWS
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import code, dotted

SEED_CALLS = {
    "torch.manual_seed",
    "torch.random.manual_seed",
    "torch.cuda.manual_seed",
    "torch.cuda.manual_seed_all",
    "numpy.random.seed",
    "random.seed",
}
# draws from the generators the seeds set
RANDOM_DRAWS = ("numpy.random.", "random.", "torch.rand", "torch.randint", "torch.randn", "torch.randperm", "torch.multinomial", "torch.normal")
COMMENT = "# each rank draws its own dropout and augmentation from here on; the weights are already the same everywhere\n"


class SeedPerRank(Transform):
    name = "seed"
    DESCRIPTION = "with --seed-per-rank, the script's seeds offset by the rank right before training"

    def run(self) -> None:
        self._set_orders()
        seeds = [
            call
            for call in self.tree.calls()
            if self.tree.qname(call.func) in SEED_CALLS and not self.facts.in_dataset(self.tree.function(call))
        ]
        model = max(self.facts.models, key=lambda m: self.tree.line(m.anchor))
        if not seeds:
            if self.options.seed_per_rank:
                self.change(model.anchor, "no seed is set: each rank's generators already start from their own random state; --seed-per-rank changes nothing")
            return
        first = min(seeds, key=self.tree.line)
        drawing = self._dataset_drawing_its_samples()
        if drawing is not None and not self.options.seed_per_rank:
            self.change(drawing, (
                f"`{drawing.name.value}.__getitem__` ignores its index and draws its sample from the seeded generators: the "
                "DistributedSampler's indices change nothing, so every rank would draw the same samples; the seeds are offset "
                "by the rank before training, as --seed-per-rank does"
            ))
        if not self.options.seed_per_rank and drawing is None:
            self.change(
                first,
                f"`{code(first)}` seeds every rank alike: dropout and random augmentation draw the same numbers on every rank "
                "(--seed-per-rank offsets the seeds by the rank once the model is wrapped)",
            )
            return
        function = model.function
        before = self._training_statement(model.anchor, function)
        if before is None:
            self.warn(
                model.anchor,
                f"training does not start where `{model.ref}` is wrapped, so ddpify cannot tell what draws from the seeded "
                "generators in between (a data split must stay the same on every rank): the seeds were not offset by the rank; "
                "do it by hand where training starts",
            )
            return
        shared = self._shared_draw_after(function, self.tree.line(before))
        if shared is not None:
            self.warn(
                shared,
                f"`{code(shared.func)}(...)` draws from the global generator after the point where the seeds would be offset "
                "by the rank: each rank would split the data differently (train and validation would leak across ranks), so the "
                "seeds were left alone; give it its own generator seeded alike on every rank (generator=torch.Generator().manual_seed(seed))",
            )
            return
        start = self.tree.line(before)
        for call in [c for c in seeds if self.tree.function(c) is function and self.tree.line(c) >= start]:
            self.warn(call, f"`{code(call)}` seeds again once training has started: from there every rank draws alike; offset it by the rank by hand")
        seeds = [c for c in seeds if not (self.tree.function(c) is function and self.tree.line(c) >= start)]
        last = {self.tree.qname(call.func): call for call in sorted(seeds, key=self.tree.line)}  # a later seed replaces an earlier one
        reseeds: list[tuple[str, str]] = []  # (guard, call)
        for call in sorted(last.values(), key=self.tree.line):
            reseed = self._reseed(call, function)
            if reseed is not None and reseed not in reseeds:
                reseeds.append(reseed)
        if not reseeds:
            return
        source, guard = COMMENT, ""
        for condition, line in reseeds:
            if condition and condition != guard:
                source += condition
            source += f"    {line}" if condition else line
            guard = condition
        self.plan.insert_before(before, statements(source))
        calls = ", ".join(f"`{line.strip()}`" for _, line in reseeds)
        self.change(
            before,
            f"seeds offset by the rank before training ({calls}): dropout masks and random augmentation differ across ranks; "
            "the weights stay rank 0's (DDP broadcast them at the wrap) and the DistributedSampler keeps its own seed, shared by every rank",
        )
        if any(isinstance(n, cst.Break) for n in self.tree.walk(before)) and self._evaluates(before, function):
            self.warn(
                before,
                "this loop stops on a condition: with seeds offset by the rank, evaluation that draws random numbers (sampling, noise) "
                "differs across ranks, and so would that decision; keep what decides deterministic",
            )

    def _dataset_drawing_its_samples(self) -> cst.ClassDef | None:
        """A same-file Dataset whose `__getitem__(self, i)` never reads `i` and draws what it returns
        at random (`i = np.random.randint(len(self.obs))`, offline RL's samples per epoch): a shared
        seed gives every rank the same samples, whatever indices the sampler hands out (helper
        corpus AX, repro 02)."""
        for cls in self.program.classes.values():
            getitem = self.program.class_methods(cls).get("__getitem__")
            params = self.program.param_names(getitem) if getitem is not None else []
            if getitem is None or len(params) != 1:
                continue
            nodes = self.program.scope_nodes(getitem)
            if any(type(n) is cst.Name and n.value == params[0] for n in nodes if n is not getitem):
                continue  # the index is read
            if any(type(n) is cst.Call and (self.tree.qname(n.func) or "").startswith(RANDOM_DRAWS) for n in nodes):
                return cls
        return None

    def _evaluates(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Whether `node` runs an evaluation (`model.eval()`, `torch.no_grad()`), itself or in a same-file function it calls."""
        for call in self.tree.calls(node):
            if self._is_evaluation(call):
                return True
            target = self.program.callee(call, function)
            if target is not None:
                decorators = [d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator for d in target[0].decorators]
                if any(self.tree.qname(d) in s.NO_GRAD for d in decorators) or any(map(self._is_evaluation, self.program.calls_in(target[0]))):
                    return True
        return False

    def _is_evaluation(self, call: cst.Call) -> bool:
        found = s.method_call(call)
        return self.tree.qname(call.func) in s.NO_GRAD or (found is not None and found[1] == "eval")

    def _training_statement(self, anchor: cst.BaseStatement, function: cst.FunctionDef | None) -> cst.BaseStatement | None:
        """The first statement after the wrap, in its block, that runs the model or trains."""
        body = list(self.tree.block(anchor).body)
        for statement in body[body.index(anchor) + 1 :]:
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and self.facts.syncs(statement, function):
                return statement
        return None

    def _reseed(self, call: cst.Call, function: cst.FunctionDef | None) -> tuple[str, str] | None:
        """The statement that seeds again with the rank added, as code in `function`; None (with a
        warning) when the seed cannot be reached from there."""
        where = self.tree.function(call)
        statement = self.tree.statement(call)
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call):
            return self._unreachable(call)
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return self._unreachable(call)
        seed = call.args[0].value
        rank = self.rank(function)
        if where is function or self._visible(seed, function):
            guard = self._guard(statement, function) if where is function else ""
            if guard is None:
                return self._unreachable(call)
            return guard, f"{code(call.func)}({_plus(seed, rank)})\n"
        if where is not None and isinstance(seed, cst.Name) and seed.value in self.program.param_names(where) and self._only_seeds(where):
            for site, caller in self.program.call_sites(where):
                argument = self.program.argument_for(site, where, seed.value)
                site_statement = self.tree.statement(site)
                if argument is None or not (caller is function or self._visible(argument, function)):
                    continue
                if not (isinstance(site_statement, cst.SimpleStatementLine) and site_statement.body[0].value is site):  # type: ignore[attr-defined]
                    continue
                args = [
                    a.with_changes(value=cst.parse_expression(_plus(argument, rank))) if a.value is argument else a for a in site.args
                ]
                return "", code(site.with_changes(args=args)) + "\n"
        return self._unreachable(call)

    def _unreachable(self, call: cst.Call) -> None:
        self.warn(
            call,
            f"`{code(call)}` is not seeded again per rank: ddpify cannot reach its seed where training starts; offset it by the rank by hand",
        )

    def _visible(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """Whether `expr` means the same in `function`: literals and module names it does not rebind."""
        for node in self.tree.walk(expr):
            if isinstance(node, cst.Name) and not isinstance(self.tree.parent(node), cst.Attribute):
                if function is not None and self.program.binds(function, node.value):
                    return False
                if not self.program.binds(None, node.value) and node.value not in self.program.functions:
                    return False
            elif isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
                if function is not None and self.program.binds(function, node.value.value):
                    return False
                if not self.program.binds(None, node.value.value):
                    return False
        return True

    def _guard(self, statement: cst.BaseStatement, function: cst.FunctionDef | None) -> str | None:
        """"" for a seed at the top of the function; `if <test>:\\n` for one under an `if` there;
        None for anything deeper."""
        block = self.tree.block(statement)
        top = function.body if function is not None else None
        if top is block or (function is None and (isinstance(block, cst.Module) or self._is_main_block(block))):
            return ""
        owner = self.tree.parent(block)
        if isinstance(owner, cst.If) and owner.body is block:
            outer = self.tree.block(owner)
            if outer is top or (function is None and (isinstance(outer, cst.Module) or self._is_main_block(outer))):
                return f"if {code(owner.test)}:\n"
        return None

    def _is_main_block(self, block: cst.CSTNode) -> bool:
        owner = self.tree.parent(block)
        return owner is not None and self.tree.is_main_guard(owner)

    def _only_seeds(self, function: cst.FunctionDef) -> bool:
        """A `set_seed(seed)` helper: seeding calls, flags and a docstring, nothing that builds data."""
        for statement in function.body.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                return False
            for small in statement.body:
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    name = self.tree.qname(small.value.func) or ""
                    if name not in SEED_CALLS and not name.startswith("torch.use_deterministic"):
                        return False
                elif isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
                    continue
                elif isinstance(small, cst.Assign):
                    targets = [dotted(t.target) or code(t.target) for t in small.targets]
                    if not all(t.startswith(("torch.backends.", "os.environ")) for t in targets):
                        return False
                elif not isinstance(small, cst.Pass):
                    return False
        return True

    def _shared_draw_after(self, function: cst.FunctionDef | None, line: int) -> cst.Call | None:
        """A data split drawn from a global generator at or after `line`, here or in a same-file function called there."""
        for call in self.program.calls_in(function):
            if self.tree.line(call) < line:
                continue
            for candidate in [call, *self._calls_of_callee(call, function)]:
                if self.tree.qname(candidate.func) in SHARED_DRAWS and not any(a.keyword and a.keyword.value in OWN_GENERATOR for a in candidate.args):
                    return candidate
        return None

    def _calls_of_callee(self, call: cst.Call, function: cst.FunctionDef | None) -> list[cst.Call]:
        target = self.program.callee(call, function)
        return self.program.calls_in(target[0]) if target is not None else []


    def _set_orders(self) -> None:
        """`list({w for w in corpus})`, `enumerate(set(words))`: a set of strings is iterated in an
        order its string hashes decide, and every process seeds those hashes at random
        (PYTHONHASHSEED). A vocabulary numbered that way differs per rank, and so does what each
        rank's model sees. Warned about: `sorted(...)` gives one order everywhere."""
        for call in self.tree.calls():
            if not call.args or not any(self.tree.is_builtin_call(call, name) for name in ("list", "tuple", "enumerate")):
                continue
            holder = self.tree.parent(self.tree.parent(call))
            if self.tree.is_builtin_call(holder, "sorted") or self.tree.is_builtin_call(holder, "set"):
                continue  # `sorted(list(set(text)))`: one order everywhere
            iterated = call.args[0].value
            function = self.tree.function(call)
            origins = [iterated] if type(iterated) is not cst.Name else [o.node for o in self.program.origins(iterated, function)]
            if origins and all(type(o) in (cst.SetComp, cst.Set) or self.tree.is_builtin_call(o, "set") for o in origins):
                self.warn(call, (
                    f"`{code(call)}` orders a set, whose order for strings follows hashes that each process seeds at random: "
                    f"a vocabulary or index built from it differs from rank to rank; order it the same way everywhere (`sorted(...)`)"
                ))


def _plus(seed: cst.BaseExpression, rank: str) -> str:
    if isinstance(seed, cst.Integer) and seed.evaluated_value == 0:
        return rank
    text = code(seed)
    simple = isinstance(seed, (cst.Name, cst.Attribute, cst.Integer, cst.Call, cst.Subscript)) or (
        isinstance(seed, cst.BinaryOperation) and isinstance(seed.operator, (cst.Add, cst.Subtract))
    )
    return f"{text} + {rank}" if simple else f"({text}) + {rank}"
