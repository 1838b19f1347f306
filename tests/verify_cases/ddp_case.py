"""What the verify cases share: a world of one or of torchrun's ranks, toy data, a DDP training loop.

Each case in this folder is a DDP script with one thing wrong (or nothing, `correct.py`); they
import this module from their own folder (a script's folder is first on sys.path).
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def init() -> torch.device:
    """The process group (gloo on CPU, nccl on the rank's GPU) and the rank's device."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return device


def dataset(n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(n, 4, generator=generator)
    return TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))


def sharded_loader(data: TensorDataset, batch_size: int = 8) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data))


def wrap(model: nn.Module, device: torch.device) -> DDP:
    model = model.to(device)
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def train_epoch(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, device: torch.device) -> float:
    for inputs, targets in loader:
        loss = nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def linear_setup() -> tuple[torch.device, DataLoader, DDP, torch.optim.Optimizer]:
    """The group, a sharded loader and a wrapped linear model with its optimizer: what most cases start from."""
    device = init()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    model = wrap(nn.Linear(4, 1), device)
    return device, loader, model, torch.optim.SGD(model.parameters(), lr=0.1)
