"""ddpify verify's rank shim: run one rank of a script and record what it did.

`ddpify verify` starts this file in every rank (through torchrun, or as one plain process) with
the script and its arguments. It is a program, not a module of the package: it runs where torch
is installed and imports only torch and the standard library.

What it does, around running the script with runpy as `__main__`:
- sends the rank's stdout/stderr to per-rank files at the file-descriptor level, records its pid
  and, when the script ends, its exit status; registers faulthandler on SIGUSR1 so that verify
  can ask a hung rank where it is stuck;
- when verify says ranks share GPUs, forces gloo in `init_process_group` and maps LOCAL_RANK onto
  a device that exists;
- records facts that verify compares across ranks afterwards (written to `rank<N>.facts.json`):
  the parameters of every DistributedDataParallel model and of every parameter an optimizer
  stepped outside one, forward calls through DDP and around it, `backward()` calls, the sample
  indices each DataLoader's sampler produced and its first batches, files opened for writing,
  and process-group initializations and teardowns;
- with DDPIFY_VERIFY_STEPS=K, stops the script right after its K-th optimizer step.

Recording adds no collective and never blocks: every fact is local to the rank. A failure while
recording is swallowed (and counted), so the shim cannot change how the script behaves.
"""

import faulthandler
import functools
import json
import math
import os
import runpy
import signal
import sys
import threading
import traceback

STATE_DIR = os.environ["DDPIFY_VERIFY_STATE_DIR"]
RANK = int(os.environ.get("RANK", "0"))
SHIM_PID = os.getpid()
# Indices kept per DataLoader pass; more are counted, not kept.
MAX_INDICES = 200_000
# Values kept per parameter besides its sums: a strided sample.
SAMPLE_VALUES = 8
MAX_WRITES = 2_000
MAX_LOADERS = 64


def rank_file(suffix):
    return os.path.join(STATE_DIR, "rank%d.%s" % (RANK, suffix))


class StopAfterSteps(BaseException):
    """Raised after the K-th optimizer step; a BaseException so that `except Exception` lets it by."""


class Facts:
    """What this rank did, gathered by the patches below and written out as JSON at the end."""

    def __init__(self, script):
        self.script = os.path.abspath(script)
        self.user_root = os.path.dirname(self.script)
        self.backward = 0
        self.backward_without_loader = 0
        self.steps = 0
        self.stop_after = int(os.environ.get("DDPIFY_VERIFY_STEPS", "0") or 0)
        self.stopped = False
        self.pg_init = 0
        self.pg_destroy = 0
        self.backend = None
        self.ddp = []  # dicts, in wrap order
        self.ddp_by_id = {}  # id(DDP instance) -> entry
        self.inner_by_id = {}  # id(wrapped module) -> entry
        self.ddp_depth = 0  # > 0 while a DDP forward runs (its module's forward is not direct)
        self.optimizers = {}  # id(optimizer) -> entry
        self.loaders = []
        self.loader_by_id = {}
        self.last_loader = None  # the loader that yielded the most recent batch
        self.writes = {}  # absolute path -> entry
        self.checkpoints = {}  # absolute path -> checkpoint_report() of the last torch.save there
        self.shim_errors = []

    # -- helpers -----------------------------------------------------------------------------

    def site(self, depth=2):
        """`file:line` of the innermost frame in the script, else in the script's folder."""
        frame = sys._getframe(depth)
        found = None
        for _ in range(80):
            if frame is None:
                break
            filename = frame.f_code.co_filename
            if filename == self.script:
                return "%s:%d" % (os.path.basename(filename), frame.f_lineno)
            if found is None and filename.startswith(self.user_root) and "-packages" not in filename:
                found = "%s:%d" % (os.path.relpath(filename, self.user_root), frame.f_lineno)
            frame = frame.f_back
        return found

    def error(self, where):
        if len(self.shim_errors) < 20:
            self.shim_errors.append("%s: %s" % (where, traceback.format_exc(limit=2).strip().splitlines()[-1]))

    def to_json(self):
        return {
            "rank": RANK,
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "backward": self.backward,
            "backward_without_loader": self.backward_without_loader,
            "steps": self.steps,
            "stop_after": self.stop_after,
            "stopped": self.stopped,
            "pg_init": self.pg_init,
            "pg_destroy": self.pg_destroy,
            "backend": self.backend,
            "ddp": [self.ddp_json(entry) for entry in self.ddp],
            "optimizers": [self.optimizer_json(entry) for entry in self.optimizers.values()],
            "loaders": [self.loader_json(entry) for entry in self.loaders],
            "writes": list(self.writes.values()),
            "checkpoints": self.checkpoints,
            "shim_errors": self.shim_errors,
        }

    def ddp_json(self, entry):
        return {
            "site": entry["site"],
            "module": entry["module_type"],
            "forward": entry["forward"],
            "forward_grad": entry["forward_grad"],
            "direct_forward_grad": entry["direct_forward_grad"],
            "bypassed_backward": entry["bypassed_backward"],
            "superseded": entry.get("superseded", False),
            "first_unfed_input": entry["first_unfed_input"],
            "params": [fingerprint_param(name, p) for name, p in entry["params"]],
        }

    def optimizer_json(self, entry):
        in_ddp = set()
        for ddp in self.ddp:
            in_ddp.update(id(p) for _, p in ddp["params"])
        outside = [(name, p) for name, p in entry["params"] if id(p) not in in_ddp]
        return {
            "type": entry["type"],
            "site": entry["site"],
            "steps": entry["steps"],
            "num_params": len(entry["params"]),
            "outside_ddp": [fingerprint_param(name, p) for name, p in outside],
        }

    def loader_json(self, entry):
        return {key: value for key, value in entry.items() if not key.startswith("_")}


