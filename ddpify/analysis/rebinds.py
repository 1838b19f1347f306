"""A wrapped model's name bound again after the wrap to what is no wrapper.

`model = torch.load(path)` after training (the best model read back whole) leaves the name
holding the plain model: from there on `model.module` fails and `model.state_dict()` has the
plain keys. Convert reaches such a model as `getattr(model, "module", model)`; lint DDP302 does
not report its state_dict. Both ask here.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Program


def rebinds_after(program: Program, name: str, wrap: cst.CSTNode, function: cst.FunctionDef | None, until: cst.CSTNode | None = None) -> list[cst.BaseExpression]:
    """The values `name` (a plain name, not `self.model`) is bound to in `function` after `wrap`
    (and before `until`), in source order, that are no DDP wrap and do not read it (`model =
    torch.load(f)`, not `model = DDP(model.module)` nor `model = convert_sync_batchnorm(model)`)."""
    if "." in name:
        return []
    tree = program.tree
    start = tree.order(wrap)
    end = tree.order(until) if until is not None else None
    statement = tree.statement(wrap)
    return sorted((
        value for value, _ in program.assignments(function, name)
        if start < tree.order(value) and (end is None or tree.order(value) < end) and not tree.inside(value, statement)
        and not (type(value) is cst.Call and tree.is_call_to(value, s.DDP))
        and name not in {n.value for n in tree.walk(value) if type(n) is cst.Name}
    ), key=tree.order)  # fmt: skip
