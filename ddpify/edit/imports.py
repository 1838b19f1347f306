"""The imports an edit plan asks for, added and dropped the way LibCST's `AddImportsVisitor`
and `RemoveImportsVisitor` do, without their passes over the whole tree.

Adding only ever looks at the block of imports at the top of the module (after a docstring),
so it is done on the module's body: an existing `from m import ...` there takes the new
names first, anything else becomes new lines after that block, in the codemod's order
(`import m`, `import m as a`, `from m import o[ as a]`), with a blank line before the code
that follows (`__future__` imports, which the codemod puts first, are never asked for).
Dropping an unused import asks the qualified-name resolver whether any name
still refers to it (names listed in `__all__` or used only inside string annotations are
not looked at: training scripts have neither).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ddpify import nodes
from ddpify.edit.rebuild import replace_nodes
from ddpify.names import Names
from ddpify.syntax import is_import_line, is_preamble

ImportRequest = tuple[str, str | None, str | None]  # module, object, alias
ImportNode = cst.Import | cst.ImportFrom


# --- adding ------------------------------------------------------------------------------


class _Wanted:
    """What is still to import, grouped the way the codemod groups it."""

    def __init__(self, requests: Sequence[ImportRequest]) -> None:
        self.modules = {module for module, obj, alias in requests if obj is None and alias is None}
        self.module_aliases = {module: alias for module, obj, alias in requests if obj is None and alias is not None}
        self.objects: dict[str, set[str]] = {}
        self.object_aliases: dict[str, list[tuple[str, str]]] = {}
        for module, obj, alias in sorted(requests, key=lambda r: r[0]):
            if obj is not None and alias is None:
                self.objects.setdefault(module, set()).add(obj)
            elif obj is not None and alias is not None:
                self.object_aliases.setdefault(module, []).append((obj, alias))

    def __bool__(self) -> bool:
        return bool(self.modules or self.module_aliases or self.objects or self.object_aliases)

    def drop_present(self, statements: list[ImportNode]) -> None:
        """Forget what the imports at the top of the module already bring in."""
        present_aliases: dict[str, str] = {}  # as the codemod gathers them: the last alias of a module counts
        for statement in statements:
            if isinstance(statement, cst.Import):
                for alias in statement.names:
                    if alias.evaluated_alias is None:
                        self.modules.discard(alias.evaluated_name)
                    else:
                        present_aliases[alias.evaluated_name] = alias.evaluated_alias
            else:
                self._drop_present_from(statement)
        for name, alias in present_aliases.items():
            if self.module_aliases.get(name) == alias:
                del self.module_aliases[name]

    def _drop_present_from(self, statement: cst.ImportFrom) -> None:
        module = _absolute_module(statement)
        if module is None:
            return
        if isinstance(statement.names, cst.ImportStar):
            self.objects.pop(module, None)
            return
        for alias in statement.names:
            if alias.evaluated_alias is not None:
                aliases = self.object_aliases.get(module, [])
                if (alias.evaluated_name, alias.evaluated_alias) in aliases:
                    aliases.remove((alias.evaluated_name, alias.evaluated_alias))
                    if not aliases:
                        del self.object_aliases[module]
            elif module in self.objects:
                self.objects[module].discard(alias.evaluated_name)
                if not self.objects[module]:
                    del self.objects[module]

    def extend(self, statement: cst.ImportFrom) -> cst.ImportFrom | None:
        """The top `from m import ...` with the names still wanted from `m` put first."""
        module = _absolute_module(statement)
        if isinstance(statement.names, cst.ImportStar) or module is None:
            return None
        if module not in self.objects and module not in self.object_aliases:
            return None
        added = [cst.ImportAlias(name=cst.Name(obj)) for obj in sorted(self.objects.pop(module, ()))]
        added += [
            cst.ImportAlias(name=cst.Name(obj), asname=cst.AsName(name=cst.Name(alias)))
            for obj, alias in sorted(self.object_aliases.pop(module, ()))
        ]
        return statement.with_changes(names=[*added, *statement.names])

    def new_lines(self, module: cst.Module) -> list[cst.BaseStatement]:
        """Import lines for what is still wanted, parsed with the module's newline and indent."""
        lines = [f"import {name}" for name in sorted(self.modules)]
        lines += [f"import {name} as {alias}" for name, alias in self.module_aliases.items()]
        from_imports: dict[str, list[tuple[str, str | None]]] = {name: list(pairs) for name, pairs in self.object_aliases.items()}
        for name, objects in self.objects.items():
            from_imports.setdefault(name, []).extend((obj, None) for obj in objects)
        for name, pairs in from_imports.items():
            listed = ", ".join(obj if alias is None else f"{obj} as {alias}" for obj, alias in sorted(pairs))  # type: ignore[type-var]
            lines.append(f"from {name} import {listed}")
        return [cst.parse_statement(line, config=module.config_for_parsing) for line in lines]


