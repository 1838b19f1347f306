"""Where DDP's overhead at world size 1 goes: ResNet-152 on GPU-resident batches, one process.

    python scripts/ddp_overhead.py      # a machine with CUDA; prints samples/s per DDP setting

No data loader and no ddpify: the model alone, plain and in DDP with and without the bucket view
and the per-forward buffer broadcast, each timed twice, alternating. docs/gpu-report.md has a run.
"""
import time

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
torch.cuda.set_device(0)
x = torch.randn(256, 3, 128, 128, device="cuda")
y = torch.randint(0, 10, (256,), device="cuda")
loss_fn = torch.nn.CrossEntropyLoss()


def run(wrap, warmup=8, steps=25):
    torch.manual_seed(0)
    model = torchvision.models.resnet152(num_classes=10).cuda()
    model = wrap(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            t = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()
    return steps * 256 / (time.perf_counter() - t)



def quiet(model):
    model.broadcast_buffers = False
    return model


configs = {
    "plain": lambda m: m,
    "DDP": lambda m: DDP(m),
    "DDP gradient_as_bucket_view": lambda m: DDP(m, gradient_as_bucket_view=True),
    "DDP broadcast_buffers off": lambda m: quiet(DDP(m)),
    "DDP both": lambda m: quiet(DDP(m, gradient_as_bucket_view=True)),
}
results = {name: [] for name in configs}
for repeat in range(2):
    for name, wrap in configs.items():
        results[name].append(run(wrap))
        print(f"{name}: {results[name][-1]:.0f} samples/s", flush=True)
base = max(results["plain"])
for name, rates in results.items():
    print(f"| {name} | {', '.join(f'{r:.0f}' for r in rates)} | {max(rates) / base:.3f} |")
dist.destroy_process_group()
