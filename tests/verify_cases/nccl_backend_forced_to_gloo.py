"""Asks for NCCL (with an NCCL-only device_id) on CPU: runs only when verify forces gloo."""

import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group(backend="nccl", device_id=torch.device("cuda", local_rank))
rank = dist.get_rank()
total = torch.ones(1)
dist.all_reduce(total)
print(
    f"rank {rank}: backend={dist.get_backend()} world={int(total.item())}"
    f" LOCAL_RANK={local_rank} true={os.environ.get('DDPIFY_VERIFY_LOCAL_RANK')}"
)
dist.destroy_process_group()
