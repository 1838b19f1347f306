"""What makes ranks wait for each other.

A call synchronizes the ranks when it is a torch.distributed collective, a forward of the
distributed model (DDP broadcasts buffers), a `backward()` (DDP all-reduces the gradients), or
a same-file function that (transitively) runs one of these. Every rank must reach such a call
the same number of times, or the job hangs.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Program
from ddpify.syntax import Tree

# Whether a call runs the distributed model's forward; the caller decides which models count.
ForwardsModel = Callable[[cst.Call, "cst.FunctionDef | None"], bool]


def is_sync(tree: Tree, call: cst.Call, function: cst.FunctionDef | None, forwards_model: ForwardsModel) -> bool:
    """The call itself synchronizes (not counting what a same-file callee does)."""
    return s.is_backward(call) or tree.is_call_to(call, s.COLLECTIVES) or forwards_model(call, function)


def syncing_functions(tree: Tree, program: Program, forwards_model: ForwardsModel) -> set[cst.FunctionDef]:
    """Same-file functions that synchronize, directly or through other same-file functions."""
    return program.reaching(lambda call, function: is_sync(tree, call, function, forwards_model))


def call_syncs(
    tree: Tree,
    program: Program,
    call: cst.Call,
    function: cst.FunctionDef | None,
    forwards_model: ForwardsModel,
    syncing: set[cst.FunctionDef],
) -> bool:
    """The call synchronizes, itself or through the same-file function it runs."""
    if is_sync(tree, call, function, forwards_model):
        return True
    target = program.callee(call, function)
    return target is not None and target[0] in syncing
