"""DDP201 device-not-bound-to-rank (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class DeviceNotBoundToRank(Rule):
    """TODO: document DDP201."""

    code = "DDP201"
    name = "device-not-bound-to-rank"
    fix = "by convert"

