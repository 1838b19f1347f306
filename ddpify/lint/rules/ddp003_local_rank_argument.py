"""DDP003 local-rank-argument (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class LocalRankArgument(Rule):
    """TODO: document DDP003."""

    code = "DDP003"
    name = "local-rank-argument"
    fix = "safe"