FACTS = None


# -- fingerprints ------------------------------------------------------------------------------


def _finite(value):
    return value if math.isfinite(value) else repr(value)


def fingerprint_tensor(tensor):
    """Shape, float64 sum and sum of squares, and a strided sample of a tensor."""
    import torch

    with torch.no_grad():
        flat = tensor.detach().reshape(-1)
        if not (flat.is_floating_point() or flat.is_complex()):
            flat = flat.to(torch.float64)
        flat = flat.to(torch.float64) if not flat.is_complex() else flat.abs().to(torch.float64)
        count = flat.numel()
        stride = max(1, count // SAMPLE_VALUES)
        sample = flat[::stride][:SAMPLE_VALUES].cpu().tolist()
        return {
            "shape": list(tensor.shape),
            "sum": _finite(float(flat.sum())) if count else 0.0,
            "sumsq": _finite(float((flat * flat).sum())) if count else 0.0,
            "sample": [_finite(v) for v in sample],
        }


def fingerprint_param(name, param):
    try:
        result = fingerprint_tensor(param)
    except Exception as exc:  # a meta or sparse parameter: named, not compared
        result = {"error": type(exc).__name__}
    result["name"] = name
    return result


def parameter_names(wanted):
    """`Module.name` for parameters (by id), from the largest live module that holds each one."""
    import gc

    import torch

    names = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.nn.Module):
            try:
                for name, param in obj.named_parameters():
                    if id(param) in wanted and len(name) >= len(names.get(id(param), ("", ""))[1]):
                        names[id(param)] = (type(obj).__name__, name)
            except Exception:
                continue
    return {key: "%s.%s" % pair for key, pair in names.items()}


