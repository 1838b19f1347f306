"""One analysis pass over a single-GPU script: the facts every transform works from.

Which name is the trained model and where it is ready to wrap, which DataLoader feeds the
loop that calls `backward()`, where each epoch starts, where the entry point is, what the
script calls its device. Transforms read these facts; none re-derives them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis import sync
from ddpify.analysis.batches import from_batch, reads
from ddpify.analysis.destinations import private_to_process
from ddpify.analysis.loops import TrainLoop, TrainLoops
from ddpify.analysis.output import FILE_WRITE, Outputs
from ddpify.analysis.rebinds import rebinds_after
from ddpify.analysis.splits import fresh_seeds, seeded_before
from ddpify.analysis.switches import GradSwitches
from ddpify.analysis.wrappers import wrapper_names
from ddpify.program import Origin, Program
from ddpify.syntax import Tree, code, dotted, is_backward, is_gpu_string, is_import_line, is_preamble, string_value, unchained

ENTRY_NAMES = ("local_rank", "rank", "world_size", "backend")
# What picks one layer of several from the data in a forward (`self.experts[int(scores.argmax())]`).
CHOOSERS = {"argmax", "argmin", "multinomial", "randint", "item", "max", "min"}
# Embedding layers and lookups whose keywords DDP cannot keep in step (`sparse=True`, `max_norm=`).
EMBEDDINGS = {
    "torch.nn.Embedding", "torch.nn.EmbeddingBag", "torch.nn.functional.embedding", "torch.nn.functional.embedding_bag",
    "torch.nn.Embedding.from_pretrained", "torch.nn.EmbeddingBag.from_pretrained",
}  # fmt: skip
SEPARATE_OUTPUTS = ": a loss that uses only some leaves parameters without gradients"
# Optimizer classes outside torch.optim, by name: SAM(model.parameters(), ...), FusedAdam, Lion.
OPTIMIZER_NAMES = re.compile(
    r"^(Fused)?(SGD|Adam\w*|RMSprop|Adagrad|Adadelta|Adamax|LBFGS|Lamb|LAMB|Lion|SAM|ASAM|Ranger\w*|NovoGrad|"
    r"Lars|LARS|ASGD|Rprop|Shampoo|Adafactor|AdaBelief|RAdam|NAdam|Sophia\w*|Muon)$"
)
# Text any evidence of an already distributed script contains (`_check_not_distributed`).
DISTRIBUTED_MARKERS = ("init_process_group", "DistributedDataParallel", "DistributedSampler", "RANK", "WORLD_SIZE", *s.DISTRIBUTED_FRAMEWORKS)
# What `next()` draws batches through: an iterator over a loader.
# Method names that set up state rather than run the layers (`init_hidden`, `reset_states`).
STATE_METHOD_PREFIXES = ("init_", "reset", "get_", "set_", "num_", "count_", "zero_", "detach_", "repackage")
CHECKPOINTS = {"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"}
# Forwards with parameters handed in (MAML's inner loop): they call the module's forward, not DDP's.
FUNCTIONAL_CALLS = {"torch.func.functional_call", "torch.nn.utils.stateless.functional_call", "torch.func.stateless.functional_call"}
MOVE_METHODS = {"to", "cuda", "half", "float", "double", "bfloat16", "to_empty"}
# Methods of a model that draw its weights in place (each rank its own): the DDP wrap must come after them.
WEIGHT_SETTERS = {"apply", "reset_parameters"}
# What SyncBatchNorm.convert_sync_batchnorm converts: subclasses of torch.nn.modules.batchnorm._BatchNorm.
BATCH_NORMS = {
    f"torch.nn.{prefix}{name}"
    for prefix in ("", "modules.batchnorm.")
    for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "SyncBatchNorm")
}
# torchvision models built with BatchNorm layers.
BATCH_NORM_MODELS = re.compile(
    r"^torchvision\.models\.(resnet|resnext|wide_resnet|vgg\d+_bn|densenet|mobilenet|efficientnet|inception|googlenet|"
    r"regnet|shufflenet|mnasnet)"
)
# Draws of random numbers shaped like a tensor (noise added to a gradient).
GRADIENT_NOISE = {"torch.randn_like", "torch.rand_like", "torch.randn", "torch.rand", "torch.normal", "torch.randint_like"}
# What picks the samples a loader trains on from a list of indices (a rank picking its own trains another number of steps).
SUBSETS = {"torch.utils.data.Subset", "torch.utils.data.dataset.Subset", *s.SUBSET_SAMPLER}
NORM_CLASS = re.compile(r"norm(?!ali[sz])", re.IGNORECASE)  # `FrozenBN`? no: `LayerNorm2d`, `MyBatchNorm`, not `Normalize`


def _input_gradient(tree: Tree, call: cst.Call) -> bool:
    """`torch.autograd.grad(..., create_graph=True)`: a gradient a loss can be made of."""
    graph = s.arg(call, None, "create_graph")
    # `create_graph=self.training` (helper corpus CK, repro 04): true while training
    return tree.qname(call.func) == "torch.autograd.grad" and graph is not None and code(graph.value) not in ("False", "None")


def _penalty_made(tree: Tree, call: cst.Call) -> str:
    if _input_gradient(tree, call):
        return f"`{code(call.func)}(..., create_graph=True)`"
    return f"`{code(call.func)}(...)`, a penalty on `torch.autograd.grad(..., create_graph=True)`"


def _may_be_container(value: cst.CSTNode | None) -> bool:
    """A list, tuple, dict or set written out, or an `x if ... else [x]` with one."""
    if type(value) is cst.IfExp:
        return _may_be_container(value.body) or _may_be_container(value.orelse)
    return type(value) in CONTAINER_LITERALS


class NotConvertible(Exception):
    """The script is returned unchanged; the message says why."""

# In-place updates a hand-written optimizer step makes (`p.data.add_(p.grad, alpha=-lr)`).
HAND_UPDATES = {"add_", "sub_", "addcmul_", "addcdiv_"}

# torch.nn modules with no parameters of their own: never the reason a forward leaves some unused.
PARAMETER_FREE = {
    "ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Mish", "ELU", "SELU", "CELU", "Sigmoid", "Tanh", "Hardtanh", "Hardswish",
    "Hardsigmoid", "Softplus", "Softsign", "Tanhshrink", "Threshold", "Softmax", "LogSoftmax", "Softmax2d", "Dropout", "Dropout1d",
    "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d",
    "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "CosineSimilarity",
    "PairwiseDistance", "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss",
    "KLDivLoss", "CTCLoss",
}  # fmt: skip


CONTAINER_LITERALS = (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp)
# Stock containers a trained model may be put in after training (`nn.Sequential(net, nn.Softmax(-1))`).
CONTAINERS = {"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"}

@dataclass
class Entry:
    # "library": no entry point (a Trainer class another module drives): the group is set up on first use.
    kind: Literal["function", "main-block", "module", "library"]
    function: cst.FunctionDef | None
    block: cst.IndentedBlock | cst.Module
    after: cst.BaseStatement | None  # module kind: the setup goes after this statement
    label: str


@dataclass
class Device:
    """The script's own device variable, if it has one: kept, since it holds the script's choice."""

    name: str | None  # None: the script names no device (`.cuda()` calls, or CPU only)
    function: cst.FunctionDef | None  # where it is assigned (None: the module)
    cuda_only: bool  # the script never asks whether CUDA is there: its GPU calls get a CPU fallback


@dataclass
class TrainedModel:
    ref: str  # "model" or "self.model"
    function: cst.FunctionDef | None  # where it is assigned, and wrapped
    anchor: cst.BaseStatement  # DDP(...) goes right after this statement
    moved: bool
    # Why some parameters may get no gradient in a step (DDP then needs find_unused_parameters),
    # "" when the model's forward uses all of them, None when its class is not in this file.
    unused_parameters: str | None = ""
    # Reentrant activation checkpointing in its forward (`checkpoint(self.block, h)`), as the
    # report names it: DDP then needs static_graph=True (find_unused_parameters cannot see into it).
    reentrant: str = ""
    class_name: str | None = None  # the qualified name it is built from, when not a same-file class
    element: str | None = None  # a list of models (`nets`): the name its elements go by (`net`)
    # BatchNorm layers its source builds (`nn.BatchNorm2d`, `torchvision.models.resnet18`), None when
    # part of it is not in this file; and same-file normalization classes that are no _BatchNorm.
    batch_norms: list[str] | None = field(default_factory=list)
    custom_norms: list[str] = field(default_factory=list)
    # `Adam(encoder.parameters()) if fine_tune else None`: trained only when the script chooses to,
    # and frozen otherwise (DDP refuses a model with no parameter that requires a gradient)
    optional: str | None = None
    # Buffers the model registers itself (`self.register_buffer(...)` in a same-file class).
    registers_buffers: bool = False
    # A same-file object or function handed the model after the wrap moves it (`self.model =
    # model.to(device)` in a Trainer): the move spelled for the wrap's scope, and who moves it.
    moved_by: tuple[str | None, str] | None = None
    # Where the model runs forward again before the backward() of an earlier forward (a GAN's
    # discriminator on real, then on fake images): "" when it does not, or holds no buffers. DDP
    # broadcasts buffers in place at each forward, and cuDNN's BatchNorm backward needs the
    # statistics the earlier forward saw: "modified by an inplace operation" on CUDA.
    repeated_forward: str = ""
    # `PerceptualLoss`: its class freezes every module it builds, so the wrap is decided at run
    # time (DDP refuses a module with nothing to train), as for an optional model.
    frozen_by_class: str = ""


@dataclass
class LoaderPlan:
    """How one training DataLoader gets its share of the data on each rank."""

    call: cst.Call | None  # the DataLoader(...) call; None for a loader built outside this file
    function: cst.FunctionDef | None
    # "shard": a DistributedSampler (in place of `shuffle`, a RandomSampler or a SequentialSampler);
    # "generator": a sampler drawing with replacement keeps its draws, from a per-rank generator;
    # "subset": SubsetRandomSampler's indices are split by rank;
    # "recreate": a loader built elsewhere is made again with a DistributedSampler where it is used.
    # "stream": an IterableDataset that splits itself by rank in its __iter__: left as it is.
    how: Literal["shard", "generator", "subset", "recreate", "stream"]
    sampler: cst.Call | None = None  # the user's sampler, for "generator", "subset" and a replaced one
    loader: cst.BaseExpression | None = None  # "recreate": the loader as spelled in `function`
    anchor: cst.BaseStatement | cst.IndentedBlock | None = None  # "recreate": it is made again right before this statement (at the top of this loop body)
    after: bool = False  # "recreate": right after `anchor` (the statement that gets it) instead
    # "generator" under a flag (`sampler = WeightedRandomSampler(...) if args.balance else None`):
    # the None becomes this DistributedSampler, so the ranks shard the data when the flag is off.
    none: cst.CSTNode | None = None
    none_sampler: str | None = None
    # "shard" of `batch_sampler=BatchSampler(RandomSampler(ds), ...)`: `sampler` is the one inside
    batched: bool = False


@dataclass
class EpochStart:
    loop: cst.For | cst.While
    loader: str  # the loader, spelled for the loop's scope
    epoch: str | None
    batches: cst.CSTNode | None = None  # the loop over the loader's batches, when inside `loop` in the same function
    optional: bool = False  # its sampler is a DistributedSampler only on some runs (a flag chooses another)


@dataclass
class Facts:
    tree: Tree
    program: Program
    entry: Entry
    device: Device
    models: list[TrainedModel]
    train_loops: list[TrainLoop]
    train_loaders: list[Origin]
    loader_plans: list[LoaderPlan]
    imports_end: cst.BaseStatement | None  # module-level helpers go after the imports at the top
    epoch_starts: list[EpochStart]
    model_refs: dict[cst.FunctionDef | None, set[str]]
    syncing: set[cst.FunctionDef]
    # helper parameters handed the plain model before the wrap and the wrapper after it
    # (`set_backbone_trainable(model, False)`, then again in the epoch loop): reached both ways
    handed_both: set[tuple[str, cst.FunctionDef]]
    outputs: Outputs  # what a call outputs: the analyzer's own classification, shared
    warnings: list[tuple[cst.CSTNode | None, str]] = field(default_factory=list)
    # `classifier = Probe(encoder)` after `encoder` was trained and wrapped: (the model built,
    # its construction, the argument, the wrapped model it is handed), which it holds plain
    built_around: list[tuple[TrainedModel | None, cst.Call, cst.Arg, TrainedModel]] = field(default_factory=list)
    # `rank`, `world_size` the script binds itself in its entry (a LoRA rank): asked of dist there.
    taken: set[str] = field(default_factory=set)
    # Statements of the entry that prepare data files through same-file helpers (download, unzip,
    # write csv): they run on rank 0, then a barrier; the helpers they alone call are left as is.
    preparation: list[cst.BaseStatement] = field(default_factory=list)
    prepared_functions: set[cst.FunctionDef] = field(default_factory=set)
    # `data = np.load(download_or_prepare(root))`: a helper that makes data files when they are
    # missing, whose value every rank keeps: rank 0 calls it first, then the others find them
    prepared_calls: list[cst.Call] = field(default_factory=list)
    _data_names_cache: dict[int, set[str]] = field(default_factory=dict)

    # --- scopes ------------------------------------------------------------------------

    def sees_entry_names(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> bool:
        """Whether the setup's names (`rank`, `device`, ...) are visible in `function` (and
        bound by then, at `at`, where given)."""
        return not self.before_setup(function, at) and self._in_entry_scope(function)

    def _in_entry_scope(self, function: cst.FunctionDef | None) -> bool:
        """Code in `function` reads the entry scope's names, where the setup binds them."""
        if self.entry.kind == "library":
            return False
        if self.entry.kind == "function":
            return function is self.entry.function
        return function is None or self.program.owner_class(function) is None

    def device_expr(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> str | None:
        """How code in `function` names the script's device, when a variable of the script does
        (and, given `at`, is bound before that point when both are in the same scope)."""
        found = self._device_expr(function)
        if found is not None and at is not None and "." not in found:
            bound = [v for v, _ in self.program.assignments(function, found)]
            params = function is not None and found in self.program.all_param_names(function)
            if bound and not params and all(self.tree.order(v) > self.tree.order(at) for v in bound):
                return None  # assigned only further down: not defined yet here
        return found

    def _device_expr(self, function: cst.FunctionDef | None) -> str | None:
        name = self.device.name
        if name is not None:
            if self.program.binds(function, name) or (
                self.device.function is None and not (function is not None and self.program.binds(function, name))
            ):
                return name
        if self.program.binds(function, "device"):
            return "device"
        if function is not None:
            cls = self.program.owner_class(function)
            if cls is not None:
                for method in self.program.methods.get(cls, {}).values():
                    if self.program.assignments(method, "self.device"):
                        return "self.device"
        return None

    def rank_expr(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> str:
        """How code in `function` (at `at`, where given) asks for this process's rank."""
        if self.before_setup(function, at):
            return 'int(os.environ.get("RANK", 0))'
        if self._in_entry_scope(function) and "rank" not in self.taken:
            return "rank"
        if not self.runs_after_setup(function):  # the group may not exist yet (or ever, on that path)
            return 'int(os.environ.get("RANK", 0))'
        return "dist.get_rank()"

    def local_rank_expr(self, function: cst.FunctionDef | None, at: cst.CSTNode | None = None) -> str:
        """How code in `function` asks for this process's rank on its node: the setup's
        `local_rank` in the entry scope once it is bound, else the environment's."""
        if self._in_entry_scope(function) and not self.before_setup(function, at):
            return "local_rank"
        return 'int(os.environ.get("LOCAL_RANK", 0))'

    def world_size_expr(self, function: cst.FunctionDef | None) -> str:
        if self.sees_entry_names(function) and "world_size" not in self.taken:
            return "world_size"
        if not self.runs_after_setup(function):
            return 'int(os.environ.get("WORLD_SIZE", 1))'
        return "dist.get_world_size()"

    def before_setup(self, function: cst.FunctionDef | None, at: cst.CSTNode | None) -> bool:
        """Module code that runs before the process group exists: above the statement the setup
        follows (`try: import x / except: print(...)` among the imports), or, when the setup is
        in the `__main__` block, outside it (a config built at import). A function that such
        code calls runs there too (`LOGGER = get_logger()` at import: helper corpus BL, repro 03)."""
        if function is not None:
            return function in self._called_before_setup
        if at is None:
            return False
        if self.entry.kind == "main-block":
            return not self.tree.inside(at, self.entry.block)
        after = self.entry.after
        return self.entry.kind == "module" and after is not None and self.tree.order(at) < self.tree.order(after)

    def runs_after_setup(self, function: cst.FunctionDef | None) -> bool:
        """Whether code in `function` runs once the process group exists. Module code of a script
        whose group is set up in a function may run before; so may a function the entry function
        does not call (`inference(args)` in another branch of the `__main__` block)."""
        if self.entry.kind == "library":  # set up on first use: in these functions, and what they call
            return function is not None and function in self._runs_after_lazy_setup
        if function is None:
            return self.entry.kind != "function"
        return self.entry.kind != "function" or function in self._called_from_entry

    @cached_property
    def optional_models(self) -> set[str]:
        """Names of the models wrapped only when they train (the last part: `encoder`), and the
        names of a model the script binds again after the wrap to what is no wrapper (`model =
        torch.load(f)`, the best model read back), with the helpers' parameters it is handed:
        from there on they hold the plain model, so code reaching it must work both ways."""
        names = {m.ref.rsplit(".", 1)[-1] for m in self.models if m.optional is not None}
        rebound = list(self._rebound)
        if rebound:
            names |= {ref.rsplit(".", 1)[-1] for refs in self.program.propagate(rebound).values() for ref in refs}
        return names

    @cached_property
    def _rebound(self) -> dict[tuple[str, cst.FunctionDef | None], cst.BaseExpression]:
        """Each wrapped model bound again after its wrap to what is no wrapper: its first such value."""
        found = {}
        for m in self.models:
            if m.element is None and m.optional is None:
                values = rebinds_after(self.program, m.ref, m.anchor, m.function)
                if values:
                    found[(m.ref, m.function)] = values[0]
        return found

    def may_be_plain(self, ref: str, at: cst.CSTNode | None) -> bool:
        """Whether `ref` may hold the plain model where `at` runs, so that code reaching the plain
        model must work both ways (`getattr(ref, "module", ref)`). In the function that wraps a
        model read back later, code that runs only before the read holds the wrapper."""
        if at is not None and (ref.split(".")[0], self.tree.function(at)) in self.handed_both:
            return True
        name = ref.rsplit(".", 1)[-1]
        if name not in self.optional_models:
            return False
        if at is None or any(m.ref.rsplit(".", 1)[-1] == name for m in self.models if m.optional is not None):
            return True
        function = self.tree.function(at)
        value = self._rebound.get((ref, function))
        if value is None:
            return True  # a helper handed it: called before and after the read
        outer = set(self.tree.loops(value))
        return not (self.tree.order(at) < self.tree.order(value) and not any(loop in outer for loop in self.tree.loops(at)))

    @cached_property
    def _runs_after_lazy_setup(self) -> set[cst.FunctionDef]:
        """A library sets the group up at the top of the functions that wrap a model or build a
        training loader (ProcessGroup's first uses): those, the methods of a class whose
        constructor is one, and the same-file functions they call."""
        first_uses = {m.function for m in self.models if m.function is not None}
        first_uses |= {p.function for p in self.loader_plans if p.function is not None}
        # set up in a constructor: every method of its class runs on an object made after it
        constructed = {self.program.owner_class(f) for f in first_uses if f.name.value == "__init__"}
        first_uses |= {m for cls in constructed if cls is not None for m in self.program.class_methods(cls).values()}
        return self.program.called_from(first_uses)

    @cached_property
    def _called_before_setup(self) -> set[cst.FunctionDef]:
        """Same-file functions that module code run before the setup calls, directly or through others."""
        if self.entry.kind not in ("main-block", "module"):
            return set()
        roots = {
            target[0] for call in self.program.calls_in(None)
            if self.before_setup(None, call) and (target := self.program.callee(call, None)) is not None
        }
        return self.program.called_from(roots) if roots else set()

    @cached_property
    def _called_from_entry(self) -> set[cst.FunctionDef]:
        """Same-file functions the entry function runs, directly or through others."""
        assert self.entry.function is not None
        return self.program.called_from({self.entry.function})

    # --- the wrapped model -----------------------------------------------------------

    def is_model(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Whether `node` names the DDP-wrapped model at this point of `function`."""
        ref = dotted(node) if isinstance(node, cst.BaseExpression) else None
        if ref is None or ref not in self.model_refs.get(function, set()):
            return False
        if any(_may_be_container(self.program.element(v, i)) and self.tree.order(v) < self.tree.order(node) for v, i in self.program.assignments(function, ref)):
            # `if not isinstance(nets, list): nets = [nets]` (pix2pix's set_requires_grad; helper corpus BQ, repro 01), or
            # `nets = nets if isinstance(nets, (list, tuple)) else [nets]` (BS, repro 03): a list from there on
            return False
        for model in self.models:
            if model.ref == ref and model.function is function:
                line = self.tree.line(node)
                wrapped = self.tree.positions[model.anchor].end.line
                return line > wrapped and not any(wrapped < rebound < line for rebound in self._rebound_lines(model))
        return True

    def _rebound_lines(self, model: TrainedModel) -> list[int]:
        """Lines after the wrap where the model's name gets a new object that is not made from
        it (`model = Net()` to load the saved weights into): from there on it is a plain module.
        `model = train(model, ...)` or `model = model.to(device)` keep the wrapped one."""
        root = model.ref.split(".")[0]
        wrapped = self.tree.positions[model.anchor].end.line
        lines = []
        for value, _ in self.program.assignments(model.function, model.ref):
            if self.tree.line(value) <= wrapped:
                continue
            if not any(isinstance(n, cst.Name) and n.value == root for n in self.tree.walk(value)):
                lines.append(self.tree.line(value))
        return lines

    @cached_property
    def sharded_loaders(self) -> set[int]:
        """Ids of the `DataLoader(...)` calls that get a DistributedSampler where they are built."""
        return {id(plan.call) for plan in self.loader_plans if plan.call is not None and plan.how == "shard"}

    @cached_property
    def split_loaders(self) -> set[int]:
        """Ids of the `DataLoader(...)` calls that give each rank its own part of the data: a
        DistributedSampler, a weighted sampler drawing each rank's share, or a SubsetRandomSampler
        split by rank. A statistics pass over one sees this rank's part only."""
        return {id(plan.call) for plan in self.loader_plans if plan.call is not None and plan.how in ("shard", "generator", "subset")}

    def generator_passes(self) -> list[tuple[cst.BaseStatement, str, bool]]:
        """The passes of same-file generators the training steps draw sharded batches from
        (`def cycle(loader): while True: for b in loader: yield b`, or `yield from loader`), each with the generator's
        loader parameter and whether a caller may hand it a loader that is not sharded."""
        loops = self.program.fact(TrainLoops)
        found: dict[cst.BaseStatement, tuple[cst.BaseStatement, str, bool]] = {}
        for draw in loops.draws:
            if not self._draws_sharded(draw) or not (draw.external or any(_shuffles(o.node) for o in self.program.dataloaders(draw.loader, draw.function))):
                continue  # a loader read in order reads in order on every pass: set_epoch changes nothing
            for via, generator, loop in loops.generator_passes(draw):
                if via is draw.loop:  # the generator reads the loader itself: it is that loader
                    found.setdefault(loop, (loop, self.program.sampler_owner(draw.loader, draw.function), False))
                    continue
                name = self.program.param_names(generator)[0]
                callers = [
                    (call.args[0].value, caller) for call, caller in self.program.call_sites(generator) if call.args
                ]
                mixed = not all(
                    any(id(o.node) in self.sharded_loaders for o in self.program.dataloaders(arg, caller)) or (draw.external and code(arg) == code(draw.loader))
                    for arg, caller in callers
                )
                found.setdefault(loop, (loop, self.program.sampler_owner(cst.Name(name), generator, name), mixed))
        return list(found.values())

    def _draws_sharded(self, draw: TrainLoop) -> bool:
        return draw.external or any(id(o.node) in self.sharded_loaders for o in self.program.dataloaders(draw.loader, draw.function))

    def refills(self) -> list[tuple[cst.Call, str]]:
        """`iter(loader)` calls that start another pass over a sharded training loader drawn with
        next() (inside a loop, in an `except StopIteration`, or at the top of a function called
        once per epoch: MixMatch's `train()`), with the loader as spelled there. Not one at the
        top of an epoch loop that starts with `set_epoch(epoch)` already."""
        found = []
        for loop in self.program.fact(TrainLoops).draws:
            if loop.consumed_by != "next":
                continue
            if not self._draws_sharded(loop):
                continue
            spelled = code(loop.loader)
            epochs = [start.loop for start in self.epoch_starts if start.loader == spelled and start.epoch not in (None, PASSES)]
            again = loop.function is not None and self.program.called_repeatedly(loop.function)
            scopes = [loop.function]
            if loop.function is None:  # a global iterator (`train_iter = iter(train_loader)`), refilled in a function declaring it `global`
                scopes += self.program.all_functions
            owner = self.program.owner_class(loop.function)
            if spelled.startswith("self.") and owner is not None:  # `self.lab_iter = iter(self.lab_loader)` again in another method
                scopes += [m for m in self.program.methods.get(owner, {}).values() if m is not loop.function]
            for call in (c for scope in scopes for c in self.program.calls_in(scope)):
                if not (self.tree.is_builtin_call(call, "iter") and call.args and code(call.args[0].value) == spelled):
                    continue
                if self.tree.function(call) is not loop.function and not any(isinstance(a, cst.ExceptHandler) for a in self.tree.ancestors(call)):
                    continue  # another method's: only its `except StopIteration` starts a new pass
                if not self.tree.inside(call, loop.loop) and any(self.tree.inside(call, epoch.body) for epoch in epochs):
                    continue  # the epoch loop's set_epoch(epoch) came first
                if again or self.tree.loops(call) or any(isinstance(a, cst.ExceptHandler) for a in self.tree.ancestors(call)):
                    found.append((call, self.program.sampler_owner(loop.loader, loop.function, spelled)))
        return list(dict.fromkeys(found))

    def in_dataset(self, function: cst.FunctionDef | None) -> bool:
        return self.program.in_dataset(function)

    @cached_property
    def _training_indices(self) -> set[str]:
        """The index lists a SubsetRandomSampler of a training loader draws from (`train_idx`):
        `len(train_idx)` counts the whole training set, as `len(train_set)` does."""
        found = set()
        for plan in self.loader_plans:
            indices = s.arg(plan.sampler, 0, "indices") if plan.how == "subset" and plan.sampler is not None else None
            if indices is not None:
                found.add(code(indices.value))
        return found

    @cached_property
    def _drawn_counts(self) -> set[str]:
        """The sample counts a training loader's sampler draws per epoch (`num_samples=args.k` of a
        RandomSampler or WeightedRandomSampler), as spelled: each rank now draws its share of it
        (helper corpus AS, repro 07)."""
        found = set()
        for plan in self.loader_plans:
            drawn = s.arg(plan.sampler, None, "num_samples") if plan.sampler is not None and type(plan.sampler) is cst.Call else None
            if drawn is not None and type(drawn.value) is not cst.Integer:
                found.add(code(drawn.value))
        return found

    @cached_property
    def _training_datasets(self) -> set[str]:
        """The datasets the training loaders sample, as the script names them (`train_set`)."""
        found = set()
        for origin in self.train_loaders:
            dataset = s.arg(origin.node, 0, "dataset") if isinstance(origin.node, cst.Call) else None
            if dataset is not None and isinstance(dataset.value, (cst.Name, cst.Attribute)):
                found.add(code(dataset.value))
            # `TensorDataset(X, y)`: `len(X)` counts its samples too
            made = [dataset.value] if dataset is not None else []
            made += [o.node for o in self.program.origins(dataset.value, origin.function)] if dataset is not None else []
            for value in made:
                if self.tree.is_call_to(value, TENSOR_DATASET):
                    found |= {code(a.value) for a in value.args if type(a.value) is cst.Name}  # type: ignore[union-attr]
        return found

    def counts_whole_dataset(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """`len(loader.dataset)`, `loader.dataset.__len__()`, `len(train_set)` of a training
        loader's dataset, or a name bound to `len(dataset)`: the number of samples of the whole
        dataset, of which a rank now sees 1/world_size. Not `len(loader)` or `len(loader.sampler)`:
        those count a rank's own batches or samples. Counts per class taken from the labels
        (`label_counts = torch.bincount(labels)`, `label_counts[c]`) count the whole set too."""
        if hasattr(expr, "lpar"):
            expr = expr.with_changes(lpar=[], rpar=[])  # `(len(ds))`
        if code(expr) in self._drawn_counts:
            return True  # `RandomSampler(ds, num_samples=args.k)`'s k: what one process drew, now split over the ranks
        counted = expr.value if type(expr) is cst.Subscript else expr  # `label_counts[c]`
        if any(o.node is not counted and _counts_labels(self.tree, o.node) for o in self.program.origins(counted, function)):
            return True
        if isinstance(expr, cst.Call):
            measured = _measured(self.tree, expr)
            return measured is not None and (
                (isinstance(measured, cst.Attribute) and measured.attr.value == "dataset")
                or code(measured) in self._training_datasets
                or code(measured) in self._training_indices
            )
        for origin in self.program.origins(expr, function):
            sized = _first_size(origin.node) if origin.node is not expr else None
            if sized is not None and code(sized) in self._training_datasets:
                return True  # `n_train = X.size(0)` of the training TensorDataset's `X`
            measured = _measured(self.tree, origin.node) if origin.node is not expr else None
            if measured is not None and not self.program.dataloaders(measured, origin.function) and not (
                isinstance(measured, cst.Attribute) and measured.attr.value in ("sampler", "batch_sampler")
            ):
                return True
        return False

    def sizes_data(self, expr: cst.BaseExpression, loop: TrainLoop, depth: int = 2) -> bool:
        """A size of the data the training loop reads, taken before it and the same on every rank:
        `len(train_idx)` or `train_idx.numel()` of the indices its loader serves, `x.size(0)` of
        the tensor its steps index, `int(mask.sum())`, or a name bound to one (`n = len(idx) // bs`
        too). Not a loader's or sampler's length (a rank's own), nor a size of a batch."""
        function = loop.function
        data = self._data_names(loop)
        for node in self.tree.walk(expr):
            sized = _measured(self.tree, node) or _first_size(node) or _counted(node)
            root = sized
            while type(root) in (cst.Attribute, cst.Subscript, cst.Call):
                root = root.func if type(root) is cst.Call else root.value  # type: ignore[union-attr]
            if type(root) is cst.Name and root.value in data:
                return True
            if depth > 0 and type(node) is cst.Name and node.value not in data:
                scope = function if function is not None and self.program.assignments(function, node.value) else None
                values = [v for v, i in self.program.assignments(scope, node.value) if i is None]
                if len(values) == 1 and type(values[0]) is cst.Call and (
                    self.tree.is_call_to(values[0], s.DATALOADER) or "Sampler" in (self.tree.qname(values[0].func) or "")  # type: ignore[attr-defined]
                ):
                    continue  # `len(train_loader)` of `DataLoader(ds, sampler=WeightedRandomSampler(w, num_samples=len(ds)))`: a rank's own (helper corpus BF, repro 01)
                if len(values) == 1 and not self.tree.inside(values[0], loop.loop) and self.sizes_data(values[0], loop, depth - 1):  # type: ignore[arg-type]
                    return True
        return False

    def _data_names(self, loop: TrainLoop) -> set[str]:
        """The names of the data a training loop reads, bound before it: what its steps index
        (`x[idx]`) and what its loader's dataset is made of (`train_idx`, and the `mask` that made
        it); not the loader itself, nor what the loop binds."""
        cached = self._data_names_cache.get(id(loop.loop))
        if cached is not None:
            return cached
        bound = set(self.program.names_in(loop.loop.target)) if type(loop.loop) is cst.For else set()
        for node in self.tree.walk(loop.loop.body):
            if type(node) is cst.Assign:
                bound |= {name for t in node.targets for name in self.program.names_in(t.target)}
            elif type(node) in (cst.AugAssign, cst.AnnAssign):
                bound |= set(self.program.names_in(node.target))  # type: ignore[attr-defined]
        found = {
            n.value for n in self.tree.walk(loop.loop.body)
            if type(n) is cst.Name and type(parent := self.tree.parent(n)) is cst.Subscript and parent.value is n
        }  # `x[idx]`: the tensors the steps index
        for origin in self.program.dataloaders(loop.loader, loop.function):
            dataset = s.arg(origin.node, 0, "dataset") if type(origin.node) is cst.Call else None
            names = {n.value for n in self.tree.walk(dataset.value) if type(n) is cst.Name} if dataset is not None else set()
            for name in list(names):
                for value, _ in self.program.assignments(origin.function, name):
                    names |= {n.value for n in self.tree.walk(value) if type(n) is cst.Name}
            found |= names
        found -= bound | {n.value for n in self.tree.walk(loop.loader) if type(n) is cst.Name}
        self._data_names_cache[id(loop.loop)] = found
        return found

    def custom_method_calls(self) -> list[tuple[cst.Call, cst.FunctionDef | None]]:
        """Calls of the wrapped model's own methods (`model.generate(...)`): DDP has none of them."""
        found = []
        for function in self.model_refs:
            for node in self.program.calls_in(function):
                if type(node.func) is cst.Attribute and self.is_model(node.func.value, function):
                    attr = node.func.attr.value
                    if attr not in s.WRAPPER_ATTRIBUTES and not attr.startswith("__"):
                        found.append((node, function))
        return found

    def forwards_model(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        return self.is_model(call.func, function)

    def call_syncs(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """Whether the call itself takes part in a collective: a DDP forward or backward, a
        torch.distributed collective, or a same-file function that does one of these."""
        return sync.call_syncs(self.tree, self.program, call, function, self.forwards_model, self.syncing)

    def syncs(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Whether running `node` takes part in a collective anywhere inside it."""
        return any(self.call_syncs(call, function) for call in self.tree.calls(node))


class Analyzer:
    def __init__(self, tree: Tree, source: str | None = None, directory: Path | None = None) -> None:
        self.tree = tree
        self.source = source
        self.program = Program(tree, directory)
        self.outputs = Outputs(tree, self.program)
        self.warnings: list[tuple[cst.CSTNode | None, str]] = []
        self._sources_cache: dict[cst.FunctionDef | None, set[int]] = {}
        self._return_sources_cache: dict[cst.FunctionDef, set[int]] = {}
        self._classes_followed: set[tuple[int, int]] = set()  # `a = b.to(d)` being followed to `b`'s class (a cycle stops)
        self._loss_only: dict[cst.ClassDef, list[str]] = {}  # parameters of a model class only the training reads, outside its forward

    def run(self) -> Facts:
        self._check_not_distributed()
        backward_calls = self.program.backward_calls
        if not backward_calls:
            self._explain_nothing_to_train()
        self._check_nested_training(backward_calls)
        models = self._models()
        if not models:
            raise NotConvertible(self._no_model_reason(backward_calls))
        self._warn_loss_buffers(models)
        found = self.program.fact(TrainLoops)
        loops = found.loops
        self._judge_repeated_forwards(models, loops)
        loaders = found.loaders
        loader_plans = [self._loader_plan(origin) for origin in loaders]
        loader_plans += self._recreated_loaders(found.draws)
        if not loader_plans:
            raise NotConvertible(self._no_loader_reason(backward_calls))
        self._check_carried_state(loops, {m.ref for m in models})
        self._check_shard_picks_the_data(loops)
        self._check_tables_filled_from_the_shard(loops)
        entry = self._entry(loaders, models)
        if entry.kind != "library":  # not before a `__main__` block's setup: rank0_value needs the process group
            fresh = fresh_seeds(self.tree, self.program, entry.function)
            self.program.shared_seeds = {id(call) for call in fresh if entry.kind != "main-block" or self.tree.inside(call, entry.block)}
        self._check_spawned_workers(entry)
        device = self._device(entry, models)
        built_around = self._built_around(models)
        refs, handed_both = self._model_refs(models, {id(argument.value) for _, _, argument, _ in built_around})
        facts = Facts(
            tree=self.tree,
            program=self.program,
            entry=entry,
            device=device,
            models=models,
            train_loops=loops,
            train_loaders=loaders,
            loader_plans=loader_plans,
            imports_end=self.top_imports_end(),
            epoch_starts=self._epoch_starts([loop for loop in loops if self._sharded(loop, loader_plans)], loader_plans),
            model_refs=refs,
            syncing=set(),
            handed_both=handed_both,
            outputs=self.outputs,
            warnings=self.warnings,
            built_around=built_around,
        )
        facts.syncing = self._syncing(facts)
        facts.preparation, facts.prepared_functions, facts.prepared_calls = self._data_preparation(facts)
        facts.taken = self._check_names(entry)
        self._warn_unsplit_stages(facts, found.unfed)
        self._warn_skipped_failures()
        self._check_custom_methods(facts)
        self._check_aliases(facts)
        self._check_hand_set_gradients(facts)
        self._penalties_of_input_gradients(facts)
        self._check_backwards_per_forward(facts)
        return facts

    def _warn_skipped_failures(self) -> None:
        """`try: loss.backward()` with an `except RuntimeError:` that skips the batch (out of
        memory, speech recipes): a rank that fails there leaves the others in backward's all-reduce,
        which NCCL waits on for good. Said, not changed: only the script knows what may fail."""
        for backward in self.program.backward_calls:
            for ancestor in self.tree.ancestors(backward):
                if type(ancestor) in (cst.FunctionDef, cst.For, cst.While):
                    break
                if type(ancestor) is cst.Try and self.tree.inside(backward, ancestor.body):
                    for handler in ancestor.handlers:
                        leaves = [n for n in self.tree.walk(handler.body) if type(n) in (cst.Continue, cst.Break, cst.Return)]
                        raises = [n for n in handler.body.body if type(n) is cst.SimpleStatementLine and any(type(b) is cst.Raise for b in n.body)]
                        if leaves and not raises:
                            self.warnings.append((handler, (
                                f"this handler skips the step when `{code(backward)}` (line {self.tree.line(backward)}) fails (out of memory): a rank "
                                "that skips leaves the others waiting in backward's gradient all-reduce (NCCL waits for good); let the error "
                                "stop the run, or decide the skip on every rank together"
                            )))
                            break
                    break

    def _warn_unsplit_stages(self, facts: Facts, unfed: list[cst.Call]) -> None:
        """A second stage that trains the wrapped model on batches it makes itself (`idx =
        torch.randint(0, n, (bs,))`, `X[idx]`) beside a DataLoader stage: ddpify splits only the
        loader, so each rank draws from the whole data there (the same batches under one seed:
        no faster than one process). It still trains right: a warning, not a refusal."""
        seen: set[int] = set()
        for backward in unfed:
            function = self.tree.function(backward)
            loops = [loop for loop in self.tree.loops(backward) if self.tree.function(loop) is function]
            if not loops or id(loops[0]) in seen:
                continue
            step = loops[0]
            if not any(facts.forwards_model(call, function) for call in self.tree.calls(step)):
                continue  # a calibration on kept logits, a model of its own: nothing of the wrapped model's
            seen.add(id(step))
            head = code(step.iter) if isinstance(step, cst.For) else code(step.test)
            self.warnings.append((
                step,
                f"the training loop here (over `{head[:50]}`) makes its own batches, not from a DataLoader: ddpify does not split "
                "them by rank, so each rank draws from the whole data in this stage (the same batches when the ranks share a seed, "
                "no faster than one process); give each rank its own part by hand, or feed this stage from a DataLoader",
            ))

    def _check_backwards_per_forward(self, facts: Facts) -> None:
        """`loss_i.backward(retain_graph=True)` for each task on one forward (PCGrad, MGDA): DDP
        reduces once per forward, and the second backward fails ("Expected to mark a variable
        ready only once", or an undefined gradient all-reduced). A backward in a loop that runs
        no forward, or followed by another before the next forward, is refused."""
        for backward in self.program.backward_calls:
            kept = s.arg(backward, None, "retain_graph")
            if kept is None or code(kept.value) != "True":
                continue
            function = self.tree.function(backward)
            loops = self.tree.loops(backward)
            if not loops:
                continue
            forwards = [c for c in self.program.calls_in(function) if facts.forwards_model(c, function)]
            inner = loops[0]
            again = None
            if not any(self.tree.inside(f, inner) for f in forwards) and (not forwards or any(self.tree.inside(f, lp) for lp in loops[1:] for f in forwards)):
                again = f"its loop (line {self.tree.line(inner)}) runs no forward"  # `for obj in objectives: obj.backward(retain_graph=True)`
            else:
                step = next((lp for lp in loops if any(self.tree.inside(f, lp) for f in forwards)), None)
                later = [
                    b for b in self.program.backward_calls
                    if b is not backward and step is not None and self.tree.inside(b, step) and self.tree.order(b) > self.tree.order(backward)
                ]
                first = min(later, key=self.tree.order, default=None)
                between = [
                    f for f in forwards
                    if self.tree.inside(f, step) and self.tree.order(f) > self.tree.order(backward)  # type: ignore[arg-type]
                    and first is not None and (self.tree.order(f) < self.tree.order(first) or self.tree.inside(f, self.tree.statement(first)))
                ]
                if first is not None and not between:
                    again = f"another backward follows at line {self.tree.line(first)} with no forward between"
            if again:
                raise NotConvertible(
                    f"`{code(backward)}` (line {self.tree.line(backward)}) is one of several backward passes through one forward "
                    f"({again}): DDP averages the gradients once per forward, and the second backward fails or goes unaveraged; run the "
                    "forward again for the next loss (a GAN's discriminator on the fakes), or, for per-task gradients (PCGrad), compute "
                    "them under `model.no_sync()` and all-reduce the combined gradient by hand"
                )

    def _penalties_of_input_gradients(self, facts: Facts) -> None:
        """A backward of its own for a penalty on an input gradient (lazy R1, a WGAN-GP term given
        its own backward): `torch.autograd.grad(D(x).sum(), x, create_graph=True)` reaches only the
        parameters that shape that gradient (not the last layer's bias), and DDP fails at the next
        forward, find_unused_parameters or not. Refused with the usual way out."""
        for backward in self.program.backward_calls:
            function = self.tree.function(backward)
            receiver = backward.func.value  # type: ignore[attr-defined]
            values = [receiver]
            seen: set[str] = set()
            calls: list[cst.Call] = []
            while values:
                value = values.pop()
                if self.tree.grad_disabled(value):
                    continue  # `with torch.no_grad(): fake = netG(noise)`: detached too
                detached = {id(d) for c in self.tree.walk(value) if type(c) is cst.Call and (m := s.method_call(c)) and m[1] == "detach" for d in self.tree.walk(c)}
                for n in self.tree.walk(value):
                    if id(n) in detached:
                        continue  # `fake.detach()`: the backward does not reach what made it
                    if type(n) is cst.Call:
                        calls.append(n)
                    elif type(n) is cst.Name and n.value not in seen:
                        seen.add(n.value)
                        values += self._values_of(function, n.value)
            grads = [c for c in calls if _input_gradient(self.tree, c)]
            # `r1 = r1_penalty(D(x), x)`, a same-file helper returning a penalty on autograd.grad of what it is handed
            grads += [c for c in calls if (t := self.program.callee(c, function)) is not None and self._returns_input_gradient(t[0])]
            inside = {id(n) for g in grads for n in self.tree.walk(g)}
            if not grads or any(facts.is_model(c.func, function) for c in calls if id(c) not in inside):
                continue  # the loss also runs the model itself: every parameter gets its gradient
            # the model run inside the gradient, or handed to the helper that runs it (`gradient_penalty(D, real, fake)`)
            forwarded = next(
                (m for g in grads for n in self.tree.walk(g) if type(n) is cst.Call
                 for m in (n.func, *(a.value for a in n.args if n is g)) if facts.is_model(m, function)),
                None,
            )
            if forwarded is not None:
                raise NotConvertible(
                    f"the backward at line {self.tree.line(backward)} reaches `{code(forwarded)}` only through an input gradient "
                    f"({_penalty_made(self.tree, grads[0])}, line {self.tree.line(grads[0])}): the parameters that do not shape it "
                    "(a last bias) get no gradient in that step, which DDP cannot wait for, even with find_unused_parameters (its search "
                    "sees the whole graph of the forward); add the output times zero to that loss (`penalty + 0 * out.sum()`, as "
                    "StyleGAN2 does), then convert"
                )

    # --- should we touch this script at all? -------------------------------------------

    def _check_not_distributed(self) -> None:
        """Already distributed scripts are left alone; the reason names the strongest evidence."""
        if self.source is not None and not any(marker in self.source for marker in DISTRIBUTED_MARKERS):
            return  # none of the evidence below can be there
        tree = self.tree
        evidence: list[tuple[int, str]] = []  # (strength, reason)
        for node in tree.walk():
            if isinstance(node, cst.Call):
                name = tree.qname(node.func) or ""
                if name in s.INIT_PROCESS_GROUP or name in s.DDP or name in s.DISTRIBUTED_SAMPLER:
                    evidence.append((0, f"calls {name.rsplit('.', 1)[-1]} (line {tree.line(node)})"))
            elif isinstance(node, (cst.Import, cst.ImportFrom)):
                names = [code(a.name) for a in node.names] if isinstance(node, cst.Import) else [code(node.module)] if node.module else []
                for root in (n.split(".")[0] for n in names):
                    if root in s.DISTRIBUTED_FRAMEWORKS:
                        evidence.append((1, f"uses {s.DISTRIBUTED_FRAMEWORKS[root]} (line {tree.line(node)})"))
            elif isinstance(node, cst.SimpleString) and string_value(node) in {"LOCAL_RANK", "RANK", "WORLD_SIZE"}:
                if isinstance(tree.parent(tree.parent(node)), (cst.Call, cst.SubscriptElement)):
                    evidence.append((2, f"reads {string_value(node)} (line {tree.line(node)})"))
        if evidence:  # the strongest kind, first in the file
            raise NotConvertible(f"already distributed: {min(evidence, key=lambda e: e[0])[1]}")

    def _check_nested_training(self, backward_calls: list[cst.Call]) -> None:
        """`def train_one_epoch(): ...` (or `def step(batch): ...`) defined inside `main()`, reading
        the model, optimizer and loader of `main()`: ddpify follows values through module-level
        functions and methods, not into closures, so it would wrap the model after the training and
        shard a loader the closure rebinds. Refused with the way out."""
        for call in backward_calls:
            function = self.tree.function(call)
            outer = self.tree.function(function) if function is not None else None
            stepped = any(
                (m := s.method_call(c)) is not None and m[1] == "step" and any(dotted(a.value) == function.name.value for a in c.args)
                for c in self.program.calls_in(outer)
            ) if outer is not None else False  # `optimizer.step(closure)` (LBFGS): the optimizer calls it, in the loop around
            # `optimizer.step(closure_for(xb, yb))`: a factory of the closure (helper corpus CJ, repro 01c)
            made_by_outer = function is not None and outer is not None and self._closure_step(function) is not None
            if outer is not None and self.program.owner_class(function) is None and not stepped and not made_by_outer:
                raise NotConvertible(
                    f"the training step (`backward()`, line {self.tree.line(call)}) is in `{function.name.value}`, a function defined inside "
                    f"`{outer.name.value}()`: ddpify does not follow the model, optimizer and loader into such a closure; define it at module "
                    f"level, handed what it uses (`def {function.name.value}(model, loader, optimizer, ...)`), then convert"
                )

    def _explain_nothing_to_train(self) -> None:
        # A training loop living in another module is out of reach of a one-file rewrite.
        elsewhere = []
        for call in self.tree.calls():
            name = self.tree.qname(call.func)
            if name is None or name.startswith(("torch.", "builtins.")) or "." not in name:
                continue
            if any(self._holds_optimizer(a.value) for a in call.args):
                self.warnings.append(
                    (call, f"training loop lives in `{name}` (another module): out of reach of a one-file rewrite")
                )
                elsewhere.append((call, name))
        if elsewhere and self.program.companion_class(elsewhere[0][1]) is not None:
            call, name = elsewhere[0]
            module = name.rsplit(".", 1)[0]
            raise NotConvertible(
                f"nothing to train in this file: `{name}` ({module.replace('.', '/')}.py), handed the optimizer at line {self.tree.line(call)}, "
                f"trains; convert {module.replace('.', '/')}.py, whose class then wraps the model and shards the loader it is given, "
                "and run this script under torchrun as it is"
            )
        if elsewhere and self.program.companion_function(elsewhere[0][1]) is not None:  # the engine layout (DETR, DeiT, MAE)
            call, name = elsewhere[0]
            raise NotConvertible(
                f"the training loop runs in `{name}` (another module), called at line {self.tree.line(call)} with the optimizer: "
                "ddpify rewrites one file, and this layout needs both: here the DDP wrap, a DistributedSampler with set_epoch and "
                f"rank-0 output; in `{name.rsplit('.', 1)[0]}` the reduction of what it measures. Make those changes by hand "
                "(ddpify lint checks the result)"
            )
        autograd = next((c for c in self.tree.calls() if self.tree.qname(c.func) == "torch.autograd.grad"), None)
        if autograd is not None and any(self._is_optimizer_call(c) for c in self.tree.calls()):  # a step on what autograd.grad returns
            raise NotConvertible(
                f"nothing DDP can average: the gradients come from `{code(autograd.func)}` (line {self.tree.line(autograd)}), and no "
                "backward() runs; DDP averages only what backward() accumulates, so each rank would step with its own gradients: "
                "average them over ranks by hand (dist.all_reduce, then divide by the world size)"
            )
        raise NotConvertible("nothing to train: no `.backward()` call in this file")

    def _holds_optimizer(self, expr: cst.BaseExpression) -> bool:
        function = self.tree.function(expr)
        return any(self._is_optimizer_call(o.node) for o in self.program.origins(expr, function))

    def _is_optimizer_call(self, node: cst.CSTNode) -> bool:
        """`torch.optim.Adam(...)`, an optimizer class of another library or module (`SAM(...)`,
        `apex.optimizers.FusedAdam(...)`), or a same-file subclass of torch.optim.Optimizer."""
        if not isinstance(node, cst.Call):
            return False
        name = self.tree.qname(node.func) or dotted(node.func) or ""
        if name.startswith(s.OPTIMIZER_PREFIX):
            return ".lr_scheduler." not in name and ".swa_utils." not in name
        if isinstance(node.func, cst.Name) and node.func.value in self.program.classes:
            cls = self.program.classes[node.func.value]
            return any((self.tree.qname(b.value) or "").startswith(s.OPTIMIZER_PREFIX) for b in cls.bases)
        last = name.rsplit(".", 1)[-1]
        return ("optim" in name.lower() or OPTIMIZER_NAMES.match(last) is not None) and bool(node.args)

    # --- entry point -----------------------------------------------------------------

    def _entry(self, loaders: list[Origin], models: list[TrainedModel]) -> Entry:
        module = self.tree.module
        guard = next((st for st in module.body if self.tree.is_main_guard(st)), None)
        if guard is not None and not self._needs_group_at_import(guard, loaders):
            assert isinstance(guard.body, cst.IndentedBlock)
            called = [
                self.program.functions[c.func.value]
                for c in self.tree.calls(guard.body)
                if isinstance(c.func, cst.Name) and c.func.value in self.program.functions
            ]
            training = [f for f in called if self._reaches_training(f)]
            # the block itself builds what trains (the model it wraps, the loader it shards): set up there
            builds = any(m.function is None for m in models) or any(o.function is None for o in loaders) or any(
                m.function is not None and m.ref in self.program.all_param_names(m.function) and any(caller is None for _, caller in self.program.call_sites(m.function))
                for m in models
            )  # or hands the model to the function that wraps it (`_sets_weights`)
            # `for lr in grid: train(lr)`: a function run more than once would set the group up again
            repeated = len(training) == 1 and self.program.called_repeatedly(training[0], guard.body)
            # `best = train()`, then the block reads back what training wrote: the group must outlive the call (helper corpus BX, repro 01)
            later = len(training) == 1 and self._reads_back_after(guard.body, training[0])
            if len(training) == 1 and not builds and not repeated and not later:
                f = training[0]
                return Entry("function", f, f.body, None, f"{f.name.value}()")  # type: ignore[arg-type]
            return Entry("main-block", None, guard.body, None, "the __main__ block")
        last_import = self.top_imports_end()
        if last_import is None:
            raise NotConvertible("no imports found: not a PyTorch training script")
        if guard is None and not self._trains_at_import():
            return Entry("library", None, module, last_import, "the first use")
        return Entry("module", None, module, last_import, "the module")

    def _reads_back_after(self, block: cst.IndentedBlock, function: cst.FunctionDef) -> bool:
        """A statement of the `__main__` block after the call of `function` loads a file
        (`torch.load(best)`), which rank 0 may be writing: a barrier must come first, while the
        process group is still there."""
        calls = [c for c in self.tree.calls(block) if self.program.callee(c, None) == (function, 0)]
        if not calls:
            return False
        end = self.tree.order(self.tree.statement(calls[-1]))
        return any(
            self.tree.order(self.tree.statement(c)) > end and self.tree.is_call_to(c, s.TORCH_LOAD)
            for c in self.tree.calls(block)
        )

    def _check_spawned_workers(self, entry: Entry) -> None:
        """The group set up at import, and DataLoader workers the script starts with spawn or
        forkserver: each worker imports the script again and would set up the group again (a
        hang, or workers that die). Refused: the module-level training code belongs in a function
        or under `if __name__ == "__main__":`."""
        if entry.kind != "module":
            return
        started = None
        for call in self.tree.calls():
            name = self.tree.qname(call.func) or ""
            method = s.arg(call, 0, "method") if name.endswith("set_start_method") else s.arg(call, None, "multiprocessing_context")
            if method is not None and string_value(method.value) in ("spawn", "forkserver"):
                started = call
                break
        if started is None:
            return
        workers = [
            c for c in self.tree.calls_to(s.DATALOADER)
            if (n := s.arg(c, 7, "num_workers")) is not None and not (isinstance(n.value, cst.Integer) and n.value.value == "0")
        ]
        if workers:
            raise NotConvertible(
                f"the process group would be set up at import, and `{code(started.func)}(...)` (line {self.tree.line(started)}) starts "
                f"the DataLoader workers (line {self.tree.line(workers[0])}) by importing the script again: each worker "
                "would set up the group again; move the module-level training code into a function or under "
                "`if __name__ == \"__main__\":`, then convert"
            )

    def _trains_at_import(self) -> bool:
        """Whether module-level code trains: a loop calling backward(), or a call that reaches one."""
        for call in self.program.calls_in(None):
            target = self.program.callee(call, None)
            if is_backward(call) or (target is not None and self._reaches_training(target[0])):
                return True
        return False

    def top_imports_end(self) -> cst.BaseStatement | None:
        """The last statement of the imports at the top of the module: setup code goes after it."""
        imports = []
        for statement in self.tree.module.body:
            if is_import_line(statement):
                imports.append(statement)
            elif imports and not is_preamble(statement):
                break
        return imports[-1] if imports else None

    def _needs_group_at_import(self, guard: cst.If, loaders: list[Origin]) -> bool:
        """Module code outside the `__main__` block that needs the process group (a training
        loader's sampler, a dataset download) runs at import: the setup must come before it."""
        nodes = [o.node for o in loaders if o.function is None]
        nodes += [c for c in self.program.calls_in(None) if s.arg(c, None, "download") is not None]
        return any(not self.tree.inside(node, guard) for node in nodes)

    def _reaches_training(self, function: cst.FunctionDef) -> bool:
        return function in self.program.training_functions

    # --- models --------------------------------------------------------------------

    def _models(self) -> list[TrainedModel]:
        found: dict[tuple[str, cst.FunctionDef | None], TrainedModel] = {}
        always: set[tuple[str, cst.FunctionDef | None]] = set()  # trained by an optimizer made on every path
        unplaced: dict[tuple[str, cst.FunctionDef | None], cst.Call] = {}  # trained, with no place found for the wrap
        for call in self.tree.calls():
            if not self._is_optimizer_call(call) or not call.args:
                continue
            function = self.tree.function(call)
            parent = self.tree.parent(call)
            target = parent.targets[0].target if type(parent) is cst.Assign and len(parent.targets) == 1 else None
            if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value != "self" and self._holder_of_its_own(target, function, "optimizer"):
                continue  # `trainer.optimizer = SGD(net.parameters())`: the Trainer's model, which the class wraps (helper corpus AS, repro 01c)
            optional = self._made_only_if(call)
            touched: set[tuple[str, cst.FunctionDef | None]] = set()
            owners = self._parameter_owners(call.args[0].value, function)
            self._check_parts_picked_by_key(call, function)
            if not owners and isinstance(call.func, cst.Attribute) and "optim" in call.func.attr.value and self.tree.qname(call.func) is None and not self._builds_optimizer_of_another(call, function):
                # `model.configure_optimizers(config)`: the model builds the optimizer over its own parameters
                ref = dotted(call.func.value)
                if ref is not None and ref != "self":
                    parts = ref.split(".")
                    owners = [".".join(parts[:2] if parts[0] == "self" else parts[:1])]
            if "self" in owners:
                owners = [o for o in owners if o != "self"] + self._self_optimizer_owners(call, function)
            for listed in self._model_lists(call, owners):
                model = self._trained_model(listed.ref, function)
                touched.add((listed.ref, function))
                if model is not None and (listed.ref, function) not in found:
                    model.element = listed.element
                    self._judge_unused_parameters(model)
                    found[(listed.ref, function)] = model
                    owners = [o for o in owners if o != listed.element]
            for ref in owners:
                self._check_inline_model(ref, function, call)
                for model_ref, model_function in self._definition(ref, function):
                    key = (model_ref, model_function)
                    touched.add(key)
                    if key not in found:
                        model = self._trained_model(model_ref, model_function)
                        if model is not None:
                            self._judge_unused_parameters(model)
                            found[key] = model
            for key in touched - set(found):
                unplaced.setdefault(key, call)
            under_if = any(isinstance(a, cst.If) for a in self.tree.ancestors(call) if self.tree.function(a) is function or a is function)
            for key in touched & set(found):
                if optional is None and under_if:
                    continue  # `if fine_tune and encoder_optimizer is None: encoder_optimizer = Adam(...)`: no path decided
                if optional is None:
                    always.add(key)
                else:
                    found[key].optional = optional
        for key in always & set(found):
            found[key].optional = None
        for model in found.values():
            if model.frozen_by_class and model.optional is None:
                model.optional = f"its class `{model.frozen_by_class}` freezes every part it builds"
        unplaced = {key: call for key, call in unplaced.items() if key not in found}
        if unplaced and found:
            (ref, _), call = next(iter(unplaced.items()))
            raise NotConvertible(
                f"the optimizer at line {self.tree.line(call)} trains `{ref}`, but ddpify finds no statement after `{ref}` is built and "
                f"before it trains where a DDP wrap could go: left unwrapped it would train apart on every rank beside "
                f"{', '.join(f'`{m.ref}`' for m in found.values())}; wrap it by hand (`{ref} = DDP({ref})` once it is on its device), then convert"
            )
        if not found:
            for model in self._models_handed_an_optimizer():
                self._judge_unused_parameters(model)
                found[(model.ref, model.function)] = model
        for model in found.values():
            self._check_built_again(model)
        self._check_held_and_trained_here(list(found.values()))
        return list(found.values())

    def _check_held_and_trained_here(self, models: list[TrainedModel]) -> None:
        """`trainer = Trainer(model, loader)` wraps `self.model` in its `__init__`, and the caller
        trains `model` itself too (`trainer.optimizer = SGD(model.parameters())` after a layer is
        replaced): two wraps, one holding the other (DDP inside DDP), and a rewrap the trainer
        never sees. Refused with the names until one wrap can serve both."""
        for held in models:
            for kept in self.program.kept_by_init(held.function, held.ref):
                twin = next((m for m in models if m is not held and m.function is kept.caller and m.ref == dotted(kept.argument)), None)
                if twin is not None:
                    raise NotConvertible(
                        f"`{twin.ref}` is trained both through `{code(kept.call.func)}` (line {self.tree.line(kept.call)}), which keeps it as "
                        f"`{held.ref}` and would wrap it there, and by an optimizer of its own here: one DDP wrap would hold the other; "
                        f"train it through one of them (or wrap it once, by hand, before `{code(kept.call.func)}` is built)"
                    )

    def _builds_optimizer_of_another(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`trainer.reset_optimizer(lr)`: a same-file method that builds an optimizer over what its
        object holds (`self.model.parameters()`), not over its own parameters: the object is no
        model (found through the optimizer inside), unlike `model.configure_optimizers(...)`."""
        target = self.program.callee(call, function)
        made = [c for c in self.program.calls_in(target[0]) if self._is_optimizer_call(c) and c.args] if target is not None else []
        return bool(made) and all("self" not in self._parameter_owners(c.args[0].value, target[0]) for c in made)  # type: ignore[index]

    def _check_built_again(self, model: TrainedModel) -> None:
        """`model = make_model()` trained in a search, then `model = make_model()` again for the
        real training, each with an optimizer of its own: ddpify wraps one model per name and
        function, so the other one would train outside DDP (every rank apart). Refused."""
        if model.element is not None or "." in model.ref:
            return
        builds = [
            value for value, index in self.program.assignments(model.function, model.ref)
            if index is None and type(value) is cst.Call and model.ref not in {n.value for n in self.tree.walk(value) if type(n) is cst.Name}
        ]  # fmt: skip
        optimizers = [
            call for call in self.program.calls_in(model.function)
            if self._is_optimizer_call(call) and call.args and model.ref in self._parameter_owners(call.args[0].value, model.function)
        ]  # fmt: skip
        if len(builds) < 2 or len(optimizers) < 2:
            return
        wrapped = self.tree.block(model.anchor)
        other = next((b for b in builds if not self.tree.inside(b, wrapped)), None)
        if other is None:
            return  # every build is in the block the wrap goes in
        trained = next((o for o in optimizers if self.tree.order(o) > self.tree.order(other)), optimizers[-1])
        raise NotConvertible(
            f"`{model.ref}` is built again (line {self.tree.line(other)}) and trained by another optimizer (line {self.tree.line(trained)}) "
            f"apart from the one ddpify would wrap (line {self.tree.line(model.anchor)}): ddpify wraps one model per name and function, "
            "so the other training would skip DDP and every rank would train its own; give the second model a name of its own, "
            "or train each in a function of its own"
        )

    def _made_only_if(self, call: cst.Call) -> str | None:
        """`Adam(...) if fine_tune else None`: the condition under which the optimizer exists."""
        node: cst.CSTNode = call
        parent = self.tree.parent(node)
        if isinstance(parent, cst.IfExp):
            other = parent.orelse if parent.body is node else parent.body
            if isinstance(other, cst.Name) and other.value == "None":
                test = code(parent.test)
                return test if parent.body is node else f"not ({test})"
        return None

    def _model_lists(self, call: cst.Call, owners: list[str]) -> list[TrainedModel]:
        """`[Adam(net.parameters()) for net in nets]`: the optimizer's model is an element of `nets`."""
        found = []
        for parent in self.tree.ancestors(call):
            if isinstance(parent, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
                comp = parent.for_in
                element, listed = dotted(comp.target), dotted(comp.iter)
                if element in owners and listed is not None and "." not in listed:
                    found.append(TrainedModel(listed, None, call, False, element=element))  # type: ignore[arg-type]
        return found

    def _self_optimizer_owners(self, call: cst.Call, function: cst.FunctionDef | None) -> list[str]:
        """`Adam(self.parameters())` in a module's method: the model that method is called on, when
        the method returns the optimizer (`model.configure_optimizers()`); refused when the module
        steps it itself, since DDP can only wrap a module from outside."""
        cls = self.program.owner_class(function) if function is not None else None
        returned = function is not None and any(self.tree.inside(call, r) or self._flows_into(call, r, function) for r in self.program.returns(function))
        if cls is None or not returned:
            raise NotConvertible(
                f"the optimizer at line {self.tree.line(call)} updates the parameters of the module that creates it "
                f"(`{code(call.func)}(self.parameters())`{f' in `{cls.name.value}`' if cls else ''}), which trains itself: "
                "DDP can only wrap a module from outside; create the optimizer where the model is built and train "
                "the model through its forward"
            )
        owners = []
        for site, caller in self.program.call_sites(function):  # type: ignore[arg-type]
            if isinstance(site.func, cst.Attribute) and (ref := dotted(site.func.value)) is not None:
                owners.append(".".join(ref.split(".")[:2] if ref.startswith("self.") else ref.split(".")[:1]))
        return owners

    def _flows_into(self, call: cst.Call, value: cst.BaseExpression, function: cst.FunctionDef) -> bool:
        """Whether `value` is a name assigned from `call` in `function` (`opt = Adam(...); return opt`)."""
        name = dotted(value)
        return name is not None and any(self.tree.inside(call, v) for v, _ in self.program.assignments(function, name))

    def _models_handed_an_optimizer(self) -> list[TrainedModel]:
        """A Trainer handed its optimizer by another module steps `self.optimizer` here: the models
        are what the training forward calls (`self.model(x)`) on the way to backward()."""
        found = []
        for call in self.tree.calls():
            if not is_backward(call):
                continue
            function = self.tree.function(call)
            for forward in self.program.calls_in(function):
                ref = dotted(forward.func)
                if ref is None or ref == "self" or not self._feeds_backward(forward, function):
                    continue
                if self.program.callee(forward, function) is not None or self.tree.qname(forward.func):
                    continue  # a function of this file, or torch / an imported function
                if any(word in ref.lower() for word in ("loss", "criterion", "metric")):
                    continue
                if any(
                    type(made := unchained(o.node)) is cst.Call and "loss" in ((self.tree.qname(made.func) or dotted(made.func) or "").rsplit(".", 1)[-1]).lower()
                    for o in self.program.origins(forward.func, function)
                ):
                    continue  # `crit = nn.CrossEntropyLoss(...)`, a loss however it is named (helper corpus BR, repro 01)
                if any(type(o.node) is cst.Call and (cls := self.program.instance_of(o.node, o.function)) is not None and self._builds_no_parameters(cls)
                       for o in self.program.origins(forward.func, function)):
                    continue  # `crit = SoftTargetCrossEntropy()`, a module of this file with nothing to train (helper corpus BS, repro 01)
                for model_ref, model_function in self._definition(ref, function):
                    model = self._trained_model(model_ref, model_function)
                    if model is not None and all(m.ref != model.ref for m in found):
                        found.append(model)
        return found

    # --- parameters a step may leave without gradients --------------------------------

    def _judge_unused_parameters(self, model: TrainedModel) -> None:
        values = self._built_from(model)
        if model.element is not None:  # a list of models: its elements
            values = [el.value for v in values if isinstance(v, (cst.List, cst.Tuple)) for el in v.elements]
        self._judge_batch_norm(model, values)
        classes = set()
        for v in values:
            chosen = self._registry_classes(unchained(v), model.function)
            classes |= set(chosen) if chosen else {self._model_class_of_value(v, model.function)}
        if not classes or None in classes:
            model.class_name = next((name for v in values if (name := self._constructor_name(v, model.function))), None)
            model.unused_parameters = None
            return
        # a model chosen among several same-file classes (`if args.type == ...`): any of them may skip
        for cls in classes:
            for part in self._parts(cls):  # type: ignore[arg-type]
                self._warn_buffer_queues(model, part)
                self._warn_data_init(model, part)
                self._refuse_embeddings(part)
        reasons = [
            "" if (reason := self._forward_may_skip(cls)).endswith(SEPARATE_OUTPUTS) and self._reads_every_output(model, cls) else reason
            for cls in sorted(classes, key=self.tree.line)  # type: ignore[arg-type]
        ]
        model.unused_parameters = next((reason for reason in reasons if reason), "")
        if model.unused_parameters:
            self._refuse_dataclass_outputs(classes)  # type: ignore[arg-type]
            read_apart = next(((cls, names[0]) for cls in classes if (names := self._loss_only.get(cls))), None)  # type: ignore[arg-type]
            if read_apart is not None:  # helper corpus CS, repro 01 and script 03
                raise NotConvertible(
                    f"{model.unused_parameters}, so DDP needs find_unused_parameters=True, and the training reads the parameter "
                    f"`{read_apart[1]}` of `{read_apart[0].name.value}` outside the forward (in the loss): with that flag DDP marks it "
                    "ready when the forward ends and its gradient then comes a second time (\"marked ready twice\"), without it DDP "
                    f"waits for the unused ones; read `{read_apart[1]}` inside the forward (or keep it outside the model), then convert"
                )
        model.reentrant = next((found for cls in classes for part in self._parts(cls) if (found := self._reentrant_checkpoint(part))), "")  # type: ignore[arg-type]
        frozen = [cls for cls in classes if self._freezes_all_it_builds(cls)]  # type: ignore[arg-type]
        if frozen and model.optional is None:
            model.frozen_by_class = frozen[0].name.value  # type: ignore[union-attr]
        if model.reentrant and model.unused_parameters and not (model.unused_parameters.endswith(SEPARATE_OUTPUTS) or " does not use " in model.unused_parameters):
            raise NotConvertible(
                f"{model.reentrant} is reentrant activation checkpointing, and {model.unused_parameters}: DDP supports unused parameters "
                "under reentrant checkpointing only when every step leaves the same ones unused (static_graph=True); pass "
                "use_reentrant=False to checkpoint, then convert"
            )

    def _freezes_all_it_builds(self, cls: cst.ClassDef) -> bool:
        """Every module `cls.__init__` builds has its parameters frozen there (`for p in
        self.features.parameters(): p.requires_grad = False`): a perceptual loss around a frozen
        feature network, which an optimizer may still list (`filter(lambda p: p.requires_grad,
        chain(model.parameters(), criterion.parameters()))`) but which has nothing to train."""
        init = self.program.class_methods(cls).get("__init__")
        if init is None:
            return False
        switches = [w for w in self.program.fact(GradSwitches).all if not w.on and not w.partial and self.tree.inside(w.node, init)]
        frozen = {dotted(unchained(w.module)) for w in switches}
        if "self" in frozen:
            return True
        built = [
            target for node in self.program.scope_nodes(init)
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.value) is cst.Call
            and (target := dotted(node.targets[0].target)) is not None and target.startswith("self.") and target.count(".") == 1
            and not self.tree.is_call_to(node.value, {"torch.tensor", "torch.zeros", "torch.ones", "torch.randn", "torch.empty", "torch.arange"})
        ]  # fmt: skip
        return bool(built) and all(target in frozen for target in built)

    def _no_grad_at_times(self, item: cst.BaseExpression, with_node: cst.With) -> bool:
        """A context that disables gradients on some calls only: `torch.no_grad()` inside an `if`,
        or chosen by a conditional expression, also through a name bound to one."""
        method = self.tree.function(with_node)
        if self.tree.disables_grad(item):
            return any(type(a) is cst.If for a in self.tree.ancestors(with_node) if self.tree.inside(a, method))  # type: ignore[arg-type]
        values = [item] if type(item) is cst.IfExp else [v for v, i in self.program.assignments(method, item.value) if i is None] if type(item) is cst.Name else []
        return any(type(v) is cst.IfExp and (self.tree.disables_grad(v.body) or self.tree.disables_grad(v.orelse)) for v in values)

    def _builds_no_parameters(self, cls: cst.ClassDef) -> bool:
        """A torch.nn.Module of this file that builds nothing with parameters: no `__init__`, or
        one keeping only numbers, names and parameter-free torch.nn modules (`self.act = nn.ReLU()`).
        Anything else it builds (a layer, a Parameter, a call this file cannot follow) counts."""
        if not any(self.tree.qname(b.value) == "torch.nn.Module" for b in cls.bases):
            return False
        init = self.program.methods.get(cls, {}).get("__init__")
        handed = {p.name.value for p in init.params.params[1:] if p.default is None} if init is not None else set()  # a module may come in (`MultiCropWrapper(backbone, head)`)
        for node in self.program.scope_nodes(init) if init is not None else ():
            if type(node) is cst.Name and node.value in handed and type(self.tree.parent(node)) is not cst.Param:
                return False
            if type(node) is not cst.Call or dotted(node.func) in ("super", "self.register_buffer") or code(node.func) == "super().__init__":
                continue
            name = self.tree.qname(node.func) or ""
            if not (name.startswith("torch.nn.") and name.rsplit(".", 1)[-1] in PARAMETER_FREE) and name not in ("float", "int", "bool", "str"):
                return False
        return True

    def _reentrant_checkpoint(self, cls: cst.ClassDef) -> str:
        """`checkpoint(self.block, h)` or `checkpoint(..., use_reentrant=True)` in a method of `cls`:
        the reentrant implementation (still the default when the keyword is left out)."""
        for method in self.program.class_methods(cls).values():
            for call in self.program.calls_in(method):
                if self.tree.qname(call.func) not in CHECKPOINTS:
                    continue
                reentrant = s.arg(call, None, "use_reentrant")
                if reentrant is None or code(reentrant.value) == "True":
                    return f"`{code(call.func)}(...)` (line {self.tree.line(call)})"
        return ""

    def _parts(self, cls: cst.ClassDef, depth: int = 3) -> list[cst.ClassDef]:
        """`cls` and the same-file classes its `__init__` builds (`self.vq = Quantize(...)`), in turn."""
        found = [cls]
        init = self.program.class_methods(cls).get("__init__")
        for call in self.program.calls_in(init) if init is not None and depth > 0 else ():
            part = self.program.classes.get(call.func.value) if type(call.func) is cst.Name else None
            if part is not None and part is not cls:
                found += [p for p in self._parts(part, depth - 1) if p not in found]
        return found

    def _warn_data_init(self, model: TrainedModel, cls: cst.ClassDef) -> None:
        """Glow's ActNorm: `if not self.initialized:` in forward, then `self.loc.copy_(-x.mean(0))`:
        parameters set from the first batch each rank sees, after the wrap broadcast rank 0's
        weights, so the replicas start apart and stay apart (helper corpus BI, repro 01, the GPU
        run's bi_01). Warned about: one forward before the wrap initializes them where the wrap
        then broadcasts rank 0's."""
        forward = self.program.class_methods(cls).get("forward")
        if forward is None:
            return
        inputs = set(self.program.param_names(forward)) - {"self"}
        for node in self.program.scope_nodes(forward):
            if type(node) is not cst.If or "self." not in code(node.test) or "self.training" in code(node.test):
                continue
            for call in self.tree.calls(node.body):
                found = s.method_call(call)
                if found is None or found[1] not in ("copy_", "fill_", "normal_", "uniform_") or not (dotted(found[0]) or "").startswith("self."):
                    continue
                if any(type(n) is cst.Name and n.value in inputs for a in call.args for n in self.tree.walk(a.value)):
                    self.warnings.append((call, (
                        f"`{code(found[0])}` is set from the first batch `{cls.name.value}` sees (a data-dependent init): each rank sets it "
                        f"from its own shard after the DDP wrap broadcast rank 0's weights, so the replicas start apart; run one forward of "
                        f"`{model.ref}` on a batch before the wrap, so that the wrap broadcasts rank 0's initialized values"
                    )))
                    return

    def _warn_loss_buffers(self, models: list[TrainedModel]) -> None:
        """A same-file module that no optimizer trains (a loss: DINO's `DINOLoss`) with a buffer
        its methods update from the batch (`self.center = self.center * m + t.mean(0) * (1 - m)`):
        nothing synchronizes it, so each rank's targets drift apart on its own shard and the
        checkpoint keeps rank 0's (helper corpus CC, repro 01). Warned about: the all_reduce of the
        batch statistic before the update is the class's own change to make."""
        trained = {id(part) for m in models for cls in self._model_classes(m) for part in self._parts(cls)}
        built = {c.func.value for c in self.tree.calls() if type(c.func) is cst.Name}
        for cls in self.program.classes.values():
            if id(cls) in trained or cls.name.value not in built or "forward" not in self.program.class_methods(cls):
                continue
            forward = self.program.class_methods(cls)["forward"]
            # what its forward runs: the forward, and the methods it calls on `self` (DINO's `update_center`); not an
            # EMA copy's `update(model)`, which follows parameters every rank shares
            ran = {"forward"} | {c.func.attr.value for c in self.program.calls_in(forward) if type(c.func) is cst.Attribute and dotted(c.func.value) == "self"}
            methods = {n: m for n, m in self.program.class_methods(cls).items() if n in ran}
            buffers = self._registered_buffers(cls)
            for name, method in methods.items():
                if not buffers:
                    continue
                inputs = set(self.program.param_names(method)) - {"self"}
                for node in self.program.scope_nodes(method):  # `batch_center = teacher_output.sum(0) / n`: from the batch too
                    if type(node) is cst.Assign and any(type(n) is cst.Name and n.value in inputs for n in self.tree.walk(node.value)):
                        inputs |= {n for t in node.targets for n in self.program.names_in(t.target)}
                written = [
                    node for node in self.program.scope_nodes(method)
                    if (type(node) is cst.Assign and any((dotted(t.target) or "").removeprefix("self.") in buffers for t in node.targets)
                        and any(type(n) is cst.Name and n.value in inputs for n in self.tree.walk(node.value)))
                    or (type(node) is cst.AugAssign and (dotted(node.target) or "").removeprefix("self.") in buffers
                        and any(type(n) is cst.Name and n.value in inputs for n in self.tree.walk(node.value)))
                    or (type(node) is cst.Call and (found := s.method_call(node)) is not None and found[1].endswith("_") and not found[1].startswith(("_", "index_", "scatter", "masked"))
                        and (dotted(found[0]) or "").removeprefix("self.") in buffers
                        and any(type(n) is cst.Name and n.value in inputs for a in node.args for n in self.tree.walk(a.value)))
                ]  # fmt: skip  # `self.center = ...`, `self.counts += ...`, `self.delta.lerp_(...)` (helper corpus CE, repro 05)
                if written:
                    first = written[0]
                    target = code(first.targets[0].target if type(first) is cst.Assign else first.target if type(first) is cst.AugAssign else first.func.value)  # type: ignore[union-attr]
                    self.warnings.append((first, (
                        f"`{target}` is updated from this rank's batch in `{cls.name.value}`, which no optimizer trains and DDP does not "
                        "wrap: each rank keeps its own, so what it computes drifts apart across ranks (and rank 0's is saved); "
                        "all_reduce the batch statistic over ranks (divided by the world size) before the update"
                    )))
                    break

    def _registered_buffers(self, cls: cst.ClassDef) -> set[str]:
        """The names a class's methods give `self.register_buffer(...)`."""
        return {
            name for method in self.program.class_methods(cls).values() for c in self.program.calls_in(method)
            if dotted(c.func) == "self.register_buffer" and c.args and (name := string_value(c.args[0].value)) is not None
        }  # fmt: skip

    def _model_classes(self, model: TrainedModel) -> list[cst.ClassDef]:
        """The same-file classes the model may be built from."""
        found = []
        for value in self._built_from(model):
            chosen = self._registry_classes(unchained(value), model.function)
            found += chosen or [c for c in [self._model_class_of_value(value, model.function)] if c is not None]
        return found

    def _warn_buffer_queues(self, model: TrainedModel, cls: cst.ClassDef) -> None:
        """A buffer the model writes outside `__init__` with more than counters (MoCo's queue of
        keys: `self.queue[:, ptr:ptr + n] = k.T`): DDP copies rank 0's buffers to every rank before
        each forward, so what the other ranks wrote is lost. Warned about: gathering the keys
        from every rank before they go in is the model's own change to make."""
        methods = self.program.class_methods(cls)
        buffers = self._registered_buffers(cls)
        for name, method in methods.items():
            if name == "__init__" or self._called_only_before_the_wrap(model, name, methods):
                continue
            for node in self.program.scope_nodes(method):
                if type(node) is cst.Call and (changed := self._buffer_changed_in_place(node, buffers)) is not None:
                    # `self.running.mul_(0.9).add_(0.1 * x.mean(0))`, `self.embed.copy_(...)` (VQ-VAE's EMA codebook)
                    self.warnings.append((node, (
                        f"`{changed}` changes a buffer of `{cls.name.value}` in place with this rank's data: DDP copies rank 0's "
                        f"buffers to every rank before each forward (broadcast_buffers), so what the other ranks wrote is lost; "
                        "reduce what goes in over ranks first (all_reduce) and write the same on each"
                    )))
                    return
                if type(node) is cst.AugAssign:
                    targets = [node.target]
                elif type(node) is cst.Assign:
                    targets = [t.target for t in node.targets]
                else:
                    continue
                for target in (cst.AssignTarget(t) for t in targets):
                    written = target.target.value if type(target.target) is cst.Subscript else target.target
                    buffer = (dotted(written) or "").removeprefix("self.")
                    if buffer in buffers and type(target.target) is cst.Subscript and type(target.target.slice[0].slice) is cst.Index and isinstance(target.target.slice[0].slice.value, cst.Integer):
                        continue  # `self.queue_ptr[0] = ...`: a counter, the same on every rank
                    if buffer in buffers and any(type(n) is cst.Name and n.value not in ("self",) for n in self.tree.walk(node.value)):
                        self.warnings.append((node, (
                            f"`{code(target.target)}` writes this rank's data into a buffer of `{cls.name.value}`: DDP copies rank 0's "
                            f"buffers to every rank before each forward (broadcast_buffers), so what the other ranks wrote is lost; "
                            "gather it from every rank first (all_gather) and write the same on each"
                        )))
                        return

    def _called_only_before_the_wrap(self, model: TrainedModel, name: str, methods: dict[str, cst.FunctionDef]) -> bool:
        """`model.set_scaler(mu, sigma)` once before the wrap, and not from the forward (helper
        corpus CT, repro 05; CQ, D6): DDP broadcasts rank 0's buffers when it wraps, so what the
        method wrote is the same on every rank from then on."""
        forward = methods.get("forward")
        if forward is None or model.anchor is None or any(dotted(c.func) == f"self.{name}" for m in methods.values() for c in self.program.calls_in(m)):
            return False
        sites = [c for f in [None, *self.program.all_functions] for c in self.program.calls_in(f) if type(c.func) is cst.Attribute and c.func.attr.value == name]
        return bool(sites) and all(
            self.tree.function(c) is model.function and dotted(c.func.value) == model.ref and (self.tree.order(c) < self.tree.order(model.anchor) or self.tree.inside(c, model.anchor))
            and not self.tree.loops(c) for c in sites
        )  # fmt: skip

    def _buffer_changed_in_place(self, call: cst.Call, buffers: set[str]) -> str | None:
        """`self.running.mul_(0.9).add_(v)` (or `self.running.data.copy_(v)`) with `v` read from
        something other than the model itself: the buffer's spelling, or None."""
        found = s.method_call(call)
        if found is None or not found[1].endswith("_") or found[1].startswith("__"):
            return None
        root = found[0]
        while (inner := s.method_call(root)) is not None and inner[1].endswith("_"):
            root = inner[0]
        name = dotted(root) or ""
        buffer = name.removesuffix(".data").removeprefix("self.")
        if not name.startswith("self.") or buffer not in buffers:
            return None
        reads = [n for a in call.args for n in self.tree.walk(a.value) if type(n) is cst.Name and n.value not in ("self", "True", "False", "None")]
        return code(root) if reads else None

    def _reads_every_output(self, model: TrainedModel, cls: cst.ClassDef) -> bool:
        """`out = model(x)` then `out["logits"]` and `out["box"]`, every key forward returns, in
        every forward with gradients: no head is left out of the loss (the training code says so;
        DDP's extra graph walk each step is not needed)."""
        forward = self.program.class_methods(cls).get("forward")
        returned = [node.value for node in self.program.scope_nodes(forward) if type(node) is cst.Return] if forward is not None else []
        if returned and all(type(value) is cst.Tuple for value in returned):
            return self._unpacks_every_output(model, returned)  # type: ignore[arg-type]
        if not returned or not all(type(value) is cst.Dict for value in returned):
            return False
        keys = {string_value(el.key) for value in returned for el in value.elements if isinstance(el, cst.DictElement)}  # type: ignore[union-attr]
        if not keys or None in keys:
            return False
        forwards = [
            call for function in [None, *self.program.all_functions] for call in self.program.calls_in(function)
            if dotted(call.func) == model.ref and not self.tree.grad_disabled(call)
        ]
        for call in forwards:
            assign = self.tree.parent(call)
            if not (type(assign) is cst.Assign and len(assign.targets) == 1 and type(assign.targets[0].target) is cst.Name):
                return False
            name = assign.targets[0].target.value
            function = self.tree.function(call)
            sources = self._backward_sources(function)
            read = {  # read into what backward() runs on: a key read only for a log line leaves its head without a gradient
                string_value(node.slice[0].slice.value)  # type: ignore[union-attr]
                for node in self.program.scope_nodes(function)
                if type(node) is cst.Subscript and dotted(node.value) == name and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
                and any(id(n) in sources for n in (node, *self.tree.ancestors(node))) and not self._in_a_branch(node, call)
            }
            if not keys <= read:
                return False
        return bool(forwards)

    def _unpacks_every_output(self, model: TrainedModel, returned: list[cst.Tuple]) -> bool:
        """`return self.user_tower(u), self.item_tower(i)`, and every forward with gradients,
        through any name the model is handed to (`qu, ki = self.model(u, i)` in a Trainer), unpacked
        into as many names, each of which the loss reads outside a branch (a two-tower model's
        `qu @ ki.t()`: helper corpus CU, script 07, and CL 06): no output is left out of the loss."""
        sizes = {len(value.elements) for value in returned}
        if len(sizes) != 1 or any(type(e) is cst.StarredElement for value in returned for e in value.elements):
            return False
        refs = self.program.propagate([(model.ref, model.function)])
        forwards = [
            call for function, names in refs.items() for call in self.program.calls_in(function)
            if dotted(call.func) in names and not self.tree.grad_disabled(call)
        ]
        for call in forwards:
            assign = self.tree.parent(call)
            target = assign.targets[0].target if type(assign) is cst.Assign and len(assign.targets) == 1 else None
            if type(target) not in (cst.Tuple, cst.List) or len(target.elements) not in sizes:  # type: ignore[union-attr]
                return False
            function = self.tree.function(call)
            sources = self._backward_sources(function)
            for element in target.elements:  # type: ignore[union-attr]
                if type(element.value) is not cst.Name:
                    return False
                if not any(
                    type(node) is cst.Name and node.value == element.value.value and node is not element.value and self.tree.order(node) > self.tree.order(call)
                    and any(id(n) in sources for n in (node, *self.tree.ancestors(node))) and not self._in_a_branch(node, call)
                    for node in self.program.scope_nodes(function)
                ):
                    return False
        return bool(forwards)

    def _in_a_branch(self, node: cst.CSTNode, forward: cst.Call) -> bool:
        """`if epoch == 0: loss = loss + aux_weight * ce(out["aux"], y)`: read in a step that takes
        the branch only, inside the loop of the forward: a step without it leaves the head unused."""
        loops = self.tree.loops(forward)
        scope = loops[0] if loops else self.tree.function(forward)
        for parent in self.tree.ancestors(node):
            if parent is scope:
                return False
            if type(parent) in (cst.If, cst.IfExp):
                return True
        return False

    def _built_from(self, model: TrainedModel) -> list[cst.BaseExpression]:
        """What the wrapped model is built from: the values assigned to it up to the wrap, less
        moves of itself (`model = model.to(device)`). What it is rebound to after the wrap
        (`model = train_model(model, ...)` returns the same object) is no new model."""
        wrapped_at = self.tree.order(model.anchor) if model.anchor is not None and model.element is None else None
        values = []
        for value, index in self.program.assignments(model.function, model.ref):
            if wrapped_at is not None and self.tree.order(value) > wrapped_at and not self.tree.inside(value, model.anchor):
                continue
            value = self.program.element(value, index)  # `netG, netD = Generator(), Discriminator()`: its own element
            inner = unchained(value)
            if dotted(inner) == model.ref and inner is not value:
                continue
            if type(inner) is cst.Call and self.tree.qname(inner.func) in s.DATA_PARALLEL and inner.args and dotted(inner.args[0].value) == model.ref:
                continue  # `model = nn.DataParallel(model)`: the same model (helper corpus AS, repro 03: its find_unused was lost)
            values.append(value)
        if not values and model.function is not None and model.ref in self.program.all_param_names(model.function):
            # a parameter the function wraps itself (`_sets_weights`): what its callers hand it
            for site, caller in self.program.call_sites(model.function):
                argument = self.program.argument_for(site, model.function, model.ref)
                name = dotted(argument) if argument is not None else None
                if name is not None and "." not in name:
                    values += [self.program.element(v, i) for v, i in self.program.assignments(caller, name) if self.tree.order(v) < self.tree.order(site)]
        return values

    def _judge_batch_norm(self, model: TrainedModel, values: list[cst.CSTNode]) -> None:
        """The BatchNorm layers the model's source builds, through same-file classes and functions."""
        found: list[str] = []
        custom: list[str] = []
        known = bool(values)
        seen: set[cst.CSTNode] = set()
        work = [o.node for v in values for o in self.program.origins(v, model.function)]  # type: ignore[arg-type]
        for value in work:
            value = unchained(value)  # `model.to(device)`: what `model` is built from is judged on its own
            if isinstance(value, cst.Call) and not self._builds_same_file(value):
                name = self._constructor_name(value) or ""
                if not (name.startswith("torch.nn.") or BATCH_NORM_MODELS.match(name)):
                    known = False  # `Net()` from another module, `timm.create_model(...)`, `torchvision.models.vit_b_16()`
        while work:
            node = work.pop()
            if node in seen:
                continue
            seen.add(node)
            for call in self.tree.calls(node):
                name = self.tree.qname(call.func) or ""
                if name in BATCH_NORMS or BATCH_NORM_MODELS.match(name):
                    found.append(code(call.func))
                elif isinstance(call.func, cst.Name) and call.func.value in self.program.classes:
                    cls = self.program.classes[call.func.value]
                    bases = [self.tree.qname(b.value) or dotted(b.value) or "" for b in cls.bases]
                    if any(b in BATCH_NORMS for b in bases):
                        found.append(cls.name.value)
                        continue
                    builds = [self.tree.qname(c.func) for c in self.tree.calls(cls)]
                    if any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "register_buffer" for c in self.tree.calls(cls)):
                        model.registers_buffers = True
                    if NORM_CLASS.search(cls.name.value) and not any(b in BATCH_NORMS for b in builds):
                        custom.append(cls.name.value)  # its own statistics: convert_sync_batchnorm leaves it as it is
                    work.append(cls)
                    work += [self.program.classes[b] for b in bases if b in self.program.classes]
                elif isinstance(call.func, cst.Name) and call.func.value in self.program.functions:
                    work.append(self.program.functions[call.func.value])
        model.batch_norms = list(dict.fromkeys(found)) if found or known else None
        model.custom_norms = list(dict.fromkeys(custom))

    def _judge_repeated_forwards(self, models: list[TrainedModel], loops: list[TrainLoop]) -> None:
        for model in models:
            if model.element is None and (model.batch_norms is None or model.batch_norms or model.registers_buffers):
                model.repeated_forward = self._repeated_forward(model, loops)  # a model with no buffers has none to broadcast

    def _repeated_forward(self, model: TrainedModel, loops: list[TrainLoop]) -> str:
        """`d_real = D(real); d_fake = D(fake.detach()); (loss(d_real) + loss(d_fake)).backward()`:
        the model runs forward again before the backward() of an earlier forward with gradients,
        in one pass of a training step (its loop body and the same-file functions it calls;
        forwards in exclusive branches of the step are one forward)."""
        refs = self.program.propagate([(model.ref, model.function)])
        for loop in loops:
            step = loop.loop.body
            pending: list[cst.Call] = []  # forwards with gradients whose backward() has not run yet
            again: tuple[cst.Call, cst.Call] | None = None  # (a pending forward, a forward after it)
            for kind, call in self._step_events(step, self.tree.function(loop.loop), refs, False, set()):
                if kind == "backward":
                    if again is not None:  # the first forward's graph meets the buffers the second one overwrote
                        first, second = (self.tree.line(c) for c in again)
                        if first == second:
                            return f"`{model.ref}` runs forward twice at line {first} before backward()"
                        return f"`{model.ref}` runs forward at line {second} before the backward() of its forward at line {first}"
                    pending = []
                    continue
                earlier = next((p for p in pending if not self.tree.exclusive(p, call, within=step)), None)
                if earlier is not None and again is None:
                    again = (earlier, call)
                if kind == "forward":
                    pending.append(call)
        return ""

    def _step_events(
        self, root: cst.CSTNode, function: cst.FunctionDef | None, refs: dict, grad_off: bool, seen: set
    ) -> list[tuple[str, cst.Call]]:
        """The model's forwards ("forward", or "nograd" with gradients off) and the backward()
        calls under `root`, in the order they run (a call ends after the calls in its arguments),
        with those of the same-file functions called there in place of the call."""
        names = refs.get(function, set())
        events: list[tuple[int, int, str, cst.Call]] = []
        for call in self.tree.calls(root):
            at = self.tree.end_order(call)
            if dotted(call.func) in names:
                events.append((at, 0, "nograd" if grad_off or self.tree.grad_disabled(call) else "forward", call))
            elif is_backward(call):
                events.append((at, 0, "backward", call))
            elif (target := self.program.callee(call, function)) is not None and target[0] not in seen:
                off = grad_off or self.tree.grad_disabled(call)
                inner = self._step_events(target[0], target[0], refs, off, seen | {target[0]})
                events += [(at, i + 1, kind, c) for i, (kind, c) in enumerate(inner)]
        return [(kind, call) for _, _, kind, call in sorted(events, key=lambda e: (e[0], e[1]))]

    def _builds_same_file(self, value: cst.Call) -> bool:
        return isinstance(value.func, cst.Name) and (value.func.value in self.program.classes or value.func.value in self.program.functions)

    def _constructor_name(self, value: cst.BaseExpression, function: cst.FunctionDef | None = None, depth: int = 2) -> str | None:
        """The qualified name a model is built by: `torchvision.models.resnet18(...)`; through a
        same-file factory (`def mlp(h): return nn.Sequential(...)`) or a helper that returns (a move
        of) its argument (`to_device(mlp(64), device)`), what they return."""
        value = unchained(value)
        if not isinstance(value, cst.Call):
            return None
        name = self.tree.qname(value.func)
        returned = self.program.helper_returns(value, function) if name is None and depth else None
        if returned is None:
            return name
        names = {self._constructor_name(o.node, o.function, depth - 1) for o in returned}
        return names.pop() if len(names) == 1 else None

    def _forward_may_skip(self, cls: cst.ClassDef) -> str:
        """Why a step may leave some of the model's parameters without a gradient, from its source."""
        methods = self.program.class_methods(cls)
        forward = methods.get("forward")
        if forward is None:
            return ""
        used, reachable = set(), [forward]
        seen: set[cst.FunctionDef] = set()
        while reachable:
            method = reachable.pop()
            if method in seen:
                continue
            seen.add(method)
            for node in self.program.scope_nodes(method):
                if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
                    used.add(node.attr.value)
                    if node.attr.value in methods:
                        reachable.append(methods[node.attr.value])
        init = methods.get("__init__")
        layers = []
        for node in self.program.scope_nodes(init) if init is not None else ():
            if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
                for target in node.targets:
                    name = dotted(target.target)
                    if name and name.startswith("self.") and name.count(".") == 1 and self._builds_layer(node.value) and self._has_parameters(node.value):
                        layers.append(name[5:])
        # a parameter the training reads itself, outside the forward (`model.log_tie.exp()` in the loss: helper corpus CQ,
        # repro 01): it gets its gradient from the loss at every step, and find_unused_parameters would mark it ready twice
        read_outside = {
            n.attr.value for n in self.tree.of_type(cst.Attribute)
            if not self.tree.inside(n, cls) and type(n.value) is cst.Name and n.value.value != "self"
        }
        self._loss_only[cls] = [name for name in layers if name not in used and name in read_outside and self._made_parameter(cls, name)]
        unused = [name for name in layers if name not in used and name not in self._loss_only[cls]]
        if unused:
            return f"`{cls.name.value}.forward` does not use `{unused[0]}`"
        for method in sorted(seen, key=self.tree.order):
            dropped = self._dropped_output(method)
            if dropped:
                return f"`{cls.name.value}.forward` {dropped}"
        # a Hamiltonian network's forward returning dH/dx (helper corpus CJ, repro 03): what it returns is made by the
        # gradient's own graph, which the parameters that do not shape it (the last layer's bias) are not in
        grad = next((
            n for method in sorted(seen, key=self.tree.order) for n in self.program.scope_nodes(method) if type(n) is cst.Call and (
                _input_gradient(self.tree, n)  # also in a same-file helper the forward calls (`-gradient(e, x)`: helper corpus CM, repro 01)
                or ((t := self.program.callee(n, method)) is not None and t[0] not in seen and self._returns_input_gradient(t[0]))
            )
        ), None)  # fmt: skip
        if grad is not None:
            made = _penalty_made(self.tree, grad) if _input_gradient(self.tree, grad) else f"`{code(grad.func)}(...)`, which returns `torch.autograd.grad(..., create_graph=True)`"
            return f"`{cls.name.value}.forward` returns a gradient of its own output ({made}, line {self.tree.line(grad)}), which the last layer's bias does not shape"
        # the forward and the methods it calls (`self.dispatch(x, top_i)` routing to experts)
        for node in [n for method in sorted(seen, key=self.tree.order) for n in self.program.scope_nodes(method)]:
            if isinstance(node, (cst.If, cst.While, cst.For, cst.IfExp)):
                iterated = self.program.unwrap_iterable(node.iter) if isinstance(node, cst.For) else None
                if (
                    isinstance(iterated, cst.Subscript) and (dotted(iterated.value) or "").startswith("self.") and not _whole_slice(iterated)
                    and not self._rest_indexed(iterated, self.tree.function(node))
                ):
                    return f"`{cls.name.value}.forward` runs only some of `{code(iterated.value)}` (line {self.tree.line(node)})"
                if isinstance(node, cst.For) and (dotted(iterated) or "").startswith("self."):
                    continue  # `for layer in self.layers`: every layer runs
                if isinstance(node, cst.For) and self.tree.is_builtin_call(node.iter, "range"):
                    some = self._range_of_some(node, cls, methods)
                    if some is not None:
                        return f"`{cls.name.value}.forward` runs only some of `{some}`, as many as `{code(node.iter)}` counts (line {self.tree.line(node)})"
                    continue  # `for i in range(self.steps)`: the same layers in every step of the loop
                if self._same_layers_either_way(node, set(layers)):
                    continue  # `data_parallel(self.main, x) if ... else self.main(x)`
                if self._calls_self(node) or (type(node) is cst.If and self._skips_layers(node)):
                    return f"`{cls.name.value}.forward` runs some layers only under a condition (line {self.tree.line(node)})"
        for node in [n for method in sorted(seen, key=self.tree.order) for n in self.program.scope_nodes(method)]:
            # `with torch.set_grad_enabled(not self.freeze_backbone): h = self.backbone(x)`: no gradient while frozen (helper corpus BR, repro 03)
            if type(node) is cst.With and any(
                type(item.item) is cst.Call and self.tree.qname(item.item.func) in s.SET_GRAD_ENABLED and item.item.args
                and code(item.item.args[0].value) not in ("True", "False", "self.training") for item in node.items
            ) and any((dotted(c.func) or "").startswith("self.") for c in self.tree.calls(node.body)):
                return f"`{cls.name.value}.forward` runs layers with gradients only as a flag says (line {self.tree.line(node)})"
            # `if self.frozen: with torch.no_grad(): f = self.backbone(x)` (helper corpus BS, repro 02), or
            # `ctx = torch.no_grad() if self.frozen else nullcontext()`, `with ctx:` (BW, repro 03)
            if type(node) is cst.With and any(self._no_grad_at_times(item.item, node) for item in node.items) and any(
                (dotted(c.func) or "")[5:] in layers for c in self.tree.calls(node.body)
            ):
                return f"`{cls.name.value}.forward` runs layers without gradients under a condition (line {self.tree.line(node)})"
        for method in sorted(seen, key=self.tree.order):  # `self.heads[task](z)`: one head, chosen by what the call is handed
            params = set(self.program.param_names(method))
            for call in self.program.calls_in(method):
                chooser = call.func
                if self.tree.is_builtin_call(chooser, "getattr") and len(chooser.args) >= 2 and code(chooser.args[0].value) == "self" and type(chooser.args[1].value) is not cst.SimpleString:  # type: ignore[union-attr]
                    return f"`{cls.name.value}.forward` runs a layer chosen by name as it runs, `{code(chooser)}` (line {self.tree.line(call)})"
                if type(chooser) is cst.Subscript and (dotted(chooser.value) or "").startswith("self.") and len(chooser.slice) == 1:
                    index = chooser.slice[0].slice
                    if type(index) is cst.Index and any(type(n) is cst.Name and n.value in params - {"self"} for n in self.tree.walk(index.value)):
                        return f"`{cls.name.value}.forward` runs one of `{code(chooser.value)}`, chosen by `{code(index.value)}` (line {self.tree.line(call)})"
                    if type(index) is cst.Index and self._chosen_from_data(index.value, method):  # `self.experts[int(scores.argmax())]`
                        return f"`{cls.name.value}.forward` runs one of `{code(chooser.value)}`, chosen by `{code(index.value)}` (line {self.tree.line(call)})"
                picked = self._picked_layer(chooser, method)
                if picked is not None:
                    return f"`{cls.name.value}.forward` runs one of {picked} (line {self.tree.line(call)})"
        for node in self.program.scope_nodes(forward):
            if isinstance(node, cst.Return) and (values := self._output_fields(node.value)) is not None and len(values) > 1:
                reached = [self._layers_behind(v, forward, methods, set()) for v in values]
                if not any(layers == set().union(*reached) for layers in reached):
                    return f"`{cls.name.value}.forward` returns outputs of separate layers{SEPARATE_OUTPUTS}"
            if isinstance(node, cst.Return) and (each := self._output_of_each(node.value)) is not None:
                return f"`{cls.name.value}.forward` returns an output of each of `{each}` (line {self.tree.line(node)}){SEPARATE_OUTPUTS}"
        return ""

    def _made_parameter(self, cls: cst.ClassDef, name: str) -> bool:
        """`self.log_tie = nn.Parameter(...)` in the class's `__init__`."""
        init = self.program.class_methods(cls).get("__init__")
        values = [v for v, i in self.program.assignments(init, f"self.{name}") if i is None] if init is not None else []
        return bool(values) and all(type(v) is cst.Call and self.tree.qname(v.func) in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") for v in values)

    def _output_of_each(self, value: cst.BaseExpression | None) -> str | None:
        """`{name: head(z) for name, head in self.heads.items()}` (or a list of `head(z)` over
        `self.heads`): an output of each layer of a container of the model's own, which a loss may
        use only some of (helper corpus CR, repro 01). The container, as spelled."""
        if type(value) not in (cst.DictComp, cst.ListComp) or value.for_in.inner_for_in is not None:  # type: ignore[union-attr]
            return None
        iterated = value.for_in.iter  # type: ignore[union-attr]
        found = s.method_call(iterated)
        container = found[0] if found is not None and found[1] in ("items", "values") else iterated
        element = value.value if type(value) is cst.DictComp else value.elt  # type: ignore[union-attr]
        called = unchained(element)
        if not (dotted(container) or "").startswith("self.") or type(called) is not cst.Call or type(called.func) is not cst.Name:
            return None
        return code(container) if called.func.value in self.program.names_in(value.for_in.target) else None  # type: ignore[union-attr]

    def _picked_layer(self, chooser: cst.BaseExpression, method: cst.FunctionDef) -> str | None:
        """A layer picked by value among several of the model's own (helper corpus AS, repro 02):
        `{"cls": self.cls_head, "reg": self.reg_head}[task](h)`, `[self.a, self.b][i](h)`, `(self.a
        if task == "cls" else self.b)(h)`, or a name bound to one of those in the method. The
        layers it may pick, as a report names them."""
        layers: list[str | None]
        if type(chooser) is cst.Name:  # `head = self.a if ... else self.b`, then `head(h)`
            chooser = self.program.bound_once(method, chooser.value)  # type: ignore[assignment]
            if chooser is None:
                return None
        if type(chooser) is cst.IfExp:
            layers = [dotted(chooser.body), dotted(chooser.orelse)]
        elif type(chooser) is cst.Subscript and len(chooser.slice) == 1:
            table = chooser.value
            if type(table) is cst.Name:  # `heads = {...}` in the method, then `heads[task](h)`
                table = self.program.bound_once(method, table.value) or table
            index = chooser.slice[0].slice
            if type(table) not in (cst.Dict, cst.List, cst.Tuple) or type(index) is not cst.Index or type(index.value) in (cst.SimpleString, cst.Integer):
                return None  # not a table of layers, or a constant index: always the same layer
            layers = [dotted(e.value) for e in table.elements]  # type: ignore[attr-defined]
        else:
            return None
        own = [name for name in layers if name is not None and name.startswith("self.") and name.count(".") == 1]
        if len(own) != len(layers) or len(set(own)) < 2:
            return None
        return ", ".join(f"`{name}`" for name in dict.fromkeys(own)) + ", picked as it runs"

    def _dropped_output(self, method: cst.FunctionDef) -> str:
        """What a forward computes with a layer and then drops: `z = self.aux(h)` never read,
        `h, _ = self.enc(x)`, or `h, pos = layer(h, pos)` in a loop over `self.layers` whose last
        `pos` nothing reads after it. The layers behind the dropped value get no gradient."""
        nodes = self.program.scope_nodes(method)
        layer_loops = {
            name.value: n for n in nodes
            if type(n) is cst.For and (name := _layer_target(n)) is not None and (dotted(self.program.unwrap_iterable(n.iter)) or "").startswith("self.")
        }
        # `for stack in self.stacks: for block in stack:`, a loop over the layers of each (helper corpus BS, repro 06)
        # (or `for block in stack.blocks:`, the blocks a Stack module holds: helper corpus BW, repro 01)
        outer = {name for name, n in layer_loops.items() if type(n.target) is cst.Name}
        layer_loops.update({
            name.value: n for n in nodes
            if type(n) is cst.For and (name := _layer_target(n)) is not None and (root := _attribute_root(n.iter)) is not None and root in outer
            and self.tree.inside(n, layer_loops[root])
        })
        targets = {id(n) for node in nodes if type(node) is cst.Assign for t in node.targets for n in self.tree.walk(t.target)}
        reads: dict[str, list[cst.Name]] = {}
        for n in nodes:
            if type(n) is cst.Name and id(n) not in targets:
                reads.setdefault(n.value, []).append(n)
        for node in nodes:
            if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.value) is not cst.Call:
                continue
            func = node.value.func
            layer = dotted(func) if (dotted(func) or "").startswith("self.") and (dotted(func) or "") != "self" else None
            loop = layer_loops.get(func.value) if type(func) is cst.Name else self._indexed_layer_loop(func, node)
            if layer is None and loop is None:
                continue
            target = node.targets[0].target
            names = [target] if type(target) is cst.Name else [e.value for e in target.elements] if type(target) is cst.Tuple else []
            held = loop.iter if loop is not None else func
            kept = None
            if type(held) is cst.Name and held.value in layer_loops:
                held = layer_loops[held.value].iter  # `stack` of `for stack in self.stacks:`
            elif type(held) is cst.Attribute and (root := _attribute_root(held)) in layer_loops:
                kept = held.attr.value  # `stack.blocks`: what the classes built in `self.stacks` keep in `self.blocks`
                held = layer_loops[root].iter  # type: ignore[index]
            separate = self._separate_outputs(held, method, kept) if len(names) > 1 else None
            if len(names) > 1 and not separate:
                continue  # `out, _ = self.lstm(x)`: every output comes from all of the layer's parameters
            line = self.tree.line(node)
            for index, name in enumerate(names):
                if type(name) is not cst.Name or (layer is None and loop is None and len(names) < 2) or (separate and index not in separate):
                    continue
                later = [r for r in reads.get(name.value, []) if self.tree.order(r) > self.tree.order(node) and not self.tree.inside(r, node)]
                if loop is not None:
                    after = [r for r in later if not self.tree.inside(r, loop) or self.tree.order(r) > self.tree.order(node)]
                    if not after and len(names) > 1:
                        return f"drops the last `{name.value}` that `{code(func)}` computes in its loop over `{code(loop.iter)}` (line {line})"
                    if after and len(names) > 1 and all(self.tree.inside(r, loop) for r in after) and self._carried_only(after, loop, reads):
                        # N-BEATS: `back, f = block(res)`, `res = res - back`, and `res` is read by no one after the loop
                        return f"drops what the last `{name.value}` that `{code(func)}` computes in its loop over `{code(loop.iter)}` goes into (line {line})"
                    key = self._carried_entry(after, loop, reads) if len(names) == 1 else None
                    if key is not None:
                        # `out = block(res)`, `res = res - out["backcast"]`: the same with a dict (helper corpus BM, repro 09)
                        return f"drops what the last `{name.value}{key}` that `{code(func)}` computes in its loop over `{code(loop.iter)}` goes into (line {line})"
                elif not later:
                    return f"drops `{name.value}`, an output of `{layer}` (line {line})"
        return ""

    def _indexed_layer_loop(self, func: cst.BaseExpression, node: cst.CSTNode) -> cst.For | None:
        """`self.blocks[i](res)` in `for i in range(len(self.blocks)):` (helper corpus BO, repro 05): a
        loop over the layers, indexed."""
        if type(func) is not cst.Subscript or not (dotted(func.value) or "").startswith("self.") or len(func.slice) != 1:
            return None
        index = func.slice[0].slice
        if type(index) is not cst.Index or type(index.value) is not cst.Name:
            return None
        for loop in self.tree.loops(node):
            if type(loop) is cst.For and type(loop.target) is cst.Name and loop.target.value == index.value.value:
                spelled = code(loop.iter).replace(" ", "")
                return loop if spelled == f"range(len({code(func.value)}))" else None
        return None

    def _carried_entry(self, uses: list[cst.Name], loop: cst.For, reads: dict[str, list[cst.Name]]) -> str | None:
        """The key of a layer's dict output (`out["backcast"]`) whose every use in the loop goes into
        a name carried to the next iteration only, while another key's does not: the last one's
        layers get no gradient."""
        by_key: dict[str, list[cst.Name]] = {}
        for use in uses:
            parent = self.tree.parent(use)
            if not self.tree.inside(use, loop):
                return None
            if type(parent) is cst.Attribute and parent.value is use:
                by_key.setdefault(f".{parent.attr.value}", []).append(use)  # `out.backcast` of a NamedTuple or dataclass (helper corpus BO, repro 04)
                continue
            if type(parent) is not cst.Subscript or parent.value is not use or len(parent.slice) != 1:
                return None
            index = parent.slice[0].slice
            if type(index) is not cst.Index or type(index.value) is not cst.SimpleString:
                return None
            by_key.setdefault(f"[{code(index.value)}]", []).append(use)
        if len(by_key) < 2:
            return None
        return next((key for key, found in by_key.items() if self._carried_only(found, loop, reads)), None)

    def _carried_only(self, uses: list[cst.Name], loop: cst.For, reads: dict[str, list[cst.Name]]) -> bool:
        """Each use of a layer's output in the loop goes into a name carried to the next
        iteration only (`res = res - back`): nothing after the loop reads that name."""
        for use in uses:
            statement = next((a for a in self.tree.ancestors(use) if type(a) is cst.Assign), None)
            if statement is None or len(statement.targets) != 1:
                return False
            target = statement.targets[0].target
            if type(target) is cst.Tuple and type(statement.value) is cst.Tuple and len(target.elements) == len(statement.value.elements):
                # `res, fc = res - b, fc + f`: the element the use goes into
                target = next((t.value for t, v in zip(target.elements, statement.value.elements) if self.tree.inside(use, v.value)), target)
            if type(target) is not cst.Name:
                return False
            carried = target.value
            if any(not self.tree.inside(r, loop) for r in reads.get(carried, [])):
                return False
        return True

    def _separate_outputs(self, held: cst.BaseExpression, method: cst.FunctionDef, kept: str | None = None) -> set[int]:
        """The positions of the outputs of `self.enc` (built as `self.enc = Enc(...)`, or held in
        `self.layers` as `Layer(d)`, a class of this file) that come from layers no other output
        comes from: `return self.a(x), self.b(x)`, not `return self.out(o), h` (h behind out).
        With `kept`, the layers those classes keep in `self.<kept>` (`stack.blocks`)."""
        held = self.program.unwrap_iterable(held)
        cls = self.program.owner_class(method)
        built = self._classes_built_in(cls, dotted(held))
        if kept is not None:
            built = [inner for outer in built for inner in self._classes_built_in(outer, f"self.{kept}")]
        if not built:
            return set()
        methods = self.program.class_methods(built[0])
        forward = methods.get("forward")
        values = next((v for n in self.program.scope_nodes(forward) if type(n) is cst.Return and (v := self._output_fields(n.value))), None) if forward else None
        if not values:
            return set()
        reached = [self._layers_behind(v, forward, methods, set()) for v in values]  # type: ignore[arg-type]
        return {i for i, layers in enumerate(reached) if layers - set().union(*(r for j, r in enumerate(reached) if j != i))}

    def _classes_built_in(self, cls: cst.ClassDef | None, name: str | None) -> list[cst.ClassDef]:
        """The same-file classes `cls.__init__` builds into `name` (`self.stacks = nn.ModuleList([Stack(), ...])`)."""
        init = self.program.methods.get(cls, {}).get("__init__") if cls is not None else None
        return [
            self.program.classes[n.func.value]
            for value, _ in (self.program.assignments(init, name) if name is not None and init is not None else [])
            for n in self.tree.walk(value)
            if type(n) is cst.Call and type(n.func) is cst.Name and n.func.value in self.program.classes
        ]

    def _rest_indexed(self, item: cst.Subscript, method: cst.FunctionDef | None) -> bool:
        """`for layer in self.layers[:-1]: ...` and then `self.layers[-1](x)` (or `[1:]` after
        `self.layers[0]`): the slice and the element left out of it run every layer."""
        part = item.slice[0].slice if len(item.slice) == 1 else None
        if type(part) is not cst.Slice or part.step is not None:
            return False
        bounds = (code(part.lower) if part.lower is not None else None, code(part.upper) if part.upper is not None else None)
        rest = {(None, "-1"): "-1", ("1", None): "0"}.get(bounds)
        held = dotted(item.value)
        return rest is not None and any(
            type(n) is cst.Subscript and dotted(n.value) == held and len(n.slice) == 1 and type(n.slice[0].slice) is cst.Index
            and code(n.slice[0].slice.value) == rest  # type: ignore[union-attr]
            for n in self.program.scope_nodes(method)
        )

    def _range_of_some(self, loop: cst.For, cls: cst.ClassDef, methods: dict[str, cst.FunctionDef]) -> str | None:
        """`for i in range(depth): x = self.blocks[i](x)` with a depth the forward is handed, or one
        kept in an attribute set after `__init__` (`model.active_depth = 2`, elastic depth): the
        blocks past it get no gradient in that step. Not `range(len(self.blocks))`, nor a count
        fixed when the model was built."""
        args = loop.iter.args  # type: ignore[attr-defined]
        count = args[-1].value if args and len(args) <= 2 else None
        counter = loop.target.value if type(loop.target) is cst.Name else None
        if count is None or counter is None:
            return None
        indexed = next((
            n.value for n in self.tree.walk(loop.body)
            if type(n) is cst.Subscript and (dotted(n.value) or "").startswith("self.") and len(n.slice) == 1
            and type(n.slice[0].slice) is cst.Index and code(n.slice[0].slice.value) == counter  # type: ignore[union-attr]
        ), None)
        if indexed is None:
            return None
        method = self.tree.function(loop)
        varies = type(count) is cst.Name and method is not None and count.value in self.program.param_names(method)
        attr = dotted(count) if type(count) is cst.Attribute else None
        if attr is not None and attr.startswith("self.") and attr.count(".") == 1:
            name = attr[5:]
            set_later = any(self.program.assignments(m, attr) for n, m in methods.items() if n != "__init__")
            varies = set_later or any(t.endswith("." + name) and not t.startswith("self.") for t in self._assigned_attributes)
        return code(indexed) if varies else None

    @cached_property
    def _assigned_attributes(self) -> list[str]:
        """Every attribute an assignment in the file stores, dotted (`model.active_depth = 2`)."""
        return [name for node in self.tree.of_type(cst.Assign) for t in node.targets if type(t.target) is cst.Attribute and (name := dotted(t.target))]

    def _chosen_from_data(self, index: cst.BaseExpression, method: cst.FunctionDef) -> bool:
        """An index worked out in the forward from what it computes (`int(scores.mean(0).argmax())`,
        or a name bound to that): not a number written down, nor a loop's counter over every layer."""
        if type(index) in (cst.Integer, cst.SimpleString, cst.UnaryOperation):
            return False
        if type(index) is cst.Name:
            if index.value in self.program.loop_targets(method):
                return False
            values = [v for v, _ in self.program.assignments(method, index.value)]
            return bool(values) and any(self._chosen_from_data(v, method) for v in values)
        return any(
            (found := s.method_call(n)) is not None and found[1] in CHOOSERS or (self.tree.qname(n.func) or "").rsplit(".", 1)[-1] in CHOOSERS
            for n in self.tree.walk(index)
            if type(n) is cst.Call
        )

    def _output_fields(self, value: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
        """The separate outputs a forward returns: of a tuple, a dict, or a record of this file
        (`Output(self.main(h), self.side(h))`, `Output = namedtuple(...)`, a NamedTuple or a
        dataclass); None for one output."""
        if isinstance(value, (cst.Tuple, cst.Dict)):
            return [el.value for el in value.elements]
        if type(value) is cst.Call and type(value.func) is cst.Name and self._is_record(value.func.value):
            return [a.value for a in value.args]
        return None

    def _refuse_embeddings(self, cls: cst.ClassDef) -> None:
        """Embeddings DDP cannot keep in step: `sparse=True` makes sparse gradients, which NCCL
        cannot all-reduce (the first backward fails on a GPU, though gloo on the CPU passes), and
        `max_norm=` renormalizes the rows a batch looks up in place during the forward, outside
        the optimizer: each rank rescales its own batch's rows and the replicas drift apart."""
        for method in self.program.class_methods(cls).values():
            for call in self.program.calls_in(method):
                name = self.tree.qname(call.func) or ""
                if name not in EMBEDDINGS:
                    continue
                line = self.tree.line(call)
                keywords = [(a.keyword.value, a.value) for a in call.args if a.keyword is not None]
                for a in call.args:  # `**{"max_norm": 1.0}`, or `**EMB_CFG` bound to one: keywords written in a dict
                    spread = a.value if a.star == "**" else None
                    if type(spread) is cst.Name:
                        spread = self.program.bound_once(method, spread.value) or self.program.bound_once(None, spread.value)
                    if type(spread) is cst.Dict:
                        keywords += [(string_value(e.key), e.value) for e in spread.elements if type(e) is cst.DictElement and string_value(e.key)]
                for keyword, value in keywords:
                    if keyword == "sparse" and code(value) == "True":
                        raise NotConvertible(
                            f"`{code(call.func)}(..., sparse=True)` (line {line}) makes sparse gradients, which NCCL cannot all-reduce: "
                            "DDP fails at the first backward() on a GPU; use dense gradients (sparse=False, and a dense optimizer such as Adam "
                            "instead of SparseAdam), then convert"
                        )
                    if keyword == "sparse" and code(value) not in ("True", "False", "None") and not any(self.tree.calls(value)):
                        # `sparse=sparse`, handed `args.sparse` (helper corpus CU, repro 02): right without the flag, not with it
                        self.warnings.append((call, (
                            f"`{code(call.func)}(..., sparse={code(value)})` makes sparse gradients when `{code(value)}` is true, "
                            "which NCCL cannot all-reduce: DDP then fails at the first backward() on a GPU (gloo on the CPU passes); run it "
                            "with dense gradients under DDP"
                        )))
                    if keyword == "max_norm" and code(value) != "None":
                        raise NotConvertible(
                            f"`{code(call.func)}(..., max_norm=...)` (line {line}) rescales the rows each batch looks up in place, outside the "
                            "optimizer: every rank rescales its own batch's rows and the replicas drift apart under DDP; drop max_norm (or "
                            "renormalize the whole table after each optimizer step, alike on every rank), then convert"
                        )

    def _refuse_dataclass_outputs(self, classes: set[cst.ClassDef]) -> None:
        """A forward returning a dataclass, from a model that may leave parameters unused: DDP
        finds the output tensors whose graph it walks only in tuples, lists, dicts and named
        tuples, so find_unused_parameters still fails ("Expected to have finished reduction")."""
        for cls in classes:
            forward = self.program.class_methods(cls).get("forward")
            for node in self.program.scope_nodes(forward) if forward is not None else ():
                value = node.value if type(node) is cst.Return else None
                if type(value) is cst.Call and type(value.func) is cst.Name and self._is_dataclass(value.func.value):
                    raise NotConvertible(
                        f"`{cls.name.value}.forward` (line {self.tree.line(node)}) returns a dataclass (`{value.func.value}`) and may leave "
                        "parameters without gradients: DDP looks for the output tensors in tuples, lists, dicts and named tuples only, so "
                        "find_unused_parameters cannot see which heads a step used and the run fails; return a NamedTuple or a dict, then convert"
                    )

    def _is_dataclass(self, name: str) -> bool:
        cls = self.program.classes.get(name)
        return cls is not None and any(
            self.tree.qname(d.decorator.func if type(d.decorator) is cst.Call else d.decorator) == "dataclasses.dataclass" for d in cls.decorators
        )

    def _is_record(self, name: str) -> bool:
        """`Output = namedtuple("Output", ...)`, `class Output(NamedTuple)`, `@dataclass class Output`."""
        for made, _ in self.program.assignments(None, name):
            if type(made) is cst.Call and self.tree.qname(made.func) in ("collections.namedtuple", "typing.NamedTuple"):
                return True
        cls = self.program.classes.get(name)
        if cls is None:
            return False
        bases = {self.tree.qname(b.value) for b in cls.bases}
        decorators = {self.tree.qname(d.decorator.func if type(d.decorator) is cst.Call else d.decorator) for d in cls.decorators}
        return "typing.NamedTuple" in bases or "dataclasses.dataclass" in decorators

    def _layers_behind(self, expr: cst.CSTNode, function: cst.FunctionDef, methods: dict, seen: set) -> set[str]:
        """The `self.<layer>` calls an output of `function` depends on, through its local names and
        the methods it calls (`self.decode(self.reparameterize(mu, logvar))`)."""
        layers: set[str] = set()
        detached = {id(n) for c in self.tree.walk(expr) if type(c) is cst.Call and (found := s.method_call(c)) and found[1] == "detach" for n in self.tree.walk(c)}
        for node in self.tree.walk(expr):
            if id(node) in detached:
                continue  # `pos.detach()`: no gradient flows back through it
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and dotted(node.func.value) == "self":
                name = node.func.attr.value
                if name in methods and methods[name] not in seen:
                    seen.add(methods[name])
                    for value in self.program.returns(methods[name]):
                        layers |= self._layers_behind(value, methods[name], methods, seen)
                elif name not in methods:
                    layers.add(name)
            elif isinstance(node, cst.Name) and (node.value, function) not in seen:
                seen.add((node.value, function))
                for value in self._values_of(function, node.value):
                    layers |= self._layers_behind(value, function, methods, seen)
        return layers

    def _same_layers_either_way(self, node: cst.CSTNode, layers: set[str]) -> bool:
        """An `if`/`else` (or `a if c else b`) whose branches use the same layers of `layers`."""
        if isinstance(node, cst.IfExp):
            branches: list[cst.CSTNode] = [node.body, node.orelse]
        elif isinstance(node, cst.If) and isinstance(node.orelse, cst.Else):
            branches = [node.body, node.orelse.body]
        else:
            return False
        bound = {
            n.value for loop in self.tree.loops(node) if (dotted(self.program.unwrap_iterable(loop.iter)) or "").startswith("self.")
            for n in self.tree.walk(loop.target) if type(n) is cst.Name
        }  # `for blk in self.blocks:` around `checkpoint(blk, x) if ... else blk(x)` (helper corpus BD, repro 01)
        used = [
            {n.attr.value for n in self.tree.walk(b) if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == "self"} & layers
            | {f"loop:{n.value}" for n in self.tree.walk(b) if type(n) is cst.Name and n.value in bound}
            for b in branches
        ]  # fmt: skip
        return bool(used[0]) and all(u == used[0] for u in used)

    def _builds_layer(self, value: cst.Call) -> bool:
        name = self.tree.qname(value.func) or ""
        return name.startswith("torch.nn.") or (isinstance(value.func, cst.Name) and value.func.value in self.program.classes)

    def _has_parameters(self, value: cst.Call, depth: int = 2) -> bool:
        """A module built by `value` may hold parameters: not torch's parameter-free modules
        (`nn.ReLU()`, `nn.Dropout(p)`, pooling, losses), nor a same-file class that builds none
        (a spectrogram frontend holding only a window buffer; helper corpus AY, repro 02)."""
        name = self.tree.qname(value.func) or ""
        if name.startswith("torch.nn.") and name.rsplit(".", 1)[-1] in PARAMETER_FREE:
            return False
        if type(value.func) is not cst.Name or value.func.value not in self.program.classes or depth == 0:
            return True
        init = self.program.class_methods(self.program.classes[value.func.value]).get("__init__")
        for node in self.program.scope_nodes(init) if init is not None else ():
            if type(node) is not cst.Call:
                continue
            called = self.tree.qname(node.func) or ""
            found = s.method_call(node)
            if found is not None and (found[1] in ("register_buffer", "__init__") or type(found[0]) is cst.Call and code(found[0]) == "super()"):
                continue  # `self.register_buffer("window", ...)`, `super().__init__()`
            if called.startswith("builtins.") or (called.startswith("torch.") and not called.startswith("torch.nn.")):
                continue  # `torch.hann_window(n)`, `len(...)`: no parameter
            if self._builds_layer(node) and not self._has_parameters(node, depth - 1):
                continue
            return True  # a layer, an nn.Parameter, or a call ddpify cannot see into (`make_mlp()`): may hold parameters
        return False

    def _skips_layers(self, node: cst.If) -> bool:
        """`if sel.numel() == 0: continue` in a loop over experts: the rest of the loop's body,
        with its layer calls, is skipped under the condition."""
        leaves = any(type(n) in (cst.Continue, cst.Break) for n in self.tree.walk(node.body))
        loops = self.tree.loops(node)
        return leaves and bool(loops) and self._calls_self(loops[0].body)

    def _calls_self(self, node: cst.CSTNode) -> bool:
        """A call of the model's own layers under `node`: `self.layer(x)`, or a layer a loop over
        the model's container binds (`for e, expert in enumerate(self.experts): ... expert(x)`)."""
        bound = set()
        for loop in self.tree.loops(node):
            if (dotted(self.program.unwrap_iterable(loop.iter)) or "").startswith("self."):
                bound |= {n.value for n in self.tree.walk(loop.target) if type(n) is cst.Name}
        return any(
            (isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) and c.func.value.value == "self")
            or (type(c.func) is cst.Name and c.func.value in bound)
            or (type(c.func) is cst.Subscript and (dotted(c.func.value) or "").startswith("self."))  # `self.experts[e](x)`
            for c in self.tree.calls(node)
        )

    def _parameter_owners(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> list[str]:
        """Models whose `.parameters()` feed an optimizer argument (param groups too)."""
        owners: list[str] = []
        for node in self.tree.walk(expr):
            found = s.method_call(node)
            if found and found[1] in {"parameters", "named_parameters"}:
                ref = dotted(found[0])
                if ref is not None:
                    parts = ref.split(".")
                    if parts[0] != "self" and len(parts) > 1 and self._holder_of_its_own(found[0], function):
                        continue  # `SGD(trainer.model.parameters())` from main(): the Trainer's own model (helper corpus AS, repro 01)
                    owners.append(".".join(parts[:2] if parts[0] == "self" else parts[:1]))
        if not owners and isinstance(expr, cst.Name):  # params = model.parameters(); SGD(params)
            for value, _ in self.program.assignments(function, expr.value):
                owners += self._parameter_owners(value, function)  # type: ignore[arg-type]
        return list(dict.fromkeys(owners))

    def _check_parts_picked_by_key(self, optimizer: cst.Call, function: cst.FunctionDef | None) -> None:
        """`{t: Adam(heads[t].parameters()) for t in TASKS}`: an optimizer per part of a container
        picked by a key. No wrap can follow such a part (DDP wraps a whole module, and a wrapped
        ModuleDict cannot be indexed), so the heads trained apart on every rank beside the wrapped
        trunk (helper corpus BQ, repro 04). Refused with the way out."""
        for node in self.tree.walk(optimizer.args[0].value):
            found = s.method_call(node)
            if not found or found[1] not in ("parameters", "named_parameters") or type(found[0]) is not cst.Subscript:
                continue
            held = dotted(found[0].value)
            if held is None or not any(type(n) is cst.Name for e in found[0].slice for n in self.tree.walk(e.slice)):
                continue  # `model[0]`, `model[-1]`, `heads["a"]`, `model[:-1]`: a fixed part the optimizer names as such
            raise NotConvertible(
                f"the optimizer at line {self.tree.line(optimizer)} trains `{code(found[0])}`, a part of `{held}` picked by a key: DDP wraps "
                f"whole modules (and a wrapped container cannot be indexed), so no wrap can follow it and it would train apart on every rank; "
                f"give `{held}` one optimizer over `{held}.parameters()` (or wrap a module whose forward takes the key), then convert"
            )

    def _holder_of_its_own(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, role: str = "model") -> bool:
        """`trainer.model` of a same-file class with no forward (a Trainer, no module) whose own
        optimizer trains `self.model`: the model the class holds, wrapped where the class builds
        its optimizer, never the holder itself."""
        root = expr
        while type(root) is cst.Attribute:
            root = root.value
        cls = self.program.instance_of(root, function)
        if cls is None or "forward" in self.program.class_methods(cls):
            return False
        attribute = dotted(expr).split(".", 1)[1]  # type: ignore[union-attr]
        if role == "optimizer":  # `trainer.optimizer = ...`: the attribute the class's own optimizer is stored in
            methods = self.program.class_methods(cls).values()
            return any(
                (self.tree.qname(v.func) or "").startswith("torch.optim.") for m in methods for v, i in self.program.assignments(m, f"self.{attribute}")
                if i is None and type(v) is cst.Call
            )
        return any(
            (self.tree.qname(node.func) or "").startswith("torch.optim.") and ".lr_scheduler." not in (self.tree.qname(node.func) or "")
            for method in self.program.class_methods(cls).values() for node in self.program.calls_in(method)
            if any(dotted(n) == f"self.{attribute}" for n in self.tree.walk(node))
        )

    def _check_inline_model(self, ref: str, function: cst.FunctionDef | None, optimizer: cst.Call) -> None:
        """`ae, _ = pretrain(nn.Sequential(...), loader)`, whose `pretrain(model, loader)` builds the
        optimizer: the model is made inside the call, where no wrap can follow it, so it trained
        unwrapped beside the wrapped ones, or the script was refused for want of an optimizer."""
        if function is None or "." in ref or ref not in self.program.all_param_names(function):
            return
        for site, _ in self.program.call_sites(function):
            argument = self.program.argument_for(site, function, ref)
            if type(argument) is cst.Call and (moved := dotted(unchained(argument))) is not None:
                raise NotConvertible(
                    f"the model `{function.name.value}` trains (its optimizer at line {self.tree.line(optimizer)}) is moved inside the call "
                    f"at line {self.tree.line(site)} (`{code(argument)[:60]}`): DDP wraps a model already on its device, before that call; "
                    f"move it first (`{moved} = {code(argument)[:60]}`) and hand `{moved}`, then convert"
                )
            if type(argument) is cst.Call:
                raise NotConvertible(
                    f"the model `{function.name.value}` trains (its optimizer at line {self.tree.line(optimizer)}) is built inside the call "
                    f"at line {self.tree.line(site)} (`{code(argument)[:60]}`): ddpify wraps a model where a name holds it; bind it to a "
                    f"name first (`{ref} = {code(argument.func)}(...)`) and hand that name, then convert"
                )

    def _definition(self, ref: str, function: cst.FunctionDef | None) -> list[tuple[str, cst.FunctionDef | None]]:
        """Follow a model name through parameters to the function that assigns it."""
        if function is not None and "." not in ref and ref in self.program.all_param_names(function):
            if self._sets_weights(ref, function, training=True):
                return [(ref, function)]  # `train_ch6(net, ...)` initializes `net` itself: wrapped there, after that
            out = []
            for call, caller in self.program.call_sites(function):
                argument = self.program.argument_for(call, function, ref)
                name = dotted(argument) if argument is not None else None
                if name is not None:
                    out += self._definition(name, caller)
            return out
        if ref.startswith("self.") and function is not None:
            cls = self.program.owner_class(function)
            methods = list(self.program.methods.get(cls, {}).values()) if cls else []
            for placeholders in (False, True):  # `self.model = None` in `__init__`, built in `build()`: where it is built (helper corpus AV, repro 02)
                for method in methods:
                    values = self.program.assignments(method, ref)
                    if values and (placeholders or not all(_is_none(v) for v, _ in values)):
                        return [(ref, method)]
            return []
        if function is not None and not self.program.assignments(function, ref):
            function = None  # a global
        return [(ref, function)]

    def _sets_weights(self, ref: str, function: cst.FunctionDef, training: bool, depth: int = 0) -> bool:
        """Whether `function` changes the weights of its parameter `ref` (before it trains it, with
        `training`): `net.apply(init_weights)`, `reset_parameters()`,
        `nn.init.*` on its tensors, or a same-file function handed it that does. d2l's `train_ch6`
        initializes the net it is handed: a wrap in its caller broadcast rank 0's weights before
        each rank drew its own (helper corpus BP, repros 03 and 04)."""
        for statement in function.body.body:
            if training and self._uses_for_training(statement, ref, function):
                return False
            for call in self.tree.calls(statement):
                found = s.method_call(call)
                if found is not None and dotted(found[0]) == ref and found[1] in WEIGHT_SETTERS:
                    return True
                if (self.tree.qname(call.func) or "").startswith("torch.nn.init.") and call.args and (dotted(unchained(call.args[0].value)) or "").split(".")[0] == ref:
                    return True
                target = self.program.callee(call, function)
                handed = [a for a in call.args if dotted(a.value) == ref]
                if depth < 2 and target is not None and len(handed) == 1 and target[0] is not function:
                    param = self.program.parameter_for(call, target[0], handed[0].value)
                    if param is not None and self._sets_weights(param, target[0], training=False, depth=depth + 1):
                        return True
        return False

    def _trained_model(self, ref: str, function: cst.FunctionDef | None) -> TrainedModel | None:
        """The model is wrapped right before training starts: after the last statement that uses it
        before then, so that weight init (`apply`), loaded or frozen weights and moves come first
        (DDP broadcasts rank 0's weights when it wraps; a change after that is per rank)."""
        body = function.body if function is not None else self.tree.module
        ref = self._trained_through(ref, function, _flatten_main_block(self.tree, body))
        handed = function is not None and "." not in ref and ref in self.program.all_param_names(function)
        found = self._anchor_in(_flatten_main_block(self.tree, body), ref, function, assigned=handed)
        if found is None:
            # Built and trained inside a loop (a sweep over learning rates): wrapped there, each time
            for value, _ in self.program.assignments(function, ref):
                statement = self.tree.statement(value)
                block = self.tree.block(statement)
                if block is not body and isinstance(block, cst.IndentedBlock) and self.tree.loops(statement):
                    found = self._anchor_in(list(block.body), ref, function)
                    if found is not None:
                        break
        if found is None:
            return None
        model = TrainedModel(ref, function, found[0], found[1])
        if not found[1]:
            model.moved_by = self._moved_by_receiver(ref, function, found[0])
        return model

    def _trained_through(self, ref: str, function: cst.FunctionDef | None, statements: list[cst.BaseStatement]) -> str:
        """DETR's `model_without_ddp = model`, whose parameters the optimizer takes, while the
        training runs `model` (helper corpus BN, script 02: the wrap went after the training, on the
        name nothing trained through). The name trained through is wrapped; the other stays the
        plain model, which is what DETR saves and loads through it."""
        bound = self.program.assignments(function, ref) if "." not in ref else []
        if len(bound) != 1 or bound[0][1] is not None or type(other := bound[0][0]) is not cst.Name or other.value in (ref, "self"):
            return ref
        runs = [
            c for c in self.program.calls_in(function)
            if dotted(c.func) == ref or (self.program.callee(c, function) is not None and any(dotted(a.value) == ref for a in c.args))
        ]  # fmt: skip
        if runs:
            return ref  # its forward runs, or a same-file function is handed it: it is trained through
        return other.value if any(self._uses_for_training(st, other.value, function) for st in statements) else ref

    def _moved_by_receiver(self, ref: str, function: cst.FunctionDef | None, anchor: cst.BaseStatement) -> tuple[str | None, str] | None:
        """`Trainer(model, ..., device)` whose `__init__` does `self.model = model.to(device)`:
        the model reaches its device only after the wrap, and DDP must wrap a model already on
        it. Returns the move spelled for the wrap's scope (`model.to(device)`), None where it cannot be
        spelled there, and the receiver."""
        statements = _flatten_main_block(self.tree, function.body if function is not None else self.tree.module)
        after = [st for st in statements if self.tree.order(st) > self.tree.order(anchor)]
        for statement in after:
            for call in self.tree.calls(statement):
                target = self.program.callee(call, function)
                handed = [a for a in call.args if dotted(a.value) == ref]
                if target is None or len(handed) != 1:
                    continue
                callee = target[0]
                param = self.program.parameter_for(call, callee, handed[0].value)
                if param is None:
                    continue
                for move in self.program.calls_in(callee):
                    found = s.method_call(move)
                    if found is None or found[1] != "to":  # `.cuda()` may be rewritten there
                        continue
                    receiver = found[0]
                    if type(receiver) is cst.Call and self.tree.is_call_to(receiver, s.DATA_PARALLEL) and receiver.args:
                        receiver = receiver.args[0].value  # `nn.DataParallel(net, ...).to(devices[0])`, which loses the DataParallel
                    if dotted(receiver) != param:
                        continue
                    arguments = []
                    for a in move.args:
                        value = self._spelled_at_wrap(a.value, call, callee, function, anchor)
                        if value is None:
                            return None, code(call.func)  # `self.device`: not spelled at the wrap
                        arguments.append((f"{a.keyword.value}=" if a.keyword is not None else "") + value)
                    return f"{ref}.{found[1]}({', '.join(arguments)})", code(call.func)
        return None

    def _spelled_at_wrap(self, expr: cst.BaseExpression, call: cst.Call, callee: cst.FunctionDef, function: cst.FunctionDef | None, anchor: cst.BaseStatement) -> str | None:
        """A move's argument in `callee` as the wrap's scope spells it: the parameters replaced by what
        `call` hands them, or by their defaults (`devices=try_all_gpus()`, then `devices[0]`); other
        names must be the module's own, the same at the wrap (`model = model.to(device=device)` with a
        global `device`: helper corpus BG, repro 03). None where it cannot be spelled there."""
        names = s.read_names(expr)
        if names is None:
            return None
        params = set(self.program.param_names(callee))
        replaced: dict[int, cst.BaseExpression] = {}
        for node in names:
            if node.value not in params:
                if not self._same_global(node.value, callee, function, anchor):
                    return None
                continue
            argument = self.program.argument_for(call, callee, node.value)
            if argument is not None:
                if not self._bound_before(argument, function, anchor):
                    return None
            else:
                argument = self.program.default(callee, node.value)
                defaults = s.read_names(argument) if argument is not None else None
                if defaults is None or any(not self._same_global(n.value, callee, function, anchor) for n in defaults):
                    return None
            if node is not expr and not isinstance(argument, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.Integer)):
                return None  # `a + b` put into `devices[0]` would need parentheses
            replaced[id(node)] = argument
        return code(s.replace_names(expr, replaced))

    def _same_global(self, name: str, callee: cst.FunctionDef, function: cst.FunctionDef | None, anchor: cst.BaseStatement) -> bool:
        """`name`, read in `callee`, is the module's: an import, a function or a global bound before the
        wrap, and not rebound in the callee, in the wrap's scope or by a `global` statement."""
        if self.program.binds(callee, name) or self.program.global_writers(name) or name in self.program.loop_targets(None):
            return False
        if function is not None and self.program.binds(function, name):
            return False
        return all(self.tree.order(v) < self.tree.order(anchor) for v, _ in self.program.assignments(None, name))

    def _bound_before(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, anchor: cst.BaseStatement) -> bool:
        """Every name `expr` reads is bound before `anchor` (or is a parameter or a global)."""
        for n in self.tree.walk(expr):
            if type(n) is not cst.Name:
                continue
            values = self.program.assignments(function, n.value)
            if values and not any(self.tree.order(v) < self.tree.order(anchor) for v, _ in values):
                return False
        return True

    def _anchor_in(self, statements: list[cst.BaseStatement], ref: str, function: cst.FunctionDef | None, assigned: bool = False) -> tuple[cst.BaseStatement, bool] | None:
        """The statement the wrap follows; `assigned`: `ref` is bound on entry (a parameter)."""
        anchor: cst.BaseStatement | None = None
        moved = False
        printing = False  # the anchor is followed by statements that only print so far
        before: cst.BaseStatement | None = None  # the statement before the current one
        for statement in statements:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            if isinstance(statement, cst.SimpleStatementLine) and any(type(small) is cst.Return for small in statement.body):
                break  # `return model, opt` of a builder: the wrap comes before it, never after (helper corpus BW, repro 07)
            if self._uses_for_training(statement, ref, function):
                guard = self.tree.parent(self.tree.parent(statement))
                if (
                    function is None and anchor is not None and before is not None and self.tree.is_main_guard(guard)
                    and not self.tree.inside(anchor, guard) and self.tree.inside(before, guard)  # type: ignore[arg-type]
                ):
                    # `net = Net()` at module level, trained by `train_ch6(net, ...)` in the `__main__` block, which
                    # sets the process group up: wrapped there, right before training (helper corpus BG, repro 01)
                    anchor, printing = before, False
                break
            before = statement
            assigns, moves = self._prepares(statement, ref)
            if assigns or moves or (assigned and self._mentions(statement, ref)):
                anchor = statement
                assigned = assigned or assigns
                moved = moved or moves
                printing = True
            elif printing and anchor is not None and s.only_prints(statement):
                anchor = statement  # after a block of prints, not inside it (one rank-0 guard, not two)
            else:
                printing = False
        return (anchor, moved) if anchor is not None else None

    def _mentions(self, statement: cst.CSTNode, ref: str) -> bool:
        """Whether a statement uses the model, other than handing its parameters to an optimizer."""
        for node in self.tree.walk(statement):
            if (type(node) is cst.Name or type(node) is cst.Attribute) and dotted(node) == ref:
                parent = self.tree.parent(node)
                if not (isinstance(parent, cst.Attribute) and parent.attr.value in {"parameters", "named_parameters"}):
                    return True
        return False

    def _prepares(self, statement: cst.CSTNode, ref: str) -> tuple[bool, bool]:
        assigns = moves = False
        for node in self.tree.walk(statement):
            kind = type(node)
            if kind is cst.Assign or kind is cst.AnnAssign:
                targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]
                # `model = Net()`, and `model, criterion = set_model(opt)`
                targets += [el.value for t in targets if isinstance(t, (cst.Tuple, cst.List)) for el in t.elements]
                if any(dotted(t) == ref for t in targets):
                    assigns = True
            found = s.method_call(node)
            if found and dotted(found[0]) == ref and found[1] in MOVE_METHODS:
                moves = True
            if assigns and found and found[1] in MOVE_METHODS:
                moves = True
        return assigns, moves

    def _uses_for_training(self, statement: cst.CSTNode, ref: str, function: cst.FunctionDef | None) -> bool:
        """A forward, a loop that trains, or a call of a same-file function that trains; or a
        dict, list or tuple bound to a name that holds the model itself (`ctx = {"model": model,
        "opt": ...}` handed to a stage: helper corpus CS, repro 06): it must hold the wrapper."""
        if type(statement) is cst.SimpleStatementLine and any(
            type(small) is cst.Assign and type(small.value) in (cst.Dict, cst.List, cst.Tuple)
            and any(dotted(e.value) == ref for e in small.value.elements if isinstance(e, (cst.DictElement, cst.Element)))
            for small in statement.body
        ):  # fmt: skip
            return True
        for call in self.tree.calls(statement):
            if dotted(call.func) == ref and not self._trial_forward(call, statement):
                return True
            if is_backward(call) and any(self.tree.inside(loop, statement) for loop in self.tree.loops(call)) and self._may_train(statement, ref, function):
                return True
            target = self.program.callee(call, function)
            if target is not None and self._reaches_training(target[0]) and self._trains_with(call, target[0], ref):
                return True  # `train(model, loader)`, or `train(epoch)` on a global model
            if self._hands_to_trainer(call, ref):
                return True  # `Trainer(model, ...)`: its methods train what it was handed
        return False

    def _trial_forward(self, call: cst.Call, statement: cst.CSTNode) -> bool:
        """`model(torch.zeros(1, 3, 32, 32))` on a line of its own (it sizes lazy layers), printed
        (`print(model(dummy).shape)`) or under `no_grad`, outside any loop: a forward whose
        output nothing trains on. The wrap goes after it (DDP refuses uninitialized parameters)."""
        if self.tree.loops(call) or any(type(n) in (cst.For, cst.While) for n in self.tree.walk(statement)):
            return False
        if self.tree.grad_disabled(call):
            return True
        if not (type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 and type(statement.body[0]) is cst.Expr):
            return False
        value = statement.body[0].value
        return value is call or (self.tree.is_builtin_call(value, "print") and not any(is_backward(c) for c in self.tree.calls(value)))

    def _may_train(self, loop: cst.CSTNode, ref: str, function: cst.FunctionDef | None) -> bool:
        """Whether a loop that calls backward() may train `ref`: it names the model or a name
        bound from it before the loop (`net = model.to(device)`), or calls a function of this
        file (which may reach it). A teacher's pre-training loop before `student = Net()` trains
        no student, nor does a first stage's loop the second stage's model."""
        names = {ref}
        start = self.tree.order(loop)
        for node in self.program.scope_nodes(function):
            # bound before the loop: `loss = ...(model(x))` in a later loop is another loss
            if type(node) is cst.Assign and self.tree.order(node) < start and self._mentions(node.value, ref):
                names |= {name for t in node.targets for name in self.program.names_in(t.target)}
        for node in self.tree.walk(loop):
            if (type(node) is cst.Name or type(node) is cst.Attribute) and dotted(node) in names:
                return True
            if type(node) is cst.Call and (target := self.program.callee(node, function)) is not None and self._may_reach(node, target[0], names, function):
                return True
        return False

    def _may_reach(self, call: cst.Call, callee: cst.FunctionDef, names: set[str], function: cst.FunctionDef | None) -> bool:
        """Whether a same-file function called with `call` can reach a model named `names` in
        `function`: handed it (or something bound from it), or reading it as a global, as
        `self.<attr>`, or from the function around it. `recon_loss(model(x), x)` cannot train
        a model that the function builds later."""
        if any(dotted(n) in names for a in call.args for n in self.tree.walk(a.value) if type(n) in (cst.Name, cst.Attribute)):
            return True
        if function is None or any(name.startswith("self.") for name in names):
            return True
        return callee in self.program.nested_functions(function)

    def _hands_to_trainer(self, call: cst.Call, ref: str) -> bool:
        """`TrainEval(args, model, loader, optimizer).train()`: the model goes into a same-file
        class whose methods train, or run the forward of the model it keeps with gradients (a
        loss wrapper: `flow = Flow(model)`, then `flow.loss(x).backward()`); the object keeps
        it, so it must be wrapped before (else its forwards skip DDP and ranks diverge)."""
        if not (isinstance(call.func, cst.Name) and call.func.value in self.program.classes):
            return False
        root = ref.split(".")[0]
        handed = [a.value for a in call.args if dotted(a.value) == ref or (isinstance(a.value, cst.Name) and a.value.value == root)]
        if not handed:
            return False
        methods = self.program.class_methods(self.program.classes[call.func.value])
        if any(self._reaches_training(method) for method in methods.values()):
            return True
        kept = {attr for attr, argument in self.program.kept_arguments(call).items() if any(argument is value for value in handed)}
        return any(
            dotted(c.func) in kept and not self.tree.grad_disabled(c)
            for name, method in methods.items() if name != "__init__" for c in self.program.calls_in(method)
        )  # fmt: skip

    def _trains_with(self, call: cst.Call, target: cst.FunctionDef, ref: str) -> bool:
        """Whether a call of a training function can train `ref`: it is handed the model (or
        something holding it), or the function reaches it as a global. `train_model(model_a)`
        does not train `model_b`, built after it."""
        root = ref.split(".")[0]
        if any(isinstance(n, cst.Name) and n.value == root for a in call.args for n in self.tree.walk(a.value)):
            return True
        if root == "self" or isinstance(call.func, cst.Attribute):
            return True  # a method: it may reach the model through its object
        return any(  # a global the function, or one it calls, reads
            not self.program.binds(function, root) and any(isinstance(n, cst.Name) and n.value == root for n in self.program.scope_nodes(function))
            for function in self.program.called_from({target})
        )

    def _built_around(self, models: list[TrainedModel]) -> list[tuple[TrainedModel | None, cst.Call, cst.Arg, TrainedModel]]:
        """`model = Head(encoder)` after `encoder` was pretrained and wrapped (a two-stage recipe),
        `Head` a same-file module: it is handed the plain encoder (holding the wrapper would nest
        one DDP in the other), so its methods reach `self.encoder` as the plain one too."""
        found = []
        for model in models:
            for value, _ in self.program.assignments(model.function, model.ref):
                call = unchained(value) if type(value) is cst.Call else value
                stock = type(call) is cst.Call and self.tree.is_call_to(call, CONTAINERS)  # `nn.Sequential(self.encoder, head)` (helper corpus CE, repro 09)
                if not stock and (type(call) is not cst.Call or type(call.func) is not cst.Name or call.func.value not in self.program.classes):
                    continue
                if not stock and "forward" not in self.program.class_methods(self.program.classes[call.func.value]):
                    continue  # a trainer or a loss wrapper that runs the wrapped model: it keeps the wrapper
                for argument in call.args:
                    held = next((m for m in models if m is not model and m.element is None and m.ref == dotted(argument.value)), None)
                    same_scope = held is not None and (held.function is model.function or (
                        held.ref.startswith("self.") and self.program.owner_class(held.function) is not None
                        and self.program.owner_class(held.function) is self.program.owner_class(model.function)
                    ))  # `self.encoder`, wrapped in `__init__`, held by a model another method builds
                    if held is not None and same_scope and held.anchor is not None and self._after(call, held.anchor):
                        found.append((model, call, argument, held))
        built = {id(call) for _, call, _, _ in found}
        loops = [loop.loop for loop in self.program.fact(TrainLoops).loops]
        for held in models:
            if held.element is not None or held.anchor is None:
                continue
            for node in self.program.scope_nodes(held.function):
                # `scaled = ModelWithTemperature(net)` after training, itself trained by no optimizer over
                # its parameters() (temperature scaling): it holds the plain model too, or it would save
                # `model.module.*` keys (helper corpus BD, repro 10). Not a wrapper the training loop
                # runs (a loss wrapper, `flow = Flow(model)`, whose forward must go through DDP).
                if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                    continue
                call = unchained(node.value) if type(node.value) is cst.Call else node.value
                if type(call) is not cst.Call or id(call) in built or not self._after(call, held.anchor):
                    continue
                stock = self.tree.is_call_to(call, CONTAINERS)  # `pipeline = nn.Sequential(net, nn.Softmax(-1))` (helper corpus BM, repro 03)
                if not stock and (type(call.func) is not cst.Name or call.func.value not in self.program.classes):
                    continue
                if not stock and "forward" not in self.program.class_methods(self.program.classes[call.func.value]):
                    continue
                holder = node.targets[0].target.value
                if any(m.ref == holder and m.function is held.function for m in models):
                    continue
                if any(type(n) is cst.Name and n.value == holder for loop in loops for n in self.tree.walk(loop)) and (stock or not self._runs_without_gradients(call, held.ref)):
                    continue  # run (or handed on) in a training loop, unless it runs the model without gradients (a temperature fitted over it)
                trains = self.program.training_functions
                if any(
                    (target := self.program.callee(c, held.function)) is not None and target[0] in trains and any(dotted(a.value) == holder for a in c.args)
                    for c in self.program.calls_in(held.function)
                ):
                    continue  # handed to a function that trains (`fit(scaled, loader)`)
                for argument in call.args:
                    if dotted(argument.value) == held.ref:
                        found.append((None, call, argument, held))
        return found

    def _runs_without_gradients(self, call: cst.Call, ref: str) -> bool:
        """`Scaler(base=net)`, whose `__init__` keeps `base` and whose methods call `self.base(x)`
        only under no_grad: the loop that trains it fits its own parameters (a temperature), and
        no gradient reaches the model it holds (helper corpus BM, repro 02)."""
        cls = self.program.classes[call.func.value]  # type: ignore[attr-defined]
        init = self.program.class_methods(cls).get("__init__")
        argument = next((a.value for a in call.args if dotted(a.value) == ref), None)
        param = self.program.parameter_for(call, init, argument) if init is not None and argument is not None else None
        if init is None or param is None:
            return False
        kept = {
            name for node in self.program.scope_nodes(init) if type(node) is cst.Assign and len(node.targets) == 1
            and dotted(node.value) == param and (name := dotted(node.targets[0].target) or "").startswith("self.")
        }  # fmt: skip
        uses = [
            node for method in self.program.class_methods(cls).values() if method is not init
            for node in self.program.scope_nodes(method) if type(node) is cst.Attribute and dotted(node) in kept
        ]  # fmt: skip
        return bool(uses) and all(type(self.tree.parent(n)) is cst.Call and self.tree.parent(n).func is n and self.tree.grad_disabled(n) for n in uses)  # type: ignore[attr-defined]

    def _after(self, node: cst.CSTNode, anchor: cst.CSTNode) -> bool:
        """`node` runs after the wrap that follows `anchor` (not inside the anchor itself)."""
        return self.tree.order(node) > self.tree.order(anchor) and not self.tree.inside(node, anchor)

    def _model_refs(self, models: list[TrainedModel], plain: set[int]) -> tuple[dict[cst.FunctionDef | None, set[str]], set[tuple[str, cst.FunctionDef]]]:
        # A list of models is no model: its elements are reached through the list.
        seeds = [(m.ref, m.function) for m in models if m.element is None]
        wrapped_at = {(m.ref, m.function): m.anchor for m in models if m.element is None and m.anchor is not None}
        # the function that wraps a model returns the plain one (`return model.module`); `plain`:
        # arguments handed as the plain model (`Head(encoder.module)`)
        # (a builder that only makes the model, `model, opt = build(device)`, hands the wrapper on: its caller trains it)
        returns_plain = {seed for seed in wrapped_at if seed[1] in self.program.training_functions}
        # an object built before the wrap around the model (`saver = CheckpointSaver(model, ...)`, `self.ema =
        # EMA(self.model)` in `__init__`) keeps the plain one: its methods read no wrapper (helper corpus CV, repros 02, 06)
        plain = plain | {
            id(a.value) for m in models if m.element is None and m.anchor is not None for call in self.program.calls_in(m.function)
            if self._before_wrap(call, m.function, [m]) and (target := self.program.callee(call, m.function)) is not None
            and target[0].name.value == "__init__" for a in call.args if dotted(unchained(a.value)) == m.ref
        }  # fmt: skip
        refs = wrapper_names(self.tree, self.program, seeds, wrapped_at, plain_returns=returns_plain, plain_arguments=plain)
        # A helper the model's function calls only before the wrap (`resume_checkpoint(model)`)
        # gets the plain model: its parameter is no wrapped model; called before and after, either.
        handed_both: set[tuple[str, cst.FunctionDef]] = set()
        for function, names in refs.items():
            if function is None:
                continue
            params = set(self.program.param_names(function))
            names -= self._unwraps_itself(function, names & params)
            for name in list(names & params):
                sites = [(call, caller, dotted(arg)) for call, caller in self.program.call_sites(function)
                         if (arg := self.program.argument_for(call, function, name)) is not None and dotted(arg) in refs.get(caller, set())]
                before = [self._before_wrap(call, caller, [m for m in models if m.ref == handed] or models) for call, caller, handed in sites]
                if sites and all(before):
                    names.discard(name)
                elif any(before):
                    handed_both.add((name, function))
        return refs, handed_both

    def _unwraps_itself(self, function: cst.FunctionDef, params: set[str]) -> set[str]:
        """The parameters a helper tests for a wrapper itself and runs no forward of: timm's old
        `ModelEma.update(model)`, `needs_module = hasattr(model, "module")` then `msd =
        model.state_dict()` read with `"module." + k` keys (helper corpus CV, repro 01: a `.module`
        there made every step a KeyError). The helper reads the wrapper its own way."""
        found = set()
        for call in self.program.calls_in(function):
            if not call.args or (name := dotted(call.args[0].value)) not in params:
                continue
            tests = (self.tree.is_builtin_call(call, "hasattr") and len(call.args) == 2 and string_value(call.args[1].value) == "module") or (
                self.tree.is_builtin_call(call, "isinstance") and len(call.args) == 2
                and any(self.tree.qname(n) in s.DDP | s.DATA_PARALLEL for n in self.tree.walk(call.args[1].value))
            )  # fmt: skip
            if tests and not any(type(c.func) is cst.Name and c.func.value == name for c in self.program.calls_in(function)):
                found.add(name)
        return found

    def _before_wrap(self, call: cst.Call, caller: cst.FunctionDef | None, models: list[TrainedModel]) -> bool:
        return any(
            m.function is caller and m.anchor is not None
            and (self.tree.order(call) < self.tree.order(m.anchor) or self.tree.inside(call, m.anchor))  # the wrap follows its anchor
            for m in models
        )

    # --- training loops and loaders --------------------------------------------------

    def _no_model_reason(self, backward_calls: list[cst.Call]) -> str:
        """backward() is called but no optimizer names a model: say what the script does instead."""
        loaders = "" if any(self.tree.is_call_to(c, s.DATALOADER) for c in self.tree.calls()) else (
            "; its batches do not come from a DataLoader either, which ddpify would need to split them by rank"
        )
        for call in self.tree.calls():
            found = s.method_call(call)
            receiver = s.method_call(found[0]) if found is not None and isinstance(found[0], cst.Call) else None
            by_hand = found is not None and found[1] in HAND_UPDATES and (
                (isinstance(found[0], cst.Attribute) and found[0].attr.value == "data")
                or any(isinstance(a.value, cst.Attribute) and a.value.attr.value == "grad" or "grad" in code(a.value) for a in call.args)
            )
            if by_hand and receiver is None:
                return (
                    f"the training loop updates the parameters by hand (`{code(call)}`, line {self.tree.line(call)}) rather than "
                    "with a torch.optim optimizer, which is how ddpify finds the model to wrap: use an optimizer, or wrap the "
                    f"model in DistributedDataParallel yourself{loaders}"
                )
        handed = self._handed_everything(backward_calls[0])
        if handed is not None:
            return handed
        looped = self._model_from_a_loop()
        if looped is not None:
            return looped
        free = self._free_parameters()
        if free is not None:
            return free
        return (
            f"backward() is called (line {self.tree.line(backward_calls[0])}), but no torch.optim optimizer over a model's "
            f"parameters was found, which is how ddpify finds the model to wrap{loaders}"
        )

    def _free_parameters(self) -> str | None:
        """`opt = torch.optim.Adam([a, b, c])` over `nn.Parameter`s of no module (a curve fit:
        helper corpus CJ, repro 04): there is an optimizer, but DDP wraps a module."""
        for call in self.tree.calls():
            if not (self.tree.qname(call.func) or "").startswith("torch.optim.") or not call.args or type(call.args[0].value) not in (cst.List, cst.Tuple):
                continue
            names = [code(e.value) for e in call.args[0].value.elements]  # type: ignore[attr-defined]
            function = self.tree.function(call)
            made = [
                v.elt if type(v) in (cst.GeneratorExp, cst.ListComp) else self.program.element(v, i)  # type: ignore[attr-defined]  # `a, b = (nn.Parameter(...) for v in ...)`
                for e in call.args[0].value.elements for v, i in self.program.assignments(function, code(e.value))  # type: ignore[attr-defined]
            ]
            if names and made and all(type(n) is cst.Call and self.tree.qname(n.func) in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") for n in made):
                return (
                    f"the optimizer `{code(call.func)}(...)` (line {self.tree.line(call)}) trains {', '.join(f'`{n}`' for n in names)}, "
                    "parameters of no nn.Module, and DistributedDataParallel wraps a module: keep them in one (an nn.Module whose "
                    "forward computes the prediction from them), then convert"
                )
        return None

    def _check_carried_state(self, loops: list[TrainLoop], models: set[str]) -> None:
        """Truncated BPTT over a loader read in order (`hidden = hidden.detach()`, then `out,
        hidden = model(x, hidden)`): each batch continues the one before it in the data. A
        DistributedSampler deals the batches round-robin, so a rank's next batch is not the
        continuation of its last one: the carried state would jump over the other ranks' part."""
        for loop in loops:
            if loop.consumed_by != "for" or type(loop.loop) is not cst.For:
                continue
            origins = self.program.dataloaders(loop.loader, loop.function)
            if not origins or any(_shuffles(o.node) for o in origins):
                continue
            carried = self._carried(loop.loop, models)
            if carried is not None:
                raise NotConvertible(
                    f"the training loop (line {self.tree.line(loop.loop)}) carries `{carried}` from one batch into the next over "
                    f"`{code(loop.loader)}`, read in order (truncated backpropagation through time): a DistributedSampler would deal "
                    "its batches round-robin, so the state a rank carries would skip the other ranks' batches; give each rank a "
                    "contiguous part of the stream (for example batchify with batch size x world size columns and keep this rank's)"
                )

    def _check_shard_picks_the_data(self, loops: list[TrainLoop]) -> None:
        """`sample_loss[idx] = losses.detach()` in the training loop, then `hard = (sample_loss >
        sample_loss.mean()).nonzero()` and `Subset(full, hard)` for the next epoch (hard-example
        mining; helper corpus CO, repro 04): each rank stores only its shard's values, so each
        builds another subset, of another length, and the ranks take different numbers of steps:
        the one with more waits in backward() for the others (a hang under NCCL)."""
        for loop in loops:
            function, body = loop.function, loop.loop.body
            for node in self.tree.walk(body):
                if type(node) is not cst.Assign or len(node.targets) != 1 or type(target := node.targets[0].target) is not cst.Subscript:
                    continue
                if type(target.value) is not cst.Name or not from_batch(self.tree, self.program, loop.loop, function, node.value):
                    continue
                table = target.value.value
                made = [v for v, _ in self.program.assignments(function, table) if self.tree.order(v) < self.tree.order(loop.loop)]
                if not made or not any(type(c) is cst.Call and self.tree.qname(c.func) in s.TENSOR_FACTORIES for v in made for c in self.tree.walk(v)):
                    continue
                derived, start = {table}, self.tree.order(loop.loop)
                outer = self.tree.loops(loop.loop)  # the epoch loop around: what comes before the training loop runs in the next pass
                later = [
                    n for n in self.program.scope_nodes(function)
                    if (self.tree.order(n) > start or any(self.tree.inside(n, o) for o in outer)) and not self.tree.inside(n, loop.loop)
                ]  # fmt: skip
                for _ in range(3):  # `hard = (...).nonzero()...`, `idx = hard.tolist()`: what is made from the table
                    derived |= {t for n in later if type(n) is cst.Assign and reads(self.tree, n.value, derived) for a in n.targets for t in self.program.names_in(a.target)}
                # also the weights of the next pass's WeightedRandomSampler (`weights = table + 0.05`: helper corpus CS, repro 05)
                picked = next((c for c in later if type(c) is cst.Call and self.tree.qname(c.func) in SUBSETS | s.WEIGHTED_SAMPLER and reads(self.tree, c, derived)), None)
                if picked is not None:
                    weighted = self.tree.qname(picked.func) in s.WEIGHTED_SAMPLER
                    what = "weights the samples to train on by it" if weighted else "picks the samples to train on from it"
                    why = (
                        "would hold only its own shard's values and weight the others' samples by what they started with, so each draws "
                        "another training set" if weighted else
                        "would hold only its own shard's values, pick another set of another size, and take another number of steps, "
                        "which hangs the ranks in backward()"
                    )  # fmt: skip
                    raise NotConvertible(
                        f"`{table}` keeps a value for each sample of this rank's batches (line {self.tree.line(node)}), and "
                        f"`{code(picked.func)}(...)` (line {self.tree.line(picked)}) {what}: each rank {why}; gather `{table}` over "
                        "ranks (dist.all_gather of the indices and values) before the pick, then convert"
                    )

    def _check_tables_filled_from_the_shard(self, loops: list[TrainLoop]) -> None:
        """`ref_c[idx] = reference(c)` in a pass over the training loader before the training
        (DPO's reference log-probabilities cached per example), then `ref_c[idx]` read in the
        training step (helper corpus CQ, repro 02): the cache pass goes over this rank's shard
        only, and from the next epoch on the shards differ, so a rank reads entries it never
        filled (zeros) for the examples the other ranks cached."""
        for loop in loops:
            if type(loop.loop) is not cst.For:
                continue
            function, spelled = loop.function, code(loop.loader)
            drawn = self.program.names_in(loop.loop.target)
            read = {
                n.value.value for n in self.tree.walk(loop.loop.body)
                if type(n) is cst.Subscript and type(n.value) is cst.Name and len(n.slice) == 1 and type(n.slice[0].slice) is cst.Index
                and reads(self.tree, n.slice[0].slice.value, drawn)
            }  # fmt: skip
            if (filled := self._filled_per_sample(function, spelled, read, before=loop.loop)) is not None:
                self._refuse_table(filled[0], spelled, filled[1], loop)
            for call in self.program.calls_in(function):
                # `cache = build_cache(teacher, loader)`, a same-file helper filling and returning the table (helper corpus CS, repro 04)
                parent = self.tree.parent(call)
                if self.tree.order(call) > self.tree.order(loop.loop) or type(parent) is not cst.Assign or len(parent.targets) != 1:
                    continue
                table = dotted(parent.targets[0].target)
                target = self.program.callee(call, function)
                handed = next((a.value for a in call.args if code(a.value) == spelled), None)
                param = self.program.parameter_for(call, target[0], handed) if target is not None and handed is not None else None
                if table not in read or param is None:
                    continue
                returned = {name for v in self.program.returns(target[0]) if (name := dotted(v)) is not None}  # type: ignore[index]
                if (filled := self._filled_per_sample(target[0], param, returned)) is not None:  # type: ignore[index]
                    self._refuse_table(table, spelled, filled[1], loop)  # type: ignore[arg-type]

    def _filled_per_sample(
        self, function: cst.FunctionDef | None, loader: str, tables: set[str], before: cst.CSTNode | None = None
    ) -> tuple[str, cst.Assign] | None:
        """`table[idx] = ...` into one of `tables`, by what a `for` over `loader` in `function` draws
        (before `before`, when given): the table and the assignment."""
        for other in self.program.scope_nodes(function):
            if type(other) is not cst.For or other is before or code(self.program.unwrap_iterable(other.iter)) != loader:
                continue
            if before is not None and self.tree.order(other) > self.tree.order(before):
                continue
            for node in self.tree.walk(other.body):
                if type(node) is not cst.Assign or len(node.targets) != 1 or type(target := node.targets[0].target) is not cst.Subscript:
                    continue
                table = dotted(target.value)
                if table in tables and reads(self.tree, target, self.program.names_in(other.target)):
                    return table, node  # type: ignore[return-value]
        return None

    def _refuse_table(self, table: str, spelled: str, filled: cst.CSTNode, loop: TrainLoop) -> None:
        raise NotConvertible(
            f"`{table}` is filled for each sample in a pass over `{spelled}` (line {self.tree.line(filled)}), which will be "
            f"this rank's shard of the data, and the training step reads it by the samples of its own batches (line "
            f"{self.tree.line(loop.loop)}): from the next epoch on each rank trains on samples another rank filled, and "
            f"reads entries it never filled; fill `{table}` over a loader every rank reads whole (no sampler), then convert"
        )

    def _carried(self, loop: cst.For, models: set[str]) -> str | None:
        """A name the loop hands the model (`model(x, hidden)`) and assigns again from a call that
        reads it (`out, hidden = model(x, hidden)`; `hidden = repackage(hidden)`), bound before
        the loop too: a state carried from one iteration into the next."""
        function = self.tree.function(loop)
        handed = {
            n.value for call in self.tree.calls(loop.body) if dotted(call.func) in models
            for a in call.args for n in self.tree.walk(a.value) if type(n) is cst.Name
        }  # fmt: skip
        for node in self.tree.walk(loop.body):
            if type(node) is not cst.Assign:
                continue
            names = {n.value for t in node.targets for n in self.tree.walk(t.target) if type(n) is cst.Name}
            read = {n.value for n in self.tree.walk(node.value) if type(n) is cst.Name}
            for name in sorted(names & read & handed):
                before = [v for v, _ in self.program.assignments(function, name) if not self.tree.inside(v, loop)]
                if before and type(node.value) is cst.Call and self.tree.loops(node)[:1] == [loop] and not self._reset_each_step(loop, name, node):
                    return name
        return None

    def _reset_each_step(self, loop: cst.For, name: str, carry: cst.Assign) -> bool:
        """`hidden = model.init_hidden(bs)` in the loop's own body before `carry`, from what is not
        `hidden` itself: each batch starts a state of its own, nothing is carried."""
        for statement in loop.body.body:  # type: ignore[attr-defined]
            if self.tree.order(statement) >= self.tree.order(carry) or self.tree.inside(carry, statement):
                break
            for node in self.tree.walk(statement):
                if type(node) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == name for t in node.targets):
                    if name not in {n.value for n in self.tree.walk(node.value) if type(n) is cst.Name}:
                        return self.tree.loops(node)[:1] == [loop] and not any(type(a) is cst.If for a in self.tree.ancestors(node) if self.tree.inside(a, loop.body))
        return False

    def _model_from_a_loop(self) -> str | None:
        """`for name, model in models.items(): optimizer = Adam(model.parameters())`: the model is
        the variable of a loop over a container of models, which ddpify does not follow."""
        for call in self.tree.calls():
            if not self._is_optimizer_call(call) or not call.args:
                continue
            params = s.method_call(unchained(call.args[0].value))
            root = params[0] if params is not None else None
            while type(root) is cst.Attribute:
                root = root.value
            if type(root) is not cst.Name:
                continue
            for loop in self.tree.loops(call):
                if type(loop) is cst.For and root.value in {n.value for n in self.tree.walk(loop.target) if type(n) is cst.Name}:
                    return (
                        f"the optimizer (line {self.tree.line(call)}) trains `{root.value}`, the variable of the loop over "
                        f"`{code(loop.iter)}` (line {self.tree.line(loop)}): ddpify wraps a model where it is built, and does not "
                        "follow one out of a container; build each model inside the loop, or wrap it there in "
                        f"DistributedDataParallel yourself (`ddp_{root.value} = DDP({root.value})`, training through it)"
                    )
        return None

    def _handed_everything(self, backward: cst.Call) -> str | None:
        """`def fit(train_loader, model, optimizer, ...)` in a module that builds none of them:
        the caller, in another file, builds the model, its optimizer and the loader."""
        function = self.tree.function(backward)
        if function is None:
            return None
        params = set(self.program.param_names(function))
        steps = [c for c in self.program.calls_in(function) if (m := s.method_call(c)) is not None and m[1] == "step" and dotted(m[0]) in params]
        if not steps:
            return None
        optimizer = dotted(s.method_call(steps[0])[0])  # type: ignore[index]
        loaders = [
            code(loop.iter) for loop in self.tree.loops(backward)
            if isinstance(loop, cst.For) and dotted(self.program.unwrap_iterable(loop.iter)) in params
        ]
        top = function  # `fit` calls `train_epoch`: the caller to convert calls `fit`
        for _ in range(5):
            callers = {caller for _, caller in self.program.call_sites(top)}
            if len(callers) != 1 or None in callers:
                break
            top = callers.pop()  # type: ignore[assignment]
        where = f"`{function.name.value}(...)`"
        batches = f", iterates the loader it is given (`{loaders[-1]}`)" if loaders else ""
        return (
            f"{where} trains with the optimizer it is given (`{optimizer}`, line {self.tree.line(steps[0])}){batches}: the model, its "
            f"optimizer and the data are built by its caller, not in this file; the DDP wrap and the DistributedSampler go where they "
            f"are built: convert the script that calls `{top.name.value}(...)` (when it leaves the loop to this module, make the changes by hand)"
        )

    def _no_loader_reason(self, backward_calls: list[cst.Call]) -> str:
        for comp in self.tree.of_type(cst.CompFor):  # `[train_step(b) for b in train_loader]`
            function = self.tree.function(comp)
            if self.program.loader(comp.iter, function) is not None:
                return (
                    f"the training loop is a comprehension over `{code(comp.iter)}` (line {self.tree.line(comp)}), which ddpify "
                    "does not rewrite (set_epoch, reductions and exits need a loop body): write it as a `for` loop, then convert"
                )
        call = backward_calls[0]
        function = self.tree.function(call)
        stepped = self._closure_step(function) if function is not None else None
        if stepped is not None:
            # `optimizer.step(closure)` with LBFGS over a loader's batch (helper corpus CJ, repros 01, 01c, 01d)
            return (
                f"the loss is evaluated in `{function.name.value}()`, through a closure handed to `{code(stepped.func)}(...)` (line "  # type: ignore[union-attr]
                f"{self.tree.line(stepped)}), which evaluates it as often as its line search needs: on each rank's own shard the "
                "ranks would need different numbers of evaluations, and DDP's backward in each would wait for the others; ddpify "
                "does not rewrite it: average the loss over ranks inside the closure by hand, or train on one GPU"
            )
        drawn = self._batch_drawn_once(call)
        if drawn is not None:
            return drawn
        loops = [loop for loop in self.tree.loops(call) if isinstance(loop, cst.For)]
        if loops:
            where = f"the training loop (line {self.tree.line(loops[0])}) iterates `{code(loops[0].iter)}`"
        else:
            where = f"the training step (line {self.tree.line(call)}) uses tensors the script builds itself"
        return (
            f"the training data does not come from a DataLoader: {where}, which ddpify cannot split by rank "
            "(every rank would train on the same batches); build the batches with a DataLoader over a Dataset, "
            "or give each rank its own part of the data by hand"
        )

    def _closure_step(self, closure: cst.FunctionDef) -> cst.Call | None:
        """The torch.optim optimizer's step handed `closure`, the function that evaluates the loss
        (LBFGS): `optimizer.step(closure)`, `optimizer.step(lambda: closure(model, ...))`, or
        `optimizer.step(closure_for(xb, yb))` where `closure_for` defines it."""
        name, outer = closure.name.value, self.tree.function(closure)
        for call in self.tree.calls():
            found = s.method_call(call)
            if found is None or found[1] != "step" or not call.args:
                continue
            handed = call.args[0].value
            if not (
                (type(handed) is cst.Name and handed.value == name)
                or (type(handed) is cst.Lambda and type(handed.body) is cst.Call and type(handed.body.func) is cst.Name and handed.body.func.value == name)
                or (outer is not None and type(handed) is cst.Call and type(handed.func) is cst.Name and handed.func.value == outer.name.value)
            ):
                continue
            made = [o.node for o in self.program.origins(found[0], self.tree.function(call))]
            if any(type(n) is cst.Call and (q := self.tree.qname(n.func) or "").startswith("torch.optim.") and not q.startswith("torch.optim.lr_scheduler") for n in made):
                return call
        return None

    def _batch_drawn_once(self, backward: cst.Call) -> str | None:
        """`model_input, ground_truth = next(iter(dataloader))` once, then a loop of steps on that
        batch (SIREN fitting one image: helper corpus CJ, repro 05): the whole training set is one
        batch every step reuses, which sharding cannot split into rank-sized parts."""
        function = self.tree.function(backward)
        loops = self.tree.loops(backward)
        start = self.tree.order(loops[-1]) if loops else self.tree.order(backward)
        for call in self.program.calls_in(function):
            if self.tree.order(call) > start or not self.tree.is_builtin_call(call, "next") or not call.args:
                continue
            inner = call.args[0].value
            drawn = inner.args[0].value if type(inner) is cst.Call and self.tree.is_builtin_call(inner, "iter") and inner.args else inner
            if self.program.loader(drawn, function) is not None and not any(self.tree.inside(call, lp) for lp in loops):
                return (
                    f"the training steps reuse one batch drawn once from `{code(drawn)}` (`{code(call)}`, line {self.tree.line(call)}): "
                    "the same batch is the whole of every step's data, full-batch training that DDP cannot split into parts for the "
                    "ranks without changing what each step computes; train on one GPU, or draw the batches from the loader in the loop"
                )
        return None

    def _loader_plan(self, origin: Origin) -> LoaderPlan:
        """How a training DataLoader is split by rank; the script is refused when it cannot be."""
        call = origin.node
        assert isinstance(call, cst.Call)
        line = self.tree.line(call)
        batch_sampler = s.arg(call, 4, "batch_sampler")
        if batch_sampler is not None:
            inner = self.program.batch_sampler(batch_sampler.value, origin.function) or batch_sampler.value  # also `bs = BatchSampler(...)` before
            advice = "give each rank its own batches in it, or use a sampler"
            if self.tree.is_call_to(inner, s.BATCH_SAMPLER) and inner.args:  # type: ignore[union-attr]
                sampler = inner.args[0].value  # type: ignore[union-attr]
                if type(sampler) is cst.Name and type(bound := self.program.bound_once(origin.function, sampler.value)) is cst.Call:
                    sampler = bound  # DETR's `sampler_train = RandomSampler(dataset_train)`, then `BatchSampler(sampler_train, ...)` (helper corpus CV, repro 03)
                if self._shardable_inner(sampler):
                    return LoaderPlan(call, origin.function, "shard", sampler, batched=True)  # type: ignore[arg-type]
                advice = (
                    f"torch's BatchSampler batches what its sampler draws: give it `DistributedSampler(dataset)` in place of "
                    f"`{code(sampler)}`, and call `loader.batch_sampler.sampler.set_epoch(epoch)` each epoch"
                )
            raise NotConvertible(
                f"the training DataLoader (line {line}) takes a batch_sampler, which ddpify does not split by rank: {advice}"
            )
        dataset = s.arg(call, 0, "dataset")
        if dataset is not None and self._is_iterable_dataset(dataset.value, origin.function):
            if self._splits_by_rank(dataset.value, origin.function):
                return LoaderPlan(call, origin.function, "stream")  # its __iter__ reads the rank already
            raise NotConvertible(
                f"the training DataLoader (line {line}) reads an IterableDataset: a DistributedSampler cannot sample a "
                "stream; split the stream by rank in its __iter__ (torch.distributed.get_rank()), then convert"
            )
        sampler = s.arg(call, 3, "sampler")
        if sampler is None:
            return LoaderPlan(call, origin.function, "shard")
        origins = self.program.origins(sampler.value, origin.function)
        if origins and all(isinstance(o.node, cst.Name) and o.node.value == "None" for o in origins):
            return LoaderPlan(call, origin.function, "shard")  # `sampler=train_sampler`, which is None
        optional = self._optional_sampler(call, origin.function, origins)
        if optional is not None:
            return optional
        made = origins[0].node if len(origins) == 1 else None
        name = self.tree.qname(made.func) if isinstance(made, cst.Call) else None
        if name in s.RANDOM_SAMPLER:
            replacement = s.arg(made, 1, "replacement")
            if replacement is not None and not (isinstance(replacement.value, cst.Name) and replacement.value.value == "False"):
                return LoaderPlan(call, origin.function, "generator", made)
            if s.arg(made, 2, "num_samples") is not None:  # `num_samples=K` a pass: a draw of K, which a DistributedSampler does not make
                return LoaderPlan(call, origin.function, "generator", made)
            return LoaderPlan(call, origin.function, "shard", made)
        if name in s.SEQUENTIAL_SAMPLER:
            return LoaderPlan(call, origin.function, "shard", made)
        if name in s.WEIGHTED_SAMPLER:
            self._weighted_draws_with_replacement(made, line)
            return LoaderPlan(call, origin.function, "generator", made)
        if name in s.SUBSET_SAMPLER:
            return LoaderPlan(call, origin.function, "subset", made)
        raise NotConvertible(
            f"the training DataLoader (line {line}) draws with `{code(sampler.value)}`, a sampler ddpify cannot split by "
            "rank: make it give each rank its own samples (or use a DistributedSampler), then convert"
        )

    def _weighted_draws_with_replacement(self, sampler: cst.Call, line: int) -> None:
        """A WeightedRandomSampler keeps its weighting with a draw of its own on each rank only
        when it draws with replacement (its default). `replacement=False` draws every sample once
        an epoch, a weighted permutation: the ranks' own draws would overlap and miss samples."""
        replacement = s.arg(sampler, 2, "replacement")
        if replacement is None or (type(replacement.value) is cst.Name and replacement.value.value == "True"):
            return
        raise NotConvertible(
            f"the training DataLoader (line {line}) draws with `WeightedRandomSampler(..., replacement={code(replacement.value)})`: "
            "without replacement it visits each sample once an epoch (a weighted permutation), and draws of each rank's own "
            "would overlap; draw one permutation alike on every rank (seeded by the epoch) and give each rank its slice "
            "(indices[rank::world_size]), then convert"
        )

    def _shardable_inner(self, sampler: cst.BaseExpression) -> bool:
        """`RandomSampler(ds)` (without replacement) or `SequentialSampler(ds)` written in torch's
        `BatchSampler(...)` over a named dataset: a DistributedSampler over `ds` takes its place."""
        if type(sampler) is not cst.Call or not self.tree.is_call_to(sampler, s.RANDOM_SAMPLER | s.SEQUENTIAL_SAMPLER):
            return False
        source = s.arg(sampler, 0, "data_source")
        if source is None or dotted(source.value) is None or len(sampler.args) != 1:
            return False  # `replacement=`, `num_samples=`, `generator=`: a draw a DistributedSampler does not make
        return True

    def _optional_sampler(self, call: cst.Call, function: cst.FunctionDef | None, origins: list[Origin]) -> LoaderPlan | None:
        """`sampler = WeightedRandomSampler(w, n) if args.balance else None` with `shuffle=(sampler
        is None)`: the sampler keeps its weights from a per-rank generator when the flag is on,
        and the None becomes a DistributedSampler (shuffling as the loader would have) when off."""
        nones = [o for o in origins if type(o.node) is cst.Name and o.node.value == "None"]
        made = [o.node for o in origins if o not in nones]
        if not nones or len(nones) != 1 or len(made) != 1 or not isinstance(made[0], cst.Call):
            return None
        sampler = made[0]
        name = self.tree.qname(sampler.func)
        replacement = s.arg(sampler, 1, "replacement")
        if name in s.WEIGHTED_SAMPLER:
            self._weighted_draws_with_replacement(sampler, self.tree.line(call))
        draws = name in s.WEIGHTED_SAMPLER or (
            name in s.RANDOM_SAMPLER and replacement is not None and not (type(replacement.value) is cst.Name and replacement.value.value == "False")
        )
        dataset = s.arg(call, 0, "dataset")
        if not draws or dataset is None or type(dataset.value) is not cst.Name:
            return None
        none = nones[0].node
        if not self._bound_before(dataset.value, function, self.tree.statement(none)):
            return None
        shuffle = s.arg(call, 2, "shuffle")
        used = s.arg(call, 3, "sampler")
        if shuffle is None:
            shuffles = "False"
        elif type(shuffle.value) is cst.Name and shuffle.value.value in ("True", "False"):
            return None  # `shuffle=True` next to a sampler that may be set: a DataLoader refuses both
        elif used is not None and code(shuffle.value).strip("()") == f"{code(used.value)} is None":
            shuffles = "True"  # shuffled exactly when there is no sampler
        else:
            return None
        distributed = f"DistributedSampler({code(dataset.value)}, shuffle={shuffles})"
        return LoaderPlan(call, function, "generator", sampler, none=none, none_sampler=distributed)

    def _recreated_loaders(self, loops: list[TrainLoop]) -> list[LoaderPlan]:
        """Loaders built outside this file are made again with a DistributedSampler once, where they
        enter this file: after the statement that gets them (`train_dl, ... = get_data(opts)`), in
        the caller when a training function is handed one, else before their first use."""
        plans: dict[str, LoaderPlan] = {}
        for loop in loops:
            if not loop.external:
                continue
            for loader, function in self._loader_bindings(loop.loader, loop.function, set()):
                key = f"{id(function)}:{code(loader)}"
                if key not in plans:
                    plans[key] = self._recreate_plan(loader, function, loop)
        return list(plans.values())

    def _loader_bindings(self, expr, function, seen) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None]]:
        """Follow a parameter to what the callers in this file pass for it."""
        name = dotted(expr)
        if function is None or function in seen or not isinstance(expr, cst.Name) or name not in self.program.all_param_names(function):
            return [(expr, function)]
        seen.add(function)
        found = []
        for call, caller in self.program.call_sites(function):
            argument = self.program.argument_for(call, function, name)
            if argument is not None and dotted(argument) is not None:
                found += self._loader_bindings(argument, caller, seen)
        return found or [(expr, function)]

    def _recreate_plan(self, loader: cst.BaseExpression, function: cst.FunctionDef | None, loop: TrainLoop) -> LoaderPlan:
        spelled = code(loader)
        root = spelled.split(".")[0]
        comprehension = next((a for a in self.tree.ancestors(loader) if type(a) is cst.CompFor), None)
        if comprehension is None and type(loader) is cst.Name:
            comprehension = next((
                a for n in self.program.scope_nodes(function) if type(n) is cst.Name and n.value == loader.value
                for a in self.tree.ancestors(n) if type(a) is cst.CompFor and loader.value in self.program.names_in(a.target)
            ), None)
        if comprehension is not None and type(loader) is cst.Name and loader.value in self.program.names_in(comprehension.target) and not self.program.binds(function, loader.value):
            # `iters = {t: iter(dl) for t, dl in loaders.items()}` over loaders built elsewhere (helper corpus BQ, repro 03)
            raise NotConvertible(
                f"the training batches come from `{spelled}`, a variable of a comprehension over `{code(comprehension.iter)}` (line "
                f"{self.tree.line(comprehension)}), which ddpify does not follow to where each loader is built: give each a "
                "DistributedSampler where it is built (and set_epoch at each epoch), then convert"
            )
        if function is not None and isinstance(loader, (cst.Name, cst.Attribute)) and root != "self" and not self.program.binds(function, root):
            function = None  # a global the function reads: made again where the module binds it
        assigned = [v for v, _ in self.program.assignments(function, spelled)]
        cls = self.program.owner_class(function)
        if not assigned and root == "self" and cls is not None:
            # `self.train_dataloader = get_data(args)` in `fit()`, iterated in `one_epoch()`: made
            # again where the one method that binds it does so (before its scheduler reads its length)
            binders = {m: values for m in self.program.class_methods(cls).values()
                       if (values := [v for v, _ in self.program.assignments(m, spelled) if not (isinstance(v, cst.Name) and v.value == "None")])}
            if len(binders) == 1:
                ((function, assigned),) = binders.items()
        if assigned:
            statement = self.tree.statement(max(assigned, key=self.tree.line))
            return LoaderPlan(None, function, "recreate", loader=loader, anchor=statement, after=True)
        bound_by = [n for n in self.program.scope_nodes(function) if type(n) is cst.For and root in self.program.names_in(n.target)]
        if len(bound_by) == 1 and type(loader) is cst.Name and isinstance(bound_by[0].body, cst.IndentedBlock):
            # `for f, loader in folds(X, y):` (helper corpus CG, repro 09): made again at the top of each pass,
            # where the loop has bound it (before the loop, the name is not bound yet: UnboundLocalError)
            return LoaderPlan(None, function, "recreate", loader=loader, anchor=bound_by[0].body)
        uses = [n for n in self.program.scope_nodes(function) if isinstance(n, (cst.Name, cst.Attribute)) and _spells(n, spelled)]
        first = min((u for u in uses if not self._is_assigned(u)), key=self.tree.order, default=loop.loop)
        loops = self.tree.loops(first)  # before the outermost loop that uses it: made once
        anchor = loops[-1] if loops else self.tree.statement(first)
        return LoaderPlan(None, function, "recreate", loader=loader, anchor=anchor)

    def _is_assigned(self, node: cst.CSTNode) -> bool:
        return isinstance(self.tree.parent(node), cst.AssignTarget)

    def _is_iterable_dataset(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        for origin in self.program.origins(expr, function):
            node = origin.node
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in self.program.classes:
                cls = self.program.classes[node.func.value]
                if any(self.tree.qname(base.value) in s.ITERABLE_DATASET for base in cls.bases):
                    return True
        return False

    def _splits_by_rank(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """A same-file IterableDataset whose `__iter__` (or a method it calls) asks for the rank
        and the world size (`dist.get_rank()`, `RANK`): it gives each rank its own part itself."""
        for origin in self.program.origins(expr, function):
            node = origin.node
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in self.program.classes):
                continue
            methods = self.program.class_methods(self.program.classes[node.func.value])
            reached = [methods[name] for name in ("__iter__",) if name in methods]
            reached += [m for name, m in methods.items() if any(dotted(c.func) == f"self.{name}" for r in reached for c in self.program.calls_in(r))]
            asks = {"torch.distributed.get_rank", "torch.distributed.get_world_size"}
            for method in reached:
                nodes = self.program.scope_nodes(method)
                if any(self.tree.is_call_to(n, asks) for n in nodes) or any(string_value(n) in ("RANK", "WORLD_SIZE") for n in nodes if type(n) is cst.SimpleString):
                    return True
        return False

    def _sharded(self, loop: TrainLoop, plans: list[LoaderPlan]) -> bool:
        """Whether a `for` loop iterates a loader that gets a DistributedSampler (which needs set_epoch)."""
        if loop.consumed_by != "for":
            return False
        if loop.external:
            return True
        shard = {plan.call for plan in plans if plan.how == "shard" or plan.none is not None}
        return any(origin.node in shard for origin in self.program.dataloaders(loop.loader, loop.function))

    def _epoch_starts(self, loops: list[TrainLoop], plans: list[LoaderPlan]) -> list[EpochStart]:
        optional = {plan.call for plan in plans if plan.none is not None}
        starts: dict[tuple[cst.CSTNode, str], EpochStart] = {}
        for loop in loops:
            for loader, function in self.program.fact(TrainLoops).consumed(loop):
                chosen = any(o.node in optional for o in self.program.dataloaders(loader, function))
                for start in self._epoch_start(loop.loop, code(loader), loader, function, set(), loop):
                    start.optional = chosen
                    starts.setdefault((start.loop, start.loader), start)
        return list(starts.values())

    def _epoch_start(self, node, loader_code, loader_node, function, seen, train_loop: TrainLoop | None = None) -> list[EpochStart]:
        outer = [lp for lp in self.tree.loops(node) if lp is not node]
        if outer:
            loop = outer[0]
            owner = self.program.sampler_owner(loader_node, function, loader_code)
            root = owner.split(".", 1)[0].split("[", 1)[0]
            here = self.tree.function(loop)
            if type(loader_node) is cst.Call and self.tree.is_call_to(loader_node, s.DATALOADER) and self.tree.inside(loader_node, node):
                # `for x, y in DataLoader(ds, shuffle=True):` in a loop of rounds (helper corpus CO, repro 10): no name to call set_epoch on
                self.warnings.append((loader_node, (
                    f"this DataLoader is made in the `for` statement itself, in each pass of the loop at line {self.tree.line(loop)}: its new "
                    "DistributedSampler starts at epoch 0 every time and visits the same order in every pass; bind it to a name before the "
                    "`for` and call `.sampler.set_epoch(...)` with the pass's number"
                )))
                return []
            if not (self.program.binds(here, root) or self.program.binds(None, root)):
                return []  # `self.loader` of a helper object's method: no name for it here (its refill moves the sampler on)
            if _phase_loop(loop) and len(outer) > 1:
                # `for phase in ["train", "val"]:` inside the epoch loop: the loader may depend on
                # the phase, so the call goes in the phase loop; the epoch loop numbers the epochs
                return [EpochStart(loop, owner, self._epoch_counter(outer[1]), node)]
            return [EpochStart(loop, owner, self._epoch_counter(loop), node)]
        if function is None or function in seen:
            return []
        seen.add(function)
        found = []
        loops = self.program.fact(TrainLoops)
        for call, caller in self.program.call_sites(function):
            if train_loop is not None and self.tree.function(train_loop.loop) is function and not loops.trains_at(call, function, train_loop):
                continue  # `run_epoch(model, val_loader)`: this call evaluates
            spelled = loader_code
            if isinstance(loader_node, cst.Name) and loader_node.value in self.program.all_param_names(function):
                argument = self.program.argument_for(call, function, loader_node.value)
                if argument is None:
                    continue
                spelled, loader_node_caller = code(argument), argument
            elif loader_code.startswith("self.") and self.program.owner_class(function) is not None:
                # `self.loader` of a method called as `trainer.train_epoch()`: the caller reaches it as `trainer.loader`
                receiver = dotted(call.func.value) if type(call.func) is cst.Attribute else None
                if receiver is None:
                    continue
                spelled, loader_node_caller = (loader_code if receiver == "self" else receiver + loader_code[4:]), loader_node
            elif type(loader_node) is cst.Name and self.program.assignments(function, loader_node.value):
                # built in each call of the function: the caller has no name for it
                if not self.program.called_repeatedly(function):
                    break  # one pass, one call: epoch 0 is its order
                self.warnings.append((loader_node, (
                    f"`{loader_code}` is built anew in each call of `{function.name.value}`: its DistributedSampler starts at epoch 0 "
                    f"every call, so every call visits this rank's shard in the same order; hand the caller's epoch in and call "
                    f"`{self.program.sampler_owner(loader_node, function, loader_code)}.sampler.set_epoch(epoch)` before iterating it"
                )))
                break
            else:
                loader_node_caller = loader_node
            found += self._epoch_start(call, spelled, loader_node_caller, caller, seen)
        return found

    def _epoch_counter(self, loop: cst.For | cst.While) -> str | None:
        """What numbers the epochs: the loop variable, or a counter the loop increments."""
        counted = sorted(
            {
                name
                for n in self.tree.walk(loop.body)
                if isinstance(n, cst.AugAssign) and isinstance(n.operator, cst.AddAssign) and (name := dotted(n.target))
            }
        )
        named = next((name for name in counted if "epoch" in name), None)
        if isinstance(loop, cst.For):
            target = loop.target
            if isinstance(target, cst.Name) and not (target.value == "_" and named):
                if not named and self._not_counting(loop):
                    return PASSES  # `for lr in [1e-3, 1e-2]`: each pass gets the sampler's next epoch
                return target.value
            if isinstance(target, cst.Tuple) and not named and self._not_counting(loop):
                return PASSES  # `for name, stage, epochs in (("warm", run_stage, 1), ...)`: records, no epoch numbers (CG, repro 10)
            if isinstance(target, cst.Tuple):  # `for idx, epoch in enumerate(...)`
                names = [el.value.value for el in target.elements if isinstance(el.value, cst.Name)]
                return next((n for n in names if "epoch" in n), None) or named or (names[0] if names and names[0] != "_" else None)
            return named
        if named:
            return named
        for node in self.tree.walk(loop.test):
            if isinstance(node, cst.Name) and node.value in counted:
                return node.value
        return None

    def _not_counting(self, loop: cst.For) -> bool:
        """A loop over values that are no epoch numbers (`for lr in [1e-3, 1e-2, 1e-1]`, strings,
        a name bound to such a list): set_epoch takes an int."""
        iterable = loop.iter
        values = [iterable] if type(iterable) is not cst.Name else [
            self.program.element(v, i) for v, i in self.program.assignments(self.tree.function(loop), iterable.value)
        ]
        for value in values:
            if type(value) in (cst.List, cst.Tuple) and value.elements and any(type(e.value) is not cst.Integer for e in value.elements):
                return True
        return False

    # --- device ----------------------------------------------------------------------

    def _device(self, entry: Entry, models: list[TrainedModel]) -> Device:
        """The script's device variable: assigned a device pick in the entry point, else in the
        module, else where the model is built (`main()` under a `__main__` block that sets up)."""
        cuda_only = not any(self.tree.qname(c.func) in s.DEVICE_CHECKS for c in self.tree.calls())
        scopes = list(dict.fromkeys([entry.function, None, *(m.function for m in models)]))
        for function in scopes:
            for node in self.program.scope_nodes(function):
                if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                    if self.device_kind(node.value) is not None:
                        name = node.targets[0].target.value
                        for value, index in self.program.assignments(function, name):  # every branch's pick
                            if index is None:
                                self._warn_if_from_arguments(name, value)  # type: ignore[arg-type]
                        return Device(name, function, cuda_only)
        return Device(None, None, cuda_only)

    def _warn_if_from_arguments(self, name: str, value: cst.BaseExpression) -> None:
        """`torch.device(args.device)`: a "cuda:N" passed in would put every rank on GPU N."""
        if isinstance(value, cst.Call) and value.args and self.tree.qname(value.func) in s.TORCH_DEVICE:
            first = value.args[0].value
            if "." in (dotted(first) or ""):  # `args.device`, `config.device`: a value from outside
                self.warnings.append(
                    (value, f'`{name} = {code(value)}` is kept: pass "cuda" (not "cuda:N") so that each rank uses the GPU set_device(local_rank) picked')
                )

    def device_kind(self, node: cst.BaseExpression) -> Literal["str", "device"] | None:
        """Whether an expression picks a device: as a string or a torch.device."""
        if isinstance(node, cst.IfExp):
            body, orelse = self.device_kind(node.body), self.device_kind(node.orelse)
            return body or orelse if (body or self._is_cpu(node.body)) and (orelse or self._is_cpu(node.orelse)) else None
        if is_gpu_string(node) or string_value(node) == "mps":
            return "str"
        if isinstance(node, cst.Call):
            name = self.tree.qname(node.func)
            if name in s.TORCH_DEVICE or name in s.ACCELERATOR_CURRENT:
                return "device"
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Call) and self.tree.qname(node.value.func) in s.ACCELERATOR_CURRENT:
            return "str"  # torch.accelerator.current_accelerator().type
        return None

    def _is_cpu(self, node: cst.BaseExpression) -> bool:
        if string_value(node) == "cpu":
            return True
        return isinstance(node, cst.Call) and self.tree.qname(node.func) in s.TORCH_DEVICE and bool(node.args) and string_value(node.args[0].value) == "cpu"

    def _check_names(self, entry: Entry) -> set[str]:
        """The setup defines `local_rank` and `backend` in the entry point, and `rank` and
        `world_size` where no name of the script's own is called so (then the code asks
        `dist.get_rank()` where it needs the rank). Returns the latter names the script binds,
        and the name the backend takes where the script has a `backend` of its own."""
        taken = set()
        for name in ENTRY_NAMES:
            values = self.program.assignments(entry.function, name)
            if name == "local_rank" and values and all(code(v).endswith("local_rank") for v, _ in values):
                continue  # `local_rank = args.local_rank`: replaced by the environment variable
            if not self.program.binds(entry.function, name):
                continue
            if name in ("rank", "world_size"):
                taken.add(name)
                continue
            if name == "backend":  # the setup's own temporary: another name does
                taken.add(next(n for n in ("dist_backend", "ddp_backend", "process_group_backend") if not self.program.binds(entry.function, n)))
                continue
            where = next((f" (line {self.tree.line(v)})" for v, _ in values), "")
            raise NotConvertible(f"the script already uses the name `{name}`{where} that the DDP setup needs; rename it first")
        return taken

    # --- data preparation ---------------------------------------------------------------

    def _data_preparation(self, facts: Facts) -> tuple[list[cst.BaseStatement], set[cst.FunctionDef], list[cst.Call]]:
        """Entry statements that call same-file helpers writing data files (and nothing that syncs):
        `if not exists: download_and_unzip(...); create_csvs(...)`; and calls of helpers that make
        their files only when missing, whose value every rank keeps (`np.load(prepare(root))`)."""
        writers = self.program.reaching(self._writes_file)
        # `torch.save(tensor, f"{root}/cls0/{i}.pt")` in a helper: data files, when they are made
        # before any training (a checkpoint saves the model, and after training starts)
        first = min((self.tree.order(loop.loop) for loop in facts.train_loops), default=None)
        models = {m.ref.split(".")[0] for m in facts.models}
        tensor_writers = self.program.reaching(lambda call, function: self._saves_data(call, function, models)) - writers
        writers |= tensor_writers
        writers -= facts.syncing
        # `NpyData(root)` whose __init__ writes its files when they are missing: built on rank 0 first
        built = {f for f in writers if facts.in_dataset(f) and f.name.value == "__init__"}
        writers = {f for f in writers if not facts.in_dataset(f)}
        entry = facts.entry
        body = entry.block.body if entry.kind != "library" else []
        statements, calls = [], []
        trained = False  # a statement before this one trains: what is written from here on is no data (`exp.close()` removing the run folder)
        for statement in _flatten_main_block(self.tree, entry.block) if entry.kind == "module" else body:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            called = {t[0] for c in self.tree.calls(statement) if (t := self.program.callee(c, entry.function)) is not None}
            if trained and called and all(self._only_removes(f) for f in called & writers):
                continue  # `exp.close()` removing the run folder after training: no data (helper corpus CB, repro 04: "rank 0 prepared the data files")
            trained = trained or bool(called & self.program.training_functions) or any(self.tree.inside(loop.loop, statement) for loop in facts.train_loops)
            if facts.syncs(statement, entry.function):
                continue
            if _tees_output(statement):
                continue  # `sys.stdout = Logger("log.txt")`: a log, not data (guarded as output)
            if called & tensor_writers and not called & (writers - tensor_writers) and (first is None or self.tree.order(statement) > first):
                continue  # a save after training started: a checkpoint, not data
            loops = any(isinstance(n, (cst.For, cst.While)) for n in self.tree.walk(statement))
            if any(private_to_process(self.tree, self.program, a.value, entry.function) for c in self.tree.calls(statement) for a in c.args):
                continue  # `make_checkpoint(os.path.join(tempfile.mkdtemp(), "enc.pt"))`: each process writes its own (helper corpus AY, repro 04)
            if called & writers and not loops and not self._keeps_a_value(statement, entry.function):
                statements.append(statement)  # `opt = parse_option()` is kept by every rank: not one of them
            elif called & (writers | built) and not loops and (first is None or self.tree.order(statement) < first):
                calls += self._made_when_missing(statement, entry.function, writers | built)
            elif self._made_if_missing(statement, entry.function, first, models) and not self._keeps_a_value(statement, entry.function):
                statements.append(statement)
        inside = {id(c) for st in statements for c in self.tree.calls(st)} | {id(c) for c in calls}
        only_there: set[cst.FunctionDef] = set()
        grown = True
        while grown:  # run only there: called from the prepared statements, or only by functions that are
            grown = False
            for function in writers - only_there:
                sites = self.program.call_sites(function)
                if sites and all(id(site) in inside or caller in only_there for site, caller in sites):
                    only_there.add(function)
                    grown = True
        return statements, only_there, calls

    def _made_when_missing(self, statement: cst.BaseStatement, function: cst.FunctionDef | None, writers: set[cst.FunctionDef]) -> list[cst.Call]:
        """Calls in `statement` of a same-file helper that writes data files after asking whether
        its path exists (`if os.path.exists(path): return path`), with arguments that are only
        names, constants and paths: called again, once the files are there, it writes nothing."""
        found = []
        for call in self.tree.calls(statement):
            callee = self.program.callee(call, function)
            if callee is None or callee[0] not in writers:
                continue
            helper = callee[0]
            if s.arg(call, None, "download") is not None:
                continue  # `Clusters(root, download=True)`: rank 0's download comes first already
            if not any(self._asks_for_a_path(c) for f in self._reached(helper, writers) for n in self.program.scope_nodes(f) if type(n) is cst.If for c in self.tree.calls(n.test)):
                continue
            if all(self.tree.qname(c.func) in PATH_BUILDERS for a in call.args for c in self.tree.calls(a.value)):
                found.append(call)
        return found

    def _reached(self, function: cst.FunctionDef, among: set[cst.FunctionDef], depth: int = 3) -> list[cst.FunctionDef]:
        """`function` and the functions of `among` it calls, through `depth` calls (`load_data`
        calling `download_or_prepare`, which looks for its file first)."""
        found, work = [function], [function]
        for _ in range(depth):
            work = [t[0] for f in work for c in self.program.calls_in(f) if (t := self.program.callee(c, f)) is not None and t[0] in among and t[0] not in found]
            found += work
        return found

    def _made_if_missing(self, statement: cst.BaseStatement, function: cst.FunctionDef | None, first: int | None, models: set[str]) -> bool:
        """`if not os.path.exists(CACHE): ...; np.savez(CACHE, ...)` before training: data made
        once and cached to a file, which every rank reads back after it. Written by every rank
        at once, or by rank 0 alone with no wait, the others read a missing or half-written file."""
        if type(statement) is not cst.If or statement.orelse is not None or first is None or self.tree.order(statement) > first:
            return False
        test = statement.test
        if type(test) is not cst.UnaryOperation or type(test.operator) is not cst.Not or not any(self._asks_for_a_path(c) for c in self.tree.calls(test)):
            return False  # `if not os.path.exists(p):`
        return any(
            self._writes_file(c, function) or (self.tree.is_call_to(c, s.TORCH_SAVE) and self._saves_data(c, function, models))
            for c in self.tree.calls(statement.body)
        )

    def _asks_for_a_path(self, call: cst.Call) -> bool:
        """`os.path.exists(p)`, `os.path.isfile(p)`, `Path(p).exists()`, `p.is_dir()`."""
        if self.tree.qname(call.func) in PATH_TESTS:
            return True
        found = s.method_call(call)
        return found is not None and found[1] in ("exists", "is_file", "is_dir") and not call.args

    def _saves_data(self, call: cst.Call, function: cst.FunctionDef | None, models: set[str]) -> bool:
        """`torch.save(x, path)` in a same-file function that trains nothing, of a value that is no
        model, state dict or optimizer: a data file."""
        if function is None or not self.tree.is_call_to(call, s.TORCH_SAVE) or not call.args or function in self.program.training_functions:
            return False
        saved = call.args[0].value
        names = {n.value for n in self.tree.walk(saved) if type(n) is cst.Name}
        if names & (models | set(self.program.param_names(function))) - {"self"} and not self.tree.calls(saved):
            return False  # `torch.save(net, path)`: a model handed in
        return not any((m := s.method_call(c)) is not None and m[1] in ("state_dict", "parameters") for c in self.tree.calls(saved)) and "optim" not in code(saved)

    def _keeps_a_value(self, statement: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Whether a statement binds a name the code after it reads (`opt = parse_option()`):
        every rank needs that value, so the statement is no rank-0-only preparation."""
        bound: set[str] = set()
        for node in self.tree.walk(statement):
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                for target in targets:
                    bound |= {n.value for n in self.tree.walk(target) if isinstance(n, cst.Name)}
            elif isinstance(node, cst.NamedExpr) and isinstance(node.target, cst.Name):
                bound.add(node.target.value)
        if not bound:
            return False
        end = self.tree.order(statement) + sum(1 for _ in self.tree.walk(statement))
        later: dict[str, cst.Name] = {}  # each bound name's first mention after the statement
        for n in self.program.scope_nodes(function):
            if type(n) is cst.Name and n.value in bound and n.value not in later and self.tree.order(n) >= end:
                later[n.value] = n
        # `for x, y in loader:` or `data = np.load(p)` after `x = ...` in the statement: bound again before any read
        return any(not self._bound_here(n) for n in later.values())

    def _bound_here(self, name: cst.Name) -> bool:
        """`x` in `for x, y in loader:`, `x = ...`, `with open(p) as x:`: a name bound, not read."""
        child: cst.CSTNode = name
        for parent in self.tree.ancestors(name):
            if type(parent) in (cst.For, cst.CompFor):
                return child is parent.target
            if type(parent) is cst.AssignTarget or (type(parent) is cst.AnnAssign and child is parent.target):
                return True
            if type(parent) is cst.AsName:
                return True
            if not isinstance(parent, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
                return False
            child = parent
        return False

    def _only_removes(self, function: cst.FunctionDef) -> bool:
        """Every file `function` writes, it removes (`shutil.rmtree(self.workdir)`, `os.unlink(...)`)."""
        writes = [c for c in self.program.calls_in(function) if self._writes_file(c, function)]
        return bool(writes) and all(map(self.outputs.removes, writes))

    def _writes_file(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """A data file: written (not a checkpoint, log or folder: every rank makes folders), downloaded or extracted."""
        if self.tree.qname(call.func) in s.DOWNLOADS:
            return True
        found = s.method_call(call)
        if found is not None and found[1] == "extractall":
            return True
        out = self.outputs.of(call, function)
        return out is not None and out.kind == FILE_WRITE and not out.by_name

    # --- custom methods of the wrapped model -------------------------------------------

    def _check_custom_methods(self, facts: Facts) -> None:
        """`model.compute_loss(x)` in a training loop runs the forward outside DDP's: no gradient
        averaging. Outside training (sampling, evaluation, `init_hidden`) it goes through `.module`."""
        for call, function in facts.custom_method_calls():
            assert isinstance(call.func, cst.Attribute)
            method = call.func.attr.value
            if self._feeds_backward(call, function) and self._may_run_forward(call.func.value, method, function):
                if self._part_the_forward_runs(call.func.value, method, function) and not any(m.unused_parameters for m in facts.models):
                    continue  # `model.user(u).pow(2)`, a penalty on what the forward looks up (helper corpus CU, repro 01)
                raise NotConvertible(
                    f"`{code(call.func)}(...)` (line {self.tree.line(call)}) runs the model for training outside its "
                    "forward(), so DDP would not average its gradients across ranks: call the model itself "
                    "(its forward) in the training loop, then convert"
                )
        for function in facts.model_refs:
            for call in self.program.calls_in(function):
                if type(call.func) is cst.Subscript and facts.is_model(call.func.value, function) and self._feeds_backward(call, function):
                    raise NotConvertible(
                        f"`{code(call.func)}(...)` (line {self.tree.line(call)}) runs a part of the model for training, outside its "
                        "forward(), so DDP would not average its gradients across ranks: give the model a forward() that runs "
                        f"its parts (a module of its own around the {code(call.func.value)}[...] calls), call it in the training loop, then convert"
                    )
                if (
                    self.tree.qname(call.func) in FUNCTIONAL_CALLS and call.args and facts.is_model(call.args[0].value, function)
                    and self._feeds_backward(call, function)
                ):
                    raise NotConvertible(
                        f"`{code(call.func)}({code(call.args[0].value)}, ...)` (line {self.tree.line(call)}) runs the model's forward "
                        "with parameters handed in, outside DDP's forward, so DDP would not average its gradients across ranks: "
                        "average them by hand (dist.all_reduce on each gradient before the step) or call the model itself"
                    )

    def _returns_input_gradient(self, helper: cst.FunctionDef) -> bool:
        values, seen = list(self.program.returns(helper)), set()
        while values:
            for n in self.tree.walk(values.pop()):
                if type(n) is cst.Call and _input_gradient(self.tree, n):
                    return True
                if type(n) is cst.Name and n.value not in seen:
                    seen.add(n.value)
                    values += self._values_of(helper, n.value)
        return False

    def _check_hand_set_gradients(self, facts: Facts) -> None:
        """`p.grad = p.data - fast_p.data` (Reptile's meta-gradient) or a gradient from
        `torch.autograd.grad` stored for the step: DDP averages what backward() accumulates, not
        what the script writes into `.grad`, so each rank would step with its own gradient and the
        replicas drift apart. A value made from the gradients backward() left (`p.grad / n`, a
        projection of them) is the same on every rank, and so is an empty start (`None`, zeros)."""
        for function in facts.model_refs:
            for node in self.program.scope_nodes(function):
                if type(node) is not cst.Assign or not any(s.is_grad(t.target) for t in node.targets):
                    continue
                target = next(t.target for t in node.targets if s.is_grad(t.target))
                model = self._parameters_of(target, function, facts)
                if model is None or self._empty_gradient(node.value):
                    continue
                source = self._gradient_source(node.value, function)
                if source == "backward":
                    continue
                made = "computed by `torch.autograd.grad`, which DDP does not average" if source == "autograd" else "not by backward()"
                raise NotConvertible(
                    f"`{code(target)} = {code(node.value)}` (line {self.tree.line(node)}) sets the gradients of `{model}` by hand, "
                    f"{made}: DDP averages only the gradients backward() accumulates, so each rank would step with its own and the "
                    "replicas would drift apart; average them over ranks (dist.all_reduce, then divide by the world size) before the "
                    "optimizer step"
                )
            self._check_gradient_noise(function, facts)

    def _check_gradient_noise(self, function: cst.FunctionDef | None, facts: Facts) -> None:
        """`p.grad.add_(torch.randn_like(p.grad) * std)` after backward() (annealed gradient noise;
        helper corpus CR, repro 02): drawn after DDP's averaging, from a global generator nothing
        seeds, each rank adds its own noise and the replicas drift apart. Alike on every rank when
        the script seeds torch first."""
        for call in self.program.calls_in(function):
            found = s.method_call(call)
            if found is None or not found[1].endswith("_") or not s.is_grad(found[0]) or self._parameters_of(found[0], function, facts) is None:
                continue
            draw = next((c for a in call.args for c in self.tree.calls(a.value) if self.tree.qname(c.func) in GRADIENT_NOISE), None)
            if draw is not None and not seeded_before(self.tree, self.program, call, function):
                raise NotConvertible(
                    f"`{code(call)}` (line {self.tree.line(call)}) adds noise to the gradients after backward(), drawn from torch's "
                    "global generator, which nothing seeds: each rank would draw its own noise after DDP averaged the gradients, and "
                    "the replicas would drift apart; seed torch alike on every rank first (torch.manual_seed), or draw the noise "
                    "from a generator seeded alike, then convert"
                )

    def _parameters_of(self, target: cst.BaseExpression, function: cst.FunctionDef | None, facts: Facts) -> str | None:
        """The trained model whose parameter `target` (`p.grad`) is: `p` is bound by a loop over
        `model.parameters()` (or `named_parameters()`, also zipped with something else)."""
        while type(target) is cst.Attribute and target.attr.value in ("grad", "data"):
            target = target.value
        if type(target) is not cst.Name:
            return None
        for loop in self.tree.loops(target):
            if type(loop) is not cst.For or target.value not in self.program.names_in(loop.target):
                continue
            for call in self.tree.calls(loop.iter):
                found = s.method_call(call)
                if found is not None and found[1] in ("parameters", "named_parameters") and facts.is_model(found[0], function):
                    return code(found[0])
        return None

    def _empty_gradient(self, value: cst.BaseExpression) -> bool:
        """`None`, or zeros to accumulate into (`torch.zeros_like(p)`, `p.new_zeros(...)`)."""
        if type(value) is cst.Name and value.value == "None":
            return True
        if type(value) is not cst.Call:
            return False
        found = s.method_call(value)
        name = found[1] if found is not None else (self.tree.qname(value.func) or "").rsplit(".", 1)[-1]
        return name in ("zeros_like", "zeros", "new_zeros", "zero_")

    def _gradient_source(self, value: cst.BaseExpression, function: cst.FunctionDef | None) -> str | None:
        """Where a hand-set gradient comes from, through the local names it reads: "backward"
        when it reads a `.grad` (what backward() left, averaged), "autograd" for
        `torch.autograd.grad`, else None (made by hand: a difference of weights)."""
        names, seen, values = [value], set(), []
        loops = {target: loop for loop in self.program.scope_nodes(function) if type(loop) is cst.For for target in self.program.names_in(loop.target)}
        while names:
            expr = names.pop()
            values.append(expr)
            for n in self.tree.walk(expr):
                if type(n) is not cst.Name or n.value in seen:
                    continue
                seen.add(n.value)
                names += [v for v, _ in self.program.assignments(function, n.value)] + self.program.augmented(function, n.value)
                if n.value in loops:
                    names.append(loops[n.value].iter)
        found = None
        for expr in values:
            for n in self.tree.walk(expr):
                if type(n) is cst.Attribute and n.attr.value == "grad" and self.tree.qname(n) != "torch.autograd.grad":
                    return "backward"
                if type(n) is cst.Call and self.tree.qname(n.func) == "torch.autograd.grad":
                    found = "autograd"
        return found

    def _check_aliases(self, facts: Facts) -> None:
        """`net = model.to(device)` before the wrap, then `net(x)` in training: `net` stays the
        plain model, so that forward would skip DDP (no gradient averaging) while the script
        looks converted. Refused with the names, until a careful rewrite of both exists."""
        for model in facts.models:
            if model.element is not None or model.anchor is None:
                continue
            wrapped_at = self.tree.order(model.anchor)
            for node in self.program.scope_nodes(model.function):
                if type(node) is not cst.Assign or dotted(unchained(node.value)) != model.ref:
                    continue
                if self.tree.order(node) > wrapped_at and not self.tree.inside(node, model.anchor):
                    continue  # bound from the wrapper
                for target in node.targets:
                    alias = dotted(target.target)
                    if alias is None or alias == model.ref:
                        continue
                    for loop in facts.train_loops:
                        for call in self.tree.calls(loop.loop):
                            if dotted(call.func) == alias and self._feeds_backward(call, self.tree.function(call)):
                                raise NotConvertible(
                                    f"the training forward `{code(call)}` (line {self.tree.line(call)}) calls `{alias}`, a second name "
                                    f"for `{model.ref}` bound at line {self.tree.line(node)}, before the DDP wrap: it would stay the plain "
                                    f"model and skip DDP's gradient averaging; call the model through one name (`{model.ref}`), then convert"
                                )

    def _feeds_backward(self, call: cst.Call, function: cst.FunctionDef | None, depth: int = 0) -> bool:
        """Whether a value `backward()` is called on comes from `call` (`loss = model.loss(x)`),
        also through what a same-file function returns (`loss = vae_loss(model, x)`, whose
        `model.encode(x)` computes its result)."""
        if self.tree.grad_disabled(call):
            return False
        lineage = (call, *self.tree.ancestors(call))
        if any(id(node) in self._backward_sources(function) for node in lineage):
            return True
        if function is None or depth >= 3 or not any(id(node) in self._return_sources(function) for node in lineage):
            return False
        return any(self._feeds_backward(site, caller, depth + 1) for site, caller in self.program.call_sites(function))

    def _backward_sources(self, function: cst.FunctionDef | None) -> set[int]:
        """Ids of the expressions a function's backward() receivers are computed from: the
        receivers and, through local names, the values assigned to them. Computed once."""
        cached = self._sources_cache.get(function)
        if cached is None:
            receivers = [node.func.value for node in self.program.calls_in(function) if is_backward(node)]  # type: ignore[attr-defined]
            cached = self._sources_cache[function] = self._computed_from(function, receivers)
        return cached

    def _return_sources(self, function: cst.FunctionDef) -> set[int]:
        """Ids of the expressions what `function` returns is computed from."""
        cached = self._return_sources_cache.get(function)
        if cached is None:
            cached = self._return_sources_cache[function] = self._computed_from(function, self.program.returns(function))
        return cached

    def _computed_from(self, function: cst.FunctionDef | None, values: list[cst.BaseExpression]) -> set[int]:
        """Ids of `values` and, through the local names they read, of the values assigned to those."""
        sources: set[int] = set()
        names: list[str] = []
        for value in values:
            sources.add(id(value))
            names += [n.value for n in self.tree.walk(value) if type(n) is cst.Name]
        seen: set[str] = set()
        while names:
            name = names.pop()
            if name in seen:
                continue
            seen.add(name)
            for value in self._values_of(function, name):
                sources.add(id(value))
                names += [n.value for n in self.tree.walk(value) if type(n) is cst.Name]
        return sources

    def _values_of(self, function: cst.FunctionDef | None, name: str) -> list[cst.CSTNode]:
        return [v for v, _ in self.program.assignments(function, name)] + self.program.augmented(function, name)

    def _part_the_forward_runs(self, obj: cst.BaseExpression, attribute: str, function: cst.FunctionDef | None) -> bool:
        """`model.user(u)` where `user` is a layer of a same-file class whose forward runs
        `self.user(...)` at every step, outside any branch (BPR's L2 penalty on the batch's
        embeddings): its parameters take part in DDP's forward too, and autograd sums both uses
        into the one gradient DDP averages."""
        cls = self._model_class(obj, function)
        methods = self.program.class_methods(cls) if cls is not None else {}
        forward = methods.get("forward")
        if forward is None or attribute in methods:
            return False
        return any(
            type(c.func) is cst.Attribute and type(c.func.value) is cst.Name and c.func.value.value == "self" and c.func.attr.value == attribute
            and not any(isinstance(a, (cst.If, cst.IfExp, cst.While, cst.Try)) for a in self.tree.ancestors(c) if self.tree.inside(a, forward.body))
            for c in self.program.calls_in(forward)
        )  # fmt: skip

    def _may_run_forward(self, obj: cst.BaseExpression, method: str, function: cst.FunctionDef | None) -> bool:
        """Whether `obj.method(...)` runs the model's layers; unknown classes are assumed to,
        except for methods whose names say they set up state (`init_hidden`, `reset`)."""
        if method.startswith(STATE_METHOD_PREFIXES):
            return False
        cls = self._model_class(obj, function)
        if cls is None:
            return True
        methods = self.program.class_methods(cls)
        if method in s.MODULE_METHODS and method not in methods:
            return False  # nn.Module's own `named_parameters()`, `modules()`: they run no layer
        if method in methods and self._returns_detached(methods[method]):
            return False  # MoCo's `forward_momentum`: a frozen copy's output, `.detach()`ed: no gradient to average
        seen: set[str] = set()
        work = [method]
        while work:
            name = work.pop()
            if name in seen:
                continue
            seen.add(name)
            body = methods.get(name)
            if body is None:
                return True  # inherited from a class not in this file
            for call in self.program.calls_in(body):
                func = call.func
                if isinstance(func, cst.Name) and func.value == "self":
                    return True
                if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                    if func.attr.value in methods:
                        work.append(func.attr.value)
                    else:
                        return True  # a submodule's forward
        return False

    def _returns_detached(self, method: cst.FunctionDef) -> bool:
        """Every value the method returns is cut from the graph: `.detach()`ed (directly, or the
        name it returns was last assigned such a value), or computed with gradients off."""
        if self.tree.grad_disabled(method.body):
            return True
        returns = [n for n in self.program.scope_nodes(method) if isinstance(n, cst.Return)]
        if not returns:
            return False
        for node in returns:
            value = node.value
            if isinstance(value, cst.Name):
                bound = [v for v, i in self.program.assignments(method, value.value) if i is None and self.tree.order(v) < self.tree.order(node)]
                value = max(bound, key=self.tree.order) if bound else None
            found = s.method_call(value) if value is not None else None
            if found is None or found[1] != "detach":
                return False
        return True

    def _model_class(self, obj: cst.BaseExpression, function: cst.FunctionDef | None) -> cst.ClassDef | None:
        """The same-file class a model is built from (`Net(...).to(device)`), when all its origins agree."""
        classes = set()
        for origin in self.program.origins(obj, function):
            cls = self._model_class_of_value(origin.node, origin.function, follow=False)
            moved = unchained(origin.node)
            if cls is None and moved is not origin.node and type(moved) is cst.Name:
                if moved.value == dotted(obj) and origin.function is function:
                    continue  # `net = net.to(device)` after `net = RNNModel(10)`: the class the name had (helper corpus BG, repro 04)
                key = (id(moved), id(origin.function))
                if key in self._classes_followed:
                    return None  # `a = b.to(d)` and `b = a.to(d)`: a cycle, no class
                self._classes_followed.add(key)
                try:
                    cls = self._model_class(moved, origin.function)
                finally:
                    self._classes_followed.discard(key)
            if cls is None:
                return None
            classes.add(cls)
        return classes.pop() if len(classes) == 1 else None

    def _model_class_of_value(self, value: cst.BaseExpression, function: cst.FunctionDef | None, follow: bool = True) -> cst.ClassDef | None:
        node = unchained(value)
        if isinstance(node, cst.Call) and (made := self.program.class_made(node)) is not None:
            return made  # `Net(...)`, or a class method returning `cls(...)` (`TinyResNet.build(args)`: helper corpus CK, script 08)
        if not follow:
            return None
        if isinstance(node, cst.Call) and (through := self._class_through_helper(node, function)) is not None:
            return through
        return self._model_class(node, function)  # a name, or a same-file factory

    def _registry_classes(self, node: cst.CSTNode, function: cst.FunctionDef | None, depth: int = 3) -> list[cst.ClassDef]:
        """`MODELS[args.arch]()` or `MODELS.get(name)(...)` over a dict literal of same-file
        classes (`MODELS = {"plain": Plain, "heads": Heads}`), `A() if big else B()`, or a
        same-file factory returning one of those or a class of its own per branch (`if arch ==
        "a": return A()` / `elif ...: return B()`): every class it may build. Empty when one
        choice is not known."""
        if type(node) is cst.IfExp:
            branches = [self._chosen_class(unchained(b), function, depth) for b in (node.body, node.orelse)]
            return [] if not all(branches) else [c for found in branches for c in found]
        if type(node) is not cst.Call:
            return []
        chooser = node.func
        if depth > 0 and (target := self.program.callee(node, function)) is not None and self.program.owner_class(target[0]) is None:
            # `build_model(name)` returning `MODELS[name]()`, or `A()` and `B()` in its branches: what the factory may build
            values = self.program.returns(target[0])
            branches = [self._chosen_class(unchained(value), target[0], depth - 1) for value in values]
            return [] if not values or not all(branches) else [c for found in branches for c in found]
        if type(chooser) is cst.Subscript:
            table = chooser.value
        elif type(chooser) is cst.Call and (found := s.method_call(chooser)) is not None and found[1] == "get":
            table = found[0]
        else:
            return []
        dicts = [o.node for o in self.program.origins(table, function)]
        if not dicts or any(type(d) is not cst.Dict for d in dicts):
            return []
        classes = self._registered_by_decorator(table)
        if classes is None:
            return []
        for d in dicts:
            for element in d.elements:
                value = getattr(element, "value", None)
                if type(value) is not cst.Name or value.value not in self.program.classes:
                    return []
                classes.append(self.program.classes[value.value])
        return classes

    def _registered_by_decorator(self, table: cst.BaseExpression) -> list[cst.ClassDef] | None:
        """The same-file classes a decorator puts into the module's dict `table`
        (`def register_model(cls): MODEL_REGISTRY[cls.__name__] = cls`, then `@register_model`,
        or `@register("name")` through an inner function): empty when nothing fills it that way,
        None when something else writes into it (helper corpus BN, repro 03)."""
        name = dotted(table)
        if type(table) is not cst.Name or name is None:
            return []
        registrars: set[str] = set()
        for node in self.tree.walk(self.tree.module):
            if type(node) is not cst.Assign or not any(type(t.target) is cst.Subscript and dotted(t.target.value) == name for t in node.targets):
                continue
            function = self.tree.function(node)
            outer = function
            while outer is not None and self.tree.function(self.tree.parent(outer)) is not None:
                outer = self.tree.function(self.tree.parent(outer))
            if function is None or outer is None or type(node.value) is not cst.Name or node.value.value not in self.program.param_names(function):
                return None  # `MODELS["mlp"] = MLP` at module level, or a value that is no decorated class
            registrars.add(outer.name.value)
        classes = []
        for cls in self.program.classes.values():
            for decorator in cls.decorators:
                used = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
                if dotted(used) in registrars:
                    classes.append(cls)
        return classes

    def _chosen_class(self, node: cst.CSTNode, function: cst.FunctionDef | None, depth: int) -> list[cst.ClassDef]:
        """The same-file classes one choice builds: `A()`, a registry or factory call, or a local
        name bound to those (`model = A()` in each branch, then `return model`)."""
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in self.program.classes and self.tree.qname(node.func) is None:
            return [self.program.classes[node.func.value]]
        if type(node) is cst.Name and function is not None and depth > 0:
            values = [unchained(self.program.element(v, i)) for v, i in self.program.assignments(function, node.value)]
            branches = [self._chosen_class(v, function, depth - 1) for v in values]
            return [] if not values or not all(branches) else [c for found in branches for c in found]
        return self._registry_classes(node, function, depth)

    def _class_through_helper(self, call: cst.Call, function: cst.FunctionDef | None, depth: int = 2) -> cst.ClassDef | None:
        """`model = to_device(Net(), device)`: the same-file class of what a same-file helper
        returns (what this call hands it, or a model it builds)."""
        returned = self.program.helper_returns(call, function) if depth else None
        if not returned:
            return None
        classes = set()
        for origin in returned:
            node = unchained(origin.node)
            cls = self._model_class_of_value(node, origin.function, follow=False)
            if cls is None and isinstance(node, cst.Call):
                cls = self._class_through_helper(node, origin.function, depth - 1)
            if cls is None:
                return None
            classes.add(cls)
        return classes.pop() if len(classes) == 1 else None

    # --- what takes part in collectives ---------------------------------------------

    def _syncing(self, facts: Facts) -> set[cst.FunctionDef]:
        return sync.syncing_functions(self.tree, self.program, facts.forwards_model)


def _spells(node: cst.Name | cst.Attribute, spelled: str) -> bool:
    """`code(node) == spelled`, rendering only what is not a dotted name."""
    name = dotted(node)
    return name == spelled if name is not None else code(node) == spelled


# `EpochStart.epoch` for a loop whose variable is no epoch number: the sampler's own count goes on.
PASSES = "<passes>"


def _shuffles(loader: cst.CSTNode) -> bool:
    """Whether a DataLoader call draws in a random order (`shuffle=` not False, or a sampler or
    batch sampler)."""
    if type(loader) is not cst.Call:
        return True
    shuffle, sampler = s.arg(loader, 2, "shuffle"), s.arg(loader, 3, "sampler") or s.arg(loader, 4, "batch_sampler")
    return sampler is not None or (shuffle is not None and not (type(shuffle.value) is cst.Name and shuffle.value.value == "False"))


PATH_TESTS = {"os.path.exists", "os.path.isfile", "os.path.isdir"}
TENSOR_DATASET = {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
PATH_BUILDERS = {"os.path.join", "pathlib.Path", "builtins.str", "os.path.expanduser"}


def _flatten_main_block(tree: Tree, body: cst.IndentedBlock | cst.Module) -> list[cst.BaseStatement]:
    """Top-level statements of a body; for the module, the `__main__` block's too."""
    out: list[cst.BaseStatement] = []
    for statement in body.body:
        if isinstance(body, cst.Module) and tree.is_main_guard(statement):
            out.extend(statement.body.body)  # type: ignore[union-attr]
        else:
            out.append(statement)
    return out


__all__ = ["Analyzer", "Device", "Entry", "EpochStart", "Facts", "NotConvertible", "TrainLoop", "TrainedModel"]


def _phase_loop(loop: cst.For | cst.While) -> bool:
    """`for phase in ["train", "val"]:`: a loop over a literal list of strings, not over epochs."""
    return (
        isinstance(loop, cst.For)
        and isinstance(loop.iter, (cst.List, cst.Tuple))
        and bool(loop.iter.elements)
        and all(isinstance(e.value, cst.SimpleString) for e in loop.iter.elements)
    )


def _whole_slice(item: cst.Subscript) -> bool:
    """`layers[:]`: every element."""
    return len(item.slice) == 1 and isinstance(item.slice[0].slice, cst.Slice) and all(
        getattr(item.slice[0].slice, part) is None for part in ("lower", "upper", "step")
    )


def _first_size(node: cst.CSTNode) -> cst.BaseExpression | None:
    """What `x.size(0)` or `x.shape[0]` measures along its first dimension: `x`."""
    found = s.method_call(node) if type(node) is cst.Call else None
    if found is not None and found[1] == "size" and len(node.args) == 1 and code(node.args[0].value) == "0":  # type: ignore[attr-defined]
        return found[0]
    if type(node) is cst.Subscript and type(node.value) is cst.Attribute and node.value.attr.value == "shape" and len(node.slice) == 1:
        index = node.slice[0].slice
        return node.value.value if type(index) is cst.Index and code(index.value) == "0" else None
    return None


def _counted(node: cst.CSTNode) -> cst.BaseExpression | None:
    """What `x.numel()` counts the elements of, or `mask.sum()` the true entries of: `x`, `mask`."""
    found = s.method_call(node) if type(node) is cst.Call else None
    return found[0] if found is not None and found[1] in ("numel", "sum", "count_nonzero") and not node.args else None  # type: ignore[attr-defined]


def _measured(tree: Tree, node: cst.CSTNode) -> cst.BaseExpression | None:
    """What `len(x)` or `x.__len__()` measures: `x`."""
    if tree.is_builtin_call(node, "len") and node.args:  # type: ignore[union-attr]
        return node.args[0].value  # type: ignore[union-attr]
    found = s.method_call(node) if isinstance(node, cst.Call) else None
    return found[0] if found is not None and found[1] == "__len__" else None


def _counts_labels(tree: Tree, node: cst.CSTNode) -> bool:
    """`torch.bincount(labels)`, `np.bincount(...)` or `labels.bincount()` (`.float()` after it):
    the samples of each class, counted before training from the data, not from a loader's batches."""
    node = unchained(node) if type(node) is cst.Call else node
    if type(node) is not cst.Call:
        return False
    found = s.method_call(node)
    return (tree.qname(node.func) or "").rsplit(".", 1)[-1] == "bincount" or (found is not None and found[1] == "bincount")


def _tees_output(statement: cst.CSTNode) -> bool:
    """`sys.stdout = Logger(path)` (or stderr): the console goes to a log file too."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Assign)
        and any(dotted(t.target) in ("sys.stdout", "sys.stderr") for t in statement.body[0].targets)
    )


def _is_none(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _attribute_root(node: cst.BaseExpression) -> str | None:
    """`stack` of `stack` or of `stack.blocks`."""
    if type(node) is cst.Name:
        return node.value
    return node.value.value if type(node) is cst.Attribute and type(node.value) is cst.Name else None


def _layer_target(loop: cst.For) -> cst.Name | None:
    """The name a loop over layers binds each layer to: `block` of `for block in self.blocks:` or
    of `for i, block in enumerate(self.blocks):`."""
    if type(loop.target) is cst.Name:
        return loop.target
    enumerated = type(loop.iter) is cst.Call and type(loop.iter.func) is cst.Name and loop.iter.func.value == "enumerate"
    if enumerated and type(loop.target) is cst.Tuple and len(loop.target.elements) == 2 and type(loop.target.elements[1].value) is cst.Name:
        return loop.target.elements[1].value
    return None
