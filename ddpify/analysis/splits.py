"""Random train/validation splits that each rank would draw differently.

`random_split(dataset, lengths)` draws from the global generator. Each process starts that
generator from its own random seed (torch seeds it from the OS), so in a script that seeds
nothing before the split every rank draws its own split: a `DistributedSampler` over "the"
training set then samples different subsets on different ranks, and one rank validates on
another's training samples.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Program
from ddpify.syntax import Tree


def is_seed_call(tree: Tree, call: cst.Call) -> bool:
    """`torch.manual_seed(...)`, `np.random.seed(...)`, `set_seed(...)`: not a generator of its own."""
    name = tree.qname(call.func) or (call.func.value if isinstance(call.func, cst.Name) else "")
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.Generator."):
        return False
    return "seed" in last.lower() and last != "initial_seed" and bool(call.args)


# sklearn's cross-validation splitters that draw their folds from numpy's global generator
# unless given a `random_state` (the first four only with `shuffle=True`).
SHUFFLED_FOLDS = {
    f"sklearn.model_selection.{name}"
    for name in (
        "KFold", "StratifiedKFold", "GroupKFold", "StratifiedGroupKFold", "ShuffleSplit", "StratifiedShuffleSplit",
        "GroupShuffleSplit", "RepeatedKFold", "RepeatedStratifiedKFold",
    )
}  # fmt: skip
SHUFFLED_ONLY_IF_ASKED = {f"sklearn.model_selection.{name}" for name in ("KFold", "StratifiedKFold", "GroupKFold", "StratifiedGroupKFold")}
# Draws from a global generator that every rank must make alike: a split of the data.
SHARED_DRAWS = {
    *s.RANDOM_SPLIT,
    "torch.randperm",
    "numpy.random.permutation",
    "numpy.random.shuffle",
    "numpy.random.choice",
    "random.shuffle",
    "random.sample",
    "sklearn.model_selection.train_test_split",
    "sklearn.utils.shuffle",
    "pandas.DataFrame.sample",
    *SHUFFLED_FOLDS,
}
# Of those, the ones that reorder indices or items (not `np.random.choice`, which also draws synthetic data).
PERMUTING = {"torch.randperm", "numpy.random.permutation", "numpy.random.shuffle", "random.shuffle", "random.sample"}
# Keywords that make such a draw use its own generator instead.
OWN_GENERATOR = {"generator", "random_state"}


def unseeded_splits(tree: Tree, program: Program) -> list[cst.Call]:
    """`random_split` calls without a generator that no seed call runs before: in their own
    scope before them, at module level before them, or in a caller before the call."""
    return [call for call in unseeded_draws(tree, program) if tree.is_call_to(call, s.RANDOM_SPLIT)]


def unseeded_draws(tree: Tree, program: Program) -> list[cst.Call]:
    """Data splits drawn from a global generator that nothing seeded: `random_split`,
    `train_test_split`, and a permutation or shuffle of indices (`torch.randperm(len(ds))`,
    `np.random.shuffle(indices)`) drawn once, outside loops and Dataset code, before a DataLoader
    is built in the same scope. Each process's generator starts from its own random seed."""
    found = []
    for call in tree.calls():
        name = tree.qname(call.func)
        if is_frame_sample(call):
            name = "pandas.DataFrame.sample"  # `df.sample(frac=1)`: numpy's global generator (helper corpus BP, repro 02)
        if name not in SHARED_DRAWS or any(a.keyword is not None and a.keyword.value in OWN_GENERATOR for a in call.args):
            continue
        if name in s.RANDOM_SPLIT and s.arg(call, 2, "generator") is not None:
            continue
        if name in SHUFFLED_ONLY_IF_ASKED and ((shuffle := s.arg(call, 1, "shuffle")) is None or s.code(shuffle.value) == "False"):
            continue  # `KFold(5)`: folds in order, the same on every rank
        if name == "sklearn.model_selection.train_test_split" and (kept := s.arg(call, None, "shuffle")) is not None and s.code(kept.value) == "False":
            continue  # a chronological split (`shuffle=False`): no draw (helper corpus CT, repro 04)
        function = tree.function(call)
        if name not in s.RANDOM_SPLIT and name != "sklearn.model_selection.train_test_split" and name not in SHUFFLED_FOLDS:
            rows = name in ("pandas.DataFrame.sample", "sklearn.utils.shuffle")  # a helper reordering the rows it returns (`make_folds(df)`)
            # also a helper called once, returning what the draw splits (`train_e, val_e = split_edges(EDGES)`: helper corpus CU, repro 03)
            once = name in PERMUTING and function is not None and bool(program.call_sites(function)) and not program.called_repeatedly(function)
            if runs_per_pass(tree, program, call) or program.in_dataset(function) or not _loader_after(tree, program, call, function, callers=int(rows or once)):
                continue  # a batch permutation (mixup), augmentation, or a draw that feeds no loader here
        if not _seeded_before(tree, program, call, function, depth=2, library=_library(name)):
            found.append(call)
    return found


