"""Two networks, two optimizers, only one of them wrapped in DDP: the other drifts apart per rank."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, wrap


def main() -> None:
    device = init()
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    encoder = wrap(nn.Linear(4, 3), device)
    head = nn.Linear(3, 1).to(device)  # forgotten: trained on this rank's shard only
    optimizers = [torch.optim.SGD(encoder.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(head(encoder(inputs.to(device))), targets.to(device))
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
