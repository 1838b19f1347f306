"""Trains correctly but never calls destroy_process_group()."""

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
    loss = train_epoch(model, loader, optimizer, device)
    if dist.get_rank() == 0:
        print(f"loss {loss:.4f}")


if __name__ == "__main__":
    main()
