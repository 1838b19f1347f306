"""A DataLoader with a shuffling DistributedSampler built anew for every epoch (a curriculum's
rebuilt loader) and no set_epoch(): each new sampler starts at epoch 0, so every epoch has one order."""

import torch.distributed as dist

from ddp_case import dataset, linear_setup, sharded_loader, train_epoch


def main() -> None:
    device, _, model, optimizer = linear_setup()
    data = dataset()
    for _ in range(3):
        loader = sharded_loader(data)
        train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
