"""Line and column of nodes, exactly as LibCST's `PositionProvider` gives them, computed
only around the nodes someone asks about.

PositionProvider renders the whole module through a codegen state whose hooks record where
each node starts and ends, which costs about half a parse. The state here hooks the same
places (so the ranges are the same, syntactic ones included), but it renders only the
statement around an asked-for node. A statement of a block always starts a line, at the
block's indentation, so rendering it alone needs just its first line: one plus the line
breaks of every token before it, which come only from a few leaf node types (newlines,
whitespace with a backslash continuation, strings) and are counted without rendering.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping
from itertools import accumulate

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

from ddpify.nodes import Index

Span = tuple[int, int, int, int]  # start line, start column, end line, end column
BLOCKS = (cst.IndentedBlock, cst.Module)
INDENTING = (cst.IndentedBlock, cst.Match)  # what renders the code inside it one indent deeper
# Statements whose first line is the line after their leading lines.
HEADED = (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)
# (t-strings' text exists from LibCST 1.8 on; the package supports older LibCSTs too)
TEXT_LEAVES = {cst.SimpleWhitespace, cst.SimpleString, cst.FormattedStringText} | {
    leaf for leaf in (getattr(cst, "TemplatedStringText", None),) if leaf is not None
}


def _line_breaks(text: str) -> int:
    """How many lines `text` ends ("\\r\\n", "\\r" and "\\n" each end one)."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


