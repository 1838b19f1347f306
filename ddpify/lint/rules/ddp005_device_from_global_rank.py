"""DDP005 device-from-global-rank (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class DeviceFromGlobalRank(Rule):
    """TODO: document DDP005."""

    code = "DDP005"
    name = "device-from-global-rank"
    fix = "safe"

