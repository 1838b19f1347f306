"""DDP001 process-group-not-initialized."""

from __future__ import annotations

import re

import libcst as cst

from ddpify import syntax as s
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import NEEDS_GROUP, facts, position
from ddpify.syntax import code

# An imported helper with one of these in its name may set up the group in another module
# (`utils.init_distributed_mode(args)`, `setup_ddp()`): the file is then not flagged as having no init.
SETUP_HELPER = re.compile(r"init|setup|dist|launch|ddp", re.IGNORECASE)


class ProcessGroupNotInitialized(Rule):
    """## What it does
    Flags the first use of something that needs the default process group (a
    `DistributedSampler`, a `DistributedDataParallel` wrap, `dist.get_rank()`,
    `dist.get_world_size()`, a collective) when the script never calls
    `dist.init_process_group`, or calls it only later in the same function.

    A use in a helper counts when the helper is called before the init in the function that
    does the init. Uses under `dist.is_initialized()` or in a `try` block are not flagged. A
    file with no init at all is flagged only when the use runs when the script runs (module
    code and the functions it calls or spawns), so a library of helpers is left alone, and
    not when the script calls an imported setup helper (`init_distributed_mode(args)`) or
    uses a framework that sets up the group itself (Accelerate, Lightning, DeepSpeed, Ray Train).

    ## Why is this bad?
    Each of these asks the default process group for the rank or the world size, and fails
    with `ValueError: Default process group has not been initialized, please make sure to
    call init_process_group.` A `DistributedSampler` built before the init fails the same way
    unless it is given both `num_replicas=` and `rank=`.

    ## Example
    ```python
    model = DDP(model.to(device), device_ids=[local_rank])
    dist.init_process_group("nccl")
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    model = DDP(model.to(device), device_ids=[local_rank])
    ```

    ## Fix safety
    No fix here: where the setup goes (and which device and backend it picks) depends on the
    entry point. `ddpify convert` on the single-GPU script writes the whole setup at the top
    of the entry point.

    ## References
    - [torch.distributed.init_process_group](https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group)
    - [Getting started with DDP](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    """

    code = "DDP001"
    name = "process-group-not-initialized"
    fix = "by convert"

    def visit_Module(self, node: cst.Module) -> bool:
        found = self._first_unready_use()
        if found is not None:
            use, init = found
            what = code(use.func)
            if init is None:
                self.report(use, f"`{what}(...)` needs the default process group, but `init_process_group` is never called: initialize it first")
            else:
                self.report(use, f"`{what}(...)` runs before the process group is initialized (line {self.tree.line(init)}): initialize it first")
        return False  # one pass over the whole file is enough

    def _first_unready_use(self) -> tuple[cst.Call, cst.Call | None] | None:
        f = facts(self.script)
        if f.uses_framework:
            return None
        uses = [
            c
            for c in self.script.calls(NEEDS_GROUP)
            if self._needs_group(c) and not f.under_is_initialized(c) and not self._deferred(c)
        ]
        if not f.all_inits:
            if self._calls_setup_helper():
                return None
            for use in uses:
                if self.tree.function(use) in f.reachable:
                    return use, None
            return None
        for use in uses:
            init = self._runs_before_init(use)
            if init is not None:
                return use, init
        return None

    def _needs_group(self, call: cst.Call) -> bool:
        if self.tree.is_call_to(call, s.DISTRIBUTED_SAMPLER):
            # DistributedSampler(ds, num_replicas=n, rank=r) asks the group nothing
            return not (s.arg(call, 1, "num_replicas") and s.arg(call, 2, "rank"))
        return True

    def _deferred(self, call: cst.Call) -> bool:
        """Inside a lambda: it runs when called, not where it is written."""
        function = self.tree.function(call)
        for parent in self.tree.ancestors(call):
            if parent is function:
                return False
            if isinstance(parent, cst.Lambda):
                return True
        return False

    def _runs_before_init(self, use: cst.Call) -> cst.Call | None:
        """The init that `use` runs before: in its own scope, or in the scope that calls its
        function before initializing."""
        f = facts(self.script)
        function = self.tree.function(use)
        points = f.init_points(function)
        if points:
            first = min(points, key=lambda c: position(self.tree, c))
            return first if position(self.tree, use) < position(self.tree, first) else None
        if function is None or function in f.initializing:
            return None
        for call, caller in self.program.call_sites(function):
            caller_points = f.init_points(caller)
            if caller_points:
                first = min(caller_points, key=lambda c: position(self.tree, c))
                if position(self.tree, call) < position(self.tree, first):
                    return first
        return None

    def _calls_setup_helper(self) -> bool:
        for call in self.tree.calls():
            name = self.tree.qname(call.func)
            if name is None or name.startswith(("torch.", "builtins.")) or self.program.callee(call, self.tree.function(call)):
                continue
            if SETUP_HELPER.search(name.rsplit(".", 1)[-1]):
                return True
        return False
