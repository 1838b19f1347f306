"""Qualified names of expressions (`nn.DataParallel` -> `torch.nn.DataParallel`), resolved
from the file's own bindings.

This answers what `QualifiedNameProvider` answered (the sorted-first name an import gives,
else the builtin one) without building LibCST's full scope model, which cost several times
the parse. It keeps the parts of that model the answer depends on: which scope an expression
is evaluated in (functions, lambdas, classes, comprehensions, with class bodies invisible to
the functions inside them), which names each scope binds (imports at any level, assignments,
loop and `with` targets, definitions, parameters, `global` and `nonlocal`), longest dotted
prefix first (`import a.b.c` binds `a.b.c`, `a.b` and `a`), and builtins for names no
visible scope binds. Parts of nodes LibCST never resolves (an attribute's name, a keyword
argument's name, anything inside an import statement) have no qualified name here either.
One difference: a string annotation (`x: "nn.Module"`) gets no qualified name here, where
LibCST parses it; ddpify asks about names, attributes and calls, never strings.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ddpify.nodes import Index, children

COMPREHENSIONS = {cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp}
FUNCTIONS = {cst.FunctionDef, cst.Lambda}
DEFINITIONS = {cst.FunctionDef, cst.ClassDef, cst.Param}
UNRESOLVED_PARENTS = {cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal}
ImportNode = cst.Import | cst.ImportFrom


class Scope:
    """The names one function, lambda, class, comprehension or the module binds."""

    def __init__(self, parent: Scope | None, is_class: bool = False) -> None:
        self.parent = parent
        self.is_class = is_class
        self.bindings: dict[str, list[ImportNode | None]] = {}  # name -> import statements (None: a local binding)
        self.redirects: dict[str, Scope] = {}  # `global` / `nonlocal` names

    def visible_parent(self) -> Scope | None:
        """The next enclosing scope whose names code here sees (class bodies are skipped)."""
        scope = self.parent
        while scope is not None and scope.is_class:
            scope = scope.parent
        return scope

    def target(self, name: str) -> Scope:
        """The scope an assignment of `name` here binds it in."""
        redirect = self.redirects.get(name)
        return redirect.target(name) if redirect is not None else self

    def lookup(self, name: str) -> list[ImportNode | None] | None:
        """The bindings of `name` seen from here; None when no scope binds it."""
        scope: Scope | None = self
        while scope is not None:
            redirect = scope.redirects.get(name)
            if redirect is not None:
                scope = redirect if not redirect.is_class else redirect.visible_parent()
                continue
            found = scope.bindings.get(name)
            if found:
                return found
            scope = scope.visible_parent()
        return None


class Names:
    """Qualified names for one tree, given its index."""

    def __init__(self, module: cst.Module, index: Index) -> None:
        self.module = module
        self.parent_of = index.parent_of
        self.scopes: dict[cst.CSTNode, Scope] = {module: Scope(None)}
        self.stores: set[int] = set()  # ids of the Name nodes an assignment binds
        self.cache: dict[int, str | None] = {}  # by id(node), as in the index
        binders = _binders(self)
        for node in index.order:
            binder = binders.get(type(node))
            if binder is not None:
                binder(node)

    # --- answers -------------------------------------------------------------------------

    def qualified(self, node: cst.CSTNode) -> str | None:
        key = id(node)
        if key not in self.cache:
            self.cache[key] = self._resolve(node)
        return self.cache[key]

    def _resolve(self, node: cst.CSTNode) -> str | None:
        if id(node) not in self.parent_of:  # the module, or a node from outside the tree
            return None
        full_name = get_full_name_for_node(node)
        if full_name is None:
            return None
        scope = self.scope_of(node)
        if scope is None or id(node) in self.stores or type(node) in DEFINITIONS:
            return None  # a binding itself resolves to its local name
        for prefix in _prefixes(full_name):
            bindings = scope.lookup(prefix)
            if bindings is not None:
                imported = sorted(name for statement in bindings if statement is not None for name in _imported_names(statement, full_name))
                return imported[0] if imported else None
            if hasattr(builtins, prefix):
                return f"builtins.{prefix}"
        return None

    def reads(self, name: cst.Name, statement: ImportNode) -> bool:
        """Whether `name` is read (not bound) and resolves to a binding `statement` makes."""
        parent = self.parent_of.get(id(name))
        if id(name) in self.stores or (type(parent) in DEFINITIONS and parent.name is name):  # type: ignore[union-attr]
            return False
        scope = self.scope_of(name)
        found = scope.lookup(name.value) if scope is not None else None
        return found is not None and any(bound is statement for bound in found)

    # --- scopes --------------------------------------------------------------------------

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        """The scope `node` is evaluated in; None for parts LibCST's scope analysis skips."""
        path = [node]
        default_or_annotation = False  # evaluated outside the function the parameter belongs to
        for parent in self._ancestors(node):
            child = path[-1]
            kind = type(parent)
            if kind in UNRESOLVED_PARENTS:
                return None
            if (kind is cst.Attribute or kind is cst.Arg) and child is not parent.value:
                return None
            if kind is cst.Param and (child is parent.default or child is parent.annotation):
                default_or_annotation = True
            elif kind in FUNCTIONS and (child is parent.params or child is parent.body):
                if not default_or_annotation:
                    return self._scope(parent)
                default_or_annotation = False
            elif kind is cst.ClassDef and child is parent.body:
                return self._scope(parent)
            elif kind in COMPREHENSIONS and not _first_iteration(parent, path):
                return self._scope(parent)
            path.append(parent)
        return self.scopes[self.module]

    def _scope(self, owner: cst.CSTNode) -> Scope:
        if owner not in self.scopes:
            self.scopes[owner] = Scope(self.scope_of(owner), is_class=isinstance(owner, cst.ClassDef))
        return self.scopes[owner]

    def _ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self.parent_of.get(id(node))
        while parent is not None:
            yield parent
            parent = self.parent_of.get(id(parent))

    # --- bindings ------------------------------------------------------------------------

    def bind(self, at: cst.CSTNode, name: str, statement: ImportNode | None = None) -> None:
        scope = self.scope_of(at)
        if scope is not None:
            scope.target(name).bindings.setdefault(name, []).append(statement)

    def bind_import(self, statement: ImportNode) -> None:
        if isinstance(statement.names, cst.ImportStar):
            return
        for alias in statement.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            for name in _dotted_prefixes(bound):
                self.bind(statement, name, statement)

    def bind_definition(self, node: cst.FunctionDef | cst.ClassDef) -> None:
        self.bind(node, node.name.value)

    def bind_parameter(self, param: cst.Param) -> None:
        self.bind(param.name, param.name.value)

    def bind_targets(self, target: cst.CSTNode) -> None:
        """Every name an assignment target binds: `a`, `a, (b, *c)`; not `a.b` or `a[0]`."""
        stack = [target]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name):
                self.stores.add(id(node))
                self.bind(node, node.value)
            elif not isinstance(node, (cst.Attribute, cst.Subscript)):
                stack.extend(children(node))

    def redirect(self, statement: cst.Global | cst.Nonlocal) -> None:
        scope = self.scope_of(statement)
        if scope is None or scope.parent is None:
            return  # `global` at module level changes nothing
        to = self.scopes[self.module] if isinstance(statement, cst.Global) else scope.parent
        for item in statement.names:
            scope.redirects[item.name.value] = to


