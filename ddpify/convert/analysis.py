"""One analysis pass over a single-GPU script: the facts every transform works from.

Which name is the trained model and where it is ready to wrap, which DataLoader feeds the
loop that calls `backward()`, where each epoch starts, where the entry point is, what the
script calls its device. Transforms read these facts; none re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Origin, Program
from ddpify.syntax import Tree, code, dotted, is_backward, is_gpu_string, string_value

ENTRY_NAMES = ("local_rank", "rank", "world_size", "backend")
MOVE_METHODS = {"to", "cuda", "half", "float", "double", "bfloat16", "to_empty"}


class NotConvertible(Exception):
    """The script is returned unchanged; the message says why."""


@dataclass
class Entry:
    kind: Literal["function", "main-block", "module"]
    function: cst.FunctionDef | None
    block: cst.IndentedBlock | cst.Module
    after: cst.BaseStatement | None  # module kind: the setup goes after this statement
    label: str


@dataclass
class Device:
    name: str
    assignment: cst.BaseStatement | None  # the user's device statement, replaced by the setup
    was_string: bool


@dataclass
class TrainedModel:
    ref: str  # "model" or "self.model"
    function: cst.FunctionDef | None  # where it is assigned, and wrapped
    anchor: cst.BaseStatement  # DDP(...) goes right after this statement
    moved: bool


@dataclass
class TrainLoop:
    loop: cst.For
    loader: cst.BaseExpression  # the loader as iterated
    function: cst.FunctionDef | None


@dataclass
class EpochStart:
    loop: cst.For | cst.While
    loader: str  # the loader, spelled for the loop's scope
    epoch: str | None


@dataclass
class Facts:
    tree: Tree
    program: Program
    entry: Entry
    device: Device
    models: list[TrainedModel]
    train_loops: list[TrainLoop]
    train_loaders: list[Origin]
    epoch_starts: list[EpochStart]
    model_refs: dict[cst.FunctionDef | None, set[str]]
    syncing: set[cst.FunctionDef]
    warnings: list[tuple[cst.CSTNode | None, str]] = field(default_factory=list)

    # --- scopes ------------------------------------------------------------------------

    def sees_entry_names(self, function: cst.FunctionDef | None) -> bool:
        """Whether the setup's names (`rank`, `device`, ...) are visible in `function`."""
        if self.entry.kind == "function":
            return function is self.entry.function
        return function is None or self.program.owner_class(function) is None

    def device_expr(self, function: cst.FunctionDef | None) -> str:
        """How code in `function` names the rank's device."""
        if self.sees_entry_names(function):
            return self.device.name
        if function is not None:
            for name in (self.device.name, "device"):
                if self.program.binds(function, name):
                    return name
            cls = self.program.owner_class(function)
            if cls is not None:
                for method in self.program.methods.get(cls, {}).values():
                    if self.program.assignments(method, "self.device"):
                        return "self.device"
        return 'torch.device("cuda" if torch.cuda.is_available() else "cpu")'

    def rank_expr(self, function: cst.FunctionDef | None) -> str:
        return "rank" if self.sees_entry_names(function) else "dist.get_rank()"

    def world_size_expr(self, function: cst.FunctionDef | None) -> str:
        return "world_size" if self.sees_entry_names(function) else "dist.get_world_size()"

    # --- the wrapped model -----------------------------------------------------------

    def is_model(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Whether `node` names the DDP-wrapped model at this point of `function`."""
        ref = dotted(node) if isinstance(node, cst.BaseExpression) else None
        if ref is None or ref not in self.model_refs.get(function, set()):
            return False
        for model in self.models:
            if model.ref == ref and model.function is function:
                return self.tree.line(node) > self.tree.positions[model.anchor].end.line
        return True

    def forwards_model(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        return self.is_model(call.func, function)

    def call_syncs(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """Whether the call itself takes part in a collective: a DDP forward or backward, a
        torch.distributed collective, or a same-file function that does one of these."""
        if self.forwards_model(call, function) or is_backward(call) or self.tree.is_call_to(call, s.COLLECTIVES):
            return True
        target = self.program.callee(call, function)
        return target is not None and target[0] in self.syncing

    def syncs(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> bool:
        """Whether running `node` takes part in a collective anywhere inside it."""
        return any(self.call_syncs(call, function) for call in self.tree.calls(node))


class Analyzer:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.program = Program(tree)
        self.warnings: list[tuple[cst.CSTNode | None, str]] = []

    def run(self) -> Facts:
        self._check_not_distributed()
        backward_calls = [c for c in self.tree.calls() if is_backward(c)]
        if not backward_calls:
            self._explain_nothing_to_train()
        entry = self._entry()
        models = self._models()
        if not models:
            raise NotConvertible("nothing to convert: no optimizer over a model's parameters was found")
        loops = self._train_loops(backward_calls)
        loaders = self._train_loaders(loops)
        device = self._device(entry)
        refs = self._model_refs(models)
        facts = Facts(
            tree=self.tree,
            program=self.program,
            entry=entry,
            device=device,
            models=models,
            train_loops=loops,
            train_loaders=loaders,
            epoch_starts=self._epoch_starts(loops),
            model_refs=refs,
            syncing=set(),
            warnings=self.warnings,
        )
        facts.syncing = self._syncing(facts)
        self._check_names(entry, device)
        return facts

    # --- should we touch this script at all? -------------------------------------------

    def _check_not_distributed(self) -> None:
        """Already distributed scripts are left alone; the reason names the strongest evidence."""
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

    def _explain_nothing_to_train(self) -> None:
        # A training loop living in another module is out of reach of a one-file rewrite.
        for call in self.tree.calls():
            name = self.tree.qname(call.func)
            if name is None or name.startswith(("torch.", "builtins.")) or "." not in name:
                continue
            if any(self._holds_optimizer(a.value) for a in call.args):
                self.warnings.append(
                    (call, f"training loop lives in `{name}` (another module): out of reach of a one-file rewrite")
                )
        raise NotConvertible("nothing to train: no `.backward()` call in this file")

    def _holds_optimizer(self, expr: cst.BaseExpression) -> bool:
        function = self.tree.function(expr)
        return any(self._is_optimizer_call(o.node) for o in self.program.origins(expr, function))

    def _is_optimizer_call(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return False
        name = self.tree.qname(node.func) or ""
        return name.startswith(s.OPTIMIZER_PREFIX) and ".lr_scheduler." not in name and ".swa_utils." not in name

    # --- entry point -----------------------------------------------------------------

    def _entry(self) -> Entry:
        module = self.tree.module
        guard = next((st for st in module.body if self.tree.is_main_guard(st)), None)
        if guard is not None:
            assert isinstance(guard.body, cst.IndentedBlock)
            called = [
                self.program.functions[c.func.value]
                for c in self.tree.calls(guard.body)
                if isinstance(c.func, cst.Name) and c.func.value in self.program.functions
            ]
            training = [f for f in called if self._reaches_training(f)]
            if len(training) == 1:
                f = training[0]
                return Entry("function", f, f.body, None, f"{f.name.value}()")  # type: ignore[arg-type]
            return Entry("main-block", None, guard.body, None, "the __main__ block")
        imports = [st for st in module.body if isinstance(st, cst.SimpleStatementLine) and all(isinstance(b, (cst.Import, cst.ImportFrom)) for b in st.body)]
        if not imports:
            raise NotConvertible("no imports found: not a PyTorch training script")
        return Entry("module", None, module, imports[-1], "the module")

    @cached_property
    def _training_functions(self) -> set[cst.FunctionDef]:
        return self.program.reaching(lambda call, _function: is_backward(call))

    def _reaches_training(self, function: cst.FunctionDef) -> bool:
        return function in self._training_functions

    # --- models --------------------------------------------------------------------

    def _models(self) -> list[TrainedModel]:
        found: dict[tuple[str, cst.FunctionDef | None], TrainedModel] = {}
        for call in self.tree.calls():
            if not self._is_optimizer_call(call) or not call.args:
                continue
            function = self.tree.function(call)
            for ref in self._parameter_owners(call.args[0].value, function):
                for model_ref, model_function in self._definition(ref, function):
                    key = (model_ref, model_function)
                    if key not in found:
                        model = self._trained_model(model_ref, model_function)
                        if model is not None:
                            found[key] = model
        return list(found.values())

    def _parameter_owners(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> list[str]:
        """Models whose `.parameters()` feed an optimizer argument (param groups too)."""
        owners: list[str] = []
        for node in self.tree.walk(expr):
            found = s.method_call(node)
            if found and found[1] in {"parameters", "named_parameters"}:
                ref = dotted(found[0])
                if ref is not None:
                    parts = ref.split(".")
                    owners.append(".".join(parts[:2] if parts[0] == "self" else parts[:1]))
        if not owners and isinstance(expr, cst.Name):  # params = model.parameters(); SGD(params)
            for value, _ in self.program.assignments(function, expr.value):
                owners += self._parameter_owners(value, function)  # type: ignore[arg-type]
        return list(dict.fromkeys(owners))

    def _definition(self, ref: str, function: cst.FunctionDef | None) -> list[tuple[str, cst.FunctionDef | None]]:
        """Follow a model name through parameters to the function that assigns it."""
        if function is not None and "." not in ref and ref in self.program.all_param_names(function):
            out = []
            for call, caller in self.program.call_sites(function):
                argument = self.program.argument_for(call, function, ref)
                name = dotted(argument) if argument is not None else None
                if name is not None:
                    out += self._definition(name, caller)
            return out
        if ref.startswith("self.") and function is not None:
            cls = self.program.owner_class(function)
            for method in self.program.methods.get(cls, {}).values() if cls else ():
                if self.program.assignments(method, ref):
                    return [(ref, method)]
            return []
        if function is not None and not self.program.assignments(function, ref):
            function = None  # a global
        return [(ref, function)]

    def _trained_model(self, ref: str, function: cst.FunctionDef | None) -> TrainedModel | None:
        """The model is wrapped after the last statement that assigns or moves it before training starts."""
        body = function.body if function is not None else self.tree.module
        anchor: cst.BaseStatement | None = None
        moved = False
        for statement in _flatten_main_block(self.tree, body):
            if self._uses_for_training(statement, ref, function):
                break
            assigns, moves = self._prepares(statement, ref)
            if assigns or moves:
                anchor = statement
                moved = moved or moves
        return TrainedModel(ref, function, anchor, moved) if anchor is not None else None

    def _prepares(self, statement: cst.CSTNode, ref: str) -> tuple[bool, bool]:
        assigns = moves = False
        for node in self.tree.walk(statement):
            if isinstance(node, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                if any(dotted(t) == ref for t in targets):
                    assigns = True
            found = s.method_call(node)
            if found and dotted(found[0]) == ref and found[1] in MOVE_METHODS:
                moves = True
            if assigns and isinstance(node, cst.Call) and found and found[1] in MOVE_METHODS:
                moves = True
        return assigns, moves

    def _uses_for_training(self, statement: cst.CSTNode, ref: str, function: cst.FunctionDef | None) -> bool:
        """A forward, a loop that trains, or a call of a same-file function that trains."""
        for node in self.tree.walk(statement):
            if isinstance(node, cst.Call) and dotted(node.func) == ref:
                return True
            if isinstance(node, (cst.For, cst.While)) and any(is_backward(c) for c in self.tree.calls(node)):
                return True
            if isinstance(node, cst.Call):
                target = self.program.callee(node, function)
                if target is not None and self._reaches_training(target[0]) and any(dotted(a.value) == ref for a in node.args):
                    return True
        return False

    def _model_refs(self, models: list[TrainedModel]) -> dict[cst.FunctionDef | None, set[str]]:
        return self.program.propagate([(m.ref, m.function) for m in models])

    # --- training loops and loaders --------------------------------------------------

    def _train_loops(self, backward_calls: list[cst.Call]) -> list[TrainLoop]:
        loops: dict[cst.For, TrainLoop] = {}
        for call in backward_calls:
            for loop in self._loader_loops(call, self.tree.function(call), set()):
                loops.setdefault(loop.loop, loop)
        return list(loops.values())

    def _loader_loops(self, node: cst.CSTNode, function: cst.FunctionDef | None, seen: set) -> list[TrainLoop]:
        for loop in self.tree.loops(node):
            if isinstance(loop, cst.For):
                loader = self.program.loader(loop.iter, function)
                if loader is not None:
                    return [TrainLoop(loop, loader, function)]
        if function is None or function in seen:
            return []
        seen.add(function)
        found = []
        for call, caller in self.program.call_sites(function):
            found += self._loader_loops(call, caller, seen)
        return found

    def _train_loaders(self, loops: list[TrainLoop]) -> list[Origin]:
        loaders: dict[cst.CSTNode, Origin] = {}
        for loop in loops:
            for origin in self.program.origins(loop.loader, loop.function):
                if self.tree.is_call_to(origin.node, s.DATALOADER):
                    loaders.setdefault(origin.node, origin)
        return list(loaders.values())

    def _epoch_starts(self, loops: list[TrainLoop]) -> list[EpochStart]:
        starts: dict[cst.CSTNode, EpochStart] = {}
        for loop in loops:
            for start in self._epoch_start(loop.loop, code(loop.loader), loop.loader, loop.function, set()):
                starts.setdefault(start.loop, start)
        return list(starts.values())

    def _epoch_start(self, node, loader_code, loader_node, function, seen) -> list[EpochStart]:
        outer = [lp for lp in self.tree.loops(node) if lp is not node]
        if outer:
            loop = outer[0]
            return [EpochStart(loop, loader_code, self._epoch_counter(loop))]
        if function is None or function in seen:
            return []
        seen.add(function)
        found = []
        for call, caller in self.program.call_sites(function):
            spelled = loader_code
            if isinstance(loader_node, cst.Name) and loader_node.value in self.program.all_param_names(function):
                argument = self.program.argument_for(call, function, loader_node.value)
                if argument is None:
                    continue
                spelled, loader_node_caller = code(argument), argument
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
                return target.value
            return named
        if named:
            return named
        for node in self.tree.walk(loop.test):
            if isinstance(node, cst.Name) and node.value in counted:
                return node.value
        return None

    # --- device ----------------------------------------------------------------------

    def _device(self, entry: Entry) -> Device:
        body = entry.block
        for statement in _flatten_main_block(self.tree, body) if entry.kind != "main-block" else body.body:
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                continue
            small = statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                kind = self.device_kind(small.value)
                if kind is not None:
                    return Device(small.targets[0].target.value, statement, kind == "str")
        return Device("device", None, False)

    def device_kind(self, node: cst.BaseExpression) -> Literal["str", "device"] | None:
        """Whether an expression picks a GPU (possibly falling back to the CPU): as a string or a torch.device."""
        if isinstance(node, cst.IfExp):
            body, orelse = self.device_kind(node.body), self.device_kind(node.orelse)
            if body is not None and (orelse is not None or self._is_cpu(node.orelse)):
                return body
            return None
        if is_gpu_string(node):
            return "str"
        if isinstance(node, cst.Call):
            name = self.tree.qname(node.func)
            if name in s.TORCH_DEVICE and node.args and (self.device_kind(node.args[0].value) == "str" or is_gpu_string(node.args[0].value)):
                return "device"
            if name in s.ACCELERATOR_CURRENT:
                return "device"
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Call) and self.tree.qname(node.value.func) in s.ACCELERATOR_CURRENT:
            return "str"  # torch.accelerator.current_accelerator().type
        return None

    def _is_cpu(self, node: cst.BaseExpression) -> bool:
        if string_value(node) == "cpu":
            return True
        return isinstance(node, cst.Call) and self.tree.qname(node.func) in s.TORCH_DEVICE and bool(node.args) and string_value(node.args[0].value) == "cpu"

    def _check_names(self, entry: Entry, device: Device) -> None:
        """The setup defines `local_rank`, `rank`, `world_size`, `backend` and the device variable."""
        for name in ENTRY_NAMES:
            values = self.program.assignments(entry.function, name)
            if name == "local_rank" and values and all(code(v).endswith("local_rank") for v, _ in values):
                continue  # `local_rank = args.local_rank`: replaced by the environment variable
            if self.program.binds(entry.function, name):
                raise NotConvertible(f"the script already uses the name `{name}` that the DDP setup needs; rename it first")
        for value, _ in self.program.assignments(entry.function, device.name):
            if device.assignment is None or not self.tree.inside(value, device.assignment):
                self.warnings.append(
                    (
                        value,
                        f"`{device.name} = {code(value)}` is kept and replaces the rank's device: make it \"cuda\" "
                        "(not \"cuda:N\") so each rank uses the GPU set_device(local_rank) picked",
                    )
                )

    # --- what takes part in collectives ---------------------------------------------

    def _syncing(self, facts: Facts) -> set[cst.FunctionDef]:
        return self.program.reaching(
            lambda call, function: facts.forwards_model(call, function) or is_backward(call) or self.tree.is_call_to(call, s.COLLECTIVES)
        )


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
