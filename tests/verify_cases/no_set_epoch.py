"""A shuffling DistributedSampler whose set_epoch() is never called: every epoch has one order."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, train_epoch, wrap


def main() -> None:
    device = init()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
