"""Micro-steps of gradient accumulation under `model.no_sync()` (convert's GradientSync and lint's
DDP404 fix)."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ddpify.edit.plan import Plan
from ddpify.edit.snippets import statements


def wrap_micro_steps(plan: Plan, span: Sequence[cst.CSTNode], models: Sequence[tuple[str, str]]) -> None:
    """Put a micro-step's forward..backward statements under each model's `no_sync()` unless the
    model's condition (the optimizer-step test) holds. Shared with lint's DDP404 fix."""
    contexts = ", ".join(f"contextlib.nullcontext() if {condition} else {model}.no_sync()" for model, condition in models)
    header = statements(f"# Sync gradients only on the micro-step that updates the weights.\nwith {contexts}:\n    pass\n")[0]
    assert isinstance(header, cst.With)

    def build(inner: list[cst.BaseStatement]) -> cst.With:
        return header.with_changes(body=cst.IndentedBlock(body=inner))

    plan.wrap(span, build)
    plan.add_import("contextlib")
