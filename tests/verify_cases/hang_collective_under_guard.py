"""A collective under a rank guard: rank 0 waits in all_reduce, rank 1 in barrier, forever."""

import torch
import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    device, loader, model, optimizer = linear_setup()
    loss = torch.tensor(train_epoch(model, loader, optimizer, device))
    if dist.get_rank() == 0:
        dist.all_reduce(loss)  # the other ranks never join this collective
        torch.save(model.module.state_dict(), "model.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
