"""DDP404 accumulation-without-no-sync (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class AccumulationWithoutNoSync(Rule):
    """TODO: document DDP404."""

    code = "DDP404"
    name = "accumulation-without-no-sync"
    fix = "partial"

