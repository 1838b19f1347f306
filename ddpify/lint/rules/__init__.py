"""The rule registry: every rule module, in catalog order (../shared/RULES.md)."""

from __future__ import annotations

import importlib
import inspect
from functools import lru_cache

from ddpify.lint.rule import Rule

MODULES = (
    "ddp001_process_group_not_initialized",
    "ddp002_backend_without_cpu_fallback",
    "ddp003_local_rank_argument",
    "ddp004_process_group_not_destroyed",
    "ddp005_device_from_global_rank",
    "ddp101_dataloader_without_distributed_sampler",
    "ddp102_shuffle_with_sampler",
    "ddp103_sampler_without_set_epoch",
    "ddp104_eval_sampler_pads",
    "ddp105_split_without_generator",
    "ddp201_device_not_bound_to_rank",
    "ddp202_load_without_map_location",
    "ddp203_wrap_before_move",
    "ddp204_syncbn_after_wrap",
    "ddp205_data_parallel",
    "ddp206_forward_through_module",
    "ddp207_module_on_maybe_unwrapped",
    "ddp301_save_on_every_rank",
    "ddp302_state_dict_of_wrapper",
    "ddp303_side_effect_on_every_rank",
    "ddp401_collective_under_rank_guard",
    "ddp402_rank_divergent_exit",
    "ddp403_unreduced_metric",
    "ddp404_accumulation_without_no_sync",
    "ddp901_batch_semantics",
    "ddp902_find_unused_parameters",
)


@lru_cache(maxsize=None)
def all_rules() -> tuple[type[Rule], ...]:
    """The rule classes, one per module."""
    found = []
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        (rule,) = [obj for obj in vars(module).values() if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__]
        found.append(rule)
    return tuple(found)


def rule_for(code: str) -> type[Rule] | None:
    return next((r for r in all_rules() if r.code == code.upper()), None)
