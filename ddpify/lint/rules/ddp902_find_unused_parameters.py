"""DDP902 find-unused-parameters (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class FindUnusedParameters(Rule):
    """TODO: document DDP902."""

    code = "DDP902"
    name = "find-unused-parameters"
    fix = "no"
    default = False
