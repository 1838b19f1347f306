"""A shuffling DistributedSampler whose set_epoch() is never called: every epoch has one order."""

import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    device, loader, model, optimizer = linear_setup()
    for _ in range(3):
        train_epoch(model, loader, optimizer, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
