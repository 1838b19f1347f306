"""DDP104 eval-sampler-pads (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class EvalSamplerPads(Rule):
    """TODO: document DDP104."""

    code = "DDP104"
    name = "eval-sampler-pads"
    fix = "no"

