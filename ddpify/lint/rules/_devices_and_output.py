"""What the device, wrapping and output rules (DDP2xx, DDP301, DDP303) share.

- program order: whether `torch.cuda.set_device(<rank>)` has run before a node, following
  call sites across same-file functions;
- where a literal device spelling is used (a placement, a stored device value, or neither);
- device moves (`.to(device)`, `.cuda()`) and DDP wrap sites (`model = DDP(model, ...)`);
- output: writes to files, prints, logging, progress bars, TensorBoard and wandb, whether a
  call is reached only from rank-guarded code (also through the helpers that call it), and the
  script's own rank-0 condition for a fix.

Facts are computed once per `Script` (`devices_and_output(script)`) and shared by the rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.destinations import private_to_process
from ddpify.analysis.rebinds import rebinds_after
from ddpify.analysis.output import LOGGING, PRINT, PRINTS, TENSORBOARD, TQDM, WANDB, WRITES, Outputs
from ddpify.analysis.ranks import GLOBAL_RANK_NAMES, MAIN_PROCESS_NAMES
from ddpify.lint.script import Script
from ddpify.syntax import code, dotted, method_call, string_value

GPU_INDEX = re.compile(r"^cuda:(\d+)$")
DTYPES = {
    f"torch.{name}"
    for name in (
        "float16 float32 float64 half float double bfloat16 float8_e4m3fn float8_e5m2 "
        "int8 int16 int32 int64 uint8 long int short bool complex64 complex128"
    ).split()
}
CONVERT_SYNC_BATCHNORM = {
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "torch.nn.modules.SyncBatchNorm.convert_sync_batchnorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm",
}
# Names whose value is a device type or backend, not a placement (`device_type = "cuda"`).
NOT_A_PLACEMENT = ("type", "backend", "kind", "accelerator", "platform", "name")
# Global ranks a fix may compare with 0 (a local rank is 0 once per node).


def position(tree: s.Tree, node: cst.CSTNode) -> tuple[int, int]:
    start = tree.positions[node].start
    return (start.line, start.column)


def int_literal(node: cst.BaseExpression | None) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    return None


def gpu_index(node: cst.BaseExpression) -> int | None:
    """N for the literal "cuda:N"."""
    value = string_value(node)
    found = GPU_INDEX.match(value) if value is not None else None
    return int(found.group(1)) if found else None


def names_in(tree: s.Tree, node: cst.CSTNode) -> set[str]:
    return {n.value for n in tree.walk(node) if isinstance(n, cst.Name)}


def root_names(tree: s.Tree, node: cst.CSTNode) -> set[str]:
    """Names an expression reads (`args.rank == 0` reads `args`, not `rank`)."""
    found = set()
    for n in tree.walk(node):
        if not isinstance(n, cst.Name):
            continue
        parent = tree.parent(n)
        if isinstance(parent, cst.Attribute) and parent.attr is n:
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is n:
            continue
        found.add(n.value)
    return found


def assigned_names(tree: s.Tree, statement: cst.CSTNode) -> set[str]:
    """Names (and dotted targets) a statement binds."""
    found: set[str] = set()
    for n in tree.walk(statement):
        targets: list[cst.BaseExpression] = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign)):
            targets = [n.target]
        elif isinstance(n, (cst.For, cst.CompFor)):
            targets = [n.target]
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            targets = [n.asname.name]
        elif isinstance(n, cst.NamedExpr):
            targets = [n.target]
        for target in targets:
            for t in tree.walk(target):
                if (name := dotted(t)) is not None:  # type: ignore[arg-type]
                    found.add(name)
    return found


def climb_value(tree: s.Tree, node: cst.CSTNode) -> tuple[cst.CSTNode, cst.CSTNode | None]:
    """From a value up through `x if c else y` branches and `a or b`: (outermost, its parent)."""
    parent = tree.parent(node)
    while (isinstance(parent, cst.IfExp) and node is not parent.test) or isinstance(parent, cst.BooleanOperation):
        node, parent = parent, tree.parent(parent)
    return node, parent


def is_device_move(tree: s.Tree, call: cst.Call) -> cst.BaseExpression | None:
    """The receiver of `x.cuda(...)` or `x.to(<device>)` (not a dtype-only `.to`)."""
    found = method_call(call)
    if found is None:
        return None
    obj, name = found
    if dotted(obj) == "torch":
        return None
    if name == "cuda":
        return obj
    if name != "to":
        return None
    target = s.arg(call, 0, "device")
    if target is None:
        return None
    if tree.qname(target.value) in DTYPES:
        return None
    return obj


def wrapped_module(call: cst.Call) -> cst.BaseExpression | None:
    argument = s.arg(call, 0, "module")
    return argument.value if argument is not None else None


def wrap_target(tree: s.Tree, call: cst.Call) -> cst.BaseExpression | None:
    """The name a DDP wrap is assigned to (`model = DDP(model)`, also through `x if c else y`)."""
    _, parent = climb_value(tree, call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return parent.targets[0].target
    if isinstance(parent, cst.AnnAssign):
        return parent.target
    return None


def in_except_handler(tree: s.Tree, node: cst.CSTNode) -> bool:
    for parent in tree.ancestors(node):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(parent, (cst.ExceptHandler, cst.ExceptStarHandler)):
            return True
    return False


def same_block(tree: s.Tree, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return tree.parent(a) is tree.parent(b) and isinstance(tree.parent(a), (cst.IndentedBlock, cst.Module))


def between(tree: s.Tree, first: cst.BaseStatement, last: cst.BaseStatement) -> list[cst.BaseStatement]:
    """Statements of one block strictly between two of its statements."""
    body = list(tree.block(first).body)
    i, j = body.index(first), body.index(last)
    return body[i + 1 : j] if i < j else body[j + 1 : i]


def single_small(statement: cst.CSTNode) -> cst.BaseSmallStatement | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        return statement.body[0]
    return None


def moved_statement(statement: cst.BaseStatement) -> cst.BaseStatement:
    """A statement to re-insert elsewhere: its comments travel with it, its blank lines stay."""
    leading = getattr(statement, "leading_lines", None)
    if leading is None:
        return statement
    return statement.with_changes(leading_lines=[line for line in leading if line.comment is not None])


# --- facts per script ------------------------------------------------------------------


class DevicesAndOutput:
    """Facts the DDP2xx/DDP3xx rules share, computed lazily once per script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.tree = script.tree
        self.program = script.program

    # --- set_device in program order -------------------------------------------------------

    @cached_property
    def set_device_calls(self) -> list[cst.Call]:
        """`torch.cuda.set_device(x)` with a non-literal x: binds this process to its GPU."""
        found = []
        for call in self.script.calls(s.SET_DEVICE):
            argument = s.arg(call, 0, "device")
            if argument is None or int_literal(argument.value) is not None or gpu_index(argument.value) is not None:
                continue
            found.append(call)
        return found

    @cached_property
    def _binding_functions(self) -> set[cst.FunctionDef]:
        """Same-file functions that (transitively) call set_device."""
        found: set[cst.FunctionDef] = set()
        changed = True
        while changed:
            changed = False
            for function in self.program.all_functions:
                if function not in found and self._binding_calls(function, found):
                    found.add(function)
                    changed = True
        return found

    def _binding_calls(self, function: cst.FunctionDef | None, binding: set[cst.FunctionDef]) -> list[cst.Call]:
        """Calls in `function` that bind the device: set_device, or a function that calls it."""
        found = []
        for call in self.program.calls_in(function):
            target = self.program.callee(call, function)
            if call in self.set_device_calls or (target is not None and target[0] in binding):
                found.append(call)
        return found

    @cached_property
    def device_setup_elsewhere(self) -> bool:
        """The process group is set up in another module (`utils.init_distributed_mode(args)`,
        torchvision/DeiT style): whether that binds the GPU is out of sight."""
        return not self.script.calls(s.INIT_PROCESS_GROUP) and not self.set_device_calls

    @cached_property
    def visible_devices_per_rank(self) -> bool:
        """`os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)`: each process sees one GPU, GPU 0."""
        for node in self.tree.of_type(cst.Assign):
            if isinstance(node, cst.Assign) and isinstance(node.value, cst.BaseExpression):
                for t in node.targets:
                    if isinstance(t.target, cst.Subscript) and any(string_value(n) == "CUDA_VISIBLE_DEVICES" for n in self.tree.walk(t.target)):
                        if self.mentions_rank(node.value, self.tree.function(node), depth=1):
                            return True
        return False

    def device_bound_before(self, node: cst.CSTNode) -> bool:
        """Whether set_device(<rank>) has run whenever `node` runs (as far as the file tells)."""
        if self.device_setup_elsewhere:
            return True
        if not self.set_device_calls:
            return False
        return self._bound_at(node, self.tree.function(node), frozenset())

    def _bound_at(self, node: cst.CSTNode, function: cst.FunctionDef | None, seen: frozenset) -> bool:
        here = position(self.tree, node)
        calls = self._binding_calls(function, self._binding_functions)
        if any(position(self.tree, c) < here for c in calls):
            return True
        if function is None:
            return False
        if function in seen:
            return True
        sites = self.program.call_sites(function)
        if not sites:
            # a spawn target or a callback: bound if the binding is not later in this function
            return not calls
        return all(self._bound_at(call, caller, seen | {function}) for call, caller in sites)

    def placement(self, literal: cst.BaseExpression) -> str | None:
        """How a device literal is used: "placement" (moves or creates tensors now), "value"
        (stored as a device), "set_device", or None (compared, printed, a device type...)."""
        node, parent = climb_value(self.tree, literal)
        if isinstance(parent, cst.Arg):
            call = self.tree.parent(parent)
            if not isinstance(call, cst.Call):
                return None
            name = self.tree.qname(call.func)
            if name in s.TORCH_DEVICE:
                if parent is not s.arg(call, 0, "type") or s.arg(call, 1, "index") is not None:
                    return None
                return self.placement(call)
            if name in s.SET_DEVICE:
                return "set_device"
            keyword = parent.keyword.value if parent.keyword is not None else None
            if keyword in ("device", "map_location"):
                return "placement"
            found = method_call(call)
            if found is not None and found[1] == "to" and parent is s.arg(call, 0, "device"):
                return "placement"
            if keyword == "default" and self._is_device_option(call):
                return "value"
            return None
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            names = [dotted(t) for t in targets]
            if all(n is not None and not _names_a_type(n) for n in names):
                return "value"
            return None
        if isinstance(parent, cst.DictElement) and parent.value is node:
            key = string_value(parent.key)
            return "value" if key is not None and "device" in key.lower() and not _names_a_type(key) else None
        if isinstance(parent, cst.Param) and parent.default is node:
            return "value" if not _names_a_type(parent.name.value) else None
        return None

    def _is_device_option(self, call: cst.Call) -> bool:
        found = method_call(call)
        if found is None or found[1] != "add_argument":
            return False
        flags = [string_value(a.value) for a in call.args if a.keyword is None]
        return any(f is not None and "device" in f.lower() and not _names_a_type(f) for f in flags)

    # --- rank devices (for map_location) -------------------------------------------------

    def rank_device_name(self, node: cst.CSTNode) -> str | None:
        """A name in scope at `node` holding this rank's device (or the CPU fallback)."""
        function = self.tree.function(node)
        here = position(self.tree, node)
        candidates: list[str] = []
        if function is not None:
            candidates += [n for n in self.program.all_param_names(function) if "device" in n.lower()]
            for n in self.program.scope_nodes(function):
                if isinstance(n, (cst.Assign, cst.AnnAssign)) and position(self.tree, n) < here:
                    targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                    candidates += [d for t in targets if (d := dotted(t)) and "device" in d.rsplit(".", 1)[-1].lower()]
            cls = self.program.owner_class(function)
            if cls is not None and self.program.param_names(function) != self.program.all_param_names(function):
                for method in self.program.methods.get(cls, {}).values():
                    for n in self.program.scope_nodes(method):
                        if isinstance(n, cst.Assign):
                            candidates += [d for t in n.targets if (d := dotted(t.target)) and d.startswith("self.") and "device" in d.lower()]
        for n in self.program.scope_nodes(None):
            if isinstance(n, cst.Assign) and (function is not None or position(self.tree, n) < here):
                candidates += [d for t in n.targets if (d := dotted(t.target)) and "." not in d and "device" in d.lower()]
        for name in dict.fromkeys(candidates):
            expr = cst.parse_expression(name)
            origins = self.program.origins(expr, function)
            kinds = [self._device_kind(o.node, o.function, node) for o in origins]
            if kinds and "rank" in kinds and all(k in ("rank", "cpu") for k in kinds):
                return name
        return None

    def _device_kind(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, use: cst.CSTNode) -> str | None:
        if isinstance(expr, cst.IfExp):
            kinds = {self._device_kind(expr.body, function, use), self._device_kind(expr.orelse, function, use)}
            if kinds <= {"rank", "cpu"} and "rank" in kinds:
                return "rank"
            return "cpu" if kinds == {"cpu"} else None
        if string_value(expr) == "cpu":
            return "cpu"
        if isinstance(expr, cst.FormattedString):
            text = "".join(p.value for p in expr.parts if isinstance(p, cst.FormattedStringText))
            return "rank" if text.startswith("cuda:") and len(expr.parts) > 1 else None
        if isinstance(expr, cst.Call) and self.tree.qname(expr.func) in s.TORCH_DEVICE and expr.args:
            first = expr.args[0].value
            if string_value(first) == "cpu":
                return "cpu"
            index = s.arg(expr, 1, "index")
            if index is not None:
                return "rank" if int_literal(index.value) is None else None
            if string_value(first) == "cuda":
                return "rank" if self.device_bound_before(use) else None
            if isinstance(first, (cst.FormattedString, cst.IfExp)):
                return self._device_kind(first, function, use)
            if gpu_index(first) is None and self.script.is_rank_expr(first, function):
                return "rank"
        return None

    # --- DDP wraps -----------------------------------------------------------------------

    def wraps_in(self, function: cst.FunctionDef | None) -> list[cst.Call]:
        return [w for w in self.script.ddp_wraps if self.tree.function(w) is function]

    def rebound_since_wrap(self, name: str, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """`name` is wrapped in this function before `node`, and bound again to another object
        since (the best model read back whole): at `node` it is no wrapper."""
        wraps = [
            wrap for wrap in self.wraps_in(function)
            if self.tree.order(wrap) < self.tree.order(node) and (target := wrap_target(self.tree, wrap)) is not None and dotted(target) == name
        ]  # fmt: skip
        return bool(wraps) and all(rebinds_after(self.program, name, wrap, function, node) for wrap in wraps)

    def wrapped_at(self, name: str, node: cst.CSTNode, function: cst.FunctionDef | None, seen: frozenset = frozenset()) -> cst.Call | None:
        """The DDP wrap that `name` (the wrapper or the module it wraps) may have gone through
        when `node` runs: one that can run before it (not in a branch exclusive to it)."""
        for wrap in self.wraps_in(function):
            if not self.tree.may_follow(wrap, node):
                continue
            target = wrap_target(self.tree, wrap)
            inner = wrapped_module(wrap)
            names = {dotted(target) if target is not None else None, dotted(inner) if inner is not None else None}
            if name in names and not rebinds_after(self.program, name, wrap, function, node):
                return wrap
        if function is None or function in seen:
            return None
        root = name.split(".", 1)[0]
        if name.startswith("self."):
            cls = self.program.owner_class(function)
            init = self.program.methods.get(cls, {}).get("__init__") if cls is not None else None
            if init is not None and init is not function:
                for wrap in self.wraps_in(init):
                    target = wrap_target(self.tree, wrap)
                    if target is not None and dotted(target) == name:
                        return wrap
            return None
        if root not in self.program.param_names(function):
            return None
        sites = self.program.call_sites(function)
        found = None
        for call, caller in sites:
            argument = self.program.argument_for(call, function, root)
            passed = dotted(argument) if argument is not None else None
            if passed is None:
                return None
            wrap = self.wrapped_at(passed + name[len(root) :], call, caller, seen | {function})
            if wrap is None:
                return None
            found = wrap
        return found

    # --- rank guards ---------------------------------------------------------------------

    def guarded_everywhere(self, node: cst.CSTNode, seen: frozenset = frozenset()) -> bool:
        """Only some ranks reach `node`: a rank guard around it, or around every call of its function."""
        if self.script.rank_guard(node) is not None:
            return True
        lam = next((a for a in self.tree.ancestors(node) if type(a) is cst.Lambda), None)
        if lam is not None and lam not in seen:
            # `to_file = lambda line: open(LOG, "a").write(line)`: guarded where it is called (helper corpus CK, script 07)
            sites = [c for c in self.tree.calls() if type(c.func) is cst.Name and lam in self.program.lambdas_called(c, self.tree.function(c))]
            return bool(sites) and all(self.guarded_everywhere(c, seen | {lam}) for c in sites)
        function = self.tree.function(node)
        if function is None:
            return False
        if function in seen:
            return True
        sites = self.program.call_sites(function)
        return bool(sites) and all(self.guarded_everywhere(call, seen | {function}) for call, _ in sites)

    def mentions_rank(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 3) -> bool:
        """The value of `expr` differs per rank (`f"ckpt_rank{rank}.pt"`, a path built from one)."""
        for node in self.tree.walk(expr):
            if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and self.script.is_rank_expr(node, function):
                return True
        if depth == 0:
            return False
        for node in self.tree.walk(expr):
            if isinstance(node, cst.Name) and not (isinstance(self.tree.parent(node), cst.Attribute) and self.tree.parent(node).attr is node):
                for origin in self.program.origins(node, function):
                    if origin.node is not node and self.mentions_rank(origin.node, origin.function, depth - 1):
                        return True
        return False

    # --- writes and other output -----------------------------------------------------------

    def opens_for_writing(self, node: cst.CSTNode) -> bool:
        return self.tree.opens_for_writing(node)

    @cached_property
    def outputs(self) -> Outputs:
        return Outputs(self.tree, self.program)

    def write_destination(self, call: cst.Call, function: cst.FunctionDef | None) -> tuple[str, cst.BaseExpression] | None:
        """For a call that writes a file: (what it is, the destination). A dump into a file
        object opened here is left to its `open(...)`."""
        out = self.outputs.of(call, function)
        if out is None or out.kind not in WRITES or out.by_name or out.destination is None or out.into_open_file:
            return None
        return out.label, out.destination

    def is_private_destination(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """A buffer in memory, a temporary file, os.devnull, or a path that names the rank."""
        return private_to_process(self.tree, self.program, expr, function) or self.mentions_rank(expr, function)

    def output_kind(self, call: cst.Call, function: cst.FunctionDef | None) -> str | None:
        """print / logging / tqdm / SummaryWriter / wandb.init (the DDP303 side effects); not a
        rank's own failure (error-level logging), nor output known only by a helper's name."""
        out = self.outputs.of(call, function)
        if out is None or out.loud or out.by_name:
            return None
        if out.kind == PRINT and out.label == "print":
            return "print"
        if out.kind == PRINT and self.tree.qname(call.func) in PRINTS:
            return "echo"  # `click.echo(...)`, `pprint.pprint(...)`: not silenced with print
        if out.creates:
            return {TENSORBOARD: "SummaryWriter", WANDB: "wandb.init"}.get(out.kind)
        if out.kind in (LOGGING, TQDM):
            return out.kind
        return None

    def is_output_statement_call(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """Calls a rank-0 guard may enclose: output, writes, folders, TensorBoard/wandb logging."""
        return self.outputs.of(call, function) is not None

    def output_only(self, statement: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """A statement that only outputs: guarding it changes nothing else the rank does."""
        if self.script.collectives_in(statement):
            return False
        return self._output_only(statement, function)

    def _output_only(self, statement: cst.CSTNode, function) -> bool:
        if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return all(
                isinstance(small, cst.Pass)
                or (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and self.is_output_statement_call(small.value, function))
                for small in statement.body
            )
        if isinstance(statement, cst.IndentedBlock):
            return all(self._output_only(inner, function) for inner in statement.body)
        if isinstance(statement, cst.If):
            orelse = statement.orelse
            if orelse is not None and not (isinstance(orelse, cst.Else) and self._output_only(orelse.body, function)):
                return False
            return self._output_only(statement.body, function)
        if isinstance(statement, cst.For):
            return statement.orelse is None and self._output_only(statement.body, function)
        if isinstance(statement, cst.With):
            return all(self.opens_for_writing(item.item) for item in statement.items) and self._output_only(statement.body, function)
        return False

    @cached_property
    def rank_aware_logging(self) -> bool:
        """Logging already quiet on other ranks: a level or `logging.disable` chosen per rank."""
        for call in self.tree.calls():
            name = self.tree.qname(call.func)
            found = method_call(call)
            configures = name in ("logging.basicConfig", "logging.disable") or (found is not None and found[1] == "setLevel")
            if not configures:
                continue
            function = self.tree.function(call)
            if self.script.rank_guard(call) is not None:
                return True
            for node in self.tree.walk(call):
                if isinstance(node, cst.IfExp) and self.script.is_rank_condition(node.test, function):
                    return True
            if any(self.mentions_rank(a.value, function, depth=1) for a in call.args):
                return True
        return False

    @cached_property
    def print_silenced(self) -> bool:
        """`builtins.print` replaced per rank (DETR/DeiT's `setup_for_distributed(is_master)`,
        also reached through their `utils.init_distributed_mode(args)`)."""
        for node in self.tree.of_type(cst.Assign, cst.Call):
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    name = dotted(t.target)
                    if name in ("builtins.print", "__builtin__.print", "__builtins__.print"):
                        return True
            if isinstance(node, cst.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] in ("setup_for_distributed", "init_distributed_mode"):
                return True  # DETR/DeiT/MAE: init_distributed_mode(args) calls setup_for_distributed
        return False

    # --- the script's own rank-0 condition, for fixes ----------------------------------------

    def main_condition(self, node: cst.CSTNode) -> tuple[str, cst.BaseExpression | None]:
        """A rank-0 test usable at `node`: the script's own spelling when one is in scope, else
        `dist.get_rank() == 0`. Returns (code, the test it copies or None)."""
        function = self.tree.function(node)
        for test in self._positive_tests(function):
            if self._available(test, node, function):
                return code(test), test
        for name in ("rank", *GLOBAL_RANK_NAMES):
            if self._name_bound_at(name, node, function) and self.script.is_rank_expr(cst.Name(name), function):
                return f"{name} == 0", None
        return f"{self.distributed_alias()}.get_rank() == 0", None

    def not_main_condition(self, node: cst.CSTNode) -> str:
        condition, test = self.main_condition(node)
        if test is None:
            test = cst.parse_expression(condition)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            operator = test.comparisons[0].operator
            flipped = {cst.Equal: "!=", cst.In: "not in", cst.NotEqual: "==", cst.NotIn: "in"}.get(type(operator))
            if flipped is not None:
                return f"{code(test.left)} {flipped} {code(test.comparisons[0].comparator)}"
        if isinstance(test, (cst.BooleanOperation, cst.IfExp)):
            return f"not ({condition})"
        return f"not {condition}"

    def distributed_alias(self) -> str:
        """How the file spells `torch.distributed` (`dist` when it is not imported)."""
        for node in self.tree.walk():
            if isinstance(node, cst.Import):
                for alias in node.names:
                    if code(alias.name) == "torch.distributed":
                        return code(alias.asname.name) if alias.asname is not None else "torch.distributed"
            elif isinstance(node, cst.ImportFrom) and node.module is not None and code(node.module) == "torch":
                if isinstance(node.names, cst.ImportStar):
                    continue
                for alias in node.names:
                    if code(alias.name) == "distributed":
                        return code(alias.asname.name) if alias.asname is not None else "distributed"
        return "dist"

    def needs_distributed_import(self, condition: str) -> bool:
        return condition.startswith("dist.") and self.distributed_alias() == "dist" and not self._imports_dist()

    def _imports_dist(self) -> bool:
        for node in self.tree.walk():
            if isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    bound = alias.asname.name if alias.asname is not None else alias.name
                    if code(bound) == "dist":
                        return True
        return False

    def _positive_tests(self, function: cst.FunctionDef | None) -> Iterator[cst.BaseExpression]:
        """Rank-0 tests the script writes, nearest scope first."""
        scopes = [function, *(f for f in self.program.all_functions if f is not function), None]
        for scope in dict.fromkeys(scopes):
            for n in self.program.scope_nodes(scope):
                test = n.test if isinstance(n, (cst.If, cst.IfExp, cst.While)) else None
                if test is None:
                    continue
                positive = self._positive_part(test, scope)
                if positive is not None:
                    yield positive

    def _positive_part(self, test: cst.BaseExpression, function) -> cst.BaseExpression | None:
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._positive_part(test.left, function) or self._positive_part(test.right, function)
        if isinstance(test, cst.BooleanOperation):
            # `not dist.is_initialized() or dist.get_rank() == 0`: rank 0, or not distributed at all
            for rank_side, other in ((test.left, test.right), (test.right, test.left)):
                if self._positive_part(rank_side, function) is not None and self._asks_distributed(other):
                    return test
            return None
        if not self.script.is_rank_condition(test, function):
            return None
        if isinstance(test, cst.Comparison):
            if len(test.comparisons) != 1:
                return None
            operator, other = test.comparisons[0].operator, test.comparisons[0].comparator
            if isinstance(operator, cst.Equal) and (int_literal(other) == 0 or int_literal(test.left) == 0):
                return test
            if isinstance(operator, cst.In) and isinstance(other, (cst.Tuple, cst.List, cst.Set)):
                return test if any(int_literal(e.value) == 0 for e in other.elements) else None
            return None
        if isinstance(test, (cst.Call, cst.Name, cst.Attribute)):
            name = dotted(test.func if isinstance(test, cst.Call) else test)
            if name is not None and name.rsplit(".", 1)[-1] in MAIN_PROCESS_NAMES:
                return test
            if isinstance(test, cst.Call):
                target = self.program.callee(test, function)
                returns = self.program.returns(target[0]) if target is not None else []
                if returns and all(self._positive_part(r, target[0]) is not None for r in returns):  # type: ignore[index]
                    return test
        return None

    def _asks_distributed(self, test: cst.BaseExpression) -> bool:
        """A test on whether the run is distributed at all (`dist.is_initialized()`, `args.distributed`)."""
        for n in self.tree.walk(test):
            name = self.tree.qname(n) if isinstance(n, (cst.Name, cst.Attribute)) else None
            if name in ("torch.distributed.is_initialized", "torch.distributed.is_available"):
                return True
            last = (dotted(n) or "").rsplit(".", 1)[-1].lower() if isinstance(n, (cst.Name, cst.Attribute)) else ""
            if last in ("distributed", "is_distributed", "ddp", "use_ddp", "world_size"):
                return True
        return False

    def _available(self, test: cst.BaseExpression, node: cst.CSTNode, function) -> bool:
        """Every name `test` reads is bound where `node` runs (a test may come from another function)."""
        for name in root_names(self.tree, test):
            if not self._name_bound_at(name, node, function):
                return False
        return True

    def _name_bound_at(self, name: str, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        here = position(self.tree, node)
        if function is not None:
            if name in self.program.all_param_names(function):
                return True
            local = self._local_bindings(function, name)
            if local:
                return any(p < here for p in local)
        module = self._local_bindings(None, name)
        if function is None:
            return any(p < here for p in module)
        return bool(module) or name in self.program.functions or name in self.program.classes

    def _local_bindings(self, function: cst.FunctionDef | None, name: str) -> list[tuple[int, int]]:
        found = []
        for n in self.program.scope_nodes(function):
            if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.WithItem)) and name in assigned_names(self.tree, n):
                found.append(position(self.tree, n))
            elif isinstance(n, (cst.Import, cst.ImportFrom)) and not isinstance(n.names, cst.ImportStar):
                for alias in n.names:
                    bound = alias.asname.name if alias.asname is not None else alias.name
                    if code(bound).split(".")[0] == name:
                        found.append(position(self.tree, n))
            elif isinstance(n, (cst.FunctionDef, cst.ClassDef)) and n.name.value == name:
                found.append(position(self.tree, n))
        if function is None:
            found += [position(self.tree, f) for f in self.program.functions.values() if f.name.value == name]
        return found


def _names_a_type(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return any(word in last for word in NOT_A_PLACEMENT)


def devices_and_output(script: Script) -> DevicesAndOutput:
    """The shared facts for `script`, computed once."""
    return script.shared(DevicesAndOutput)


def guard_fix(facts: DevicesAndOutput, plan, call: cst.Call) -> str | None:
    """Put the statement holding `call` under the script's rank-0 condition."""
    statement = facts.tree.statement(call)
    function = facts.tree.function(call)
    if not facts.output_only(statement, function):
        return None
    condition, _ = facts.main_condition(statement)
    if facts.needs_distributed_import(condition):
        plan.add_import("torch.distributed", None, "dist")
    plan.guard(statement, condition)
    return f"runs on rank 0 only (`if {condition}:`)"


def uses_beyond_parameters(tree: s.Tree, statement: cst.CSTNode, names: set[str]) -> bool:
    """Whether `statement` refers to one of `names` other than through `.parameters()` /
    `.named_parameters()` (the same Parameter objects whether wrapped or not)."""
    for node in tree.walk(statement):
        if isinstance(node, (cst.Name, cst.Attribute)) and dotted(node) in names:
            parent = tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                if dotted(parent) in names or parent.attr.value in ("parameters", "named_parameters"):
                    continue  # judged at the full name (`self.model`), or a parameter read
            return True
    return False
