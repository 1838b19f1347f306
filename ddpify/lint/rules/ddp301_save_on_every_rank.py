"""DDP301 save-on-every-rank (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class SaveOnEveryRank(Rule):
    """TODO: document DDP301."""

    code = "DDP301"
    name = "save-on-every-rank"
    fix = "safe"

