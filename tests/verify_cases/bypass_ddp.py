"""Trains through a custom method of the wrapped module: DDP's forward runs only for evaluation."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, wrap


class Regressor(nn.Linear):
    def compute_loss(self, inputs, targets):
        return nn.functional.mse_loss(self(inputs), targets)


def main() -> None:
    device = init()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    model = wrap(Regressor(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = model.module.compute_loss(inputs.to(device), targets.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            model(inputs.to(device))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
