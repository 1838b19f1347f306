"""Each rank keeps its own random half of the data (a split drawn from a generator nothing
seeded), then shards it with a DistributedSampler: the positions each rank draws look disjoint,
the samples behind them are not."""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Subset

from ddp_case import dataset, init, sharded_loader, train_epoch, wrap


def main() -> None:
    device = init()
    data = dataset()
    kept = torch.randperm(len(data), generator=torch.Generator().manual_seed(dist.get_rank()))[:32].tolist()
    loader = sharded_loader(Subset(data, kept))
    torch.manual_seed(0)
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
