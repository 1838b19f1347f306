"""DDP101 dataloader-without-distributed-sampler (not implemented yet)."""

from __future__ import annotations

from ddpify.lint.rule import Rule


class DataloaderWithoutDistributedSampler(Rule):
    """TODO: document DDP101."""

    code = "DDP101"
    name = "dataloader-without-distributed-sampler"
    fix = "by convert"

