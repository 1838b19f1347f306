"""DDP206 forward-through-module (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class ForwardThroughModule(Rule):
    """TODO: document DDP206."""

    code = "DDP206"
    name = "forward-through-module"
    fix = "no"

