"""Right under torchrun, but `python needs_torchrun.py` fails: it reads RANK without a default."""

import os

import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    rank = int(os.environ["RANK"])
    device, loader, model, optimizer = linear_setup()
    loss = train_epoch(model, loader, optimizer, device)
    if rank == 0:
        print(f"loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