def checkpoint_report(obj):
    """The state dicts in a saved object (itself, a module's, or a dict's values) and their keys."""
    import torch

    from torch.nn.parallel import DistributedDataParallel

    def report(key, mapping):
        keys = [str(k) for k in mapping.keys()]
        wrapper = bool(getattr(mapping, "_ddpify_wrapper", False))  # from DistributedDataParallel.state_dict()
        return {"key": key, "num_keys": len(keys), "prefixed": [k for k in keys if k.startswith("module.")][:20], "wrapper": wrapper}

    def is_state_dict(value):
        return (
            isinstance(value, dict)
            and len(value) > 0
            and all(isinstance(k, str) for k in value)
            and all(isinstance(v, torch.Tensor) for v in value.values())
        )

    found = []
    if isinstance(obj, torch.nn.Module):
        found.append(report("<%s>" % type(obj).__name__, obj.state_dict()))
        found[-1]["wrapper"] = isinstance(obj, DistributedDataParallel)
    elif is_state_dict(obj):
        found.append(report("", obj))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            wrapped = isinstance(value, DistributedDataParallel)
            if isinstance(value, torch.nn.Module):
                value = value.state_dict()
            if is_state_dict(value):
                found.append(report(str(key), value))
                found[-1]["wrapper"] = found[-1]["wrapper"] or wrapped
    return {"state_dicts": found}


def fingerprint_batch(value, depth=0):
    """A short, comparable summary of a batch: tensors by their fingerprints, other values by repr."""
    import torch

    if depth > 4:
        return "..."
    if isinstance(value, torch.Tensor):
        if value.numel() == 0:
            return {"shape": list(value.shape)}
        return fingerprint_tensor(value)
    if isinstance(value, (list, tuple)):
        return [fingerprint_batch(v, depth + 1) for v in list(value)[:16]]
    if isinstance(value, dict):
        return {str(k): fingerprint_batch(v, depth + 1) for k, v in list(value.items())[:16]}
    text = repr(value)
    return text if len(text) <= 200 else text[:200]


# -- patches -----------------------------------------------------------------------------------


def patch_distributed(facts):
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    force_gloo = os.environ.get("DDPIFY_VERIFY_FORCE_GLOO") == "1"
    if force_gloo:
        shared_gpus = int(os.environ.get("DDPIFY_VERIFY_SHARED_GPUS", "0"))
        if shared_gpus > 0:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            os.environ["DDPIFY_VERIFY_LOCAL_RANK"] = str(local_rank)
            os.environ["LOCAL_RANK"] = str(local_rank % shared_gpus)

    original_init = c10d.init_process_group
    original_destroy = c10d.destroy_process_group

    @functools.wraps(original_init)
    def init_process_group(*args, **kwargs):
        if force_gloo:
            # NCCL refuses two ranks on one GPU; gloo does not. Drop NCCL-only arguments.
            if args:
                args = ("gloo",) + tuple(args[1:])
            else:
                kwargs["backend"] = "gloo"
            kwargs.pop("device_id", None)
            kwargs.pop("pg_options", None)
        result = original_init(*args, **kwargs)
        facts.pg_init += 1
        try:
            facts.backend = str(c10d.get_backend())
        except Exception:
            facts.error("backend")
        return result

    @functools.wraps(original_destroy)
    def destroy_process_group(group=None):
        result = original_destroy(group)
        if group is None or group is getattr(c10d.GroupMember, "WORLD", None):
            facts.pg_destroy += 1
        return result

    for module in (dist, c10d):
        module.init_process_group = init_process_group
        module.destroy_process_group = destroy_process_group