class _SyntacticSpan:
    """What `record_syntactic_position` returns: the range between entering and leaving,
    or the start or end of another node when the caller names one."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _PositionState, node: cst.CSTNode, start_node: cst.CSTNode | None, end_node: cst.CSTNode | None) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is not None:  # rendering stopped inside: the range is not known
            return
        spans = self.state.spans
        start = spans[id(self.start_node)][:2] if self.start_node is not None else self.start
        end = spans[id(self.end_node)][2:] if self.end_node is not None else (self.state.line, self.state.column)
        spans[id(self.node)] = start + end


class _Done(Exception):
    """The node asked about is rendered: the rest of its statement need not be."""


class _PositionState(CodegenState):
    """Codegen that tracks the current line and column and records each node's span (keyed
    by id: node hashing is a Python call, and this runs for every node rendered). It stops
    once `until` is rendered (the header of a loop needs none of its body)."""

    __slots__ = ("line", "column", "starts", "spans", "until")

    def __init__(self, module: cst.Module, spans: dict[int, Span], line: int, indents: list[str], until: int | None = None) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline, indent_tokens=indents)
        self.line = line
        self.column = 0
        self.starts: list[tuple[int, int]] = []
        self.spans = spans
        self.until = until

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            self.line += _line_breaks(value)
            self.column = len(value) - max(value.rfind("\n"), value.rfind("\r")) - 1
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        key = id(node)
        if key not in self.spans:  # a syntactic range recorded inside wins
            self.spans[key] = start + (self.line, self.column)
        if key == self.until:
            raise _Done

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None) -> _SyntacticSpan:  # type: ignore[override]
        return _SyntacticSpan(self, node, start_node, end_node)


class Positions(Mapping[cst.CSTNode, CodeRange]):
    """`PositionProvider`'s mapping for one module (node -> CodeRange), filled statement by
    statement as nodes are asked for."""

    def __init__(self, module: cst.Module, index: Index) -> None:
        self.module = module
        self.index = index
        self._spans: dict[int, Span] = {}
        self._complete = False
        self._break_positions: list[int] | None = None  # preorder positions of the leaves that end lines
        self._breaks_before: list[int] = []  # lines they end, cumulated

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        line, column, end_line, end_column = self.span(node)
        return CodeRange(CodePosition(line, column), CodePosition(end_line, end_column))

    def span(self, node: cst.CSTNode) -> Span:
        """The same range as plain numbers: start line, start column, end line, end column."""
        key = id(node)
        if key not in self._spans and key in self.index.position_of:
            self._render_around(node)
        return self._spans[key]

    def __contains__(self, node: object) -> bool:
        return id(node) in self.index.position_of

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self.index.order)

    def __len__(self) -> int:
        return len(self.index.order)

    def start_line(self, node: cst.CSTNode) -> int:
        """The line `node` starts on. A node with no line break inside starts on the line of its
        place in preorder, and a compound statement of a block (a loop, an `if`, a `with`) after
        its leading lines, so neither needs rendering; anything else is rendered."""
        key = id(node)
        if key in self._spans:
            return self._spans[key][0]
        position = self.index.position_of.get(key)
        if position is not None and not isinstance(node, HEADED) and self._on_one_line(node, position):
            return self._line_at(position)
        if not isinstance(node, HEADED) or getattr(node, "decorators", None):
            return self.span(node)[0]
        parent = self.index.parent(node)
        if not (isinstance(parent, BLOCKS) and node in self):
            return self.span(node)[0]
        return self._first_line(node) + len(node.leading_lines)  # type: ignore[attr-defined]

    def lines(self, statement: cst.CSTNode) -> tuple[int, int]:
        """The lines a statement of a block renders on, its leading lines included: the first,
        and one past the last. Counted, not rendered."""
        return self._first_line(statement), self._line_at(self.index.end(statement))

    def _on_one_line(self, node: cst.CSTNode, position: int) -> bool:
        """No leaf under `node` ends a line: it renders within the line it starts on (children
        render in preorder, so everything before it in preorder is rendered before it)."""
        if self._break_positions is None:
            self._count_line_breaks()
        breaks = self._break_positions
        first = bisect_left(breaks, position)  # type: ignore[arg-type]
        return first == len(breaks) or breaks[first] >= self.index.end(node)  # type: ignore[arg-type,index]

    def _render_around(self, node: cst.CSTNode) -> None:
        statement, indents = self._statement_of(node)
        if statement is None:
            self._render_module()
        else:
            try:
                statement._codegen(_PositionState(self.module, self._spans, self._first_line(statement), indents, id(node)))
            except _Done:
                pass

    def _render_module(self) -> None:
        if not self._complete:
            self.module._codegen(_PositionState(self.module, self._spans, 1, []))
            self._complete = True

    def _statement_of(self, node: cst.CSTNode) -> tuple[cst.CSTNode | None, list[str]]:
        """The innermost statement of a block holding `node` (None: the module's own lines),
        and the indentation it is rendered at (the indents its enclosing blocks push)."""
        statement = None
        indents: list[str] = []
        child, parent = node, self.index.parent(node)
        while parent is not None:
            if statement is None and isinstance(parent, BLOCKS) and any(child is s for s in parent.body):
                statement = child
            if statement is not None and isinstance(parent, INDENTING):
                indents.append(self.module.default_indent if parent.indent is None else parent.indent)
            child, parent = parent, self.index.parent(parent)
        return statement, indents[::-1]

    def _first_line(self, statement: cst.CSTNode) -> int:
        """One plus the line breaks of everything rendered before `statement`."""
        return self._line_at(self.index.position_of[id(statement)])

    def _line_at(self, position: int) -> int:
        """The line the node at a preorder position starts rendering on."""
        if self._break_positions is None:
            self._count_line_breaks()
        count = bisect_left(self._break_positions, position)  # type: ignore[arg-type]
        return 1 + (self._breaks_before[count - 1] if count else 0)

    def _count_line_breaks(self) -> None:
        """Only newlines, whitespace (a backslash continuation) and strings end lines."""
        found: list[int] = []
        breaks: list[int] = []
        for position, node in enumerate(self.index.order):
            kind = type(node)
            if kind is cst.Newline:
                found.append(position)
                breaks.append(1)
            elif kind in TEXT_LEAVES:
                text = node.value  # type: ignore[attr-defined]
                if "\n" in text or "\r" in text:
                    found.append(position)
                    breaks.append(_line_breaks(text))
        self._break_positions = found
        self._breaks_before = list(accumulate(breaks))
