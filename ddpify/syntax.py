"""Syntax-tree helpers shared by the converter and the linter.

Everything here reads a LibCST tree indexed once by `Tree`: qualified names (so
`import torch.nn as nn` and `from torch.nn import DataParallel as DP` are both seen),
parents, children and positions.
"""

from __future__ import annotations

import re

from bisect import bisect_left
from collections.abc import Iterator
from functools import cached_property

import libcst as cst

from ddpify import nodes
from ddpify.names import Names
from ddpify.positions import Positions

# --- torch names, matched by qualified name -------------------------------------------

DATALOADER = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
RANDOM_SAMPLER = {"torch.utils.data.RandomSampler", "torch.utils.data.sampler.RandomSampler"}
SEQUENTIAL_SAMPLER = {"torch.utils.data.SequentialSampler", "torch.utils.data.sampler.SequentialSampler"}
WEIGHTED_SAMPLER = {"torch.utils.data.WeightedRandomSampler", "torch.utils.data.sampler.WeightedRandomSampler"}
SUBSET_SAMPLER = {"torch.utils.data.SubsetRandomSampler", "torch.utils.data.sampler.SubsetRandomSampler"}
BATCH_SAMPLER = {"torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler"}
PARAMETER = {"torch.nn.Parameter", "torch.nn.parameter.Parameter"}
ITERABLE_DATASET = {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
DATASET = {"torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset", *ITERABLE_DATASET}


def is_dataset_class(name: str | None) -> bool:
    """torch's Dataset classes, and the datasets torchvision (or torchaudio, torchtext) ships."""
    return name in DATASET or (name or "").startswith(("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets."))


DISTRIBUTED_SAMPLER = {
    "torch.utils.data.DistributedSampler",
    "torch.utils.data.distributed.DistributedSampler",
}
DDP = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DistributedDataParallel",
}
DATA_PARALLEL = {
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel",
}
COLLECTIVES = {
    f"torch.distributed.{name}"
    for name in (
        "barrier",
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "monitored_barrier",
    )
}
INIT_PROCESS_GROUP = {"torch.distributed.init_process_group"}
DESTROY_PROCESS_GROUP = {"torch.distributed.destroy_process_group"}
TORCH_SAVE = {"torch.save"}
# Folders: convert makes them on every rank, race-free (another module may write there on any rank).
MAKE_FOLDER = {"os.makedirs", "os.mkdir"}
TORCH_LOAD = {"torch.load"}
TORCH_DEVICE = {"torch.device"}
SET_DEVICE = {"torch.cuda.set_device"}
CUDA_IS_AVAILABLE = {"torch.cuda.is_available"}
CUDA_TENSOR_TYPES = {
    f"torch.cuda.{t}Tensor"
    for t in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
}
TENSOR_FACTORIES = {
    f"torch.{name}"
    for name in (
        "tensor",
        "zeros",
        "ones",
        "empty",
        "full",
        "rand",
        "randn",
        "randint",
        "randperm",
        "arange",
        "linspace",
        "eye",
        "as_tensor",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "rand_like",
        "randn_like",
    )
}
AUTOCAST = {
    "torch.autocast",
    "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast",
    "torch.cuda.amp.autocast",
    "torch.cpu.amp.autocast",
}
GRAD_SCALER = {"torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"}
RANDOM_SPLIT = {"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"}
ACCELERATOR_CURRENT = {"torch.accelerator.current_accelerator"}
# Calls by which a script decides at run time whether to use a GPU.
DEVICE_CHECKS = {
    "torch.cuda.is_available",
    "torch.cuda.device_count",
    "torch.accelerator.is_available",
    "torch.accelerator.current_accelerator",
    "torch.backends.mps.is_available",
}
ACCELERATOR_AVAILABLE = {"torch.accelerator.is_available"}
SUMMARY_WRITER = {
    "torch.utils.tensorboard.SummaryWriter",
    "torch.utils.tensorboard.writer.SummaryWriter",
    "tensorboardX.SummaryWriter",
}
TQDM = {"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm.trange", "tqdm.auto.trange", "torch.hub.tqdm"}  # torch.hub re-exports tqdm
LOGGING_EMIT = {
    f"logging.{name}" for name in ("debug", "info", "warning", "warn", "error", "critical", "exception", "log")
}
GET_LOGGER = {"logging.getLogger"}
LOGGER_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
WANDB_CALLS = {f"wandb.{name}" for name in ("init", "log", "finish", "watch", "save", "alert", "define_metric")}
# Calls that fetch files from the network onto the disk.
DOWNLOADS = {"urllib.request.urlretrieve", "wget.download", "gdown.download", "torch.hub.download_url_to_file"}
# Calls that build an image object whose `.save(path)` writes a file.
# Exports of a model into a compiled program: handed the plain model, never the DDP wrapper
# (whose forward takes *inputs and broadcasts buffers through the process group). The scripted
# module they return saves itself (`traced.save(path)`).
SCRIPTED_EXPORTS = {"torch.jit.trace", "torch.jit.script", "torch.jit.trace_module"}
# Post-training quantization makes a new model from the trained one: of the plain model, not its wrapper.
QUANTIZED_COPIES = {
    f"{package}.{name}"
    for package in ("torch.ao.quantization", "torch.quantization")
    for name in ("quantize_dynamic", "convert", "quantize_fx.convert_fx", "quantize_fx.convert_to_reference_fx")
}
MODEL_EXPORTS = SCRIPTED_EXPORTS | QUANTIZED_COPIES | {"torch.export.export", "torch.onnx.export", "torch.onnx.dynamo_export"}
IMAGE_MAKERS = {"PIL.Image.fromarray", "PIL.Image.new", "PIL.Image.open", "torchvision.transforms.functional.to_pil_image"}
# numpy memory maps: qualified name -> (position, keyword) of the mode
# the one field a GPU string fills in: `%d`, `%(gpu)s`; `{}`, `{0}`, `{gpu}`, `{:d}`
_ONE_FIELD_PERCENT = re.compile(r"%(\(\w+\))?[dis]")
_ONE_FIELD_FORMAT = re.compile(r"\{\w*(:d)?\}")
MEMMAPS = {"numpy.memmap": (2, "mode"), "numpy.lib.format.open_memmap": (1, "mode")}
NO_GRAD = {
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.grad_mode.inference_mode",
}
SET_GRAD_ENABLED = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"}
OPTIMIZER_PREFIX = "torch.optim."
# Frameworks that already distribute a script: a script using one is left alone.
DISTRIBUTED_FRAMEWORKS = {
    "accelerate": "Hugging Face Accelerate",
    "lightning": "Lightning",
    "pytorch_lightning": "PyTorch Lightning",
    "deepspeed": "DeepSpeed",
    "horovod": "Horovod",
    "colossalai": "ColossalAI",
}
# nn.Module methods that return the module they are called on (`Net().to(device).train()`).
RETURNS_SELF = {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "to_empty", "train", "eval", "requires_grad_"}


