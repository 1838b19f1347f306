"""DDP205 data-parallel."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.lint.rule import Rule
from ddpify.syntax import code

DATA_PARALLEL_CALLS = s.DATA_PARALLEL | {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}
# A branch that sets up the process group or DDP: the DataParallel path is the other one.
DISTRIBUTED_SETUP = s.DDP | s.INIT_PROCESS_GROUP
DISTRIBUTED_TESTS = {"torch.distributed.is_initialized", "torch.distributed.is_available", "torch.distributed.is_torchelastic_launched"}


class DataParallel(Rule):
    """## What it does
    Flags `nn.DataParallel` (and `nn.parallel.data_parallel`) in a script that runs distributed,
    unless it sits in the branch that runs when the script is *not* distributed
    (`if args.distributed: DDP(...) else: DataParallel(...)`).

    ## Why is this bad?
    `DataParallel` is one process driving every visible GPU by threads: it replicates the
    model on every forward, gathers outputs on GPU 0 (the memory imbalance everyone hits) and
    is held back by the GIL. Inside a DDP job it is worse: every rank grabs all GPUs (double
    parallelism), or DDP wraps a `DataParallel` whose `.module` nesting breaks checkpoints. The
    PyTorch docs recommend `DistributedDataParallel` instead, even on one machine.

    ## Example
    ```python
    dist.init_process_group("nccl")
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    model = DDP(model.to(device), device_ids=[local_rank])
    ```

    ## Fix safety
    No fix from `ddpify lint --fix`: replacing the wrapper needs the process-group setup and
    the rank's device. `ddpify convert` removes `DataParallel` and wraps the model in DDP.

    ## References
    - [DataParallel: use DistributedDataParallel instead](https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html)
    - [CUDA semantics: use DDP instead of DataParallel](https://pytorch.org/docs/stable/notes/cuda.html#cuda-nn-ddp-instead)
    - [Comparison between DataParallel and DistributedDataParallel](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#comparison-between-dataparallel-and-distributeddataparallel)
    """

    code = "DDP205"
    name = "data-parallel"
    fix = "by convert"

    def visit_Call(self, node: cst.Call) -> None:
        if not self.tree.is_call_to(node, DATA_PARALLEL_CALLS) or self._single_process_path(node):
            return
        self.report(node, f"`{code(node.func)}` in a distributed script: every rank would drive all GPUs; use one GPU per process with DistributedDataParallel")

    def _single_process_path(self, node: cst.Call) -> bool:
        """In the branch opposite to the DDP setup, or under a test for a distributed run."""
        child: cst.CSTNode = node
        for parent in self.tree.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test:
                other = parent.orelse if child is parent.body else parent.body
                if other is not None and any(self.tree.is_call_to(c, DISTRIBUTED_SETUP) for c in self.tree.calls(other)):
                    return True
                if self._tests_distributed(parent.test):
                    return True
            child = parent
        return False

    def _tests_distributed(self, test: cst.BaseExpression) -> bool:
        for n in self.tree.walk(test):
            if isinstance(n, cst.Call) and self.tree.qname(n.func) in DISTRIBUTED_TESTS:
                return True
            if isinstance(n, (cst.Name, cst.Attribute)):
                last = (s.dotted(n) or "").rsplit(".", 1)[-1].lower()
                if last in ("distributed", "is_distributed", "use_ddp", "ddp", "multiprocessing_distributed"):
                    return True
        return False
