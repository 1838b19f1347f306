"""DDP004 process-group-not-destroyed (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class ProcessGroupNotDestroyed(Rule):
    """TODO: document DDP004."""

    code = "DDP004"
    name = "process-group-not-destroyed"
    fix = "safe"

