"""DDP901 batch-semantics (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class BatchSemantics(Rule):
    """TODO: document DDP901."""

    code = "DDP901"
    name = "batch-semantics"
    fix = "no"
    default = False
