"""DDP001 process-group-not-initialized (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class ProcessGroupNotInitialized(Rule):
    """TODO: document DDP001."""

    code = "DDP001"
    name = "process-group-not-initialized"
    fix = "by convert"