def patch_ddp(facts):
    import torch
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.nn.parallel import DistributedDataParallel

    original_init = DistributedDataParallel.__init__
    original_forward = DistributedDataParallel.forward
    hook_installed = []

    def direct_forward_hook(module, args):
        # Any module's forward: counts the wrapped models' forwards that do not come from DDP.
        if facts.ddp_depth == 0:
            entry = facts.inner_by_id.get(id(module))
            if entry is not None and torch.is_grad_enabled():
                entry["direct_forward_grad"] += 1
                entry["_direct_since_backward"] = True

    @functools.wraps(original_init)
    def __init__(self, module, *args, **kwargs):
        original_init(self, module, *args, **kwargs)
        try:
            entry = {
                "site": facts.site(),
                "module_type": type(module).__name__,
                "module": module,  # kept alive so that ids stay unique
                "params": list(module.named_parameters()),
                "forward": 0,
                "forward_grad": 0,
                "direct_forward_grad": 0,
                "bypassed_backward": 0,
                "first_unfed_input": None,
                "_ddp_since_backward": False,
                "_direct_since_backward": False,
            }
            earlier = facts.inner_by_id.get(id(module))
            if earlier is not None:  # wrapped again (after unfreezing or a new layer): the earlier wrapper is done
                earlier["superseded"] = True
            facts.ddp.append(entry)
            facts.ddp_by_id[id(self)] = entry
            facts.inner_by_id[id(module)] = entry
            if not hook_installed:
                hook_installed.append(register_module_forward_pre_hook(direct_forward_hook))
        except Exception:
            facts.error("DistributedDataParallel.__init__")

    @functools.wraps(original_forward)
    def forward(self, *inputs, **kwargs):
        entry = facts.ddp_by_id.get(id(self))
        if entry is not None:
            entry["forward"] += 1
            if torch.is_grad_enabled():
                entry["forward_grad"] += 1
                entry["_ddp_since_backward"] = True
                if entry["first_unfed_input"] is None and facts.last_loader is None:  # what no DataLoader batch vouches for
                    try:
                        entry["first_unfed_input"] = fingerprint_batch([inputs, kwargs])
                    except Exception:
                        facts.error("DDP input")
        facts.ddp_depth += 1
        try:
            return original_forward(self, *inputs, **kwargs)
        finally:
            facts.ddp_depth -= 1

    original_state_dict = DistributedDataParallel.state_dict

    @functools.wraps(original_state_dict)
    def state_dict(self, *args, **kwargs):
        result = original_state_dict(self, *args, **kwargs)
        try:
            result._ddpify_wrapper = True  # checkpoint_report: these `module.` keys are the wrapper's
        except Exception:
            pass
        return result

    DistributedDataParallel.__init__ = __init__
    DistributedDataParallel.forward = forward
    DistributedDataParallel.state_dict = state_dict


def patch_autograd(facts):
    import torch.autograd

    original_backward = torch.autograd.backward

    @functools.wraps(original_backward)
    def backward(*args, **kwargs):
        # Tensor.backward() calls torch.autograd.backward, so both are counted here, once.
        facts.backward += 1
        loader = facts.last_loader
        if loader is None:
            facts.backward_without_loader += 1
        else:
            loader["backward"] += 1
        for entry in facts.ddp:
            # A backward after forwards of the wrapped module that skipped DDP: no gradient averaging.
            if entry["_direct_since_backward"] and not entry["_ddp_since_backward"]:
                entry["bypassed_backward"] += 1
            entry["_direct_since_backward"] = entry["_ddp_since_backward"] = False
        return original_backward(*args, **kwargs)

    torch.autograd.backward = backward


def patch_optimizers(facts):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def after_step(optimizer, args, kwargs):
        facts.steps += 1
        entry = facts.optimizers.get(id(optimizer))
        if entry is None:
            try:
                params = [p for group in optimizer.param_groups for p in group["params"]]
                in_ddp = {id(p) for ddp in facts.ddp for _, p in ddp["params"]}
                # Named now, while the modules that hold them are alive (the end is too late).
                outside = {id(p) for p in params} - in_ddp
                names = parameter_names(outside) if outside else {}
                entry = {
                    "type": type(optimizer).__name__,
                    "site": facts.site(),
                    "optimizer": optimizer,  # kept alive so that ids stay unique
                    "params": [(names.get(id(p), "param %d" % i), p) for i, p in enumerate(params)],
                    "steps": 0,
                }
            except Exception:
                facts.error("optimizer")
                entry = {"type": type(optimizer).__name__, "site": None, "optimizer": optimizer, "params": [], "steps": 0}
            facts.optimizers[id(optimizer)] = entry
        entry["steps"] += 1
        if facts.stop_after and facts.steps >= facts.stop_after:
            facts.stopped = True
            raise StopAfterSteps()

    register_optimizer_step_post_hook(after_step)


