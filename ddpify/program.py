"""A one-file program model: functions, call sites, argument binding and value origins.

This is what lets ddpify follow a loader or a model across functions of one script:
`train_loader, val_loader = build_loaders()` resolves into the `DataLoader(...)` call inside
`build_loaders`, and `train(model, loader)` binds the callee's parameters to the caller's
arguments. Anything defined in another module is out of reach and resolves to the expression
that names it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ddpify import syntax as s
from ddpify.syntax import Tree, code, dotted, string_value, unchained

COMPANION_LIMIT = 500_000  # bytes: a module of the script's own larger than this is not read
# Calls that wrap an iterable without changing what it yields batch by batch.
ITERABLE_WRAPPERS = {"builtins.enumerate", "builtins.iter", "builtins.zip", "itertools.islice", "itertools.cycle", *s.TQDM}


@dataclass(frozen=True)
class Origin:
    """An expression a value comes from, and the function it is evaluated in (None: module)."""

    node: cst.BaseExpression
    function: cst.FunctionDef | None


@dataclass(frozen=True)
class Kept:
    """A construction of a same-file class whose `__init__` keeps what one of its parameters is
    handed (`self.model = model`, or `model.to(device)`): `trainer = Trainer(net, loader)`."""

    call: cst.Call
    caller: cst.FunctionDef | None
    argument: cst.BaseExpression  # what the call hands for that parameter (`net`)
    holder: str | None  # the name the construction is bound to (`trainer`), if a plain name


_NEW_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


T = TypeVar("T")


def _params(function: cst.FunctionDef) -> list[cst.Param]:
    p = function.params
    return [*p.posonly_params, *p.params]


def _unpacked(node: cst.Assign) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) pairs of an assignment, element by element when a tuple is unpacked from a
    tuple of the same length (`self.model, self.opt = model, opt`)."""
    pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
    for t in node.targets:
        if type(t.target) in (cst.Tuple, cst.List) and type(node.value) in (cst.Tuple, cst.List) and len(t.target.elements) == len(node.value.elements):  # type: ignore[union-attr]
            pairs += [(a.value, b.value) for a, b in zip(t.target.elements, node.value.elements)]  # type: ignore[union-attr]
        else:
            pairs.append((t.target, node.value))
    return pairs


def _decorated(function: cst.FunctionDef, name: str) -> bool:
    """`@staticmethod`, `@classmethod` on `function`."""
    return any(type(d.decorator) is cst.Name and d.decorator.value == name for d in function.decorators)


def _named_params(function: cst.FunctionDef) -> list[cst.Param]:
    """Every parameter a caller can pass by name or position (keyword-only ones too)."""
    p = function.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