def add_imports(module: cst.Module, requests: Sequence[ImportRequest]) -> cst.Module:
    """`module` with the requested imports that its top import block lacks."""
    wanted = _Wanted(requests)
    first = _header_length(module)
    end = first
    while end < len(module.body) and _single_import(module.body[end]) is not None:
        end += 1
    # what the script imports before its code starts is there already, even after a `try: import x`,
    # unless a statement above that import and below the new lines reads it (a guard `os.environ`)
    present = []
    opening = _opening(module, first)
    for position, statement in enumerate(opening, start=first):
        found = _single_import(statement)
        if found is not None and not (position > end and _read_in(opening[end - first : position - first], _bound_names(found))):
            present.append(found)
    wanted.drop_present(present)
    body = list(module.body)
    for position in range(first, end):
        statement = _single_import(body[position])
        extended = wanted.extend(statement) if isinstance(statement, cst.ImportFrom) else None
        if extended is not None:
            body[position] = body[position].with_changes(body=[extended])  # type: ignore[union-attr]
    if not wanted:
        return module.with_changes(body=body)
    rest = _blank_line_before(body[end:])
    return module.with_changes(body=[*body[:end], *wanted.new_lines(module), *rest])


def _opening(module: cst.Module, start: int) -> list[cst.BaseStatement]:
    """The statements from `start` that open the script: import lines and what may sit between
    them (`try: import x` blocks, `sys.path` / `warnings` calls)."""
    found = []
    for statement in module.body[start:]:
        if not (is_import_line(statement) or is_preamble(statement)):
            break
        found.append(statement)
    return found


def _bound_names(statement: ImportNode) -> set[str]:
    """The names an import binds: `os` for `import os.path`, `x` for `from m import y as x`."""
    if isinstance(statement.names, cst.ImportStar):
        return set()
    found = set()
    for alias in statement.names:
        if alias.evaluated_alias is not None:
            found.add(alias.evaluated_alias)
        else:
            found.add(alias.evaluated_name.split(".")[0] if isinstance(statement, cst.Import) else alias.evaluated_name)
    return found


def _read_in(statements: Sequence[cst.BaseStatement], names: set[str]) -> bool:
    """A statement (not an import line: those bind names) that mentions one of `names`."""
    return any(
        type(n) is cst.Name and n.value in names for statement in statements if _single_import(statement) is None for n in nodes.index(statement).order
    )


