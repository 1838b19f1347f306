"""ddpify: rewrite single-GPU PyTorch training scripts into DistributedDataParallel scripts.

The package never imports torch: converting and linting are pure source transformations.
"""

__version__ = "0.1.0"
