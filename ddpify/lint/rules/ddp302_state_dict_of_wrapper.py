"""DDP302 state-dict-of-wrapper."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan
from ddpify.lint.rule import Rule
from ddpify.lint.rules._devices_and_output import devices_and_output
from ddpify.syntax import code, method_call


class StateDictOfWrapper(Rule):
    """## What it does
    Flags `torch.save` of the DDP wrapper's `state_dict()` instead of the wrapped module's.

    ## Why is this bad?
    `DistributedDataParallel` holds the model as `.module`, so every key of the wrapper's
    state dict starts with `module.`. The checkpoint then fails to load into the plain model
    (`Missing key(s) ... Unexpected key(s) "module.fc.weight"`), for inference, for a
    single-GPU fine-tune, or for anyone you share it with.

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    ...
    if rank == 0:
        torch.save(model.state_dict(), "model.pt")
    ```

    ## Use instead
    ```python
    if rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
    ```

    ## Fix safety
    Safe: `model.state_dict()` becomes `model.module.state_dict()`; the saved tensors are the
    same, only the key prefix goes.

    ## References
    - [PyTorch: saving and loading DDP models](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints)
    - [DistributedDataParallel](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    """

    code = "DDP302"
    name = "state-dict-of-wrapper"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        if not self.tree.is_call_to(node, s.TORCH_SAVE) or not node.args:
            return
        function = self.tree.function(node)
        calls = self._wrapper_state_dicts(node.args[0].value, function)
        if calls:
            call = calls[0]
            message = f"saves `{code(call)}` of the DDP wrapper: keys get a `module.` prefix; save `{code(call.func.value)}.module.state_dict()`"  # type: ignore[union-attr]
            self.report(node, message, fix=lambda plan: self._unwrap(plan, calls))

    def _wrapper_state_dicts(self, saved: cst.BaseExpression, function) -> list[cst.Call]:
        """`model.state_dict()` calls inside what is saved, through one local name if needed."""
        found = [
            c
            for c in self.tree.calls(saved)
            if (m := method_call(c)) and m[1] == "state_dict" and self.script.is_ddp_model(m[0], function)
            and not devices_and_output(self.script).rebound_since_wrap(code(m[0]), c, function)  # `model = torch.load(f)` since
        ]
        if not found and isinstance(saved, cst.Name):
            for value, index in self.program.assignments(function, saved.value):
                if index is None:
                    found += self._wrapper_state_dicts(value, function)  # type: ignore[arg-type]
        return found

    def _unwrap(self, plan: Plan, calls: list[cst.Call]) -> str | None:
        for call in calls:
            wrapper = call.func.value  # type: ignore[union-attr]
            plan.replace(wrapper, cst.parse_expression(f"{code(wrapper)}.module"))
        return "saves the wrapped module's state_dict (`.module.state_dict()`)" if calls else None
