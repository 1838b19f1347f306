"""Rendering an edited tree: the statements no edit touched keep their source text.

`Plan.apply()` keeps every node that no edit reached (the very objects the parser made), so most
of a converted script is the original text. LibCST's codegen renders all of it again, which
costs about as much as parsing it. `render()` renders only what changed: each block is walked
down the compound statements the edits rebuilt, and a statement of the original tree that sits
in a block at the indentation it had is stood in for by a one-line marker, which the source
lines it came from then replace. The text is the same as `module.code`.
"""

from __future__ import annotations

import libcst as cst

from ddpify.syntax import Tree

_MARK = "_ddpify_kept_statement_"
_INDENTING = (cst.IndentedBlock, cst.Match)  # what renders the code inside it one indent deeper
# What holds the blocks of a compound statement: walked down to reach them.
_HOLDERS = (cst.BaseCompoundStatement, cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)


def render(module: cst.Module, tree: Tree, source: str) -> str:
    """`module.code`, where `module` is `tree`'s module after edits and `source` its text."""
    if module is tree.module:
        return source
    if source.count("\r") != source.count("\r\n") or _MARK in source:  # lines split on "\n" only
        return module.code
    lines = source.split("\n")  # a statement's text: its lines, joined by the "\n" that ends each
    stubs = _Stubs(tree)
    kept = stubs.kept
    text = module.visit(stubs).code
    if not kept:
        return text
    out = []
    for line in text.split("\n"):
        mark = line.find(_MARK)
        if mark >= 0 and not line[:mark].strip():
            first, end = kept[int(line[mark + len(_MARK) :])]
            out.append("\n".join(lines[first - 1 : end - 1]))
        else:
            out.append(line)
    return "\n".join(out)


class _Stubs(cst.CSTTransformer):
    """Walks blocks and the compound statements holding them; puts a marker where a statement
    of the original tree sits at its original indentation (`kept`: the lines it spans)."""

    def __init__(self, tree: Tree) -> None:
        super().__init__()
        self.tree = tree
        self.indents = [""]  # the indentation inside each block being walked
        self.original_indents: dict[int, str] = {}  # block of the original tree -> its indentation
        self.marked: dict[int, int] = {}  # statement -> its marker's number
        self.kept: list[tuple[int, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.marked:
            return False
        if isinstance(node, _INDENTING):
            self.indents.append(self.indents[-1] + (self.tree.module.default_indent if node.indent is None else node.indent))
        if isinstance(node, (cst.Module, cst.IndentedBlock)):
            self._mark(node.body)
            return True
        return isinstance(node, _HOLDERS)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        number = self.marked.get(id(original_node))
        if number is not None:
            return cst.SimpleStatementLine([cst.Expr(cst.Name(f"{_MARK}{number}"))])
        if isinstance(original_node, _INDENTING):
            self.indents.pop()
        return updated_node

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass

    def _mark(self, statements: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement]) -> None:
        tree = self.tree
        for statement in statements:
            if statement not in tree.positions:  # built by an edit
                continue
            block = tree.parent(statement)
            if type(block) not in (cst.Module, cst.IndentedBlock) or self._original_indent(block) != self.indents[-1]:
                continue
            self.marked[id(statement)] = len(self.kept)
            self.kept.append(tree.positions.lines(statement))

    def _original_indent(self, node: cst.CSTNode) -> str:
        """The indentation inside `node` in the original tree."""
        key = id(node)
        found = self.original_indents.get(key)
        if found is None:
            parent = self.tree.parent(node)
            found = "" if parent is None else self._original_indent(parent)
            if isinstance(node, _INDENTING):
                found += self.tree.module.default_indent if node.indent is None else node.indent
            self.original_indents[key] = found
        return found
