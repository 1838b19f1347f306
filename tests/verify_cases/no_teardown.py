"""Trains correctly but never calls destroy_process_group()."""

import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    device, loader, model, optimizer = linear_setup()
    loss = train_epoch(model, loader, optimizer, device)
    if dist.get_rank() == 0:
        print(f"loss {loss:.4f}")


if __name__ == "__main__":
    main()
