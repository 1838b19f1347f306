"""DDP207 module-on-maybe-unwrapped (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class ModuleOnMaybeUnwrapped(Rule):
    """TODO: document DDP207."""

    code = "DDP207"
    name = "module-on-maybe-unwrapped"
    fix = "safe"

