"""DDP002 backend-without-cpu-fallback (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class BackendWithoutCpuFallback(Rule):
    """TODO: document DDP002."""

    code = "DDP002"
    name = "backend-without-cpu-fallback"
    fix = "safe"

