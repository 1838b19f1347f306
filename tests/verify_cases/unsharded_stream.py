"""An IterableDataset that yields the same stream on every rank."""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from ddp_case import init, train_epoch, wrap


class Stream(IterableDataset):
    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for _ in range(32):
            inputs = torch.randn(4, generator=generator)
            yield inputs, inputs.sum(dim=0, keepdim=True)


def main() -> None:
    device = init()
    torch.manual_seed(0)
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_epoch(model, DataLoader(Stream(), batch_size=8), optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