def _loader_after(tree: Tree, program: Program, node: cst.CSTNode, function: cst.FunctionDef | None, callers: int) -> bool:
    """A DataLoader is built after `node` in its function, or, for a function returning a value
    (`df = make_folds(df)`, a helper shuffling the rows), after a call of it (`callers` levels up)."""
    if any((tree.is_call_to(c, s.DATALOADER) or _builds_a_loader(tree, program, c, function)) and tree.order(c) > tree.order(node) for c in program.calls_in(function)):
        return True
    if callers == 0 or function is None or not program.returns(function):
        return False
    return any(_loader_after(tree, program, site, caller, callers - 1) for site, caller in program.call_sites(function))


def shuffled_from_the_global_generator(tree: Tree, program: Program, skip: set[int], seeded_alike: bool = True) -> list[cst.Call]:
    """`DataLoader(valid_set, batch_size=32, shuffle=True)` (ids in `skip` aside: the loaders
    that get a DistributedSampler): it shuffles with torch's global generator, which starts from
    a random seed in each process unless a seed runs before (`seeded_alike`: seeds are alike on
    every rank). Each rank would read the same samples in its own order, batched differently."""
    found = []
    for call in tree.calls():
        if id(call) in skip or not tree.is_call_to(call, s.DATALOADER):
            continue
        shuffle = s.arg(call, 2, "shuffle")
        if shuffle is None or type(shuffle.value) is not cst.Name or shuffle.value.value != "True":
            continue
        if any(s.arg(call, i, k) is not None for i, k in ((3, "sampler"), (4, "batch_sampler"))) or s.arg(call, None, "generator") is not None:
            continue
        function = tree.function(call)
        if program.in_dataset(function) or (seeded_alike and _seeded_before(tree, program, call, function, depth=2, library="torch")):
            continue
        found.append(call)
    return found


def runs_per_pass(tree: Tree, program: Program, node: cst.CSTNode) -> bool:
    """`node` runs again and again: inside a loop, or in a function called from inside one
    (`validate(model, ds)` every epoch drawing its own subset)."""
    if tree.loops(node):
        return True
    function = tree.function(node)
    if function is None:
        return False
    if any(tree.loops(site) for site, _ in program.call_sites(function)):
        return True
    cls = program.owner_class(function) if function.name.value == "__call__" else None
    return cls is not None and any(  # `val(model)` every epoch, `val` an object whose `__call__` draws
        type(call.func) is cst.Name and tree.loops(call) and program.instance_of(call.func, caller) is cls
        for caller in [None, *program.all_functions] for call in program.calls_in(caller)
    )  # fmt: skip


def _builds_a_loader(tree: Tree, program: Program, call: cst.Call, function: cst.FunctionDef | None, depth: int = 2) -> bool:
    """A call of a same-file function that builds a DataLoader (`train_fold(ds, tr_idx, va_idx)`
    making `DataLoader(Subset(ds, tr_idx))`), through `depth` calls: indices drawn before it
    split the data it loads."""
    target = program.callee(call, function)
    if target is None or not call.args:
        return False
    calls = program.calls_in(target[0])
    return any(tree.is_call_to(c, s.DATALOADER) for c in calls) or (depth > 0 and any(_builds_a_loader(tree, program, c, target[0], depth - 1) for c in calls))


# Draws of random data from a global generator (synthetic data sets built in the script).
DATA_DRAWS = {
    "torch.randn", "torch.rand", "torch.randint", "torch.normal", "torch.bernoulli", "torch.multinomial",
    "numpy.random.randn", "numpy.random.rand", "numpy.random.randint", "numpy.random.normal", "numpy.random.uniform",
    "numpy.random.random", "numpy.random.binomial",
}  # fmt: skip


