"""DDP303 side-effect-on-every-rank (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class SideEffectOnEveryRank(Rule):
    """TODO: document DDP303."""

    code = "DDP303"
    name = "side-effect-on-every-rank"
    fix = "safe"
    default = False
