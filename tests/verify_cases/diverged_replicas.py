"""Weights re-initialized after the DDP wrap from a per-rank seed: the replicas never agree again."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, train_epoch, wrap


def main() -> None:
    device = init()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    model = wrap(nn.Linear(4, 1), device)
    torch.manual_seed(1234 + dist.get_rank())  # "a different seed per rank"
    nn.init.normal_(model.module.weight)  # after the wrap: DDP broadcast rank 0's weights already
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