def patch_dataloader(facts):
    import torch
    from torch.utils.data import dataloader

    from torch.utils.data.distributed import DistributedSampler

    original_set_epoch = DistributedSampler.set_epoch

    @functools.wraps(original_set_epoch)
    def set_epoch(self, epoch):
        self._ddpify_set_epoch = True  # the script numbers its epochs: a repeated order is its choice
        return original_set_epoch(self, epoch)

    DistributedSampler.set_epoch = set_epoch

    BaseIter = dataloader._BaseDataLoaderIter
    original_iter_init = BaseIter.__init__
    original_reset = BaseIter._reset
    original_next_index = BaseIter._next_index
    original_next = BaseIter.__next__

    def loader_entry(loader):
        entry = facts.loader_by_id.get(id(loader))
        if entry is not None and entry["_loader"] is loader:
            return entry
        if len(facts.loaders) >= MAX_LOADERS:
            return None
        sampler = getattr(loader, "sampler", None)
        batch_sampler = getattr(loader, "batch_sampler", None)
        inner = getattr(batch_sampler, "sampler", None)
        if inner is not None and inner is not sampler:  # `batch_sampler=BatchSampler(DistributedSampler(ds), ...)`
            sampler = inner
        entry = {
            "_loader": loader,
            "index": len(facts.loaders),
            "site": None,
            "dataset": type(loader.dataset).__name__,
            "iterable": isinstance(loader.dataset, torch.utils.data.IterableDataset),
            "sampler": type(sampler).__name__ if sampler is not None else None,
            "batch_sampler": type(batch_sampler).__name__ if batch_sampler is not None else None,
            "distributed": _is_distributed_sampler(sampler) or _is_distributed_sampler(batch_sampler),
            "shuffle": getattr(sampler, "shuffle", None),
            "replacement": getattr(sampler, "replacement", None),
            "sampler_len": _length(sampler),
            "dataset_len": _length(loader.dataset),
            "passes": 0,
            "batches": 0,
            "backward": 0,
            "indices": [],  # the first pass (the second after a one-batch preview), up to MAX_INDICES
            "indices_pass": 1,
            "indices_batches": 0,
            "indices_seen": 0,
            "pass_heads": [],  # the first batch of indices of the first two passes
            "set_epoch": False,  # set_epoch() was called on its DistributedSampler before a pass began
            "first_batch": None,
        }
        facts.loaders.append(entry)
        facts.loader_by_id[id(loader)] = entry
        return entry

    def start_pass(iterator, loader):
        try:
            entry = loader_entry(loader)
            iterator._ddpify_entry = entry
            if entry is None:
                return
            entry["passes"] += 1
            entry["set_epoch"] = entry.get("set_epoch", False) or _set_epoch_called(loader)
            if entry["site"] is None:
                entry["site"] = facts.site(3)
            iterator._ddpify_pass = entry["passes"]
            iterator._ddpify_head = None
        except Exception:
            facts.error("DataLoader pass")

    @functools.wraps(original_iter_init)
    def __init__(self, loader, *args, **kwargs):
        # Before the original: a multi-worker iterator draws its first indices while it starts.
        start_pass(self, loader)
        original_iter_init(self, loader, *args, **kwargs)

    @functools.wraps(original_reset)
    def _reset(self, loader, first_iter=False):
        if not first_iter and getattr(self, "_ddpify_entry", None) is not None:
            start_pass(self, loader)  # a persistent-workers loader starts its next pass
        return original_reset(self, loader, first_iter)

    @functools.wraps(original_next_index)
    def _next_index(self):
        index = original_next_index(self)
        entry = getattr(self, "_ddpify_entry", None)
        if entry is not None:
            try:
                batch = list(index) if isinstance(index, (list, tuple)) else [index]
                batch = [int(i) if isinstance(i, int) or hasattr(i, "__index__") else repr(i) for i in batch]
                batch = [_in_base_dataset(self._dataset, i) for i in batch]
                if self._ddpify_head is None:
                    self._ddpify_head = batch
                    if len(entry["pass_heads"]) < 2:
                        entry["pass_heads"].append(batch[:64])
                if self._ddpify_pass == entry["indices_pass"] + 1 and entry["indices_batches"] <= 1:
                    # the recorded pass drew one batch and stopped: a preview (`next(iter(loader))`),
                    # not an epoch; the indices of the next pass stand for the shard instead
                    entry["indices_pass"] = self._ddpify_pass
                    entry["indices"], entry["indices_seen"], entry["indices_batches"] = [], 0, 0
                if self._ddpify_pass == entry["indices_pass"]:
                    entry["indices_batches"] += 1
                    entry["indices_seen"] += len(batch)
                    room = MAX_INDICES - len(entry["indices"])
                    if room > 0:
                        entry["indices"].extend(batch[:room])
            except Exception:
                facts.error("DataLoader index")
        return index

    @functools.wraps(original_next)
    def __next__(self):
        try:
            data = original_next(self)
        except StopIteration:
            if facts.last_loader is not None and facts.last_loader is getattr(self, "_ddpify_entry", None):
                facts.last_loader = None  # the pass ended: a backward now trains on batches no DataLoader gave
            raise
        entry = getattr(self, "_ddpify_entry", None)
        if entry is not None:
            entry["batches"] += 1
            facts.last_loader = entry
            if entry["first_batch"] is None:
                try:
                    entry["first_batch"] = fingerprint_batch(data)
                except Exception:
                    facts.error("DataLoader batch")
        return data

    BaseIter.__init__ = __init__
    BaseIter._reset = _reset
    BaseIter._next_index = _next_index
    BaseIter.__next__ = __next__


