"""Rebuilding a LibCST tree along the paths to the nodes an edit touches.

LibCST's transformers rebuild every node of the tree, which costs more than parsing it;
an edit only needs new nodes from the edited ones up to the module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import libcst as cst


class PathRebuilder(cst.CSTTransformer):
    """A transformer that descends only into `dirty` nodes: the rest of the tree is kept as it is."""

    def __init__(self, dirty: set[cst.CSTNode]) -> None:
        super().__init__()
        self.dirty = dirty

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node in self.dirty

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


Parent = Callable[[cst.CSTNode], "cst.CSTNode | None"]


def dirty_paths(edited: Iterable[cst.CSTNode], parent: Parent) -> set[cst.CSTNode]:
    """The edited nodes and all their ancestors."""
    dirty: set[cst.CSTNode] = set()
    for node in edited:
        current: cst.CSTNode | None = node
        while current is not None and current not in dirty:
            dirty.add(current)
            current = parent(current)
    return dirty


class _Replacer(PathRebuilder):
    """Swaps nodes for their edits."""

    def __init__(self, edits: dict[cst.CSTNode, cst.CSTNode | cst.RemovalSentinel], parent: Parent) -> None:
        super().__init__(dirty_paths(edits, parent))
        self.edits = edits

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        return self.edits.get(original_node, updated_node)


def replace_nodes(module: cst.Module, edits: dict[cst.CSTNode, cst.CSTNode | cst.RemovalSentinel], parent: Parent) -> cst.Module:
    """`module` with each key of `edits` replaced by its value (a removal drops it, and a
    line left empty goes with it)."""
    return module.visit(_Replacer(edits, parent))  # type: ignore[return-value]
