"""Hand-made batches sliced from tensors, not from a DataLoader: verify cannot judge the data.
A sharded DataLoader's epoch comes first: its batches do not vouch for the stage after it."""

import torch
import torch.distributed as dist
from torch import nn

from ddp_case import dataset, init, sharded_loader, train_epoch, wrap


def main() -> None:
    device = init()
    torch.manual_seed(0)
    inputs, targets = dataset().tensors
    model = wrap(nn.Linear(4, 1), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_epoch(model, sharded_loader(dataset()), optimizer, device)
    for start in range(0, len(inputs), 8):
        loss = nn.functional.mse_loss(model(inputs[start:start + 8].to(device)), targets[start:start + 8].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