def _in_base_dataset(dataset, index):
    """A position in a `Subset` (also nested) as the index of the dataset it picks from: ranks
    whose own Subsets hold different samples draw positions that only look disjoint."""
    import torch.utils.data

    for _ in range(8):
        if not isinstance(dataset, torch.utils.data.Subset) or not isinstance(index, int):
            return index
        try:
            index = int(dataset.indices[index])
        except Exception:
            return index
        dataset = dataset.dataset
    return index


def _set_epoch_called(loader):
    """Whether set_epoch() was called on the loader's DistributedSampler (or its batch sampler's)."""
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if getattr(sampler, "_ddpify_set_epoch", False):
            return True
    return False


def _is_distributed_sampler(sampler):
    if sampler is None:
        return False
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(sampler, DistributedSampler):
        return True
    inner = getattr(sampler, "sampler", None)  # a BatchSampler around a DistributedSampler
    if inner is not None and inner is not sampler and isinstance(inner, DistributedSampler):
        return True
    return hasattr(sampler, "num_replicas") and hasattr(sampler, "rank")


def _length(value):
    try:
        return int(len(value))
    except Exception:
        return None


_WRITE_MODES = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def patch_writes(facts):
    import builtins
    import io

    import torch

    def record(file, how):
        if len(facts.writes) >= MAX_WRITES or os.getpid() != SHIM_PID:
            return
        try:
            path = os.path.abspath(os.fsdecode(file))
        except Exception:
            return
        if path.startswith(STATE_DIR + os.sep):
            return
        entry = facts.writes.get(path)
        if entry is None:
            facts.writes[path] = {"path": path, "how": how, "site": facts.site(3), "count": 1}
        else:
            entry["count"] += 1

    original_open = builtins.open

    @functools.wraps(original_open)
    def open_(file, mode="r", *args, **kwargs):
        handle = original_open(file, mode, *args, **kwargs)
        if isinstance(mode, str) and not _WRITE_MODES.isdisjoint(mode) and isinstance(file, (str, bytes, os.PathLike)):
            record(file, "open")
        return handle

    builtins.open = open_
    io.open = open_

    original_os_open = os.open

    @functools.wraps(original_os_open)
    def os_open(path, flags, *args, **kwargs):
        fd = original_os_open(path, flags, *args, **kwargs)
        if flags & _WRITE_FLAGS and isinstance(path, (str, bytes, os.PathLike)):
            record(path, "os.open")
        return fd

    os.open = os_open

    original_save = torch.save

    @functools.wraps(original_save)
    def save(obj, f, *args, **kwargs):
        result = original_save(obj, f, *args, **kwargs)
        path = f if isinstance(f, (str, bytes, os.PathLike)) else getattr(f, "name", None)  # `with open(p, "wb") as f`
        if isinstance(path, (str, bytes, os.PathLike)):
            if path is f:
                record(f, "torch.save")  # a file object was recorded when it was opened
            try:
                # What the file holds, from the object saved: its state dicts' keys (a whole
                # model, of a class of the script's __main__, would not unpickle elsewhere).
                facts.checkpoints[os.path.abspath(os.fsdecode(path))] = checkpoint_report(obj)
            except Exception:
                facts.error("checkpoint")
        return result

    torch.save = save


