"""Every rank appends to one log file and saves one sample file; rank 1 also keeps a file of its own."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, train_epoch, wrap


def main() -> None:
    device = init()
    rank = dist.get_rank()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = train_epoch(model, loader, optimizer, device)
    with open("train.log", "a") as log:
        log.write(f"loss {loss:.4f}\n")
    torch.save(model.module.weight.detach().cpu(), "samples.pt")
    with open(f"rank{rank}.txt", "w") as own:
        own.write("mine\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
