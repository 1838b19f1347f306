"""Sharded data and a process group, but the model is never wrapped in DDP: nothing is averaged."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, train_epoch


def main() -> None:
    device = init()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
