"""DDP202 load-without-map-location (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class LoadWithoutMapLocation(Rule):
    """TODO: document DDP202."""

    code = "DDP202"
    name = "load-without-map-location"
    fix = "safe"