def unseeded_data(tree: Tree, program: Program, dataset: cst.BaseExpression, function: cst.FunctionDef | None) -> list[cst.Call]:
    """Random draws a training data set is made of (`TensorDataset(X, Y)`, `X = torch.randn(n, d)`),
    from a global generator nothing seeded before them: each process draws its own data."""
    found: list[cst.Call] = []
    work = [(dataset, function)]
    seen: set[int] = set()
    while work and len(seen) < 64:
        expr, scope = work.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        for node in tree.walk(expr):
            if type(node) is cst.Call:
                name = tree.qname(node.func)
                if name in DATA_DRAWS and not any(a.keyword is not None and a.keyword.value in OWN_GENERATOR for a in node.args):
                    in_training = any(any(s.is_backward(c) for c in tree.calls(loop)) for loop in tree.loops(node))
                    if not in_training and not program.in_dataset(scope) and not _seeded_before(tree, program, node, scope, 2, _library(name)):
                        found.append(node)
                if type(node.func) is cst.Name and node.func.value in program.classes:
                    found += _drawn_when_built(tree, program, node, scope)
                elif (target := program.callee(node, scope)) is not None and not program.in_dataset(target[0]):
                    # `make_blob(c, n)`, a same-file helper returning `np.random.randn(n, 2) + ...`: what it returns
                    work += [(value, target[0]) for value in program.returns(target[0])]
            elif type(node) is cst.Name and not program.in_dataset(scope):
                # `xs.append(np.random.randn(n, 8) + c)` class by class, then `np.concatenate(xs)`
                work += [(a.value, scope) for c in program.calls_in(scope) if (m := s.method_call(c)) is not None and m[1] in ("append", "extend")
                         and type(m[0]) is cst.Name and m[0].value == node.value and tree.order(c) < tree.order(node) for a in c.args[:1]]
                # `df["y"] = np.sin(df.t) + np.random.normal(0, 0.3, len(df))`: a column drawn into it (helper corpus CT, repro 03)
                work += [
                    (a.value, scope) for a in program.scope_nodes(scope) if type(a) is cst.Assign and tree.order(a) < tree.order(node)
                    and any(type(t.target) is cst.Subscript and type(t.target.value) is cst.Name and t.target.value.value == node.value for t in a.targets)
                ]  # fmt: skip
                earlier = [
                    program.element(v, i) for v, i in program.assignments(scope, node.value) if tree.order(v) < tree.order(node)
                ]  # also `train_set, val_set = random_split(TensorDataset(X, y), ...)`: drawn from X and y (helper corpus BD, repro 03)
                if earlier:  # the value the name holds here: its last assignment before, in this scope
                    work.append((max(earlier, key=tree.order), scope))
                    continue
                for origin in program.origins(node, scope):
                    if origin.node is not node:
                        work.append((origin.node, origin.function))
    return list(dict.fromkeys(found))


def _drawn_when_built(tree: Tree, program: Program, built: cst.Call, scope: cst.FunctionDef | None) -> list[cst.Call]:
    """`SyntheticDataset(1024)` of a same-file class whose `__init__` draws its samples from a
    global generator (`self.x = torch.randn(n, 8)`) that nothing seeds before the object is
    made, nor in `__init__` before the draw. A draw in `__getitem__` (augmentation) is another
    matter: every rank may draw its own."""
    init = program.class_methods(program.classes[built.func.value]).get("__init__")  # type: ignore[union-attr]
    if init is None:
        return []
    found = []
    calls = program.calls_in(init)
    for call in calls:
        name = tree.qname(call.func)
        if name not in DATA_DRAWS or any(a.keyword is not None and a.keyword.value in OWN_GENERATOR for a in call.args):
            continue
        library = _library(name)
        if any(_seeds(tree, c, library, program.shared_seeds) and tree.order(c) < tree.order(call) for c in calls):
            continue
        if not _seeded_before(tree, program, built, scope, 2, library):
            found.append(call)
    return found


def _library(draw: str) -> str:
    """Whose global generator a draw uses: `torch`, `numpy` or `random` (sklearn's and pandas': numpy's)."""
    root = draw.split(".", 1)[0]
    return "numpy" if root in ("sklearn", "pandas") else root


def is_frame_sample(call: cst.Call) -> bool:
    """`df.sample(frac=1)` (or `n=`): pandas draws the rows from numpy's global generator unless given `random_state`."""
    found = s.method_call(call)
    return found is not None and found[1] == "sample" and any(a.keyword is not None and a.keyword.value in ("frac", "n") for a in call.args)


# A fresh seed from the operating system, set as torch's global generator's and returned.
FRESH_SEEDS = {"torch.seed", "torch.random.seed"}


