"""A correct DDP script that would train for a million epochs: verify --steps judges its start."""

import torch.distributed as dist

from ddp_case import linear_setup, train_epoch


def main() -> None:
    device, loader, model, optimizer = linear_setup()
    try:
        for epoch in range(1_000_000):
            loader.sampler.set_epoch(epoch)
            loss = train_epoch(model, loader, optimizer, device)
            if dist.get_rank() == 0:
                print(f"epoch {epoch} loss {loss:.4f}")
    except Exception as exc:  # a script's own error handling must not swallow the stop
        print(f"training failed: {exc}")
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
