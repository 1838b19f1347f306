"""Saves the DDP wrapper's state_dict(): every key carries a `module.` prefix."""

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
    train_epoch(model, loader, optimizer, device)
    if dist.get_rank() == 0:
        torch.save({"model": model.state_dict(), "epoch": 1}, "checkpoint.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
