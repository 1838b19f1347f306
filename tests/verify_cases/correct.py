"""A correct DDP script: sharded data, set_epoch, output and checkpoint on rank 0, unwrapped state dict.

It previews a batch before training (the tutorials' `next(iter(loader))`): that pass shares
epoch 0's order with the first epoch, which is no missing set_epoch()."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, train_epoch, wrap


def main() -> None:
    device = init()
    is_main_process = dist.get_rank() == 0
    torch.manual_seed(0)
    loader = sharded_loader(dataset())
    preview, _ = next(iter(loader))
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if is_main_process:
        print(f"batch shape {tuple(preview.shape)}")
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        loss = train_epoch(model, loader, optimizer, device)
        if is_main_process:
            print(f"epoch {epoch} loss {loss:.4f}")
    if is_main_process:
        torch.save(model.module.state_dict(), "model.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