def fresh_seeds(tree: Tree, program: Program, function: cst.FunctionDef | None) -> list[cst.Call]:
    """`seed = torch.seed()` (or the call alone) on a line of its own in `function`, outside
    loops: a fresh seed per run, which each process would draw for itself."""
    found = []
    for call in program.calls_in(function):
        if not tree.is_call_to(call, FRESH_SEEDS) or tree.loops(call):
            continue
        parent = tree.parent(call)
        alone = type(parent) is cst.Expr or (type(parent) is cst.Assign and len(parent.targets) == 1 and type(parent.targets[0].target) is cst.Name)
        if alone and type(tree.parent(parent)) is cst.SimpleStatementLine and len(tree.parent(parent).body) == 1:  # type: ignore[union-attr]
            found.append(call)
    return found


def _seeds(tree: Tree, call: cst.Call, library: str, shared: set[int] | frozenset = frozenset()) -> bool:
    """A seed call for `library`'s generator: its own (`np.random.seed`), or a helper of the
    script's that may seed them all (`set_seed(0)`); or a fresh `torch.seed()` in `shared`,
    which the converter makes rank 0's on every rank."""
    if id(call) in shared:
        return library == "torch"
    if not is_seed_call(tree, call):
        return False
    name = tree.qname(call.func) or ""
    return name.split(".", 1)[0] not in ("torch", "numpy", "random") or name.startswith(library + ".")


def seeded_before(tree: Tree, program: Program, point: cst.CSTNode, function: cst.FunctionDef | None, library: str = "torch") -> bool:
    """Whether a seed of `library`'s global generator runs before `point` (here, at import, or in
    a caller before the call): what is drawn there is drawn alike on every rank."""
    return _seeded_before(tree, program, point, function, 2, library)


def _seeded_before(tree: Tree, program: Program, point: cst.CSTNode, function: cst.FunctionDef | None, depth: int, library: str) -> bool:
    where = tree.order(point)
    if any(_seeds(tree, c, library, program.shared_seeds) and tree.order(c) < where for c in program.calls_in(function)):
        return True
    if function is None:
        return False
    if any(_seeds(tree, c, library, program.shared_seeds) for c in program.calls_in(None) if tree.order(c) < where):
        return True  # module code before the function runs (a seed at import)
    if depth == 0:
        return False
    return any(_seeded_before(tree, program, site, caller, depth - 1, library) for site, caller in program.call_sites(function))


# --- one loader builder for every split ----------------------------------------------------------


def training_split_test(
    shuffle: cst.BaseExpression, program: Program | None = None, builder: cst.FunctionDef | None = None
) -> tuple[cst.BaseExpression, bool] | None:
    """For a builder that shuffles only the training split (`shuffle=True if mode == "train" else
    False`, `shuffle=mode == "train"`, `shuffle=is_train`, or a parameter its calls pass as True for
    one split and False for another, `get_loader(X[va], y[va], shuffle=False)`): the test, and
    whether it is true for training. A flag that only asks to shuffle (`args.shuffle`) names no
    split: None."""
    if type(shuffle) is cst.Name and program is not None and builder is not None and shuffle.value in program.param_names(builder):
        passed = {s.code(a) if a is not None else "default" for a in (program.argument_for(c, builder, shuffle.value) for c, _ in program.call_sites(builder))}
        default = program.default(builder, shuffle.value)
        passed = {s.code(default) if p == "default" and default is not None else p for p in passed}
        if passed == {"True", "False"}:
            return shuffle, True
    if isinstance(shuffle, cst.IfExp) and {s.code(shuffle.body), s.code(shuffle.orelse)} == {"True", "False"}:
        test, training_when = shuffle.test, s.code(shuffle.body) == "True"
    elif isinstance(shuffle, (cst.Comparison, cst.Name, cst.Attribute)):
        test, training_when = shuffle, True
    else:
        return None
    text = s.code(test).lower()
    return (test, training_when) if any(word in text for word in ("train", "val", "test", "eval")) else None


def builds_training_split(program: Program, builder: cst.FunctionDef, call: cst.Call, test: cst.BaseExpression) -> bool | None:
    """Whether `call` of the builder function makes `test` (of `training_split_test`) true: it
    passes a literal for the parameter the test reads (`build_loader("valid")`). None: unknown."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        sides = [test.left, target.comparator]
        names = [x for x in sides if isinstance(x, cst.Name)]
        literals = [s.string_value(x) for x in sides if isinstance(x, cst.SimpleString)]
        if len(names) != 1 or len(literals) != 1 or not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
            return None
        passed = program.argument_for(call, builder, names[0].value)
        value = s.string_value(passed) if passed is not None else None
        if value is None:
            return None
        return (value == literals[0]) == isinstance(target.operator, cst.Equal)
    if isinstance(test, cst.Name):
        passed = program.argument_for(call, builder, test.value)
        return {"True": True, "False": False}.get(s.code(passed)) if passed is not None else None
    return None