def is_grad(node: cst.CSTNode) -> bool:
    """`p.grad` (also `p.grad.data`)."""
    while type(node) is cst.Attribute and node.attr.value == "data":
        node = node.value
    return type(node) is cst.Attribute and node.attr.value == "grad"


def unchained(node: cst.BaseExpression) -> cst.BaseExpression:
    """`Net().to(device).train()` -> `Net()`: what a chain of RETURNS_SELF calls is called on."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in RETURNS_SELF:
        node = node.func.value
    return node


# nn.Module methods that exist on the DDP wrapper too (calls through the wrapper are fine).
MODULE_METHODS = {
    "train",
    "eval",
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "children",
    "named_children",
    "modules",
    "named_modules",
    "zero_grad",
    "to",
    "cuda",
    "cpu",
    "float",
    "half",
    "double",
    "bfloat16",
    "type",
    "apply",
    "requires_grad_",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_buffer",
    "add_module",
    "forward",
    "no_sync",
    "join",
}
# Attributes of the DDP wrapper itself (not to be rerouted through `.module`).
# What the DDP wrapper answers as the model would. Not `children()` (the wrapper's one child is
# the model) nor the `named_*` walks (their names gain a `module.` prefix): those go to `.module`.
WRAPPER_ATTRIBUTES = (MODULE_METHODS - {"children", "named_children", "named_parameters", "named_buffers", "named_modules"}) | {
    "module",
    "training",
    "state_dict",
    "load_state_dict",
    "device_ids",
}


# --- tree access ------------------------------------------------------------------------
# The hot helpers test `type(node) is cst.X`: LibCST's node classes are ABCs, so a failing
# isinstance costs a Python-level __instancecheck__, and the concrete classes tested here
# have no subclasses.


def code(node: cst.CSTNode) -> str:
    """Source text of a node, as LibCST renders it (without leading comments)."""
    return cst.Module(body=[]).code_for_node(node)


def parse_statements(source: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(source).body)


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None."""
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base is not None else None
    return None


