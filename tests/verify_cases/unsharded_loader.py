"""A DataLoader that shuffles with the same seed on every rank and no DistributedSampler."""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from ddp_case import dataset, init, train_epoch, wrap


def main() -> None:
    device = init()
    torch.manual_seed(0)
    loader = DataLoader(dataset(), batch_size=8, shuffle=True)
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
