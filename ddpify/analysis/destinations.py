"""Where a write goes: destinations that belong to one process, which every rank may write."""

from __future__ import annotations

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import Tree

IN_MEMORY = {"io.BytesIO", "io.StringIO"}


def private_to_process(tree: Tree, program: Program, expr: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 3) -> bool:
    """A buffer in memory, a temporary file or directory (`tempfile.*`, also through a path
    joined onto one), or os.devnull: each process has its own, so a write there by every rank
    is no duplicate, and a rank reads back only what it wrote itself."""
    for node in tree.walk(expr):
        if type(node) is cst.Name or type(node) is cst.Attribute:
            name = tree.qname(node)
            if name is not None and (name in IN_MEMORY or name.startswith("tempfile.") or name == "os.devnull"):
                return True
    if depth == 0:
        return False
    for node in tree.walk(expr):
        if type(node) is cst.Name:
            parent = tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue
            for origin in program.origins(node, function):
                if origin.node is not node and private_to_process(tree, program, origin.node, origin.function, depth - 1):
                    return True
    return False
