"""DDP103 sampler-without-set-epoch (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class SamplerWithoutSetEpoch(Rule):
    """TODO: document DDP103."""

    code = "DDP103"
    name = "sampler-without-set-epoch"
    fix = "safe"