def install(facts):
    for patch in (patch_distributed, patch_ddp, patch_autograd, patch_optimizers, patch_dataloader, patch_writes):
        try:
            patch(facts)
        except Exception:
            facts.error(patch.__name__)


def finish_process_group(facts):
    """After a stop at --steps: tear the group down here, the script never reached its teardown."""
    try:
        import torch.distributed.distributed_c10d as c10d

        if c10d.is_initialized():
            c10d.destroy_process_group.__wrapped__()
    except Exception:
        facts.error("destroy after stop")


def run_exit_handlers(facts):
    """The script's atexit handlers (a teardown registered there) belong to its run: run them now,
    while the facts can still see them, and only once."""
    import atexit

    try:
        atexit._run_exitfuncs()
    except Exception:
        if facts is not None:
            facts.error("atexit")
    atexit._clear()


def write_facts(facts):
    try:
        data = facts.to_json()
    except Exception:
        facts.error("facts")
        data = {"rank": RANK, "shim_errors": facts.shim_errors}
    tmp = rank_file("facts.json.tmp")
    with open(tmp, "w") as out:
        json.dump(data, out)
    os.replace(tmp, rank_file("facts.json"))


def main():
    global FACTS
    # Per-rank logs at the file-descriptor level, so C++ output and DataLoader workers land there too.
    for fd, suffix in ((1, "stdout"), (2, "stderr")):
        log_fd = os.open(rank_file(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log_fd, fd)
        os.close(log_fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    with open(rank_file("pid"), "w") as pid_file:
        pid_file.write(str(os.getpid()))
    if hasattr(signal, "SIGUSR1"):
        # Lets verify ask a hung rank where it is blocked, even inside a C++ collective.
        faulthandler.register(signal.SIGUSR1, all_threads=True)

    script = sys.argv[1]
    facts = FACTS = Facts(script)
    try:
        import torch  # noqa: F401 - the patches need it; a script without torch is only run
    except ImportError:
        facts = None
    if facts is not None:
        install(facts)

    prelude = os.environ.get("DDPIFY_VERIFY_PRELUDE")
    if prelude:
        runpy.run_path(prelude, run_name="__ddpify_prelude__")

    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    exit_code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except StopAfterSteps:
        finish_process_group(facts)
    except SystemExit as exc:
        if exc.code is None:
            exit_code = 0
        elif isinstance(exc.code, int):
            exit_code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            exit_code = 1
    except BaseException:
        traceback.print_exc()
        exit_code = 1
    finally:
        if threading.current_thread() is threading.main_thread():
            run_exit_handlers(facts)
        sys.stdout.flush()
        sys.stderr.flush()
        if facts is not None and threading.current_thread() is threading.main_thread():
            write_facts(facts)
        with open(rank_file("exit"), "w") as exit_file:
            exit_file.write(str(exit_code))
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
