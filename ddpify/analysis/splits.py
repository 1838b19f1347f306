"""Random train/validation splits that each rank would draw differently.

`random_split(dataset, lengths)` draws from the global generator. Each process starts that
generator from its own random seed (torch seeds it from the OS), so in a script that seeds
nothing before the split every rank draws its own split: a `DistributedSampler` over "the"
training set then samples different subsets on different ranks, and one rank validates on
another's training samples.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Program
from ddpify.syntax import Tree


def is_seed_call(tree: Tree, call: cst.Call) -> bool:
    """`torch.manual_seed(...)`, `np.random.seed(...)`, `set_seed(...)`: not a generator of its own."""
    name = tree.qname(call.func) or (call.func.value if isinstance(call.func, cst.Name) else "")
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.Generator."):
        return False
    return "seed" in last.lower() and last != "initial_seed" and bool(call.args)


def unseeded_splits(tree: Tree, program: Program) -> list[cst.Call]:
    """`random_split` calls without a generator that no seed call runs before: in their own
    scope before them, at module level before them, or in a caller before the call."""
    found = []
    for call in tree.calls():
        if not tree.is_call_to(call, s.RANDOM_SPLIT) or s.arg(call, 2, "generator") is not None:
            continue
        if not _seeded_before(tree, program, call, tree.function(call), depth=2):
            found.append(call)
    return found


def _seeded_before(tree: Tree, program: Program, point: cst.CSTNode, function: cst.FunctionDef | None, depth: int) -> bool:
    where = tree.order(point)
    if any(is_seed_call(tree, c) and tree.order(c) < where for c in program.calls_in(function)):
        return True
    if function is None:
        return False
    if any(is_seed_call(tree, c) for c in program.calls_in(None) if tree.order(c) < where):
        return True  # module code before the function runs (a seed at import)
    if depth == 0:
        return False
    return any(_seeded_before(tree, program, site, caller, depth - 1) for site, caller in program.call_sites(function))
