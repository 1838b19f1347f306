"""DDP403 unreduced-metric (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class UnreducedMetric(Rule):
    """TODO: document DDP403."""

    code = "DDP403"
    name = "unreduced-metric"
    fix = "no"

