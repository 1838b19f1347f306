"""Saves the DDP wrapper's state_dict(): every key carries a `module.` prefix."""

import torch
import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    device, loader, model, optimizer = linear_setup()
    train_epoch(model, loader, optimizer, device)
    if dist.get_rank() == 0:
        torch.save({"model": model.state_dict(), "epoch": 1}, "checkpoint.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
