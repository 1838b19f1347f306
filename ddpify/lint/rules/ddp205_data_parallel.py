"""DDP205 data-parallel (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class DataParallel(Rule):
    """TODO: document DDP205."""

    code = "DDP205"
    name = "data-parallel"
    fix = "by convert"