class Program:
    """Functions, classes and assignments of one script, indexed once."""

    def __init__(self, tree: Tree, directory: Path | None = None) -> None:
        self.tree = tree
        self.directory = directory  # where the script's own modules are (`from utils import AverageMeter`)
        self._companions: dict[str, Program | None] = {}
        self.functions: dict[str, cst.FunctionDef] = {}  # module-level functions by name
        self.classes: dict[str, cst.ClassDef] = {}
        self.methods: dict[cst.ClassDef, dict[str, cst.FunctionDef]] = {}
        self.all_functions: list[cst.FunctionDef] = []
        for node in tree.of_type(cst.FunctionDef, cst.ClassDef):
            if isinstance(node, cst.FunctionDef):
                self.all_functions.append(node)
                parent = tree.parent(node)
                owner = tree.parent(parent) if isinstance(parent, cst.IndentedBlock) else parent
                if isinstance(owner, cst.ClassDef):
                    self.methods.setdefault(owner, {})[node.name.value] = node
                elif isinstance(parent, cst.Module):
                    self.functions[node.name.value] = node
            elif isinstance(node, cst.ClassDef) and isinstance(tree.parent(node), cst.Module):
                self.classes[node.name.value] = node
        self._scope_cache: dict[cst.FunctionDef | None, list[cst.CSTNode]] = {}
        # `torch.seed()` calls whose fresh seed the converter makes rank 0's on every rank (filled
        # by convert's analysis once it knows the entry; lint's reading leaves it empty)
        self.shared_seeds: set[int] = set()
        self._assignment_cache: dict[cst.FunctionDef | None, dict[str, list[tuple[cst.CSTNode, int | None]]]] = {}
        self._global_writers: dict[str, list[cst.FunctionDef]] | None = None  # `global_writers`, by name
        self._calls_in_cache: dict[cst.FunctionDef | None, list[cst.Call]] = {}
        self._loop_target_cache: dict[cst.FunctionDef | None, set[str]] = {}
        self._augmented_cache: dict[cst.FunctionDef | None, dict[str, list[cst.BaseExpression]]] = {}
        self._calls_cache: dict[cst.FunctionDef, list[tuple[cst.Call, cst.FunctionDef | None]]] = {}
        self._returns_cache: dict[cst.FunctionDef, list[cst.BaseExpression]] = {}
        self._facts: dict[Callable, object] = {}
        # by id, holding the call so that the id stays its own: (call, what it runs)
        self._callee_cache: dict[tuple[int, int], tuple[cst.Call, tuple[cst.FunctionDef, int] | None]] = {}
        self._resolving: set[tuple[int, int]] = set()
        self._instances_followed: set[tuple[int, int]] = set()  # (name, caller) being followed by `_handed_instance`

    # --- scopes ----------------------------------------------------------------------

    def scope_nodes(self, function: cst.FunctionDef | None) -> list[cst.CSTNode]:
        """Nodes that run in `function` (the module when None), in source order, nested defs excluded."""
        nodes = self._scope_cache.get(function)
        if nodes is None:
            root: cst.CSTNode = function.body if function is not None else self.tree.module
            nodes = self._scope_cache[function] = self.tree.walk_skipping(root, _NEW_SCOPES)
        return nodes

    def owner_class(self, function: cst.FunctionDef | None) -> cst.ClassDef | None:
        return self.tree.enclosing_class(function) if function is not None else None

    def in_dataset(self, function: cst.FunctionDef | None) -> bool:
        """Whether `function` is a method of a Dataset: it runs on every rank and in DataLoader
        workers, where a rank guard or a collective would hang or crash (convert leaves it alone,
        lint does not flag it)."""
        cls = self.owner_class(function) if function is not None else None
        seen = set()
        while cls is not None and cls not in seen:
            seen.add(cls)
            if any(s.is_dataset_class(self.tree.qname(b.value)) for b in cls.bases):
                return True
            local = [dotted(b.value) for b in cls.bases]
            cls = next((self.classes[n] for n in local if n in self.classes), None)
        return False

    def kept_values(self, attribute: cst.Attribute, function: cst.FunctionDef | None) -> list[Origin]:
        """`trainer.out_dir`, where `trainer` is an object of a same-file class: what its methods
        bind to `self.out_dir` (`self.out_dir = Path(out_dir)` in `__init__`)."""
        cls = self.instance_of(attribute.value, function) if dotted(attribute.value) != "self" else None
        if cls is None:
            return []
        found = []
        for method in self.class_methods(cls).values():
            for value, index in self.assignments(method, f"self.{attribute.attr.value}"):
                found += self.origins(value, method, index)
        return found

    def subclasses(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """`cls` and the same-file classes built on it (`class MyTrainer(BaseTrainer)`), whose
        methods see what its methods keep in `self`."""
        found = [cls]
        for other in found:
            found += [c for c in self.classes.values() if c not in found and any(self.classes.get(dotted(b.value) or "") is other for b in c.bases)]
        return found

    def class_methods(self, cls: cst.ClassDef, seen: frozenset = frozenset()) -> dict[str, cst.FunctionDef]:
        """Methods of a same-file class by name, with those it inherits from same-file bases."""
        if not cls.bases:
            return dict(self.methods.get(cls, {}))
        methods: dict[str, cst.FunctionDef] = {}
        for base in reversed(cls.bases):  # the first base wins, as in the MRO of simple hierarchies
            name = dotted(base.value)
            if name in self.classes and self.classes[name] is not cls and cls not in seen:
                methods.update(self.class_methods(self.classes[name], seen | {cls}))
        methods.update(self.methods.get(cls, {}))
        return methods

    def fact(self, factory: Callable[[Program], T]) -> T:
        """One `factory(self)` per program: an analysis convert and lint share (the training
        loops, analysis/loops.py), built on first use."""
        if factory not in self._facts:
            self._facts[factory] = factory(self)
        return self._facts[factory]  # type: ignore[return-value]

    def companion(self, module: str) -> Program | None:
        """One of the script's own modules, read (never rewritten) from the script's directory:
        `utils` from `utils.py` (or `utils/__init__.py`), once. None when there is no such file."""
        if self.directory is None:
            return None
        if module not in self._companions:
            self._companions[module] = None
            parts = module.split(".")
            for candidate in (self.directory.joinpath(*parts).with_suffix(".py"), self.directory.joinpath(*parts, "__init__.py")):
                try:
                    if candidate.is_file() and candidate.stat().st_size < COMPANION_LIMIT:
                        self._companions[module] = Program(Tree.parse(cst.parse_module(candidate.read_text())))
                        break
                except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
                    break
        return self._companions[module]

    def companion_class(self, qualified: str | None) -> tuple[Program, cst.ClassDef] | None:
        """A top-level class of one of the script's own modules (`r10_meters.AverageMeter`), with
        the program of that module."""
        if not qualified or "." not in qualified:
            return None
        module, name = qualified.rsplit(".", 1)
        companion = self.companion(module)
        if companion is None or name not in companion.classes or companion.tree.function(companion.classes[name]) is not None:
            return None
        return companion, companion.classes[name]

    def companion_function(self, qualified: str | None) -> tuple[Program, cst.FunctionDef] | None:
        """A top-level function of one of the script's own modules (`utils.save_history`)."""
        if not qualified or "." not in qualified:
            return None
        module, name = qualified.rsplit(".", 1)
        companion = self.companion(module)
        if companion is None or name not in companion.functions:
            return None
        return companion, companion.functions[name]

    def param_names(self, function: cst.FunctionDef) -> list[str]:
        names = [p.name.value for p in _params(function)]
        if self.owner_class(function) is not None and names and not self._is_static(function):
            names = names[1:]  # self / cls
        return names

    def all_param_names(self, function: cst.FunctionDef) -> set[str]:
        return {q.name.value for q in _named_params(function)}

    def default(self, function: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
        """The default of `function`'s parameter `name` (None: it has none)."""
        return next((p.default for p in _named_params(function) if p.name.value == name), None)

    @staticmethod
    def _is_static(function: cst.FunctionDef) -> bool:
        return _decorated(function, "staticmethod")

    # --- assignments -----------------------------------------------------------------

    @staticmethod
    def element(value: cst.CSTNode, index: int | None) -> cst.CSTNode:
        """What an assignment gives one target: element `index` of `a, b = x, y`, else the value."""
        if index is not None and isinstance(value, (cst.Tuple, cst.List)) and index < len(value.elements):
            return value.elements[index].value
        return value

    def assignments(self, function: cst.FunctionDef | None, target: str) -> list[tuple[cst.CSTNode, int | None]]:
        """Statements assigning `target` (a dotted name) in a scope: (value, tuple index)."""
        if function not in self._assignment_cache:
            index: dict[str, list[tuple[cst.CSTNode, int | None]]] = {}
            for node in self.scope_nodes(function):
                kind = type(node)
                if kind is cst.Assign:
                    pairs = [(t.target, node.value) for t in node.targets]
                elif kind is cst.AnnAssign and node.value is not None:
                    pairs = [(node.target, node.value)]
                elif kind is cst.WithItem and node.asname is not None:
                    pairs = [(node.asname.name, node.item)]
                else:
                    continue
                for target_node, value in pairs:
                    for name, position in self.targets(target_node):
                        index.setdefault(name, []).append((value, position))
            self._assignment_cache[function] = index
        return self._assignment_cache[function].get(target, [])

    def global_writers(self, name: str) -> list[cst.FunctionDef]:
        """The functions that declare `name` global and bind it."""
        if self._global_writers is None:
            found: dict[str, list[cst.FunctionDef]] = {}
            for node in self.tree.of_type(cst.Global):
                function = self.tree.function(node)
                for item in node.names:
                    if function is not None and self.assignments(function, item.name.value) and function not in found.get(item.name.value, []):
                        found.setdefault(item.name.value, []).append(function)
            self._global_writers = found
        return self._global_writers.get(name, [])

    def bound_once(self, function: cst.FunctionDef | None, target: str) -> cst.CSTNode | None:
        """The one value `target` is bound to, whole, in a scope (`bs = BatchSampler(...)`), or None."""
        values = [value for value, index in self.assignments(function, target) if index is None]
        return values[0] if len(values) == 1 else None

    def bound_where_read(self, name: str, function: cst.FunctionDef | None) -> tuple[cst.CSTNode | None, cst.FunctionDef | None]:
        """The one value a name read in `function` is bound to, and the scope that binds it: the
        function's own, else the module's (`load = torch.load` at the top, read in `main`)."""
        scope = function if function is not None and self.binds(function, name) else None
        return self.bound_once(scope, name), scope

    def partial_of(self, value: cst.CSTNode | None) -> cst.BaseExpression | None:
        """The function `functools.partial(f, ...)` fixes arguments of: `f`; None for any other value."""
        if type(value) is cst.Call and self.tree.qname(value.func) == "functools.partial" and value.args:
            return value.args[0].value
        return None

    @staticmethod
    def targets(target: cst.BaseExpression) -> list[tuple[str, int | None]]:
        """The dotted names an assignment target binds, with their tuple positions."""
        name = dotted(target)
        if name is not None:
            return [(name, None)]
        if isinstance(target, (cst.Tuple, cst.List)):
            return [(n, i) for i, el in enumerate(target.elements) if (n := dotted(el.value)) is not None]
        return []

    def binds(self, function: cst.FunctionDef | None, name: str) -> bool:
        """Whether `name` is a parameter or assigned in `function` (module when None)."""
        if function is not None and name in self.all_param_names(function):
            return True
        return bool(self.assignments(function, name)) or name in self.loop_targets(function) or (function is None and bool(self.global_writers(name)))

    def parsed_options(self, name: str, function: cst.FunctionDef) -> bool:
        """`args = parser.parse_args()` (or `parse_known_args()[0]`, or a same-file `get_args()`
        returning it), bound once in `function`: the same options on every rank."""
        values = self.assignments(function, name)
        if len(values) != 1 or name in self.loop_targets(function):
            return False
        value = self.element(*values[0])
        while type(value) is cst.Subscript:
            value = value.value
        found = s.method_call(value)
        if found is None and type(value) is cst.Call and (target := self.callee(value, function)) is not None:
            # `args = get_args()`, a same-file function returning `parser.parse_args()` (helper corpus BS, repro 09)
            returned = self.returns(target[0])
            value = returned[0] if len(returned) == 1 else None
            while type(value) is cst.Subscript:
                value = value.value
            found = s.method_call(value) if value is not None else None
        return found is not None and found[1] in ("parse_args", "parse_known_args")

    def loop_targets(self, function: cst.FunctionDef | None) -> set[str]:
        """The names `for` loops of a scope bind."""
        names = self._loop_target_cache.get(function)
        if names is None:
            names = self._loop_target_cache[function] = set()
            for node in self.scope_nodes(function):
                if type(node) is cst.For:
                    names |= self.names_in(node.target)
        return names

    def loops_binding(self, function: cst.FunctionDef | None, name: str) -> list[cst.For]:
        """The `for` loops of a scope whose target binds `name`."""
        if name not in self.loop_targets(function):
            return []
        return [node for node in self.scope_nodes(function) if type(node) is cst.For and name in self.names_in(node.target)]

    @staticmethod
    def names_in(target: cst.BaseExpression) -> set[str]:
        """The plain names an assignment or loop target binds (`x`, `a, (b, c)`)."""
        if isinstance(target, cst.Name):
            return {target.value}
        if isinstance(target, (cst.Tuple, cst.List)):
            out: set[str] = set()
            for el in target.elements:
                out |= Program.names_in(el.value)
            return out
        return set()

    # --- calls -----------------------------------------------------------------------

    def callee(self, call: cst.Call, caller: cst.FunctionDef | None) -> tuple[cst.FunctionDef, int] | None:
        """The same-file function a call runs, and how many leading parameters it skips."""
        key = (id(call), id(caller))
        cached = self._callee_cache.get(key)
        if cached is None or cached[0] is not call:
            if key in self._resolving:  # asked again while its function value is traced through call sites
                return None
            self._resolving.add(key)
            try:
                cached = self._callee_cache[key] = (call, self._callee(call, caller))
            finally:
                self._resolving.discard(key)
        return cached[1]

    def _walked_functions(self, caller: cst.FunctionDef | None, func: cst.BaseExpression) -> list[cst.FunctionDef]:
        """The same-file functions a call may run when `func` picks one of several, in order, when
        they all take the same parameters; none otherwise. `callee` answers with the first.
        - `for stage in (stage_a, stage_b): stage(model, opt, loader)`, also a function in a place
          of tuples unpacked (`for name, fn, epochs in ((...), ...)`) or made with
          `functools.partial(fn, lr=0.1)` (helper corpus CE, repro 02; CG, repros 08, 10);
        - `STAGES[name](model, opt, loader)` over `STAGES = {"warm": warm}` (CG, repro 01);
        - `getattr(self, f"stage_{name}")()`, or bound to a name first (CK, repro 03, script 09).
        The stages were not known to train: the wrap came after them, or rank 0 ran them alone."""
        if type(func) is cst.Call and self.tree.is_builtin_call(func, "getattr") and len(func.args) >= 2:
            return self._spelled_methods(caller, func)
        if type(func) is cst.Call and type(func.func) is cst.Attribute and func.func.attr.value == "get" and len(func.args) == 1:
            func = cst.Subscript(func.func.value, [cst.SubscriptElement(cst.Index(func.args[0].value))])  # `STAGES.get(name)`
        if type(func) is cst.Subscript and type(func.value) is cst.Name:
            name = func.value.value
            table = self.bound_once(caller, name) if self.binds(caller, name) else self.bound_once(None, name)
            if type(table) is cst.Call and (registry := self.class_made(table)) is not None and not self.binds(caller, name):
                items = self._registered_by_methods(name, registry)  # `STAGES = Registry()`, `@STAGES.register("fit")` (helper corpus CP, repro 03)
            elif type(table) is not cst.Dict:
                return []
            elif table.elements:
                items = [e.value if type(e) is cst.DictElement else None for e in table.elements]
            elif self.binds(caller, name):
                return []
            else:
                items = self._registered(name)
        elif type(func) is cst.Name:
            if func.value not in self.loop_targets(caller):
                bound = self.bound_once(caller, func.value) if caller is not None else None
                return self._walked_functions(caller, bound) if type(bound) is cst.Call and self.tree.is_builtin_call(bound, "getattr") else []
            items = self._looped_items(caller, func.value)
        else:
            return []
        # `functools.partial(run_stage, lr=0.1)` with keywords only: the function, its parameters in place
        items = [
            fixed if (fixed := self.partial_of(v)) is not None and v.args[0].keyword is None and all(a.keyword is not None for a in v.args[1:]) else v  # type: ignore[union-attr]
            for v in items
        ]
        names = [v.value if type(v) is cst.Name else None for v in items]
        if not names or any(n not in self.functions or self.binds(caller, n) for n in names):
            return []
        functions = [self.functions[n] for n in names]  # type: ignore[index]
        return functions if len({tuple(self.param_names(f)) for f in functions}) == 1 else []

    def _registered(self, table: str) -> list[cst.BaseExpression | None]:
        """The functions a module-level registry `STAGES = {}` is filled with: stored by name at
        module level (`STAGES["warm"] = warm`), or by a same-file decorator whose body stores the
        function it is handed (`@stage` with `STAGES[fn.__name__] = fn`, also a decorator factory
        `@stage("warm")` whose inner function does it; helper corpus CK, repro 01)."""
        items: list[cst.BaseExpression | None] = []
        for node in self.scope_nodes(None):
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Subscript and dotted(node.targets[0].target.value) == table:
                items.append(node.value)
        storing = {name for name, function in self.functions.items() if self._stores_handed(function, table)}
        for name, function in self.functions.items():
            for decorator in function.decorators:
                made = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
                if type(made) is cst.Name and made.value in storing:
                    items.append(function.name)
        return items

    def _stores_handed(self, function: cst.FunctionDef, table: str | None) -> bool:
        """Whether `function`, or a function nested in it, stores its first parameter into
        `table[...]` (None: into a dict the object keeps, `self._fns[name] = fn`, or is, `self[name]
        = fn` in a subclass of dict: helper corpus CS, repro 09)."""
        for inner in [function, *self.nested_functions(function)]:
            params = [p for p in self.param_names(inner) if p != "self"]
            if params and any(
                type(value) is cst.Name and value.value == params[0]
                for node in self.scope_nodes(inner) if type(node) is cst.Assign and len(node.targets) == 1
                and type(node.targets[0].target) is cst.Subscript
                and ((stored := dotted(node.targets[0].target.value) or "") == table or (table is None and (stored == "self" or stored.startswith("self."))))
                for value in [node.value]
            ):
                return True
        return False

    def _registered_by_methods(self, name: str, registry: cst.ClassDef) -> list[cst.BaseExpression | None]:
        """The functions decorated by a method of a same-file registry object (`@STAGES.register("fit")`,
        or `@STAGES.add`) whose method stores the function it is handed in a dict the object keeps."""
        methods = self.class_methods(registry)
        found: list[cst.BaseExpression | None] = []
        for function in self.functions.values():
            for decorator in function.decorators:
                made = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
                if type(made) is cst.Attribute and dotted(made.value) == name and (method := methods.get(made.attr.value)) is not None and self._stores_handed(method, None):
                    found.append(function.name)
        return found

    def _looped_items(self, caller: cst.FunctionDef | None, name: str) -> list[cst.BaseExpression | None]:
        """What a loop over a literal tuple or list binds to `name` in turn, also from a place of
        the tuples it unpacks; none when there is no one such loop."""
        loops = [n for n in self.scope_nodes(caller) if type(n) is cst.For and name in self.names_in(n.target)]
        if len(loops) != 1 or type(loops[0].iter) not in (cst.Tuple, cst.List):
            return []
        target, items = loops[0].target, [e.value for e in loops[0].iter.elements]  # type: ignore[attr-defined]
        if type(target) is cst.Name:
            return items
        if type(target) not in (cst.Tuple, cst.List):
            return []
        spots = [i for i, e in enumerate(target.elements) if type(e.value) is cst.Name and e.value.value == name]  # type: ignore[attr-defined]
        if len(spots) != 1 or not all(type(v) in (cst.Tuple, cst.List) and len(v.elements) > spots[0] for v in items):  # type: ignore[attr-defined]
            return []
        return [v.elements[spots[0]].value for v in items]  # type: ignore[attr-defined]

    def _spelled_methods(self, caller: cst.FunctionDef | None, call: cst.Call) -> list[cst.FunctionDef]:
        """`getattr(self, f"stage_{name}")`: the methods of the object's same-file class whose
        names the string can spell, when they all take the same parameters."""
        cls = self.instance_of(call.args[0].value, caller)
        spelled = call.args[1].value
        exact = type(spelled) is cst.SimpleString
        prefix = string_value(spelled) if exact else (
            spelled.parts[0].value if type(spelled) is cst.FormattedString and spelled.parts and type(spelled.parts[0]) is cst.FormattedStringText else None
        )
        if cls is None or not prefix:
            return []
        methods = [m for n, m in sorted(self.class_methods(cls).items()) if (n == prefix if exact else n.startswith(prefix))]
        return methods if methods and len({tuple(self.param_names(m)) for m in methods}) == 1 else []

    def _callee(self, call: cst.Call, caller: cst.FunctionDef | None) -> tuple[cst.FunctionDef, int] | None:
        func = call.func
        if isinstance(func, cst.Name):
            if func.value in self.functions and not (caller is not None and self.binds(caller, func.value)):
                return self.functions[func.value], 0
            if caller is not None and not self.binds(caller, func.value):
                # `def get_batch(): ...` defined in the function that calls it (nanoGPT's fetcher with `nonlocal`)
                nested = [f for f in self.nested_functions(caller) if f.name.value == func.value]
                if len(nested) == 1:
                    return nested[0], 0
            if func.value in self.classes:
                init = self.class_methods(self.classes[func.value]).get("__init__")  # its own, or a same-file base's
                if init is not None:
                    return init, 0
            owner = self.owner_class(caller)
            if owner is not None and caller is not None and _params(caller) and _params(caller)[0].name.value == func.value and _decorated(caller, "classmethod"):
                init = self.class_methods(owner).get("__init__")  # `return cls(model, opt, loader)` in a class method (helper corpus CK, repro 07)
                if init is not None:
                    return init, 0
            passed = self._passed_function(caller, func.value)  # `def fit(step_fn, loader): ... step_fn(batch)`
            if passed is None and (walked := self._walked_functions(caller, func)):
                passed = walked[0]
            return (passed, 0) if passed is not None else None
        if isinstance(func, (cst.Subscript, cst.Call)) and (walked := self._walked_functions(caller, func)):
            return walked[0], 0
        if isinstance(func, cst.Attribute):
            if type(func.value) is cst.Call and type(func.value.func) is cst.Name and func.value.func.value == "super" and not func.value.args:
                owner = self.owner_class(caller)  # `super().__init__(model, opt)`: the same-file base's method
                bases = [self.classes[n] for b in owner.bases if (n := dotted(b.value) or "") in self.classes] if owner is not None else []
                method = next((m for base in bases if (m := self.class_methods(base).get(func.attr.value)) is not None), None)
                return (method, 0) if method is not None else None
            if type(func.value) is cst.Name and func.value.value in self.classes and not (caller is not None and self.binds(caller, func.value.value)):
                # `CheckpointIO.load_into(path, model)`: a static method called on its same-file class (helper corpus CE, repro 06),
                # or a class method (`Snapshot.take(model, epoch)`: CG, script 02)
                method = self.class_methods(self.classes[func.value.value]).get(func.attr.value)
                if method is not None and (_decorated(method, "staticmethod") or _decorated(method, "classmethod")):
                    return method, 0
            cls = self.instance_of(func.value, caller)
            if cls is not None:
                method = self.class_methods(cls).get(func.attr.value)  # its own, or one it inherits from a same-file base
                if method is not None:
                    return method, 0
                held = self._held_function(cls, func.attr.value)  # `self.process_fn(self, batch)`
                if held is not None:
                    return held, 0
        if isinstance(func, cst.Subscript):
            hooked = self._hooked_function(func, caller)  # `self.hooks["after_epoch"](opt, loss)`
            if hooked is not None:
                return hooked, 0
        return None

    def _hooked_function(self, item: cst.Subscript, function: cst.FunctionDef | None) -> cst.FunctionDef | None:
        """The same-file function a dict of hooks holds under a written key, when the dict is
        written out where it is bound (`self.hooks = {"after_epoch": shrink_lr}`)."""
        key = item.slice[0].slice if len(item.slice) == 1 else None
        if type(key) is not cst.Index or type(key.value) is not cst.SimpleString:
            return None
        held = dotted(item.value)
        if held is None:
            return None
        scopes = [function]
        if held.startswith("self.") and (cls := self.owner_class(function)) is not None:
            scopes = list(self.methods.get(cls, {}).values())
        values = [v for scope in scopes for v, i in self.assignments(scope, held) if i is None]
        if len(values) != 1 or type(values[0]) is not cst.Dict:
            return None
        for element in values[0].elements:
            if type(element) is cst.DictElement and type(element.key) is cst.SimpleString and element.key.value == key.value.value:
                value = element.value
                return self.functions.get(value.value) if type(value) is cst.Name else None
        return None

    def _passed_function(self, function: cst.FunctionDef | None, param: str) -> cst.FunctionDef | None:
        """The same-file function that every call of `function` passes for its parameter `param`
        (a step function handed to a loop: `fit(train_step, loader)`), when `function` binds the
        parameter nowhere else."""
        if function is None or param not in self.param_names(function) or self.assignments(function, param):
            return None
        found: set[cst.FunctionDef] = set()
        for call, site in self.call_sites(function):
            argument = self.argument_for(call, function, param)
            if type(argument) is not cst.Name:
                return None
            if argument.value in self.functions and not (site is not None and self.binds(site, argument.value)):
                found.add(self.functions[argument.value])
            elif (passed := self._passed_function(site, argument.value)) is not None:
                found.add(passed)
            else:
                return None
        return found.pop() if len(found) == 1 else None

    def _held_function(self, cls: cst.ClassDef, attr: str) -> cst.FunctionDef | None:
        """The same-file function an instance attribute holds when its only assignment stores a
        parameter of `__init__` (`self.process_fn = process_fn`, the Ignite Engine layout) and every
        construction passes that function."""
        init = self.methods.get(cls, {}).get("__init__")
        bound = [
            (method, value)
            for method in self.methods.get(cls, {}).values()
            for value, index in self.assignments(method, f"self.{attr}")
            if index is None
        ]
        if init is None or len(bound) != 1 or bound[0][0] is not init or type(bound[0][1]) is not cst.Name:
            return None
        return self._passed_function(init, bound[0][1].value)

    def instance_of(self, obj: cst.BaseExpression, function: cst.FunctionDef | None) -> cst.ClassDef | None:
        """The same-file class an object is an instance of (`stopper = EarlyStopping()`, or
        `self.stopper = EarlyStopping()` in a method), when its assignment says so directly, or
        when it is made right there (`Trainer(model).fit(...)`)."""
        if type(obj) is cst.Call and (made := self.class_made(obj)) is not None:
            return made
        if type(obj) is cst.Attribute and obj.attr.value == "module":  # `model.module`: the model a DDP wrapper holds
            inner = self.instance_of(obj.value, function)
            if inner is not None and not any(self.assignments(m, "self.module") for m in self.methods.get(inner, {}).values()):
                return inner
        held = dotted(obj) if type(obj) is cst.Attribute else None
        if held is not None and held.startswith("self.") and held.count(".") == 1 and function is not None:
            cls = self.owner_class(function)  # `self.stopper = EarlyStopping()` in a method of the class
            for method in self.methods.get(cls, {}).values() if cls is not None else ():
                for value, index in self.assignments(method, held):
                    if index is None and type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in self.classes:
                        return self.classes[value.func.value]
            # `self.cfg = cfg` in `__init__`, built `Trainer(cfg, ...)` after `cfg = Config()` (helper corpus CP, script 04)
            init = self.methods.get(cls, {}).get("__init__") if cls is not None else None
            kept = self.kept_by_init(init, held)
            handed = {
                self.class_made(k.argument) if type(k.argument) is cst.Call
                else self._handed_instance(k.argument, k.caller) if type(k.argument) is cst.Name else None
                for k in kept
            }  # fmt: skip
            return handed.pop() if len(handed) == 1 and kept else None
        if not isinstance(obj, cst.Name):
            return None
        if obj.value == "self" and function is not None:
            return self.owner_class(function)
        if function is not None and obj.value in self.param_names(function) and not self.assignments(function, obj.value):
            # `def main(cfg): cfg.save(...)`, called `main(Cfg())`: the class every caller hands (helper corpus BX, repro 04)
            handed = [(self.argument_for(call, function, obj.value), caller) for call, caller in self.call_sites(function)]
            classes = {
                self.classes.get(a.func.value) if type(a) is cst.Call and type(a.func) is cst.Name
                # `cfg = TrainConfig()` in the caller, then `save_checkpoint(cfg, ...)` (helper corpus BZ, script 08)
                else self._handed_instance(a, caller) if type(a) is cst.Name else None
                for a, caller in handed
            }  # fmt: skip
            return classes.pop() if len(classes) == 1 and handed else None
        scope = function if function is not None and self.assignments(function, obj.value) else None
        for value, index in self.assignments(scope, obj.value):
            value = unchained(value)  # `model = Net().to(device)`
            if index is None and isinstance(value, cst.Call) and self.tree.qname(value.func) in s.DDP and value.args:
                value = unchained(value.args[0].value)  # `model = DDP(Net().to(device), ...)`: `model.module` is a Net
            if index is None and isinstance(value, cst.Call) and (made := self.class_made(value)) is not None:
                return made
        return None

    def _handed_instance(self, name: cst.Name, caller: cst.FunctionDef | None) -> cst.ClassDef | None:
        """The class of a caller's object handed on by name, once (a cycle of calls gives none)."""
        key = (id(name), id(caller))
        if key in self._instances_followed:
            return None
        self._instances_followed.add(key)
        try:
            return self.instance_of(name, caller)
        finally:
            self._instances_followed.discard(key)

    def class_made(self, call: cst.Call) -> cst.ClassDef | None:
        """The same-file class a call makes an object of: `Snapshot(...)`, or a class method of it
        that returns `cls(...)` (`Snapshot.from_file(path)`: helper corpus CG, script 02)."""
        func = call.func
        if type(func) is cst.Name:
            return self.classes.get(func.value)
        if type(func) is not cst.Attribute or type(func.value) is not cst.Name or func.value.value not in self.classes:
            return None
        cls = self.classes[func.value.value]
        method = self.class_methods(cls).get(func.attr.value)
        if method is None or not _decorated(method, "classmethod"):
            return None
        first = _params(method)[0].name.value if _params(method) else None
        returned = [self.bound_once(method, r.value) if type(r) is cst.Name else r for r in self.returns(method)]  # also `m = cls(...); return m`
        return cls if returned and all(type(r) is cst.Call and type(r.func) is cst.Name and r.func.value == first for r in returned) else None

    def called_repeatedly(self, function: cst.FunctionDef, within: cst.CSTNode | None = None) -> bool:
        """Whether `function` runs more than once: called at several places, or in a loop (only
        the calls inside `within`, when given)."""
        sites = [call for call, _ in self.call_sites(function) if within is None or self.tree.inside(call, within)]
        comprehensions = (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)  # `[train_one_seed(s) for s in seeds]` (helper corpus BO, script 09)
        return len(sites) > 1 or any(self.tree.loops(call) or any(type(a) in comprehensions for a in self.tree.ancestors(call)) for call in sites)

    def calls_in(self, function: cst.FunctionDef | None) -> list[cst.Call]:
        calls = self._calls_in_cache.get(function)
        if calls is None:
            calls = self._calls_in_cache[function] = [n for n in self.scope_nodes(function) if type(n) is cst.Call]
        return calls

    def augmented(self, function: cst.FunctionDef | None, target: str) -> list[cst.BaseExpression]:
        """Values added to, multiplied into, ... `target` in a scope (`total += loss`)."""
        index = self._augmented_cache.get(function)
        if index is None:
            index = self._augmented_cache[function] = {}
            for node in self.scope_nodes(function):
                if type(node) is cst.AugAssign and (name := dotted(node.target)) is not None:
                    index.setdefault(name, []).append(node.value)
        return index.get(target, [])

    def call_sites(self, function: cst.FunctionDef) -> list[tuple[cst.Call, cst.FunctionDef | None]]:
        """Calls of `function` in this file, with the function each call is made from."""
        if function not in self._calls_cache:
            sites = []
            for caller in [None, *self.all_functions]:
                for call in self.calls_in(caller):
                    target = self.callee(call, caller)
                    if target is not None and target[0] is function:
                        sites.append((call, caller))
                    elif target is not None and function in self._walked_functions(caller, call.func):
                        sites.append((call, caller))  # `stage(model, ...)` over `(stage_a, stage_b)`: a call of each
            self._calls_cache[function] = sites
        return self._calls_cache[function]

    def kept_by_init(self, init: cst.FunctionDef | None, attribute: str) -> list[Kept]:
        """The constructions handing `init` (an `__init__`) what it keeps as `attribute`
        (`self.model`), bound there once from one of its parameters."""
        if init is None or init.name.value != "__init__" or not attribute.startswith("self.") or attribute.count(".") != 1:
            return []
        bound = [v for v, i in self.assignments(init, attribute) if i is None]
        kept = unchained(bound[0]) if len(bound) == 1 else None  # type: ignore[arg-type]
        if type(kept) is not cst.Name or kept.value not in self.param_names(init):
            return []
        found = []
        for call, caller in self.call_sites(init):
            argument = self.argument_for(call, init, kept.value)
            if argument is None:
                continue
            parent = self.tree.parent(call)
            named = type(parent) is cst.Assign and len(parent.targets) == 1 and type(parent.targets[0].target) is cst.Name
            found.append(Kept(call, caller, argument, parent.targets[0].target.value if named else None))  # type: ignore[union-attr]
        return found

    def argument_for(self, call: cst.Call, function: cst.FunctionDef, param: str) -> cst.BaseExpression | None:
        """The argument expression `call` passes for `function`'s parameter `param`."""
        for a in call.args:
            if a.keyword is not None and a.keyword.value == param:
                return a.value
        names = self.param_names(function)
        if param not in names:
            return None
        index = names.index(param)
        positional = [a for a in call.args if a.keyword is None and not a.star]
        return positional[index].value if index < len(positional) else None

    def parameter_for(self, call: cst.Call, function: cst.FunctionDef, argument: cst.BaseExpression) -> str | None:
        """The parameter of `function` that receives `argument` at `call`."""
        names = self.param_names(function)
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for i, a in enumerate(positional):
            if a.value is argument and i < len(names):
                return names[i]
        for a in call.args:
            if a.value is argument and a.keyword is not None:
                return a.keyword.value
        return None

    def returns(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        values = self._returns_cache.get(function)
        if values is None:
            nodes = self.scope_nodes(function)
            values = self._returns_cache[function] = [n.value for n in nodes if type(n) is cst.Return and n.value is not None]
        return values

    # --- value origins ---------------------------------------------------------------

    def origins(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, index: int | None = None) -> list[Origin]:
        """Where the value of `expr` (element `index` of it, for tuple unpacking) comes from."""
        return self._origins(expr, function, index, set())

    def _origins(self, expr, function, index, seen) -> list[Origin]:
        key = (id(expr), index)
        if key in seen:
            return []
        seen.add(key)
        if isinstance(expr, cst.IfExp):  # either branch
            return self._origins(expr.body, function, index, seen) + self._origins(expr.orelse, function, index, seen)
        if isinstance(expr, cst.BooleanOperation):  # `a or b`: either operand
            return self._origins(expr.left, function, index, seen) + self._origins(expr.right, function, index, seen)
        if isinstance(expr, (cst.Tuple, cst.List)) and index is not None:
            elements = expr.elements
            return self._origins(elements[index].value, function, None, seen) if index < len(elements) else []
        if isinstance(expr, cst.Call):
            target = self.callee(expr, function)
            if target is not None and not (isinstance(expr.func, cst.Name) and expr.func.value in self.classes):
                callee, _ = target
                found = []
                for value in self.returns(callee):
                    found += self._origins(value, callee, index, seen)
                if found:
                    return found
            return [Origin(expr, function)] if index is None else []
        if type(expr) is cst.Subscript and index is None:  # `loaders[phase]`: the dict's values
            values = self._dict_values(expr, function, seen)
            if values:
                return values
        name = dotted(expr)
        if name is None or name in ("None", "True", "False"):
            return [Origin(expr, function)] if index is None else []
        if name.startswith("self.") and function is not None:
            cls = self.owner_class(function)
            if cls is not None:
                found = []
                for method in self.methods.get(cls, {}).values():
                    for value, i in self.assignments(method, name):
                        found += self._origins(value, method, i if i is not None else index, seen)
                return found or ([Origin(expr, function)] if index is None else [])
        if "." in name and name.count(".") == 1 and index is None and (fields := self._yielded_fields(name, function)):
            found = []  # `for fold in folds(): ... fold.train`, the generator yielding `Fold(i, DataLoader(...))` (helper corpus CP, repro 04)
            for value, generator in fields:
                found += self._origins(value, generator, None, seen)
            return found
        if "." in name:
            return [Origin(expr, function)] if index is None else []
        # a plain name: parameter, local, or global; a closure's variable is the enclosing function's (`loader` in a nested `get_batch()`)
        while function is not None and not self.binds(function, name) and (enclosing := self.tree.function(function)) is not None and self.binds(enclosing, name):
            function = enclosing
        if function is not None and name in self.all_param_names(function):
            found = []
            for call, caller in self.call_sites(function):
                argument = self.argument_for(call, function, name)
                if argument is not None:
                    found += self._origins(argument, caller, index, seen)
            return found
        if function is not None and self.assignments(function, name) and function not in self.global_writers(name):
            scopes = [function]
        else:  # a global: bound at the top level, or in a function that declares it `global` (`def setup(): global loader`)
            scopes = [None, *self.global_writers(name)]
        found = []
        for scope in scopes:
            for value, i in self.assignments(scope, name):
                if i is not None and index is not None:
                    continue
                found += self._origins(value, scope, i if i is not None else index, seen)
        return found

    def resolve(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> list[Origin]:
        """Where a value comes from, as `origins` finds it, and further: through attributes the
        scope or the module assigns (`args.lr = 0.1`), and through a parameter's default (what it
        holds when a caller leaves it out). Empty: unknown."""
        return self._resolve(expr, function, set())

    def _resolve(self, expr, function, seen) -> list[Origin]:
        if id(expr) in seen:
            return []
        seen.add(id(expr))
        if isinstance(expr, cst.IfExp):
            return self._resolve(expr.body, function, seen) + self._resolve(expr.orelse, function, seen)
        if isinstance(expr, cst.BooleanOperation):
            return self._resolve(expr.left, function, seen) + self._resolve(expr.right, function, seen)
        if isinstance(expr, cst.Name) and expr.value in ("None", "True", "False"):
            return [Origin(expr, function)]
        name = dotted(expr)
        if name is not None and "." in name and not name.startswith("self."):
            scopes = [function, None] if function is not None else [None]
            values = [(v, scope) for scope in scopes for v, i in self.assignments(scope, name) if i is None]
            if not values:
                return [Origin(expr, function)]
            out: list[Origin] = []
            for value, scope in values:
                out += self._resolve(value, scope, seen)
            return out
        out = []
        if isinstance(expr, cst.Name) and function is not None:
            default = self.default(function, expr.value)
            if default is not None:
                out += self._resolve(default, self.tree.function(function), seen)
        for origin in self.origins(expr, function):
            if isinstance(origin.node, (cst.IfExp, cst.BooleanOperation)) or (
                origin.node is not expr and dotted(origin.node) is not None
            ):
                out += self._resolve(origin.node, origin.function, seen)
            else:
                out.append(origin)
        return out

    def _dict_values(self, item: cst.Subscript, function, seen) -> list[Origin]:
        """The values `d[key]` may read when `d` is a dict literal or comprehension: the value
        under a literal key, or every value; when it is a list literal, its elements and what
        the scope appends to it (`frames = []; frames.append(Image.fromarray(a)); frames[0]`).
        Empty when `d` is anything else."""
        if len(item.slice) != 1 or type(item.slice[0].slice) is not cst.Index:
            return []
        key = string_value(item.slice[0].slice.value)
        found: list[Origin] = []
        for origin in self._origins(item.value, function, None, seen) or self._yielded(item.value, function):
            node = origin.node
            if type(node) is cst.DictComp:
                found += self._origins(node.value, origin.function, None, seen)
            elif type(node) is cst.Dict and all(type(e) is cst.DictElement for e in node.elements):
                chosen = [e for e in node.elements if key is not None and string_value(e.key) == key] or list(node.elements)
                for element in chosen:
                    found += self._origins(element.value, origin.function, None, seen)
            elif type(node) is cst.List and all(type(e) is cst.Element for e in node.elements) and (listed := dotted(item.value)):
                for element in node.elements:
                    found += self._origins(element.value, origin.function, None, seen)
                for call in self.calls_in(origin.function):
                    if type(call.func) is cst.Attribute and call.func.attr.value == "append" and dotted(call.func.value) == listed and len(call.args) == 1:
                        found += self._origins(call.args[0].value, origin.function, None, seen)
                if not found:
                    return []
            else:
                return []
        return found

    def _yielded(self, name: cst.BaseExpression, function: cst.FunctionDef | None) -> list[Origin]:
        """What a same-file generator yields, for the variable of the one loop over it that binds
        `name` whole (`for split in folds(): ... split["train"]`; helper corpus CK, repro 02)."""
        if type(name) is not cst.Name:
            return []
        loops = [n for n in self.scope_nodes(function) if type(n) is cst.For and type(n.target) is cst.Name and n.target.value == name.value]
        if len(loops) != 1 or type(loops[0].iter) is not cst.Call or (target := self.callee(loops[0].iter, function)) is None:
            return []
        generator = target[0]
        return [Origin(n.value, generator) for n in self.scope_nodes(generator) if type(n) is cst.Yield and n.value is not None and type(n.value) is not cst.From]

    def _yielded_fields(self, name: str, function: cst.FunctionDef | None) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None]]:
        """`fold.train` of a loop variable over a same-file generator that yields a record of this
        file (`Fold = namedtuple("Fold", ["index", "train"])`, or a NamedTuple class), made with
        the field by keyword or in its place: what each yield puts there."""
        base, attr = name.split(".")
        found = []
        for origin in self._yielded(cst.Name(base), function) if self.binds(function, base) else []:
            made = origin.node
            if type(made) is not cst.Call or type(made.func) is not cst.Name:
                return []
            keyword = next((a.value for a in made.args if a.keyword is not None and a.keyword.value == attr), None)
            fields = self._record_fields(made.func.value)
            positional = [a.value for a in made.args if a.keyword is None and not a.star]
            if keyword is None and attr in fields and fields.index(attr) < len(positional):
                keyword = positional[fields.index(attr)]
            if keyword is None:
                return []
            found.append((keyword, origin.function))
        return found

    def _record_fields(self, name: str) -> list[str]:
        """The fields of a record type of this file, in order: `namedtuple("Fold", ["index",
        "train"])` (or "index train"), or a class deriving NamedTuple with annotated fields."""
        made = self.bound_once(None, name)
        if type(made) is cst.Call and (self.tree.qname(made.func) or "").endswith("namedtuple") and len(made.args) >= 2:
            listed = made.args[1].value
            if type(listed) in (cst.List, cst.Tuple):
                return [string_value(e.value) or "" for e in listed.elements]  # type: ignore[attr-defined]
            text = string_value(listed)
            return text.replace(",", " ").split() if text else []
        cls = self.classes.get(name)
        if cls is not None and isinstance(cls.body, cst.IndentedBlock):
            return [
                small.target.value for statement in cls.body.body if isinstance(statement, cst.SimpleStatementLine)
                for small in statement.body if type(small) is cst.AnnAssign and type(small.target) is cst.Name
            ]
        return []

    # --- what functions do, transitively --------------------------------------------------

    def called_from(self, roots: set[cst.FunctionDef]) -> set[cst.FunctionDef]:
        """`roots` and the same-file functions they run, directly or through others."""
        seen = set(roots)
        work = list(roots)
        while work:
            caller = work.pop()
            for call in self.calls_in(caller):
                target = self.callee(call, caller)
                if target is not None and target[0] not in seen:
                    seen.add(target[0])
                    work.append(target[0])
        return seen

    def reaching(self, predicate: Callable[[cst.Call, cst.FunctionDef | None], bool]) -> set[cst.FunctionDef]:
        """Same-file functions that make a call `predicate` accepts, directly or through
        other same-file functions they call."""
        found: set[cst.FunctionDef] = set()
        changed = True
        while changed:
            changed = False
            for function in self.all_functions:
                if function in found:
                    continue
                for call in self.calls_in(function):
                    target = self.callee(call, function)
                    if predicate(call, function) or (target is not None and target[0] in found):
                        found.add(function)
                        changed = True
                        break
        return found

    # --- training ----------------------------------------------------------------------

    @cached_property
    def backward_calls(self) -> list[cst.Call]:
        """`loss.backward()` calls, in preorder."""
        return [c for c in self.tree.calls() if s.is_backward(c)]

    @cached_property
    def training_functions(self) -> set[cst.FunctionDef]:
        """Same-file functions that call backward(), directly or through same-file functions."""
        return self.reaching(lambda call, _function: s.is_backward(call))

    @cached_property
    def training_loops(self) -> list[cst.For | cst.While]:
        """Loops (batch and epoch loops alike) whose body calls backward(), directly or through
        same-file functions, in preorder."""
        backward, trains = set(self.backward_calls), self.training_functions
        loops = []
        for node in self.tree.of_type(cst.For, cst.While):
            function = self.tree.function(node)
            for call in self.tree.calls(node.body):
                target = self.callee(call, function)
                if call in backward or (target is not None and target[0] in trains):
                    loops.append(node)
                    break
        return loops

    # --- data loaders ----------------------------------------------------------------

    def unwrap_iterable(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """`enumerate(tqdm(loader))` -> `loader`."""
        while isinstance(node, cst.Call) and node.args and self.tree.qname(node.func) in ITERABLE_WRAPPERS:
            node = node.args[0].value
        return node

    def loader(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> cst.BaseExpression | None:
        """The DataLoader an iterable comes from, as spelled in `function` (`pbar = tqdm(loader)` -> `loader`),
        or the same-file object that iterates one (`train_dl = DeviceDataLoader(loader, device)`)."""
        for _ in range(5):
            expr = self.unwrap_iterable(expr)
            origins = self.origins(expr, function)
            loaders = [o for o in origins if self.tree.is_call_to(o.node, s.DATALOADER) or self._wrapped_loaders(o)]
            if loaders and len(loaders) < len(origins) and type(expr) is cst.Name:
                # `batches = itertools.islice(loader, skip, None) if resuming else loader`: not always
                # a loader itself; the one name inside that always is
                inner = {
                    n.value: n for value, _ in self.assignments(function, expr.value) for n in self.tree.walk(value)
                    if type(n) is cst.Name and n.value != expr.value and (found := self.origins(n, function))
                    and all(o in loaders or self.tree.is_call_to(o.node, s.DATALOADER) for o in found)
                }
                if len(inner) == 1:
                    return next(iter(inner.values()))
            if loaders:
                return expr
            wrapped = [o.node for o in origins if o.function is function and self.unwrap_iterable(o.node) is not o.node]
            if not wrapped:
                return None
            expr = wrapped[0]
        return None

    def dataloaders(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> list[Origin]:
        """The `DataLoader(...)` calls an iterable comes from (through a same-file wrapper too)."""
        loader = self.loader(expr, function)
        if loader is None:
            return []
        found = []
        for o in self.origins(loader, function):
            found += [o] if self.tree.is_call_to(o.node, s.DATALOADER) else self._wrapped_loaders(o)
        return found

    def kept_arguments(self, call: cst.CSTNode) -> dict[str, cst.BaseExpression]:
        """`Flow(model)`, `DeviceDataLoader(loader, device)`: for a call of a same-file class, the
        attributes its `__init__` keeps an argument in (`self.model = model`), with the argument
        at this call."""
        if not (type(call) is cst.Call and type(call.func) is cst.Name and call.func.value in self.classes):
            return {}
        init = self.class_methods(self.classes[call.func.value]).get("__init__")
        kept: dict[str, cst.BaseExpression] = {}
        for node in self.scope_nodes(init) if init is not None else ():
            if type(node) is not cst.Assign:
                continue
            for target, value in _unpacked(node):  # `self.model = model`, `self.model, self.T = model, T`
                argument = self.argument_for(call, init, value.value) if type(value) is cst.Name else None
                if argument is not None and (attr := dotted(target)) and attr.startswith("self."):
                    kept[attr] = argument
        return kept

    def helper_returns(self, call: cst.Call, function: cst.FunctionDef | None) -> list[Origin] | None:
        """What a call of a same-file function (not a class) returns, a returned parameter read
        as this call's argument (`to_device(Net(), device)` -> `Net()`); returns of lists and
        dicts (`[to_device(x, device) for x in data]`, for batches) are left out. None: no such call."""
        target = self.callee(call, function)
        if target is None or (type(call.func) is cst.Name and call.func.value in self.classes):
            return None
        callee = target[0]
        params = self.param_names(callee)
        found = []
        for value in self.returns(callee):
            inner = s.unchained(value)
            if isinstance(inner, (cst.List, cst.ListComp, cst.Tuple, cst.GeneratorExp, cst.Dict, cst.DictComp)):
                continue
            argument = self.argument_for(call, callee, inner.value) if type(inner) is cst.Name and inner.value in params else None
            found.append(Origin(argument, function) if argument is not None else Origin(inner, callee))
        return found

    def loader_wrapper(self, origin: Origin) -> tuple[str, cst.BaseExpression] | None:
        """`DeviceDataLoader(loader, device)`: a same-file class keeping an argument as
        `self.<attr>` and iterating it in `__iter__` (moving each batch, say): the attribute, and
        the argument at this call."""
        kept = self.kept_arguments(origin.node)
        if not kept:
            return None
        iterate = self.class_methods(self.classes[origin.node.func.value]).get("__iter__")  # type: ignore[attr-defined]
        for node in self.scope_nodes(iterate) if iterate is not None else ():
            attr = dotted(self.unwrap_iterable(node.iter)) if type(node) is cst.For else dotted(node.item) if type(node) is cst.From else None
            if attr in kept:
                return attr[len("self."):], kept[attr]
        return None

    def _wrapped_loaders(self, origin: Origin) -> list[Origin]:
        wrapped = self.loader_wrapper(origin)
        if wrapped is None:
            return []
        return [o for o in self.origins(wrapped[1], origin.function) if self.tree.is_call_to(o.node, s.DATALOADER)]

    def sampler_owner(self, loader: cst.BaseExpression, function: cst.FunctionDef | None, spelled: str | None = None) -> str:
        """How `loader` (spelled so) reaches the object whose `.sampler` to use: itself, the
        attribute a same-file wrapper keeps it in (`train_dl.dl`), or its torch BatchSampler
        (`loader.batch_sampler`)."""
        spelled = spelled if spelled is not None else code(loader)
        for origin in self.origins(loader, function):
            wrapped = self.loader_wrapper(origin)
            if wrapped is not None and self._wrapped_loaders(origin):
                return f"{spelled}.{wrapped[0]}"
            if self.tree.is_call_to(origin.node, s.DATALOADER) and self.batch_sampler(getattr(s.arg(origin.node, 4, "batch_sampler"), "value", None), origin.function):
                return f"{spelled}.batch_sampler"  # its `.sampler` is the one the BatchSampler batches
        return spelled

    def batch_sampler(self, value: cst.BaseExpression | None, function: cst.FunctionDef | None) -> cst.Call | None:
        """torch's BatchSampler call a `batch_sampler=` value is: made right there, or bound to a
        name once (`bs = BatchSampler(RandomSampler(ds), 32, False)`)."""
        if type(value) is cst.Name:
            value = self.bound_once(function, value.value)  # type: ignore[assignment]
        return value if value is not None and self.tree.is_call_to(value, s.BATCH_SAMPLER) else None  # type: ignore[return-value]

    # --- following an object through the program ---------------------------------------

    @cached_property
    def _star_modules(self) -> list[str]:
        """The modules `from x import *` at the top level imports."""
        return [
            name
            for node in self.tree.of_type(cst.ImportFrom)
            if isinstance(node.names, cst.ImportStar) and node.module is not None and self.tree.function(node) is None
            and (name := get_full_name_for_node(node.module)) is not None
        ]

    def star_imported(self, node: cst.BaseExpression, function: cst.FunctionDef | None) -> str | None:
        """`module.name` for a bare name that only a `from module import *` can have bound (the
        first such module: which one is unknowable here); None for any other name."""
        if not (isinstance(node, cst.Name) and self._star_modules) or hasattr(builtins, node.value):
            return None
        name = node.value
        if name in self.functions or name in self.classes or self.binds(None, name) or (function is not None and self.binds(function, name)):
            return None
        return f"{self._star_modules[0]}.{name}"

    def hook_methods(self, call: cst.Call) -> list[cst.FunctionDef]:
        """A callback hook called on an object of no known class (`cb.on_epoch_end(self, epoch)`,
        `getattr(cb, "on_epoch_end")(self, epoch)` over a list of callbacks, or `getattr(cb, hook)` in a
        dispatcher handed the hook's name): the same-file methods of that name, any of which it may
        run (helper corpus BL, repro 01 and script 02)."""
        func = call.func
        names: list[str | None] = []
        listed: list[cst.FunctionDef] = []
        loop = next((lp for lp in self.tree.loops(call) if type(lp) is cst.For and type(lp.target) is cst.Name and type(func) is cst.Name and lp.target.value == func.value), None)
        if loop is not None:
            names = ["__call__"]  # `for cb in self.callbacks: cb(self)`: callable callbacks (helper corpus BO, repro 03)
            for origin in self.origins(loop.iter, self.tree.function(loop)):  # or functions of this file in the list (helper corpus BS, repro 07)
                if type(origin.node) in (cst.List, cst.Tuple):
                    listed += [self.functions[e.value.value] for e in origin.node.elements if type(e.value) is cst.Name and e.value.value in self.functions]
        elif type(func) is cst.Attribute:
            names = [func.attr.value]
        elif type(func) is cst.Call and type(func.func) is cst.Name and func.func.value == "getattr" and len(func.args) >= 2:
            hook = func.args[1].value
            names = [string_value(hook)]
            function = self.tree.function(call)
            if type(hook) is cst.Name and function is not None and hook.value in self.param_names(function):
                # `def _call(self, hook, *args): getattr(cb, hook)(self, *args)`, called `self._call("on_epoch_end", ...)`
                passed = [self.argument_for(site, function, hook.value) for site, _ in self.call_sites(function)]
                names = [string_value(p) if p is not None else None for p in passed]
        return listed + [methods[name] for name in names if name is not None and name.startswith(("on_", "__call__")) for methods in self.methods.values() if name in methods]

    def lambdas_called(self, call: cst.Call, function: cst.FunctionDef | None) -> list[cst.Lambda]:
        """The lambdas a call of a name runs (`restore_best = lambda m: ...`, then `restore_best(net)`)."""
        if type(call.func) is not cst.Name:
            return []
        return [o.node for o in self.origins(call.func, function) if type(o.node) is cst.Lambda]  # type: ignore[misc]

    def lambda_calls(self, function: cst.FunctionDef | None, ref: str) -> list[cst.Call]:
        """Calls in the lambdas of a scope that read `ref` from it (`predict = lambda p: predict_ch8(p,
        net)`, d2l; `save = lambda: torch.save(model.state_dict(), p)`): the lambda hands the
        object on, or uses it, when it is called. A lambda whose parameter is `ref` reads its own."""
        found = []
        for node in self.tree.of_type(cst.Lambda):
            if self.tree.function(node) is not function:
                continue
            if ref.split(".")[0] in {p.name.value for p in _named_params(node)}:
                continue
            found += [n for n in self.tree.walk(node.body) if type(n) is cst.Call]
        return found

    def nested_functions(self, function: cst.FunctionDef) -> list[cst.FunctionDef]:
        """The functions defined directly inside `function`."""
        return [f for f in self.all_functions if self.tree.function(f) is function]

    def propagate(self, seeds: list[tuple[str, cst.FunctionDef | None]], plain: Collection[int] = ()) -> dict[cst.FunctionDef | None, set[str]]:
        """Names that denote the same object as the seeds, per function.

        An object named `ref` in a function is also named by the parameter it is passed to
        (`train(model)`), by `self.<attr>` when a constructor stores it, in every method for a
        `self.<attr>` seed, in every function and method for a global, and in the functions defined
        inside a function (closures) that read it from there. Arguments whose ids are in `plain`
        hand something else (the converter hands `model.module` there).
        """
        refs: dict[cst.FunctionDef | None, set[str]] = {}
        work = list(seeds)
        while work:
            ref, function = work.pop()
            if ref in refs.setdefault(function, set()):
                continue
            refs[function].add(ref)
            if ref.startswith("self."):
                cls = self.owner_class(function)
                work += [(ref, method) for c in self.subclasses(cls) for method in self.methods.get(c, {}).values()] if cls else []
            elif function is None:  # a global: functions and methods that do not rebind it see it (`log_weights(self)` reading `model.conv1`)
                work += [(ref, f) for f in self.all_functions if not self.binds(f, ref.split(".")[0])]
            else:  # a closure reads it when it is called: the object the name holds by then
                root = ref.split(".")[0]
                work += [(ref, f) for f in self.nested_functions(function) if not self.binds(f, root)]
                if function in self.global_writers(root):
                    work.append((ref, None))  # `def setup(): global model; model = ...`: the global every function reads
            for call in self.calls_in(function) + self.lambda_calls(function, ref):
                target = self.callee(call, function)
                walked = self._walked_functions(function, call.func) if target is not None else []
                for callee in (walked or [target[0]]) if target is not None else self.hook_methods(call):
                    for a in call.args:
                        handed = dotted(unchained(a.value))  # also `export_all(model.cpu(), out)`: the module the chain is called on
                        if handed is None or id(a.value) in plain or not (handed == ref or ref.startswith(handed + ".")):
                            continue
                        param = self.parameter_for(call, callee, a.value)
                        if param is None:
                            continue
                        work.append((param + ref[len(handed):], callee))  # `cb.on_epoch_end(self, epoch)`: `trainer.model` there
                        if handed == ref and callee.name.value == "__init__":  # Trainer(model) keeps it as self.<attr>
                            for node in self.scope_nodes(callee):
                                if type(node) is not cst.Assign:
                                    continue
                                work += [  # `self.model = model`, `self.model, self.opt = model, opt`
                                    (name, callee) for target, value in _unpacked(node)
                                    if dotted(unchained(value)) == param and (name := dotted(target)) and name.startswith("self.")  # also `model.eval().cpu()`
                                ]
        return refs
