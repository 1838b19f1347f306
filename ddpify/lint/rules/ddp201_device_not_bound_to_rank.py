"""DDP201 device-not-bound-to-rank."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import (
    devices_and_output,
    gpu_index,
    int_literal,
)
from ddpify.syntax import code, method_call, string_value

FIX = 'use `torch.device("cuda", local_rank)`'
UNBOUND = "no `torch.cuda.set_device(local_rank)` runs before it"


class DeviceNotBoundToRank(Rule):
    """## What it does
    Flags GPU spellings that name the same GPU in every process: `"cuda:0"`,
    `torch.device("cuda", 0)`, `.cuda(0)`, `.to(0)`, `device_ids=[0]`,
    `torch.cuda.set_device(0)`; and the bare `"cuda"` / `.cuda()` (the *current* GPU) when no
    `torch.cuda.set_device(local_rank)` has run before it, following same-file calls.

    Not flagged: scripts that give each process one GPU through
    `os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)` (there `"cuda:0"` is the rank's
    own GPU), and the bare spellings in files that set up the process group in another module
    (`utils.init_distributed_mode(args)`), where the binding is out of sight.

    ## Why is this bad?
    Under `torchrun` every process runs the same script. A fixed GPU index puts all of them on
    GPU 0: the other GPUs sit idle, GPU 0 runs out of memory, and NCCL fails with "Duplicate
    GPU detected" or hangs. The bare `"cuda"` means "the current device", which is GPU 0 until
    the process calls `torch.cuda.set_device`.

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = Net().to("cuda:0")
    inputs = inputs.cuda()
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
    model = Net().to(device)
    inputs = inputs.to(device)
    ```

    ## Fix safety
    No fix from `ddpify lint --fix`: the right device depends on how the script learns its local
    rank. `ddpify convert` rewrites every GPU spelling to the rank's device and adds the
    `set_device(local_rank)` setup.

    ## References
    - [PyTorch: getting started with DDP](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    - [torchrun environment variables (`LOCAL_RANK`)](https://pytorch.org/docs/stable/elastic/run.html#environment-variables)
    - [torch.cuda.set_device](https://pytorch.org/docs/stable/generated/torch.cuda.set_device.html)
    """

    code = "DDP201"
    name = "device-not-bound-to-rank"
    fix = "by convert"

    def visit_Module(self, node: cst.Module) -> bool:
        # one GPU visible per process: "cuda:0" is this rank's GPU
        return not devices_and_output(self.script).visible_devices_per_rank

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._built_gpu_string(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        facts = devices_and_output(self.script)
        index = gpu_index(node)
        if index is not None:
            if facts.placement(node) is not None:
                self.report(node, f"`{code(node)}` is GPU {index} on every rank; {FIX}")
            return
        if self._built_gpu_string(node):
            return
        if string_value(node) != "cuda":
            return
        use = facts.placement(node)
        if use == "placement" and not facts.device_bound_before(node):
            self.report(node, f'`"cuda"` is GPU 0 on every rank: {UNBOUND}')
        elif use == "value" and not facts.set_device_calls and not facts.device_setup_elsewhere:
            self.report(node, '`"cuda"` is GPU 0 on every rank: the script never calls `torch.cuda.set_device(local_rank)`')

    def _built_gpu_string(self, node: cst.SimpleString | cst.FormattedString) -> bool:
        """`f"cuda:{args.gpu}"`, `"cuda:%d" % args.gpu`: one GPU, the same one on every rank."""
        whole = self.tree.gpu_string(node)
        if whole is None or whole is node and type(node) is cst.SimpleString:
            return False
        facts = devices_and_output(self.script)
        if facts.placement(whole) is not None and not facts.mentions_rank(whole, self.tree.function(whole)):
            self.report(whole, f"`{code(whole)}` is the same GPU on every rank; {FIX}")
        return True

    def visit_Call(self, node: cst.Call) -> None:
        name = self.tree.qname(node.func)
        if name in s.TORCH_DEVICE:
            self._torch_device(node)
        elif name in s.SET_DEVICE:
            argument = s.arg(node, 0, "device")
            if argument is not None and (index := int_literal(argument.value)) is not None:
                self.report(argument.value, f"`{code(node)}` puts every rank on GPU {index}; pass the local rank")
        elif name in s.DDP:
            for keyword in ("device_ids", "output_device"):
                argument = s.arg(node, None, keyword)
                values = argument.value.elements if argument is not None and isinstance(argument.value, (cst.List, cst.Tuple)) else []
                literals = [e.value for e in values] if values else ([argument.value] if argument is not None else [])
                for literal in literals:
                    if (index := int_literal(literal)) is not None:
                        self.report(literal, f"`{keyword}={code(argument.value)}` is GPU {index} on every rank; pass the local rank")  # type: ignore[union-attr]
        else:
            self._method(node)

    def _torch_device(self, node: cst.Call) -> None:
        first = s.arg(node, 0, "type")
        index = s.arg(node, 1, "index")
        if first is not None and (gpu := int_literal(first.value)) is not None:
            self.report(node, f"`{code(node)}` is GPU {gpu} on every rank; {FIX}")
        elif first is not None and string_value(first.value) == "cuda" and index is not None and (gpu := int_literal(index.value)) is not None:
            self.report(node, f"`{code(node)}` is GPU {gpu} on every rank; {FIX}")

    def _method(self, node: cst.Call) -> None:
        found = method_call(node)
        if found is None or s.dotted(found[0]) == "torch" or found[1] not in ("cuda", "to"):
            return
        argument = s.arg(node, 0, "device")
        index = int_literal(argument.value) if argument is not None else None
        if index is not None:
            self.report(argument.value, f"`.{found[1]}({index})` is GPU {index} on every rank; {FIX}")  # type: ignore[union-attr]
        elif found[1] == "cuda" and argument is None and not devices_and_output(self.script).device_bound_before(node):
            self.report(node, f"`.cuda()` is GPU 0 on every rank: {UNBOUND}")
