"""What in a training loop holds this rank's own batch: the names the loop draws its batch
into, and what the step computes from them. Under DDP each rank draws other batches, so a value
made from them differs per rank (a loss, predictions), while counters and values made from
replicated weights and fixed inputs (`netG(fixed_noise)`) are the same on every rank."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import libcst as cst

from ddpify.program import Program
from ddpify.syntax import Tree, dotted


def drawn_names(tree: Tree, program: Program, loop: cst.For | cst.While) -> set[str]:
    """The names a loop's batch is drawn into: its target (without `enumerate`'s index), and
    `x, y = next(batches)` in its body."""
    names: set[str] = set()
    if isinstance(loop, cst.For) and not _counts_steps(tree, loop.iter):
        target = loop.target
        if tree.is_builtin_call(loop.iter, "enumerate") and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            target = target.elements[1].value  # `i, (x, y)`: the index is no batch
        names = set(program.names_in(target))
    for call in tree.calls(loop.body):
        if tree.is_builtin_call(call, "next"):
            parent = tree.parent(call)
            if isinstance(parent, cst.Assign):
                for t in parent.targets:
                    names |= program.names_in(t.target)
    return names


COUNTERS = {"builtins.range", "itertools.count", "tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange"}


def _counts_steps(tree: Tree, iterable: cst.BaseExpression) -> bool:
    """`for i in range(start, n):` (also under tqdm): the target counts steps, the same on every
    rank; the batch comes from `next(...)` in the body."""
    while type(iterable) is cst.Call and iterable.args and (tree.qname(iterable.func) or "").split(".")[0] == "tqdm" and tree.qname(iterable.func) not in COUNTERS:
        iterable = iterable.args[0].value  # `tqdm(range(n))`
    return type(iterable) is cst.Call and tree.qname(iterable.func) in COUNTERS


def batch_names(tree: Tree, program: Program, loop: cst.For | cst.While) -> set[str]:
    """Every name the step binds from its batch, in any order (`loss`, `outputs`, `acc`): the
    drawn names, and plain assignments in the body computed from one of those."""
    names = drawn_names(tree, program, loop)
    assignments = [n for n in tree.walk(loop.body) if isinstance(n, (cst.Assign, cst.AnnAssign, cst.NamedExpr))]
    changed = True
    while changed:
        changed = False
        for node in assignments:
            if node.value is None or not reads(tree, node.value, names):
                continue
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            new = set().union(*(program.names_in(t) for t in targets)) - names
            if new:
                names |= new
                changed = True
    return names


def from_batch(
    tree: Tree,
    program: Program,
    loop: cst.For | cst.While,
    function: cst.FunctionDef | None,
    value: cst.CSTNode,
    depth: int = 4,
    also: Callable[[cst.CSTNode], bool] | None = None,
) -> bool:
    """Whether `value`, where it stands in the loop, holds something of this rank's batch: it
    reads a drawn name, or a name whose last assignment in the loop before it does, or one the
    loop keeps adding to from the batch (`tokens_seen += x.numel()`). `fake = netG(noise)` early
    in a step does not make `img_list.append(netG(fixed_noise))` later in it a batch's value.
    `also`: what else counts as this rank's own, wherever the value is followed to (convert's
    metrics: another module's evaluation handed the sharded loader)."""
    drawn = drawn_names(tree, program, loop)
    if not drawn:
        return True  # no batch to follow: assume it is one
    return _from_batch(tree, program, loop, function, value, drawn, depth, also)


def _from_batch(tree, program, loop, function, value, drawn, depth, also=None) -> bool:
    if also is not None and also(value):
        return True
    at = tree.order(value)
    for node in tree.walk(value):
        held = dotted(node) if type(node) is cst.Attribute else None
        if held is not None and held.startswith("self.") and held.count(".") == 1:
            # `self.loss = criterion(self.model(xb), yb)` earlier in the step, then `losses.append(self.loss.item())` (helper corpus CV, repro 07)
            earlier = [v for v, _ in program.assignments(function, held) if tree.inside(v, loop.body) and tree.order(v) < at]
            if earlier and (depth == 0 or _from_batch(tree, program, loop, function, max(earlier, key=tree.order), drawn, depth - 1, also)):
                return True
            continue
        if not isinstance(node, cst.Name):
            continue
        if node.value in drawn:
            return True
        earlier = [v for v, _ in program.assignments(function, node.value) if tree.inside(v, loop.body) and tree.order(v) < at]
        if earlier and (depth == 0 or _from_batch(tree, program, loop, function, max(earlier, key=tree.order), drawn, depth - 1, also)):
            return True
        grown = _grown(tree, loop).get(node.value, [])
        if grown and (depth == 0 or any(_from_batch(tree, program, loop, function, g, drawn, depth - 1, also) for g in grown)):
            return True
        # `for k, v in losses.items(): meters[k].update(v.item())`: a loop in the step over something of the batch
        inner = [lp for lp in tree.loops(value) if type(lp) is cst.For and lp is not loop and tree.inside(lp, loop.body) and node.value in program.names_in(lp.target)]
        if inner and (depth == 0 or _from_batch(tree, program, loop, function, inner[0].iter, drawn, depth - 1, also)):
            return True
    return False


_GROWN: weakref.WeakKeyDictionary[Tree, dict[int, dict[str, list[cst.BaseExpression]]]] = weakref.WeakKeyDictionary()


def _grown(tree: Tree, loop: cst.For | cst.While) -> dict[str, list[cst.BaseExpression]]:
    """What the loop adds to each name (`tokens_seen += x.numel()`), by name; once per loop."""
    per_loop = _GROWN.setdefault(tree, {})
    found = per_loop.get(id(loop))
    if found is None:
        found = per_loop[id(loop)] = {}
        for n in tree.walk(loop.body):
            if type(n) is cst.AugAssign and type(n.target) is cst.Name:
                found.setdefault(n.target.value, []).append(n.value)
    return found


def reads(tree: Tree, node: cst.CSTNode, names: set[str]) -> bool:
    return any(isinstance(n, cst.Name) and n.value in names for n in tree.walk(node))
