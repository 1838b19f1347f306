"""DDP202 load-without-map-location."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan, add_keyword
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import devices_and_output
from ddpify.syntax import code

LOADS = s.TORCH_LOAD | {"torch.jit.load"}


class LoadWithoutMapLocation(Rule):
    """## What it does
    Flags `torch.load` (and `torch.jit.load`) without `map_location` in a distributed script,
    unless only one rank runs it or a Dataset reads its own data files with it.

    ## Why is this bad?
    `torch.load` puts every tensor back on the device it was saved from. A checkpoint written by
    rank 0 holds `cuda:0` tensors, so every rank that loads it allocates them on GPU 0: GPU 0
    runs out of memory, or the ranks train on tensors of another process's GPU.

    ## Example
    ```python
    checkpoint = torch.load("checkpoint.pt")
    model.module.load_state_dict(checkpoint["model"])
    ```

    ## Use instead
    ```python
    checkpoint = torch.load("checkpoint.pt", map_location=device)  # or map_location="cpu"
    model.module.load_state_dict(checkpoint["model"])
    ```

    ## Fix safety
    Safe: adds `map_location=<device>` when a variable holding this rank's device is in scope
    (`device = torch.device("cuda", local_rank)`), else `map_location="cpu"`; `load_state_dict`
    copies the tensors onto the model's own device either way.

    ## References
    - [pytorch/pytorch#23138](https://github.com/pytorch/pytorch/issues/23138): all processes load the checkpoint onto GPU 0
    - [torch.load: map_location](https://pytorch.org/docs/stable/generated/torch.load.html)
    - [PyTorch DDP tutorial: save and load checkpoints](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints)
    """

    code = "DDP202"
    name = "load-without-map-location"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        if not self.tree.is_call_to(node, LOADS):
            return
        if s.arg(node, 1, "map_location") is not None or any(a.star == "**" for a in node.args):
            return
        if self.script.rank_guard(node) is not None:
            return  # one rank loads onto its own GPU
        if self.script.program.in_dataset(self.tree.function(node)):
            return  # a Dataset reading its own data files, not a checkpoint
        self.report(
            node,
            f"`{code(node.func)}` without `map_location`: tensors saved from GPU 0 load onto GPU 0 on every rank; pass `map_location`",
            fix=lambda plan: self._map_location(plan, node),
        )

    def _map_location(self, plan: Plan, load: cst.Call) -> str | None:
        device = devices_and_output(self.script).rank_device_name(load)
        value = device if device is not None else '"cpu"'
        plan.replace(load, add_keyword("map_location", value))
        return f"loads with `map_location={value}`"
