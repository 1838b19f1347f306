"""Missing rank-0 guard on output: every rank prints the epoch lines."""

import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    device, loader, model, optimizer = linear_setup()
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        loss = train_epoch(model, loader, optimizer, device)
        print(f"epoch {epoch} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