def string_value(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal (no f-string, no concatenation)."""
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_gpu_string(node: cst.BaseExpression) -> bool:
    """"cuda", "cuda:0", f"cuda:{gpu}"."""
    value = string_value(node)
    if value is not None:
        return value == "cuda" or value.startswith("cuda:")
    if isinstance(node, cst.FormattedString):
        text = "".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText))
        return text.startswith("cuda")
    return False


def is_backward(call: cst.Call) -> bool:
    """`loss.backward()`, `scaler.scale(loss).backward()`."""
    return type(call.func) is cst.Attribute and call.func.attr.value == "backward"


def arg(call: cst.Call, position: int | None, keyword: str | None) -> cst.Arg | None:
    """The argument of `call` given at `position` or as `keyword=`."""
    if keyword is not None:
        for a in call.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position < len(positional):
            return positional[position]
    return None


def is_import_line(statement: cst.BaseStatement) -> bool:
    """A line of imports and nothing else."""
    return isinstance(statement, cst.SimpleStatementLine) and all(isinstance(b, (cst.Import, cst.ImportFrom)) for b in statement.body)


def is_preamble(statement: cst.BaseStatement) -> bool:
    """What may sit between imports at the top of a script: `sys.path.append(...)`, a docstring,
    `warnings.filterwarnings(...)`, `matplotlib.use("Agg")`, `try: import x / except ImportError: ...`."""
    if isinstance(statement, cst.Try):  # (its prints may be under a rank guard by now)
        return any(is_import_line(s) for s in statement.body.body)  # type: ignore[attr-defined]
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    return isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and (dotted(small.value.func) or "").startswith(
        ("sys.path.", "warnings.", "matplotlib.use")  # `matplotlib.use("Agg")` before `import matplotlib.pyplot`
    )


def only_prints(statement: cst.CSTNode) -> bool:
    """`print(...)`, `logger.info(...)`, `print_network(net)`: a line that only reports."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
            return False
        name = (dotted(small.value.func) or "").rsplit(".", 1)[-1].lower()
        if not (name == "print" or "print" in name or name in {"info", "debug", "log", "summary"}):
            return False
    return True


def method_call(node: cst.CSTNode) -> tuple[cst.BaseExpression, str] | None:
    """For `obj.name(...)`, return (obj, name)."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute:
        return node.func.value, node.func.attr.value
    return None


class _ReadNames(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: list[cst.Name] = []
        self.binds = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # `torch.device`: `device` is not a name read
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # `device=d`: the keyword is not a name read
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.binds = True

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.binds = True

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.binds = True


def read_names(expr: cst.BaseExpression) -> list[cst.Name] | None:
    """The names an expression reads (not attribute names or keywords); None when it binds names of
    its own (a lambda, a comprehension, `:=`)."""
    visitor = _ReadNames()
    expr.visit(visitor)
    return None if visitor.binds else visitor.names


class _ReplaceNames(cst.CSTTransformer):
    def __init__(self, replaced: dict[int, cst.BaseExpression]) -> None:
        self.replaced = replaced

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.replaced.get(id(original_node), updated_node)


def replace_names(expr: cst.BaseExpression, replaced: dict[int, cst.BaseExpression]) -> cst.BaseExpression:
    """`expr` with the Name nodes whose ids are keys of `replaced` swapped for their values."""
    if id(expr) in replaced:
        return replaced[id(expr)]
    return expr.visit(_ReplaceNames(replaced))  # type: ignore[return-value]


def _different_branches(node: cst.CSTNode, one: cst.CSTNode, other: cst.CSTNode) -> bool:
    """`one` and `other`, children of `node`, are branches of it that exclude each other."""
    if type(node) in (cst.If, cst.IfExp):
        return {id(one), id(other)} == {id(node.body), id(node.orelse)}  # type: ignore[attr-defined]
    if type(node) is cst.Match:
        return one is not other and any(c is one for c in node.cases) and any(c is other for c in node.cases)
    return False


BLOCKS = {cst.IndentedBlock, cst.Module}


def writing_mode(mode: cst.Arg | None) -> bool:
    """An open() mode that writes the file ("w", "a", "x", binary or not); none given reads it."""
    value = string_value(mode.value) if mode is not None else "r"
    return value is not None and any(c in value for c in "wax")


class Tree:
    """A parsed script, indexed once: parents, children and preorder up front; qualified
    names and positions when first asked for."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._index = index = nodes.index(module)
        self._parent_of = index.parent_of
        self._children_of = index.children_of
        self._position_of = index.position_of
        self._order = index.order

    @classmethod
    def parse(cls, module: cst.Module) -> Tree:
        return cls(module)

    @cached_property
    def positions(self) -> Positions:
        """node -> CodeRange, as LibCST's PositionProvider gives them."""
        return Positions(self.module, self._index)

    @cached_property
    def _names(self) -> Names:
        return Names(self.module, self._index)

    def children(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        return self._children_of.get(id(node), [])

    # names

    def qname(self, node: cst.CSTNode) -> str | None:
        """The imported qualified name of an expression (`nn.DataParallel` -> `torch.nn.DataParallel`)."""
        return self._names.qualified(node)

    def call_name(self, node: cst.CSTNode) -> str | None:
        return self.qname(node.func) if type(node) is cst.Call else None

    def is_call_to(self, node: cst.CSTNode, names: set[str]) -> bool:
        return type(node) is cst.Call and self.qname(node.func) in names

    def gpu_string(self, node: cst.SimpleString | cst.FormattedString) -> cst.BaseExpression | None:
        """The expression naming one GPU that a string literal starts: `"cuda:0"`, `f"cuda:{gpu}"`,
        `"cuda:%d" % gpu`, `"cuda:{}".format(gpu)` or `"cuda:" + str(gpu)`; None for any other."""
        parent = self.parent(node)
        if type(parent) is cst.ConcatenatedString:
            return None
        if type(node) is cst.FormattedString:
            parts = node.parts
            named = len(parts) == 2 and type(parts[0]) is cst.FormattedStringText and parts[0].value == "cuda:"
            return node if named and type(parts[1]) is cst.FormattedStringExpression else None
        value = string_value(node)
        if value is None or not value.startswith("cuda:"):
            return None
        index = value[5:]
        if index.isdigit():
            return node
        operation = type(parent.operator) if type(parent) is cst.BinaryOperation and parent.left is node else None
        # `"cuda:%d" % gpu`, `"cuda:%(gpu)s" % vars(args)`, or `"cuda:" + str(gpu)`
        if (_ONE_FIELD_PERCENT.fullmatch(index) and operation is cst.Modulo) or (index == "" and operation is cst.Add):
            return parent  # type: ignore[return-value]
        holder = self.parent(parent) if type(parent) is cst.Attribute and parent.attr.value == "format" else None
        if _ONE_FIELD_FORMAT.fullmatch(index) and type(holder) is cst.Call and holder.func is parent:
            return holder  # `"cuda:{}".format(gpu)`, `"cuda:{gpu}".format(gpu=args.gpu)`
        return None

    def is_builtin_call(self, node: cst.CSTNode, name: str) -> bool:
        return (
            type(node) is cst.Call
            and type(node.func) is cst.Name
            and node.func.value == name
            and self.qname(node.func) in {f"builtins.{name}", name}
        )

    # structure

    def line(self, node: cst.CSTNode) -> int:
        return self.positions.start_line(node)

    def last_line(self, node: cst.CSTNode) -> int:
        """The last line of `node`; of a statement of a block, counted without rendering it, and
        past the comments that close its block (no code stands on those lines)."""
        if type(self.parent(node)) in BLOCKS:
            return self.positions.lines(node)[1] - 1
        return self.positions.span(node)[2]

    def column(self, node: cst.CSTNode) -> int:
        return self.positions.span(node)[1] + 1

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parent_of.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self._parent_of.get(id(node))
        while parent is not None:
            yield parent
            parent = self._parent_of.get(id(parent))

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement that holds `node` as a direct child of a block."""
        current = node
        for parent in self.ancestors(node):
            if type(parent) in BLOCKS:
                return current  # type: ignore[return-value]
            current = parent
        raise ValueError("node is not inside a statement")

    def block(self, statement: cst.BaseStatement) -> cst.IndentedBlock | cst.Module:
        parent = self._parent_of[id(statement)]
        assert isinstance(parent, (cst.IndentedBlock, cst.Module))
        return parent

    def function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost function (or method) holding `node`."""
        parent = self._parent_of.get(id(node))
        while parent is not None and type(parent) is not cst.FunctionDef:
            parent = self._parent_of.get(id(parent))
        return parent

    def enclosing_class(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        parent = self._parent_of.get(id(function))
        while parent is not None and not isinstance(parent, (cst.ClassDef, cst.FunctionDef, cst.Module)):
            parent = self._parent_of.get(id(parent))
        return parent if isinstance(parent, cst.ClassDef) else None

    def loops(self, node: cst.CSTNode) -> list[cst.For | cst.While]:
        """Loops enclosing `node` inside its function, innermost first."""
        found = []
        for parent in self.ancestors(node):
            if type(parent) is cst.FunctionDef or type(parent) is cst.ClassDef:
                break
            if type(parent) is cst.For or type(parent) is cst.While:
                found.append(parent)
        return found

    def end_order(self, node: cst.CSTNode) -> int:
        """Where `node` ends in a preorder walk: calls sorted by it come in the order they run
        (a call ends after the calls in its arguments), with no rendering."""
        return self._end(node)

    def order(self, node: cst.CSTNode) -> int:
        """Where `node` comes in a preorder walk: among nodes none of which holds another, source
        order, with no rendering."""
        return self._position_of[id(node)]

    def inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        position, start = self._position_of.get(id(node)), self._position_of.get(id(container))
        if position is not None and start is not None:  # both in this tree: a preorder range
            return start <= position < self._end(container)
        current: cst.CSTNode | None = node
        while current is not None and current is not container:
            current = self._parent_of.get(id(current))
        return current is not None

    # execution order

    def exclusive(self, a: cst.CSTNode, b: cst.CSTNode, within: cst.CSTNode | None = None) -> bool:
        """At most one of `a` and `b` runs: they sit in different branches of one `if`/`elif`/
        `else` chain (or `x if c else y`, or two `case`s of a `match`) that no loop in the
        function repeats (a loop could take one branch, then the other). With `within` (a
        training step's body), at most one runs in each pass of it: only loops inside it count."""
        path_of_a: dict[int, cst.CSTNode] = {}  # ancestor of a -> its child on the way to a
        child = a
        for parent in self.ancestors(a):
            path_of_a[id(parent)] = child
            child = parent
        child = b
        for parent in self.ancestors(b):
            if id(parent) in path_of_a:
                return _different_branches(parent, path_of_a[id(parent)], child) and not self._repeated(parent, within)
            child = parent
        return False

    def may_follow(self, first: cst.CSTNode, then: cst.CSTNode) -> bool:
        """`then` can run after `first` has run: `then` holds `first` (a call completes after
        its arguments), or comes later in the text, is not held by `first` and is not in a
        branch exclusive to it. For two nodes of one function; loops are not followed back to
        their start (`exclusive` already treats branches a loop repeats as both running)."""
        if self.inside(first, then):
            return first is not then
        if self.inside(then, first):
            return False
        return self._position_of[id(first)] < self._position_of[id(then)] and not self.exclusive(first, then)

    def _repeated(self, node: cst.CSTNode, within: cst.CSTNode | None = None) -> bool:
        """`node` sits in a loop or comprehension of its function (below `within`, if given)."""
        for parent in self.ancestors(node):
            if parent is within or type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
            if type(parent) in (cst.For, cst.While, cst.CompFor):
                return True
        return False

    def walk(self, root: cst.CSTNode | None = None) -> Iterator[cst.CSTNode]:
        """Every node below `root` (the module by default), parents before children."""
        if root is None:
            return iter(self._order)
        start = self._position_of.get(id(root))
        if start is None:  # not part of this tree (a node a transform built)
            return iter((root,))
        return iter(self._order[start : self._end(root)])

    def walk_skipping(self, root: cst.CSTNode, kinds: tuple[type[cst.CSTNode], ...]) -> list[cst.CSTNode]:
        """`walk(root)` without the subtrees of nodes of `kinds` below `root` (nested scopes,
        say): slices of the preorder between them, not a walk."""
        start, end = self._position_of[id(root)], self._end(root)
        order = self._order
        found: list[cst.CSTNode] = []
        position = start
        for skipped in self.of_type(*kinds):  # in preorder
            first = self._position_of[id(skipped)]
            if first < position or skipped is root:
                continue  # inside a subtree already skipped
            if first >= end:
                break
            found.extend(order[position:first])
            position = self._end(skipped)
        found.extend(order[position:end])
        return found

    def in_loops_of(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether every loop `node` is in holds `other` too (`node`'s loops are the outermost of
        `other`'s): `node` runs no more often than `other`, in no loop of its own."""
        held, around = self.loops(other), self.loops(node)
        return len(around) <= len(held) and held[len(held) - len(around):] == around

    def of_type(self, *kinds: type[cst.CSTNode]) -> list[cst.CSTNode]:
        """The nodes of the whole tree whose type is one of `kinds` (exactly: pass concrete
        node types), in preorder. Bucketed by the index walk, so a rule that looks for one kind of
        node does not test every node."""
        by_type = self._index.by_type
        if len(kinds) == 1:
            return by_type.get(kinds[0], [])
        found = [n for kind in kinds for n in by_type.get(kind, [])]
        found.sort(key=lambda n: self._position_of[id(n)])
        return found

    def calls(self, root: cst.CSTNode | None = None) -> Iterator[cst.Call]:
        """The calls `walk(root)` meets, in the same order."""
        calls, positions = self._index.calls, self._index.call_positions
        if root is None:
            return iter(calls)
        start = self._position_of.get(id(root))
        if start is None:  # not part of this tree
            return iter([root] if type(root) is cst.Call else [])
        first = bisect_left(positions, start)
        return iter(calls[first : bisect_left(positions, self._end(root), first)])

    @cached_property
    def _calls_by_name(self) -> dict[str, list[cst.Call]]:
        by_name: dict[str, list[cst.Call]] = {}
        for call in self._index.calls:
            name = self.qname(call.func)
            if name is not None:
                by_name.setdefault(name, []).append(call)
        return by_name

    def calls_to(self, names: set[str] | frozenset[str]) -> list[cst.Call]:
        """The calls of the whole tree to one of the qualified `names`, in preorder (each call's
        name is resolved once per tree)."""
        by_name = self._calls_by_name
        found = [c for name in names for c in by_name.get(name, [])]
        if len(found) > 1:
            found.sort(key=lambda n: self._position_of[id(n)])
        return found

    def _end(self, node: cst.CSTNode) -> int:
        return self._index.end(node)

    def disables_grad(self, expr: cst.BaseExpression) -> bool:
        """`torch.no_grad()`, `torch.inference_mode()` or `torch.set_grad_enabled(False)`, as
        a context or a decorator (called or not)."""
        name = self.qname(expr.func if type(expr) is cst.Call else expr)
        if name in NO_GRAD:
            return True
        return name in SET_GRAD_ENABLED and type(expr) is cst.Call and bool(expr.args) and code(expr.args[0].value) == "False"

    def grad_disabled(self, node: cst.CSTNode) -> bool:
        """`node` runs with gradients off: in a `with` that disables them, in its function, or
        in a function decorated so (a function defined inside one runs when it is called)."""
        for parent in self.ancestors(node):
            if type(parent) is cst.With and any(self.disables_grad(item.item) for item in parent.items):
                return True
            if type(parent) is cst.FunctionDef:
                return any(self.disables_grad(d.decorator) for d in parent.decorators)
        return False

    def opens_for_writing(self, node: cst.CSTNode) -> bool:
        """`open(path, "w")` (or "a", "x", binary or not), or a numpy memory map made anew
        (`np.memmap(path, mode="w+")`, `np.lib.format.open_memmap(path, mode="w+")`): it
        truncates the file, under any other process that has it mapped."""
        if self.is_builtin_call(node, "open"):
            assert isinstance(node, cst.Call)
            return writing_mode(arg(node, 1, "mode"))
        if type(node) is not cst.Call or (spec := MEMMAPS.get(self.qname(node.func) or "")) is None:
            return False
        mode = arg(node, *spec)
        return mode is not None and string_value(mode.value) in ("w+", "write")

    def is_main_guard(self, node: cst.CSTNode) -> bool:
        """`if __name__ == "__main__":` (either operand order, either quotes)."""
        if not isinstance(node, cst.If):
            return False
        test = node.test
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
            return False
        if not isinstance(test.comparisons[0].operator, cst.Equal):
            return False
        sides = [test.left, test.comparisons[0].comparator]
        has_name = any(isinstance(s, cst.Name) and s.value == "__name__" for s in sides)
        has_main = any(string_value(s) == "__main__" for s in sides)
        return has_name and has_main