def _single_import(statement: cst.CSTNode) -> ImportNode | None:
    """The import of a line that holds one import and nothing else."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            return small
    return None


def _header_length(module: cst.Module) -> int:
    """How many statements open the module before its imports and stay above them: a docstring
    and dunder assignments (`__author__ = ...`, `__strict__ = ...`)."""
    count = 0
    for index, statement in enumerate(module.body):
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        docstring = index == 0 and isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
        dunder = (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and small.targets[0].target.value.startswith("__")
            and small.targets[0].target.value.endswith("__")
        )
        if not (docstring or dunder):
            break
        count += 1
    return count


def _blank_line_before(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """At least one blank line between the imports and the code after them."""
    if not statements:
        return statements
    first = statements[0]
    leading = first.leading_lines  # type: ignore[union-attr]
    if leading and leading[0].comment is None:
        return statements
    return [first.with_changes(leading_lines=(cst.EmptyLine(), *leading)), *statements[1:]]


def _absolute_module(statement: cst.ImportFrom) -> str | None:
    """`from a.b import c` -> `a.b`; None for a relative import (no package to resolve it in)."""
    if statement.relative:
        return None
    return get_full_name_for_node(statement.module) if statement.module is not None else None


# --- dropping ----------------------------------------------------------------------------


def drop_unused_imports(module: cst.Module, requests: Sequence[ImportRequest]) -> cst.Module:
    """`module` without the requested imports that no name refers to any more."""
    index = nodes.index(module)
    names = Names(module, index)
    edits: dict[cst.CSTNode, cst.CSTNode | cst.RemovalSentinel] = {}
    for node in index.order:
        if isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
            kept = [alias for alias in node.names if not _requested(node, alias, requests) or _referenced(names, index.order, node, alias)]
            if len(kept) < len(node.names):
                edits[node] = _without(node, kept)
    return replace_nodes(module, edits, index.parent) if edits else module


def _referenced(names: Names, order: list[cst.CSTNode], statement: ImportNode, alias: cst.ImportAlias) -> bool:
    """Whether a name read anywhere resolves to what `alias` binds."""
    bound = get_full_name_for_node(alias.asname.name if alias.asname is not None else alias.name) or ""
    head = bound.split(".")[0]
    return any(type(node) is cst.Name and node.value == head and names.reads(node, statement) for node in order)


def _requested(statement: ImportNode, alias: cst.ImportAlias, requests: Sequence[ImportRequest]) -> bool:
    if isinstance(statement, cst.Import):
        return (alias.evaluated_name, None, alias.evaluated_alias) in requests
    module = _absolute_module(statement)
    return module is not None and (module, alias.evaluated_name, alias.evaluated_alias) in requests


def _without(statement: ImportNode, kept: list[cst.ImportAlias]) -> cst.CSTNode | cst.RemovalSentinel:
    """The import keeping only `kept` (commas mended as the codemod mends them), or nothing."""
    if not kept:
        return cst.RemoveFromParent()
    names = list(statement.names)  # type: ignore[arg-type]
    changes: dict[str, object] = {}
    if isinstance(statement, cst.ImportFrom):
        kept, lpar = _mend_commas(statement, names, kept)
        if lpar is not None:
            changes["lpar"] = lpar
    if kept[-1] is not names[-1]:
        kept = [*kept[:-1], kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    return statement.with_changes(names=kept, **changes)


def _mend_commas(statement: cst.ImportFrom, names: list[cst.ImportAlias], kept: list[cst.ImportAlias]) -> tuple[list[cst.ImportAlias], cst.LeftParen | None]:
    """A dropped name's comma (and the line break after it) moves to the name before it."""
    mended: list[cst.ImportAlias] = []
    lpar = None
    for alias in names:
        if any(alias is k for k in kept):
            mended.append(alias)
            continue
        comma = alias.comma
        if not isinstance(comma, cst.Comma):
            continue
        if mended:
            previous = mended[-1]
            if isinstance(previous.comma, cst.Comma):
                merged = _merge_whitespace_after(previous.comma.whitespace_after, comma.whitespace_after)
                mended[-1] = previous.with_changes(comma=previous.comma.with_changes(whitespace_after=merged))
            else:
                mended[-1] = previous.with_changes(comma=comma)
        elif isinstance(statement.lpar, cst.LeftParen):
            lpar = statement.lpar.with_changes(whitespace_after=_merge_whitespace_after(statement.lpar.whitespace_after, comma.whitespace_after))
    return mended, lpar


def _merge_whitespace_after(left: cst.BaseParenthesizableWhitespace, right: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    if not isinstance(right, cst.ParenthesizedWhitespace):
        return left
    if not isinstance(left, cst.ParenthesizedWhitespace):
        return right
    return left.with_changes(empty_lines=tuple(line for line in right.empty_lines if line.comment is not None))
