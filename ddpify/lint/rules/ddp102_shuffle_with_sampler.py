"""DDP102 shuffle-with-sampler (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class ShuffleWithSampler(Rule):
    """TODO: document DDP102."""

    code = "DDP102"
    name = "shuffle-with-sampler"
    fix = "safe"

