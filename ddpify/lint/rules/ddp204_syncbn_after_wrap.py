"""DDP204 syncbn-after-wrap (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class SyncbnAfterWrap(Rule):
    """TODO: document DDP204."""

    code = "DDP204"
    name = "syncbn-after-wrap"
    fix = "safe"

