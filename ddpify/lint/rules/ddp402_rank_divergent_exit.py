"""DDP402 rank-divergent-exit (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class RankDivergentExit(Rule):
    """TODO: document DDP402."""

    code = "DDP402"
    name = "rank-divergent-exit"
    fix = "no"

