"""DDP203 wrap-before-move (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class WrapBeforeMove(Rule):
    """TODO: document DDP203."""

    code = "DDP203"
    name = "wrap-before-move"
    fix = "safe"

