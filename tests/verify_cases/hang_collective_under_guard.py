"""A collective under a rank guard: rank 0 waits in all_reduce, rank 1 in barrier, forever."""

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
    loss = torch.tensor(train_epoch(model, loader, optimizer, device))
    if dist.get_rank() == 0:
        dist.all_reduce(loss)  # the other ranks never join this collective
        torch.save(model.module.state_dict(), "model.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
