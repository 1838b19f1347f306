"""Micro-steps of gradient accumulation under `model.no_sync()` (convert's GradientSync and lint's
DDP404 fix)."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ddpify.edit.plan import Plan
from ddpify.edit.snippets import statements


def wrap_micro_steps(plan: Plan, span: Sequence[cst.CSTNode], model: str, condition: str) -> None:
    """Put a micro-step's forward..backward statements under `model.no_sync()` unless `condition`
    (the optimizer-step test) holds. Shared with lint's DDP404 fix."""
    header = statements(
        "# Sync gradients only on the micro-step that updates the weights.\n"
        f"with contextlib.nullcontext() if {condition} else {model}.no_sync():\n"
        "    pass\n"
    )[0]
    assert isinstance(header, cst.With)

    def build(inner: list[cst.BaseStatement]) -> cst.With:
        return header.with_changes(body=cst.IndentedBlock(body=inner))

    plan.wrap(span, build)
    plan.add_import("contextlib")
