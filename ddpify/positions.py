"""Line and column of every node, as LibCST's `PositionProvider` gives them, for a fraction
of its cost.

PositionProvider renders the module through a codegen state whose hooks record where each
node starts and ends; its state splits every token with a regular expression and builds two
dataclasses per node. The state here hooks the same places (so the ranges are the same,
syntactic ones included) but counts newlines with `str.count`, keeps plain tuples, and
builds the `CodeRange` only for the nodes someone asks about.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import libcst as cst
from libcst.metadata import CodePosition, CodeRange
from libcst._nodes.internal import CodegenState

Span = tuple[int, int, int, int]  # start line, start column, end line, end column


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
        spans = self.state.spans
        start = spans[id(self.start_node)][:2] if self.start_node is not None else self.start
        end = spans[id(self.end_node)][2:] if self.end_node is not None else (self.state.line, self.state.column)
        spans[id(self.node)] = start + end


class _PositionState(CodegenState):
    """Codegen that tracks the current line and column and records each node's span (keyed
    by id: node hashing is a Python call, and this runs for every node)."""

    __slots__ = ("line", "column", "starts", "spans")

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = 1
        self.column = 0
        self.starts: list[tuple[int, int]] = []
        self.spans: dict[int, Span] = {}

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:  # "\r\n", "\r" and "\n" each end a line
            self.line += value.count("\n") + value.count("\r") - value.count("\r\n")
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

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None) -> _SyntacticSpan:  # type: ignore[override]
        return _SyntacticSpan(self, node, start_node, end_node)


class Positions(Mapping[cst.CSTNode, CodeRange]):
    """`PositionProvider`'s mapping for one module: node -> CodeRange."""

    def __init__(self, module: cst.Module, nodes: list[cst.CSTNode]) -> None:
        state = _PositionState(module)
        module._codegen(state)
        self._spans = state.spans
        self._nodes = nodes  # every node of the module, for iteration

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        line, column, end_line, end_column = self._spans[id(node)]
        return CodeRange(CodePosition(line, column), CodePosition(end_line, end_column))

    def span(self, node: cst.CSTNode) -> Span:
        """The same range as plain numbers: start line, start column, end line, end column."""
        return self._spans[id(node)]

    def __contains__(self, node: object) -> bool:
        return id(node) in self._spans

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return (node for node in self._nodes if id(node) in self._spans)

    def __len__(self) -> int:
        return len(self._spans)
