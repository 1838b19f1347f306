"""DDP105 split-without-generator (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class SplitWithoutGenerator(Rule):
    """TODO: document DDP105."""

    code = "DDP105"
    name = "split-without-generator"
    fix = "safe"

