"""Children of LibCST nodes, read straight from their fields, and a preorder index of a tree.

`CSTNode.children` (and `ParentNodeProvider`, which calls it on every node) finds a node's
children by rebuilding the node through the visitor machinery, which made indexing a tree
cost more than parsing it. Here the fields each node type visits, in the order it visits
them, are learnt once per type from that same machinery; after that a node's children are
a few attribute reads, and they are exactly LibCST's, in the same (source) order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import get_args

import libcst as cst
from libcst import MaybeSentinel

_NOT_NODES = (type(None), MaybeSentinel, str)


@dataclass(frozen=True)
class _Fields:
    """How to read the children of one node type.

    `read` returns the fields the type visits, in visiting order (None: it visits none).
    A few types visit a field only when it is set (an f-string's format spec), so the node
    fields that were unset on the node this was learnt from stay `unsettled`: a node that
    sets one is learnt from again."""

    read: Callable[[cst.CSTNode], tuple] | None
    unsettled: tuple[str, ...]


_KNOWN: dict[type, _Fields] = {}


class _FieldRecorder(cst.CSTVisitor):
    """Notes the fields a node visits, without descending into them."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        pass

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if attribute not in self.fields:
            self.fields.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


def _learn(node: cst.CSTNode) -> _Fields:
    recorder = _FieldRecorder()
    node._visit_and_replace_children(recorder)
    visited = recorder.fields
    if not visited:
        read = None
    elif len(visited) == 1:
        single = attrgetter(visited[0])
        read = lambda n: (single(n),)  # noqa: E731
    else:
        read = attrgetter(*visited)
    unset = tuple(f.name for f in fields(node) if f.name not in visited and getattr(node, f.name) is None and _may_hold_nodes(f.type))
    known = _KNOWN[type(node)] = _Fields(read, unset)
    return known


def _may_hold_nodes(annotation: object) -> bool:
    """Whether a field's type mentions a node type (`Optional[str]` does not)."""
    if isinstance(annotation, type):
        return issubclass(annotation, cst.CSTNode)
    return any(_may_hold_nodes(arg) for arg in get_args(annotation))


def _sets_unsettled(node: cst.CSTNode, known: _Fields) -> bool:
    return any(type(getattr(node, name)) not in _NOT_NODES for name in known.unsettled)


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children`, without rebuilding the node."""
    known = _KNOWN.get(type(node))
    if known is None or (known.unsettled and _sets_unsettled(node, known)):
        known = _learn(node)
    if known.read is None:
        return []
    found: list[cst.CSTNode] = []
    for value in known.read(node):
        kind = type(value)
        if kind is tuple or kind is list:
            found.extend(value)
        elif kind not in _NOT_NODES:
            found.append(value)
    return found


@dataclass
class Index:
    """Every node of a tree in preorder, with parents, children and preorder positions.

    The maps are keyed by `id(node)`: hashing a LibCST node is a Python-level call, and
    these maps are read for nearly every node (the tree keeps the nodes, so ids stay valid)."""

    order: list[cst.CSTNode] = field(default_factory=list)
    position_of: dict[int, int] = field(default_factory=dict)
    parent_of: dict[int, cst.CSTNode] = field(default_factory=dict)
    children_of: dict[int, list[cst.CSTNode]] = field(default_factory=dict)
    calls: list[cst.Call] = field(default_factory=list)  # the calls, in preorder
    call_positions: list[int] = field(default_factory=list)  # and their preorder positions
    by_type: dict[type, list[cst.CSTNode]] = field(default_factory=dict)  # the nodes of each type, in preorder

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parent_of.get(id(node))

    def end(self, node: cst.CSTNode) -> int:
        """Where `node`'s subtree ends in preorder: just after its last descendant."""
        last = node
        while id(last) in self.children_of:
            last = self.children_of[id(last)][-1]
        return self.position_of[id(last)] + 1


def index(root: cst.CSTNode) -> Index:
    """One walk over the tree under `root`."""
    found = Index()
    order, position_of, parent_of, children_of = found.order, found.position_of, found.parent_of, found.children_of
    by_type = found.by_type
    stack = [root]
    while stack:
        node = stack.pop()
        key = id(node)
        kind = type(node)
        if kind is cst.Call:
            found.calls.append(node)
            found.call_positions.append(len(order))
        bucket = by_type.get(kind)
        if bucket is None:
            by_type[kind] = [node]
        else:
            bucket.append(node)
        position_of[key] = len(order)
        order.append(node)
        kids = children(node)
        if kids:
            children_of[key] = kids
            for kid in kids:
                parent_of[id(kid)] = node
            stack.extend(reversed(kids))
    return found