def _binders(names: Names) -> dict[type, Callable[[cst.CSTNode], None]]:
    """What each binding node type binds (LibCST's ExpressionContext STORE cases and its
    ScopeVisitor's assignments)."""
    return {
        cst.Import: names.bind_import,
        cst.ImportFrom: names.bind_import,
        cst.FunctionDef: names.bind_definition,
        cst.ClassDef: names.bind_definition,
        cst.Param: names.bind_parameter,
        cst.AssignTarget: lambda n: names.bind_targets(n.target),
        cst.AnnAssign: lambda n: names.bind_targets(n.target),
        cst.AugAssign: lambda n: names.bind_targets(n.target),
        cst.NamedExpr: lambda n: names.bind_targets(n.target),
        cst.For: lambda n: names.bind_targets(n.target),
        cst.CompFor: lambda n: names.bind_targets(n.target),
        cst.WithItem: lambda n: names.bind_targets(n.asname.name) if n.asname is not None else None,
        cst.ExceptHandler: lambda n: names.bind_targets(n.name.name) if n.name is not None else None,
        cst.ExceptStarHandler: lambda n: names.bind_targets(n.name.name) if n.name is not None else None,
        cst.Global: names.redirect,
        cst.Nonlocal: names.redirect,
    }


def _first_iteration(comprehension: cst.CSTNode, path: list[cst.CSTNode]) -> bool:
    """Whether the path from a node up to `comprehension` runs outside its scope: the first
    `for` clause itself, and the iterable it loops over, are evaluated in the enclosing scope."""
    for_in = comprehension.for_in  # type: ignore[attr-defined]
    if path[-1] is not for_in:
        return False
    return len(path) == 1 or path[-2] is for_in.iter


def _prefixes(full_name: str) -> Iterator[str]:
    """`a.b.c`, `a.b`, `a`."""
    prefix = full_name
    while True:
        yield prefix
        dot = prefix.rfind(".")
        if dot == -1:
            return
        prefix = prefix[:dot]


def _dotted_prefixes(node: cst.CSTNode) -> list[str]:
    """The names `import a.b.c` binds: `a.b.c`, `a.b`, `a`."""
    full_name = get_full_name_for_node(node)
    return list(_prefixes(full_name)) if full_name else []


def _imported_names(statement: ImportNode, full_name: str) -> set[str]:
    """The names `full_name` stands for through one import statement (LibCST's
    `ImportAssignment.get_qualified_names_for`, relative imports keeping their dots)."""
    module = ""
    if isinstance(statement, cst.ImportFrom):
        if statement.module is not None:
            module = get_full_name_for_node(statement.module) or ""
        if statement.relative:
            module = "." * len(statement.relative) + module
    found: set[str] = set()
    if isinstance(statement.names, cst.ImportStar):
        return found
    for alias in statement.names:
        real_name = get_full_name_for_node(alias.name)
        if not real_name:
            continue
        for real in _prefixes(real_name):  # the longest one `full_name` starts with
            as_name = alias.evaluated_alias if alias.asname is not None and alias.evaluated_alias is not None else real
            qualified = f"{module}{real}" if module.endswith(".") else f"{module}.{real}" if module else real
            if not full_name.startswith(as_name):
                continue
            remaining = full_name[len(as_name):]
            if remaining and not remaining.startswith("."):
                continue
            remaining = remaining.lstrip(".")
            found.add(f"{qualified}.{remaining}" if remaining else qualified)
            break
    return found
