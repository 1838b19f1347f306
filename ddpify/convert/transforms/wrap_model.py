"""The trained model is wrapped in DDP(...) once it sits on its device.

Only models whose parameters an optimizer updates are wrapped; a model that is only loaded
or evaluated stays as it is. After the wrap, attribute reads and calls of the model's own methods go through `.module`
(the analysis refuses scripts whose training runs through such a method: that would skip DDP's
forward and its gradient sync).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.batches import batch_names, reads
from ddpify.analysis.destinations import private_to_process
from ddpify.analysis.output import WRITES
from ddpify.analysis.switches import GradSwitches, passes_false
from ddpify.analysis.splits import seeded_before
from ddpify.convert.analysis import FUNCTIONAL_CALLS, TrainedModel
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import code, dotted, string_value, unchained

# Names of functions from other modules that use a model without training it: they get `model.module`.
PLAIN_MODEL_USES = ("eval", "valid", "test", "predict", "infer", "score", "metric", "sample", "generate", "visual", "plot", "show", "save", "checkpoint", "export", "log", "print", "summary", "copy", "count", "flops", "ema", "swa", "average", "submi", "animation")  # EMA/SWA helpers read the weights

# torch's weight averaging: AveragedModel deep-copies the module it is given (the wrapper would
# put a `module.` level in its state dict and run DDP forwards in update_bn).
AVERAGING = {"torch.optim.swa_utils.AveragedModel"}

# Names of objects from other modules that watch the training from outside its loop (pytorchtools'
# EarlyStopping keeps the best weights): handed the model there, they get the plain one.
MONITOR_WORDS = ("stop", "monitor", "callback", "best", "patience")
TRAINING_WORDS = ("train", "fit", "tune", "step", "update", "backward", "optim", "learn", "epoch")


# Builtins that walk or size a container module (`len(model)`, `list(model)`, `enumerate(model)`).
CONTAINER_READS = ("len", "list", "tuple", "enumerate", "iter", "reversed")

# in-place writes a parameter takes (`model.fc.weight.data.copy_(x)`)
PARAMETER_WRITES = {"copy_", "fill_", "add_", "sub_", "mul_", "index_copy_", "index_fill_", "masked_fill_", "masked_scatter_", "scatter_"}


# What adds a layer to a container module in place: `heads.append(nn.Linear(...))`, `add_module(...)`.
LAYER_ADDS = {"append", "extend", "insert", "add_module", "update"}


class WrapModel(Transform):
    name = "wrap"
    DESCRIPTION = "DDP(model) once the model is on its device and its weights are final"

    def run(self) -> None:
        self._frozen_after_the_wrap()
        self._built_around_a_wrapped_model()
        for model in self.facts.models:
            # No device_ids: DDP uses the device the model is on, whichever the script picked.
            unused = model.unused_parameters
            flag = self._unused_flag(model)
            if model.element is not None:
                wrap = f"{model.ref} = [DDP({model.element}{flag}) for {model.element} in {model.ref}]\n"
                self.plan.insert_after(model.anchor, statements(wrap))
                self.change(model.anchor, f"each model in `{model.ref}` wrapped in DistributedDataParallel" + (f" (find_unused_parameters=True: {unused})" if unused else ""))
                continue
            if model.reentrant:
                self.change(model.anchor, (
                    f"static_graph=True: {model.reentrant} is reentrant activation checkpointing, which runs a block's backward "
                    "apart from the graph DDP walks" + (f"; {unused}, the same ones every step" if unused else "")
                ))
            elif unused:
                self.change(model.anchor, f"find_unused_parameters=True: {unused}")
            keep_buffers = ""
            if model.repeated_forward:
                # Set after the wrap, which still broadcasts rank 0's buffers once: the keyword means that in every torch.
                keep_buffers = f"{model.ref}.broadcast_buffers = False  # forwarded again before backward(): a buffer broadcast between would break it on CUDA\n"
                held = (
                    "its BatchNorm statistics" if model.batch_norms else "its buffers" if model.registers_buffers
                    else "any buffers it holds (its class is not in this file)"
                )  # fmt: skip
                self.change(model.anchor, (
                    f"{model.repeated_forward}: DDP would broadcast {held} in place at every forward, and on CUDA that "
                    "backward() fails (\"modified by an inplace operation\": cuDNN's BatchNorm backward reads the statistics "
                    "its forward saw); `broadcast_buffers = False` after the wrap: buffers are broadcast once, at the wrap, "
                    "and each rank keeps its own from there"
                ))
            if model.optional is not None:
                why = f"`{model.frozen_by_class}` freezes what it builds" if model.frozen_by_class else f"frozen unless {model.optional}"
                self.plan.insert_after(model.anchor, statements(
                    f"if any(p.requires_grad for p in {model.ref}.parameters()):  # {why}: nothing to synchronize\n"
                    f"    {model.ref} = DDP({model.ref}{flag})\n"
                    + (f"    {keep_buffers}" if keep_buffers else "")
                ))
                when = (
                    f"`{model.ref}` is listed in an optimizer, but {model.optional}" if model.frozen_by_class
                    else f"`{model.ref}` is trained only when `{model.optional}` (its optimizer is None otherwise)"
                )
                self.change(model.anchor, (
                    f"{when}: it is wrapped in DistributedDataParallel when it has parameters to train, since DDP refuses "
                    f"a model with none; its plain model is `{self.plain(model.ref)}` either way"
                ))
            else:
                move = ""
                if model.moved_by is not None and model.moved_by[0] is None:
                    self.warn(model.anchor, (
                        f"`{model.moved_by[1]}` moves `{model.ref}` to its device after the wrap point, to a device ddpify cannot name "
                        f"here: DDP must wrap a model already on its device (on a GPU the first backward fails), so move `{model.ref}` "
                        "there before this line"
                    ))
                elif model.moved_by is not None:
                    move = f"{model.moved_by[0]}  # `{model.moved_by[1]}` moves it there: DDP wraps a model already on its device\n"
                    self.change(model.anchor, f"`{model.moved_by[1]}` moves `{model.ref}` after the wrap point: moved first, with the same call")
                if self._was_data_parallel(model):
                    # DataParallel moved the batch to the GPU itself; DDP does it only when it is given device_ids
                    flag += f", device_ids=[torch.cuda.current_device()] if next({model.ref}.parameters()).is_cuda else None"
                    self.change(model.anchor, (
                        f"`{model.ref}` was wrapped in DataParallel, which moves each batch to the GPU itself: DDP gets the GPU the model "
                        "is on as device_ids, so that it moves the batch too (None when the model is on the CPU)"
                    ))
                self.plan.insert_after(model.anchor, statements(move + f"{model.ref} = DDP({model.ref}{flag})\n" + keep_buffers + self._copies_made_first(model)))
                self.change(model.anchor, f"`{model.ref}` wrapped in DistributedDataParallel once it is on its device and its weights are final")
            if unused is None and not (model.class_name or "").startswith(("torch.", "torchvision.", "timm.")):
                built = f"`{model.class_name}`" if model.class_name else "a class that is not in this file"
                self.warn(
                    model.anchor,
                    f"`{model.ref}` is built by {built}: if its forward leaves some parameters without a gradient "
                    "in a step, pass find_unused_parameters=True to DDP",
                )
        self.plan.add_import("torch.nn.parallel", "DistributedDataParallel", "DDP")
        self._rewrap_after_unfreezing()
        self._rewrap_after_surgery()
        self._bare_parameters()
        self._averaged_copies()
        self._own_buffers_shared_after_each_pass()
        self._parameters_written_from_the_batch()
        self._uses_after_wrap()
        self._returned_plain()
        self._handed_to_other_modules()
        self._batchnorm_refresh_on_a_shard()
        self._own_weights_loaded_after_the_wrap()

    def _own_weights_loaded_after_the_wrap(self) -> None:
        """`init = copy.deepcopy(model.state_dict())` before the wrap, `model.load_state_dict(init)`
        after it (a sweep restarting from the same weights), in a script that seeds nothing
        before the model is built: the copy holds this rank's own initial weights, not the ones
        the wrap broadcast from rank 0, so the replicas start apart (helper corpus S). Said: the
        fix (a seed, or the copy taken after the wrap) is the script's."""
        for model in self.facts.models:
            if model.anchor is None or model.element is not None:
                continue
            start = self.tree.order(model.anchor)
            built = [v for v, _ in self.program.assignments(model.function, model.ref) if self.tree.order(v) <= start]
            if not built or seeded_before(self.tree, self.program, built[0], model.function):
                continue
            for call in self.program.calls_in(model.function):
                found = s.method_call(call)
                if found is None or found[1] != "load_state_dict" or self.tree.order(call) <= start or self.tree.inside(call, model.anchor) or not call.args:
                    continue
                if dotted(found[0]) != model.ref or type(call.args[0].value) is not cst.Name:
                    continue
                copies = [
                    v for v, _ in self.program.assignments(model.function, call.args[0].value.value)
                    if (self.tree.order(v) < start or self.tree.inside(v, model.anchor)) and any((m := s.method_call(c)) is not None and m[1] == "state_dict" and dotted(m[0]) == model.ref for c in self.tree.calls(v))
                ]
                if copies:
                    self.warn(call, (
                        f"`{call.args[0].value.value}` was copied from `{model.ref}` before the DDP wrap, which broadcast rank 0's weights: "
                        "it holds this rank's own initial weights (nothing seeds them alike), and loading it leaves the replicas apart; "
                        f"seed the generator before `{model.ref}` is built, or take the copy after the wrap"
                    ))
                    return

    def _batchnorm_refresh_on_a_shard(self) -> None:
        """`torch.optim.swa_utils.update_bn(train_loader, swa_model)` over a sharded loader: each
        rank recomputes the BatchNorm statistics from its own part of the data, so they differ
        per rank (and rank 0 saves its own). Warned about: the fix is the script's call."""
        sharded = self.facts.sharded_loaders
        for call in self.tree.calls():
            if self.tree.qname(call.func) != "torch.optim.swa_utils.update_bn" or not call.args:
                continue
            loaders = self.program.dataloaders(call.args[0].value, self.tree.function(call))
            if loaders and any(id(o.node) in sharded for o in loaders):
                self.warn(call, (
                    f"`{code(call)}` recomputes the BatchNorm statistics from this rank's shard only: they differ per rank; "
                    "pass a loader over the whole training set, or average the running_mean/running_var buffers over ranks after it"
                ))

    def _handed_to_other_modules(self) -> None:
        """`evaluate(net, val_loader)` from another module gets the DDP wrapper, whose attributes
        (`net.n_classes`) and methods it does not have: evaluation, saving, printing and copying
        get the plain model; anything else is warned about (its training would need the wrapper)."""
        for function in self.facts.model_refs:
            for call in self.program.calls_in(function):
                if self.program.callee(call, function) is not None or self.facts.is_model(call.func, function):
                    continue
                name = self.tree.qname(call.func) or dotted(call.func) or ""
                averaging = name in AVERAGING or self._of_averaging(call, function)
                if not averaging and (name.startswith(("torch.", "builtins.")) or name in {"print", "len", "isinstance", "id", "type", "DDP"}):
                    continue
                if isinstance(call.func, cst.Attribute) and self.facts.is_model(call.func.value, function):
                    continue  # the model's own method: `_uses_after_wrap`
                if self._into_a_container(call, function):
                    continue  # `fold_models.append(model)`: kept as it is, to be run later (helper corpus CF, repro 03)
                for a in call.args:
                    value = unchained(a.value)  # `copy.deepcopy(model.cpu())`: cpu() returns the wrapper
                    if a.star or not isinstance(value, (cst.Name, cst.Attribute)) or not self.facts.is_model(value, function):
                        continue
                    ref = code(value)
                    last = name.rsplit(".", 1)[-1].lower()
                    if averaging or any(word in last for word in PLAIN_MODEL_USES) or self.tree.grad_disabled(call):
                        self.plan.replace(value, cst.parse_expression(self.plain(ref, call)))
                        self.change(call, f"`{name}(...)` {self.origin_of(call, function)} gets the plain model (`{ref}.module`): it may read attributes the DDP wrapper does not have")
                    elif self._outside_training(call, function):
                        self.plan.replace(value, cst.parse_expression(self.plain(ref, call)))
                        self.change(call, (
                            f"`{name}(...)` {self.origin_of(call, function)} gets the plain model (`{ref}.module`): it runs outside the training loop "
                            "and is given no optimizer or loader, so it does not train; a state_dict it saves has the plain model's keys"
                        ))
                        if self._lambda_loading(call, function):
                            continue  # `restore_best = lambda m: m.load_state_dict(torch.load(BEST))`: every rank loads (helper corpus CE, repro 07)
                        if self._saves_privately(call, function):
                            continue  # each rank saves into its own temporary folder and reads its own back (helper corpus CO, repro 01)
                        if not self._monitor_on_rank_0(call, function):
                            self.warn(call, (
                                f"`{name}(...)` from another module stays on every rank (what it decides, such as an early stop, must be the "
                                "same on all): a file it writes is written by every rank; make its writes rank 0's in that module"
                            ))
                    else:
                        self.warn(call, f"`{name}(...)` from another module is handed the DDP wrapper: if it reads the model's own attributes or methods, pass `{ref}.module` (its forward then skips DDP's gradient averaging, so only outside training)")

    def _parameters_written_from_the_batch(self) -> None:
        """`model.codebook.weight[dead] = z[pick]` (a VQ-VAE restarting dead codes from the
        batch), `model.fc.weight.data.copy_(x[:k])`: a parameter written outside the optimizer
        from this rank's batch. DDP synchronizes gradients, never the parameters themselves after
        the wrap, so each rank writes its own and the replicas train apart. Said, not changed:
        where the write sits under a test of this rank's numbers, a broadcast after it would hang."""
        for loop in self.facts.train_loops:
            local = batch_names(self.tree, self.program, loop.loop)
            function = loop.function
            for node in self.tree.walk(loop.loop.body):
                if type(node) in (cst.Assign, cst.AugAssign):
                    targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]  # type: ignore[union-attr]
                    written = next((t for t in targets if self._a_parameter(t, function)), None)
                    value = node.value  # type: ignore[union-attr]
                elif type(node) is cst.Call and (found := s.method_call(node)) is not None and found[1] in PARAMETER_WRITES and self._a_parameter(found[0], function):
                    written, value = found[0], node
                else:
                    continue
                if written is None or not reads(self.tree, value, local):
                    continue
                self.warn(node, (
                    f"`{code(written)}` is a parameter written from this rank's batch outside the optimizer: DDP averages gradients, "
                    "never the parameters themselves after the wrap, so every rank writes its own and the replicas train apart; "
                    "decide the write on values every rank shares and broadcast the parameter from rank 0 after it (dist.broadcast)"
                ))
                return

    def _a_parameter(self, target: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """`model.codebook.weight[dead]`, `model.fc.bias.data`: a weight of the wrapped model."""
        node, names = target, []
        while type(node) in (cst.Attribute, cst.Subscript):
            if type(node) is cst.Attribute:
                names.append(node.attr.value)
            node = node.value  # type: ignore[union-attr]
        if type(node) is not cst.Name or not any(name in ("weight", "bias", "data") for name in names):
            return False
        return self.facts.is_model(node, function)

    def _rewrap_after_unfreezing(self) -> None:
        """`for p in model.backbone.parameters(): p.requires_grad = True` after the wrap (gradual
        unfreezing): DDP averages only the parameters that required a gradient when it wrapped
        the model, so the unfrozen ones would train apart on every rank. The model is wrapped
        again right after, where it is wrapped; elsewhere the report says so. Not where the
        model is only frozen after its wrap (a GAN turns its critic off and on every step): its
        parameters all required a gradient at the wrap, and DDP averages them."""
        grad = self.program.fact(GradSwitches)
        # helpers whose switches are read at their calls (`set_backbone_trainable(model, True)`)
        called = {t[0] for sw in grad.all if type(sw.node) is cst.Call and (t := self.program.callee(sw.node, self.tree.function(sw.node))) is not None}
        rewraps: list[tuple[cst.CSTNode, cst.BaseStatement, TrainedModel]] = []
        for switch in grad.all:
            node = switch.node
            if self.tree.function(node) in called:
                continue  # the call's own switch speaks for it
            root, model = self._model_of(node, switch.module)
            if not switch.on or root is None:
                continue
            if model is not None and grad.toggled_after_wrap(model.ref, model.anchor, model.function):
                continue
            if model is None or model.optional is not None:
                self.warn(node, (
                    f"`requires_grad` turns on for parameters of `{dotted(root)}` after the DDP wrap: DDP averages only the "
                    "parameters that required a gradient when it wrapped the model; wrap it again after this change"
                ))
                continue
            rewraps.append((node, self.tree.statement(node), model))
        # `freeze(model.decoder, a); freeze(model.encoder, b)`: wrapped again once, after the last of such a run, where the
        # switches are all done (between them both halves may be frozen, and DDP refuses a model with nothing to train)
        kept = {id(node) for node, _, _ in self._last_of_runs([(node, statement, "") for node, statement, _ in rewraps])}
        for node, statement, model in rewraps:
            if id(node) not in kept:
                continue
            flag = self._unused_flag(model)
            self.plan.insert_after(statement, statements(
                f"{model.ref} = DDP({model.ref}.module{flag})  # again: DDP averages only the parameters that required a gradient when it wrapped the model\n"
            ))
            self.change(node, f"`{model.ref}` wrapped again after its parameters start requiring gradients: the first wrap left them out of the gradient averaging")

    def _rewrap_after_surgery(self) -> None:
        """A layer replaced after the wrap (`model.fc = nn.Linear(...)`, or a method of the model's
        class doing it: `model.grow(2)` between continual-learning tasks): DDP knows only the
        parameters it wrapped, so the new layer's were never averaged and the old one's waited
        for gradients ("Expected to have finished reduction", also as one process). The model
        is wrapped again once the change is done and moved (`model.to(device)` after it)."""
        for model in self.facts.models:
            if model.element is not None or model.optional is not None:
                continue
            again = f"DDP(REF.module{self._unused_flag(model)})  # again: DDP averages only the parameters it wrapped, and a layer was replaced\n"
            changed = [(node, self._after_its_move(self.tree.statement(node), model.ref), what) for node, what in self._surgeries(model, model.function, model.ref, model.anchor)]
            for node, statement, what in self._last_of_runs(changed):
                self.plan.insert_after(statement, statements(f"{model.ref} = " + again.replace("REF", model.ref)))
                self.change(node, f"{what} after the wrap: `{model.ref}` wrapped again, since DDP knows only the parameters it wrapped")
            for holder, plain, call, caller in self._holders(model):
                # `trainer = Trainer(model, loader)` wraps `self.model` in its __init__; main() then replaces a layer of `model`
                kept = f"{holder}.{model.ref[5:]}"
                changed = [
                    (node, self.tree.statement(node), what)
                    for ref in (plain, kept) if ref for node, what in self._surgeries(model, caller, ref, self.tree.statement(call))
                ]  # on the model handed to it, or through the holder: `trainer.model.classifier = ...` (helper corpus AS, s05)
                changed.sort(key=lambda found: self.tree.order(found[0]))
                for node, statement, what in self._last_of_runs(changed):
                    self.plan.insert_after(statement, statements(f"{kept} = " + again.replace("REF", kept)))
                    self.change(node, f"{what} after `{holder}` wrapped it as `{kept}`: wrapped again, since DDP knows only the parameters it wrapped")

    def _last_of_runs(self, changed: list[tuple[cst.CSTNode, cst.BaseStatement, str]]) -> list[tuple[cst.CSTNode, cst.BaseStatement, str]]:
        """Of statements that change layers, those no other one follows right after: `model.fc1 =
        ...; model.fc2 = ...` is wrapped again once, after the second."""
        statements_ = {id(statement) for _, statement, _ in changed}
        kept = []
        for node, statement, what in changed:
            block = self.tree.parent(statement)
            body = list(getattr(block, "body", ()))
            following = body[body.index(statement) + 1] if statement in body and body.index(statement) + 1 < len(body) else None
            if following is None or id(following) not in statements_:
                kept.append((node, statement, what))
        return kept

    def _holders(self, model: TrainedModel) -> list[tuple[str, str, cst.Call, cst.FunctionDef | None]]:
        """Objects keeping a model their `__init__` wraps (`self.model = model`, then DDP there):
        (the object's name, the model's name at the construction, the call, its scope), for each
        `trainer = Trainer(model, ...)`."""
        return [
            (kept.holder, kept.argument.value if type(kept.argument) is cst.Name else "", kept.call, kept.caller)
            for kept in self.program.kept_by_init(model.function, model.ref) if kept.holder is not None
        ]  # the model's name where it is built, or "" (`Trainer(BagModel(...), device)`): reached through the holder only

    def _surgeries(self, model: TrainedModel, scope: cst.FunctionDef | None, ref: str, after: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, str]]:
        """Where `ref` (the model, in `scope`) gains or swaps a layer after `after`, and how to say it."""
        cls = self._model_class(model)
        start = self.tree.order(after)
        for node in self.program.scope_nodes(scope):
            if type(node) not in (cst.Assign, cst.Call) or self.tree.order(node) <= start or self.tree.inside(node, after):
                continue
            if type(node) is cst.Assign:
                targets = [_stored_in(t.target) for t in node.targets]  # `model.fc = ...`, `model.heads["b"] = ...`, `model[2] = ...`
                indexed = [t.target for t in node.targets if type(t.target) is cst.Subscript]
                if (any(t.startswith(ref + ".") for t in targets) or any(_stored_in(i) == ref for i in indexed)) and self._builds_a_layer(node.value):
                    yield node, f"`{code(node.targets[0].target)}` replaced"
                continue
            found = s.method_call(node)
            held, name = (dotted(found[0]) or "", found[1]) if found is not None else ("", "")
            if name in LAYER_ADDS and held.startswith(ref + ".") and any(self._builds_a_layer(a.value) for a in node.args):
                yield node, f"`{code(node.func)}(...)` adds a layer"  # `model.heads.append(nn.Linear(...))`
            elif held == ref and cls is not None and (method := self.program.class_methods(cls).get(name)) is not None and self._replaces_a_layer(method):
                yield node, f"`{code(node.func)}(...)` replaces a layer"
            elif self._helper_changes_layers(node, ref, scope):
                yield node, f"`{code(node.func)}(...)` changes the layers of the `{ref}` it is handed"

    def _helper_changes_layers(self, call: cst.Call, ref: str, scope: cst.FunctionDef | None) -> bool:
        """`add_task(model, device)`, a same-file function that appends a layer to (or replaces one
        of) the model it is handed: `model.heads.append(nn.Linear(...))` in its body."""
        target = self.program.callee(call, scope)
        if target is None:
            return False
        helper = target[0]
        handed = [self.program.parameter_for(call, helper, a.value) for a in call.args if dotted(a.value) == ref]
        params = {name for name in handed if name is not None}
        for node in self.program.scope_nodes(helper):
            if type(node) is cst.Assign and any(_stored_in(t.target).split(".")[0] in params and "." in _stored_in(t.target) for t in node.targets):
                if self._builds_a_layer(node.value):
                    return True
            found = s.method_call(node) if type(node) is cst.Call else None
            if found is not None and found[1] in LAYER_ADDS and (dotted(found[0]) or "").split(".")[0] in params and "." in (dotted(found[0]) or ""):
                if any(self._builds_a_layer(a.value) for a in node.args):  # type: ignore[attr-defined]
                    return True
        return False

    def _model_class(self, model) -> cst.ClassDef | None:
        values = [v for v, _ in self.program.assignments(model.function, model.ref)]
        return next((cls for v in values if (cls := self.program.instance_of(unchained(v) if type(v) is cst.Call else v, model.function)) is not None), None)

    def _builds_a_layer(self, value: cst.BaseExpression, depth: int = 1) -> bool:
        """`nn.Linear(...)`, `nn.Sequential(...)` or a same-file class: a module with new parameters
        (also listed: `[nn.Linear(4, 2) for _ in range(k)]`)."""
        if type(value) in (cst.List, cst.ListComp, cst.Tuple, cst.Dict):
            elements = [value.elt] if type(value) is cst.ListComp else [e.value for e in value.elements]  # type: ignore[union-attr]
            return any(self._builds_a_layer(e) for e in elements)
        value = unchained(value) if type(value) is cst.Call else value
        if type(value) is not cst.Call:
            return False
        name = self.tree.qname(value.func) or ""
        if name.startswith("torch.nn.") and name[9:10].isupper() or (type(value.func) is cst.Name and value.func.value in self.program.classes):
            return True
        made = self.program.functions.get(value.func.value) if type(value.func) is cst.Name and depth > 0 else None
        returned = self.program.returns(made) if made is not None else []  # `low_rank(model.fc1, r)`, which returns a new nn.Sequential
        return bool(returned) and all(
            self._builds_a_layer(v, depth - 1)
            or (type(v) is cst.Name and any(self._builds_a_layer(b, depth - 1) for b, _ in self.program.assignments(made, v.value)))  # type: ignore[arg-type]
            for v in returned
        )

    def _replaces_a_layer(self, method: cst.FunctionDef) -> bool:
        return any(
            type(node) is cst.Assign
            and any((t := dotted(target.target)) is not None and t.startswith("self.") and t.count(".") == 1 for target in node.targets)
            and self._builds_a_layer(node.value)
            for node in self.program.scope_nodes(method)
        )

    def _after_its_move(self, statement: cst.BaseStatement, ref: str) -> cst.BaseStatement:
        """`statement`, or the `model.to(device)` / `model.cuda()` right after it in its block."""
        block = self.tree.parent(statement)
        body = list(getattr(block, "body", ()))
        if statement not in body:
            return statement
        last = statement
        for following in body[body.index(statement) + 1:]:
            text = code(following)
            if not (type(following) is cst.SimpleStatementLine and (f"{ref}.to(" in text or f"{ref}.cuda(" in text)):
                break
            last = following
        return last

    def _built_around_a_wrapped_model(self) -> None:
        """`model = Head(encoder)` after `encoder` was pretrained and wrapped (a two-stage recipe):
        the new module holds the plain encoder (`Head(encoder.module)`; holding the wrapper
        nested one DDP in another), and it needs find_unused_parameters when the encoder's
        forward may leave parameters without gradients (its pretraining head, unused now)."""
        for model, call, argument, held in self.facts.built_around:
            self.plan.replace(argument.value, cst.parse_expression(self.plain(held.ref, call)))
            self.change(call, f"`{code(call.func)}` is built around the plain `{held.ref}` (`.module`): a DDP wrapper inside the model DDP wraps would nest one in the other")
            if model is None:
                continue  # an evaluation or calibration wrapper, not wrapped itself
            if held.unused_parameters and not model.unused_parameters:
                model.unused_parameters = f"it holds `{held.ref}`, and {held.unused_parameters}"
            partly = self._runs_part_of(call, argument)
            if partly and not model.unused_parameters:
                model.unused_parameters = f"`{code(call.func)}` holds `{held.ref}` and {partly}: the rest of its parameters get no gradient"

    def _runs_part_of(self, call: cst.Call, argument: cst.Arg) -> str:
        """How a module built around a trained model leaves some of its parameters without
        gradients: it runs only a part of it (`self.encoder.features(x)`), or runs it under
        no_grad (a linear probe on frozen features). "" when it runs all of it with gradients."""
        cls = self.program.classes.get(call.func.value) if type(call.func) is cst.Name else None
        if cls is None:
            return ""  # `nn.Sequential(self.encoder, head)`: a stock container runs all it holds
        init = self.program.class_methods(cls).get("__init__")
        param = self.program.parameter_for(call, init, argument.value) if init is not None else None
        if init is None or param is None:
            return ""
        kept = [
            name for node in self.program.scope_nodes(init) if type(node) is cst.Assign and len(node.targets) == 1
            and type(node.value) is cst.Name and node.value.value == param and (name := dotted(node.targets[0].target) or "").startswith("self.")
        ]  # fmt: skip
        cls = self.program.owner_class(init)
        for method in self.program.class_methods(cls).values() if cls is not None and kept else ():
            if method is init:
                continue
            for node in self.program.scope_nodes(method):
                if type(node) is not cst.Attribute or dotted(node) not in kept:
                    continue
                parent = self.tree.parent(node)
                if type(parent) is cst.Attribute and type(self.tree.parent(parent)) is cst.Call:
                    return f"runs only a part of it (`{code(parent)}`, line {self.tree.line(node)})"
                if type(parent) is cst.Call and parent.func is node and self.tree.grad_disabled(node):
                    return f"runs it without gradients (line {self.tree.line(node)})"
        return ""

    @staticmethod
    def _unused_flag(model: TrainedModel) -> str:
        """The keyword DDP needs for parameters some steps leave without a gradient."""
        if model.reentrant:
            return ", static_graph=True"
        return ", find_unused_parameters=True" if model.unused_parameters else ""

    def _frozen_after_the_wrap(self) -> None:
        """`for p in model.encoder.parameters(): p.requires_grad = False` after the wrap, also in a
        function handed the wrapped model (fine-tuning only the head): DDP waits for gradients of
        every parameter that required one when it wrapped the model, and the second step failed
        ("Expected to have finished reduction"). Such a model gets find_unused_parameters=True. A
        model switched off as a whole (a GAN's critic) fires no hook at all and needs nothing."""
        grad = self.program.fact(GradSwitches)
        for switch in grad.all:
            if switch.on:
                continue
            function = self.tree.function(switch.node)
            root, model = self._model_of(switch.node, switch.module)
            if root is None or (dotted(switch.module) == dotted(root) and not switch.partial):
                continue  # before the wrap, or the whole model (not some of it, chosen by name)
            candidates = [m for m in self.facts.models if m.element is None and (m is model or (model is None and m.ref == dotted(root)))]
            if model is None and not candidates and len([m for m in self.facts.models if m.element is None]) == 1:
                candidates = [m for m in self.facts.models if m.element is None]  # handed to the function under another name
            for found in candidates:
                if found.reentrant and function is found.function and not switch.partial:
                    # static_graph (reentrant checkpointing) needs the same parameters every step: a fresh wrap after the
                    # freeze leaves the frozen ones out (helper corpus CR, repro 03: "training graph has changed")
                    self.plan.insert_after(self.tree.statement(switch.node), statements(
                        f"{found.ref} = DDP({found.ref}.module, static_graph=True)  # again: a static graph needs the same parameters every step\n"
                    ))
                    self.change(switch.node, f"`{found.ref}` wrapped again after parameters of `{code(switch.module)}` stop requiring gradients: under reentrant checkpointing DDP keeps a static graph, which would still wait for them")
                    continue
                if not found.unused_parameters:
                    found.unused_parameters = (
                        f"{'some ' if switch.partial else ''}parameters of `{code(switch.module)}` stop requiring gradients after the wrap (line {self.tree.line(switch.node)}"
                        + (f", in `{function.name.value}`" if function is not None and function is not found.function else "")
                        + "): DDP would wait for their gradients"
                    )

    def _model_of(self, node: cst.CSTNode, root: cst.BaseExpression | None):
        """The wrapped model whose parameters `root` (`model.backbone`) holds, as (root, model):
        (None, None) when it is no wrapped model's (before the wrap, which sees it)."""
        function = self.tree.function(node)
        if type(root) is cst.Name and not self.facts.is_model(root, function):
            # `groups = [model[0], model[2], model[4]]`: a list of the model's own parts
            parts = [o.node for o in self.program.origins(root, function)]
            if len(parts) == 1 and type(parts[0]) in (cst.List, cst.Tuple) and parts[0].elements:
                roots = {dotted(_part_root(e.value)) for e in parts[0].elements}
                model = next((m for m in self.facts.models if m.ref in roots and m.function is function and m.element is None), None)
                if len(roots) == 1 and model is not None and self.tree.order(node) > self.tree.order(model.anchor):
                    return _part_root(parts[0].elements[0].value), model
        while type(root) in (cst.Attribute, cst.Subscript) and not self.facts.is_model(root, function):
            root = root.value
        if root is None or not self.facts.is_model(root, function):
            return None, None
        model = next((m for m in self.facts.models if m.ref == dotted(root) and m.function is function and m.element is None), None)
        return root, model

    def _returned_plain(self) -> None:
        """`return model` from the function that wraps and trains it (`model = train()`, then
        `torch.save(model.state_dict(), path)` in the caller): the caller gets the plain model,
        whose state dict has the plain keys and whose attributes are its own. The wrapper's
        saved `module.` keys that the plain model refused to load."""
        for model in self.facts.models:
            if model.function is None or model.element is not None or model.function not in self.program.training_functions:
                continue  # a builder hands the wrapper on: its caller trains it (helper corpus BW, repro 07)
            for node in self.program.scope_nodes(model.function):
                if type(node) is not cst.Return or node.value is None or self.tree.loops(node):
                    continue
                values = [e.value for e in node.value.elements] if type(node.value) is cst.Tuple else [node.value]
                for value in values:
                    if dotted(value) == model.ref and self.facts.is_model(value, model.function):
                        self.plan.replace(value, cst.parse_expression(self.plain(model.ref, node)))
                        self.change(node, f"`{model.ref}` returned as the plain model (`.module`): the caller saves and uses the model, not its DDP wrapper")

    def _bare_parameters(self) -> None:
        """`log_vars = nn.Parameter(torch.zeros(2))` stepped by the optimizer beside the model's
        parameters (learned task weights): DDP averages only its model's gradients, so such a
        parameter trained on each rank's shard apart and the replicas drifted. Its gradient is
        averaged by hand before each step of that optimizer; where the step cannot see the name,
        the report says so."""
        for call in self.tree.calls():
            name = self.tree.qname(call.func) or ""
            grown = s.method_call(call)
            added = grown is not None and grown[1] == "add_param_group" and bool(call.args) and self._is_optimizer(grown[0], self.tree.function(call))
            if not added and (not name.startswith("torch.optim.") or ".lr_scheduler." in name or ".swa_utils." in name or not call.args):
                continue
            function = self.tree.function(call)
            bare, listed, owned = [], set(), set()  # owned: a parameter of a same-file module, `scaled.t`
            work = [(node, 1) for node in self.tree.walk(call.args[0].value)]
            while work:
                node, depth = work.pop(0)
                if type(node) is cst.Attribute and (held := dotted(node)) is not None and held not in bare and self._module_parameter(node, function):
                    bare.append(held)  # `Adam([scaled.t])`: a temperature of a same-file module fitted over a trained model (helper corpus BM, repro 02)
                    owned.add(held)
                    continue
                if type(node) is not cst.Name or node.value in bare:
                    continue
                origins = [o.node for o in self.program.origins(node, function)]
                if any(self._learnable_leaf(o) for o in origins):
                    bare.append(node.value)
                elif origins and all(self._learnable_leaves(o) for o in origins):
                    bare.append(node.value)  # `task_w = [torch.zeros((), requires_grad=True) for _ in range(2)]` (helper corpus AS, repro 04)
                    listed.add(node.value)
                elif depth > 0:  # `params = list(enc.parameters()) + [logit_scale]`, then `AdamW(params)` (helper corpus BB, repro 02)
                    work += [(inner, depth - 1) for o in origins if type(o) in (cst.BinaryOperation, cst.List, cst.Tuple) for inner in self.tree.walk(o)]
            parent = self.tree.parent(call)
            optimizer = dotted(parent.targets[0].target) if type(parent) is cst.Assign and len(parent.targets) == 1 else None
            if added:  # `opt.add_param_group({"params": [log_var]})` (helper corpus BM, repro 07)
                optimizer = dotted(grown[0])  # type: ignore[index]
            if bare and optimizer is None and type(parent) is cst.Return and function is not None:
                # `return AdamW([{"params": model.parameters()}, {"params": [log_temp]}])` in a same-file builder:
                # the optimizer and the parameter under the caller's names (helper corpus BE, repro 01)
                for site, caller in self.program.call_sites(function):
                    named = self.tree.parent(site)
                    handed = [self.program.argument_for(site, function, b) for b in bare]
                    if type(named) is cst.Assign and len(named.targets) == 1 and all(type(h) is cst.Name for h in handed):
                        optimizer, function = dotted(named.targets[0].target), caller
                        listed = {h.value for h, b in zip(handed, bare) if b in listed}  # type: ignore[union-attr]
                        bare = [h.value for h in handed]  # type: ignore[union-attr]
                        break
            if not bare or optimizer is None:
                continue
            steps = [
                c for c in self.tree.calls() if (found := s.method_call(c)) is not None and found[1] == "step"
                and (dotted(found[0]) == optimizer or (c.args and dotted(c.args[0].value) == optimizer))  # `scaler.step(optimizer)`
            ]  # fmt: skip
            for step in steps:
                if step.args and set(bare) <= owned:
                    continue  # `optimizer.step(closure)` (LBFGS over a temperature): its gradient is made inside the closure
                where = self.tree.function(step)
                if where is not function or not self.facts.runs_after_setup(where):
                    self.warn(step, f"{', '.join(f'`{b}`' for b in bare)} trained by `{optimizer}` outside the DDP model: average its gradient over ranks (dist.all_reduce) before this step")
                    continue
                size = self.world_size(where)
                lines = ""
                for b in bare:
                    if b in listed:
                        each = next(n for n in ("tensor", "leaf", "weight") if not self.program.binds(where, n))
                        lines += (
                            f"for {each} in {b}:  # trained beside the DDP model: their gradients averaged over ranks by hand\n"
                            f"    if {each}.grad is not None:\n        dist.all_reduce({each}.grad)\n        {each}.grad /= {size}\n"
                        )
                    else:
                        lines += (
                            f"if {b}.grad is not None:  # trained beside the DDP model: its gradient averaged over ranks by hand\n"
                            f"    dist.all_reduce({b}.grad)\n    {b}.grad /= {size}\n"
                        )
                line = self.tree.statement(step)
                small = self.tree.parent(step)  # `opt.zero_grad(); loss.backward(); opt.step()`: the line is cut before the step
                self.plan.insert_before(small if type(line) is cst.SimpleStatementLine and small in line.body[1:] else line, statements(lines))
                self.change(step, f"{', '.join(f'`{b}`' for b in bare)}, trained by `{optimizer}` beside the DDP model, has its gradient averaged over ranks before the step")

    def _copies_made_first(self, model: TrainedModel) -> str:
        """`ema = copy.deepcopy(model)` before the wrap in a script that seeds nothing first: the copy
        holds this rank's own initial weights, while DDP gives the model rank 0's. The copy gets rank
        0's too, right after the wrap (helper corpus BI, repro 03: an early stop on the EMA's loss
        left one rank training alone)."""
        lines = ""
        for node in self.program.scope_nodes(model.function):
            if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                continue
            copied = unchained(node.value)
            if not (self.tree.is_call_to(copied, {"copy.deepcopy"}) and copied.args and dotted(copied.args[0].value) == model.ref):  # type: ignore[attr-defined]
                continue
            if self.tree.order(self.tree.statement(node)) > self.tree.order(model.anchor) or self.tree.loops(node) or seeded_before(self.tree, self.program, node, model.function):
                continue
            name = node.targets[0].target.value
            each = next((n for n in ("tensor", "copied", "weights") if not self.program.binds(model.function, n)), "_copied")
            lines += (
                f"for {each} in {name}.state_dict().values():  # `{name}` was copied from this rank's initial weights: rank 0's, as the model's\n"
                f"    dist.broadcast({each}, 0)\n"
            )
            self.change(node, f"`{name}`, copied from `{model.ref}` before the wrap in a script that seeds nothing first, gets rank 0's weights as the model does")
        return lines

    def _module_parameter(self, node: cst.Attribute, function: cst.FunctionDef | None) -> bool:
        """`scaled.t`, where `scaled` is an instance of a same-file module, no DDP model, whose
        `__init__` makes `self.t = nn.Parameter(...)`."""
        if type(node.value) is not cst.Name or self.facts.is_model(node.value, function):
            return False
        cls = self.program.instance_of(node.value, function)
        init = self.program.class_methods(cls).get("__init__") if cls is not None else None
        values = self.program.assignments(init, f"self.{node.attr.value}") if init is not None else []
        return bool(values) and all(self._learnable_leaf(self.program.element(v, i)) for v, i in values)

    def _learnable_leaves(self, node: cst.CSTNode) -> bool:
        """`[torch.zeros((), requires_grad=True) for _ in range(2)]`, a list or tuple of such
        tensors, or `nn.ParameterList(...)` of them: tensors an optimizer steps, outside any module."""
        if type(node) is cst.Call and self.tree.qname(node.func) == "torch.nn.ParameterList" and node.args:
            node = node.args[0].value
        if type(node) in (cst.ListComp, cst.GeneratorExp):
            return self._learnable_leaf(node.elt)  # type: ignore[attr-defined]
        if type(node) in (cst.List, cst.Tuple):
            return bool(node.elements) and all(self._learnable_leaf(e.value) for e in node.elements)  # type: ignore[attr-defined]
        return False

    def _learnable_leaf(self, node: cst.CSTNode) -> bool:
        """`nn.Parameter(...)`, `torch.ones(2, requires_grad=True)` or `torch.zeros(2).requires_grad_()`:
        a tensor an optimizer can step, outside any module."""
        if self.tree.is_call_to(node, s.PARAMETER):
            return True
        if type(node) is not cst.Call:
            return False
        found = s.method_call(node)
        if found is not None and found[1] == "requires_grad_" and not passes_false(node.args):
            return True
        flag = s.arg(node, None, "requires_grad")
        return flag is not None and code(flag.value) == "True" and (self.tree.qname(node.func) or "").startswith("torch.")

    def _averaged_copies(self) -> None:
        """`ema.update(model)` in the training loop, where `ema` keeps a copy of the model
        (`self.ema = copy.deepcopy(model)` in a same-file class, timm's ModelEma): DDP gives every
        rank rank 0's buffers at each forward, and the forward then moves them by the rank's own
        batch, so the copy's BatchNorm statistics came out different on every rank, and so did
        what was decided on its evaluation (an early stop left one rank waiting in backward()).
        After each pass of the loop, the copy takes rank 0's buffers, as timm's distribute_bn."""
        for loop in self.facts.train_loops:
            for call in self.tree.calls(loop.loop.body):
                found = s.method_call(call)
                if found is None or found[1] != "update" or len(call.args) != 1 or not self.facts.is_model(call.args[0].value, loop.function):
                    continue
                found_copy = self._copy_attribute(found[0], loop.function)
                if found_copy is None:
                    continue
                copy, tensors = found_copy
                held = f"{code(found[0])}.{copy}"
                buffer = next(n for n in ("buffer", "copy_buffer", "ema_buffer") if not self.program.binds(loop.function, n))
                self.plan.insert_after(loop.loop, statements(
                    f"for {buffer} in {held}.{tensors}():  # each rank's BatchNorm statistics went into the copy: rank 0's, on every rank\n"
                    f"    dist.broadcast({buffer}, 0)\n"
                ))
                self.change(call, f"`{held}` takes rank 0's {'buffers' if tensors == 'buffers' else 'tensors'} after each pass: the running statistics it averages differ per rank")
                break
            run = self._copies_run_in(loop)  # `teacher = copy.deepcopy(student)`, run on each batch (Mean Teacher)
            for copied in run + [c for c in self._copies_moved_by_helpers(loop) if c not in run]:
                buffer = next(n for n in ("buffer", "copy_buffer", "ema_buffer") if not self.program.binds(loop.function, n))
                why = "its forwards on each rank's batches moved its BatchNorm statistics" if copied in run else "each rank's BatchNorm statistics went into the copy"
                self.plan.insert_after(loop.loop, statements(
                    f"for {buffer} in {copied}.buffers():  # {why}: rank 0's, on every rank\n"
                    f"    dist.broadcast({buffer}, 0)\n"
                ))
                how = "run on this rank's batches" if copied in run else "moved toward this rank's model by a helper"
                self.change(loop.loop, f"`{copied}`, a copy of the model {how}, takes rank 0's buffers after each pass")

    def _copies_run_in(self, loop) -> list[str]:
        """Names bound to a copy of a trained model (`teacher = copy.deepcopy(student)`) that the
        training loop runs on its batches: outside DDP, each rank's forwards move the copy's
        BatchNorm statistics by its own shard, and an evaluation of it (an early stop) differs."""
        found = []
        for call in self.tree.calls(loop.loop.body):
            name = call.func.value if type(call.func) is cst.Name else None
            if name is None or name in found:
                continue
            values = [v for v, i in self.program.assignments(loop.function, name) if i is None]
            if values and all(
                self.tree.is_call_to(v, {"copy.deepcopy"}) and v.args and self._with_buffers(dotted(unchained(v.args[0].value)), loop.function)  # type: ignore[union-attr]
                for v in values
            ):
                found.append(name)
            elif values and name not in self.facts.model_refs.get(loop.function, set()) and self._loaded_from_a_model(name, loop):
                found.append(name)  # `teacher = make_net()`, then `teacher.load_state_dict(student.state_dict())`
        return found

    def _copies_moved_by_helpers(self, loop) -> list[str]:
        """`update_ema(ema_model, model)` in the training loop, a same-file function handed a deep
        copy of the model beside it (DiT's and ADM's EMA over `state_dict()` items, BatchNorm
        statistics included: helper corpus CV, repro 04): each rank folded its own statistics into
        the copy. Its buffers take rank 0's after each pass, as a copy run on the batches does."""
        found = []
        for call in self.tree.calls(loop.loop.body):
            target = self.program.callee(call, loop.function)
            if target is None or target[0] in self.program.training_functions or not any(self.facts.is_model(a.value, loop.function) for a in call.args):
                continue
            for a in call.args:
                name = a.value.value if type(a.value) is cst.Name else None
                if name is None or name in found or self.facts.is_model(a.value, loop.function):
                    continue
                made = [o.node for o in self.program.origins(a.value, loop.function)]
                if made and all(
                    self.tree.is_call_to(v, {"copy.deepcopy"}) and v.args and self._with_buffers(dotted(unchained(v.args[0].value)), self.tree.function(v))  # type: ignore[union-attr]
                    for v in made
                ):
                    found.append(name)
        return found

    def _loaded_from_a_model(self, name: str, loop) -> bool:
        """`name.load_state_dict(model.state_dict())` in the function, `model` a trained model that
        may hold buffers: a copy of it made by hand."""
        for call in self.program.calls_in(loop.function):
            found = s.method_call(call)
            if found is None or found[1] != "load_state_dict" or dotted(found[0]) != name or not call.args:
                continue
            inner = s.method_call(call.args[0].value) if type(call.args[0].value) is cst.Call else None
            if inner is not None and inner[1] == "state_dict" and self._with_buffers(dotted(inner[0]), loop.function):
                return True
        return False

    def _with_buffers(self, ref: str | None, function: cst.FunctionDef | None) -> bool:
        """A trained model that may hold buffers: BatchNorm layers, buffers it registers, or a
        part that is not in this file."""
        if ref is None or ref not in self.facts.model_refs.get(function, set()):
            return False
        models = [m for m in self.facts.models if m.ref == ref]
        return not models or any(m.batch_norms is None or m.batch_norms or m.registers_buffers for m in models)

    def _own_buffers_shared_after_each_pass(self) -> None:
        """A model wrapped with `broadcast_buffers = False` (forwarded again before backward) keeps
        its own BatchNorm statistics on each rank from the wrap on: its evaluation, and what is
        decided on it (an early stop on the validation loss), differed per rank and left one rank
        waiting (helper corpus X, repro 08). After each pass of its training loop, every rank
        takes rank 0's buffers, as timm's distribute_bn does."""
        for model in self.facts.models:
            if model.element is not None or not (model.batch_norms or model.registers_buffers):
                continue
            outside = None if model.repeated_forward else self._run_outside_ddp(model)
            part = None if model.repeated_forward or outside is not None else self._part_run_outside_ddp(model)
            if not model.repeated_forward and outside is None and part is None:
                continue
            for loop in self.facts.train_loops:
                if loop.function is not model.function and model.ref not in self.facts.model_refs.get(loop.function, set()):
                    continue
                if not any(dotted(c.func) == model.ref or any(dotted(a.value) == model.ref for a in c.args) for c in self.tree.calls(loop.loop.body)):
                    continue  # neither run in the loop nor handed to a helper there (`loss = step(model, x, y)`)
                buffer = next(n for n in ("buffer", "model_buffer", "own_buffer") if not self.program.binds(loop.function, n))
                runs = outside or part
                if part is not None:
                    method = f"{self.plain(model.ref, part)}.{part_name(part, model.ref)}"
                else:
                    method = f"{self.plain(model.ref, outside)}.{outside.func.attr.value}" if outside is not None else ""  # type: ignore[attr-defined]
                why = "kept per rank since the wrap (broadcast_buffers off)" if runs is None else f"`{method}` runs outside DDP's forward, which shares them"
                self.plan.insert_after(loop.loop, statements(
                    f"for {buffer} in {self.plain(model.ref, loop.loop)}.buffers():  # {why}: rank 0's, on every rank\n"
                    f"    dist.broadcast({buffer}, 0)\n"
                ))
                self.change(loop.loop, (
                    f"`{model.ref}` takes rank 0's buffers after each pass: "
                    + ("with broadcast_buffers off, each rank's statistics drifted apart" if runs is None else
                       f"`{method}` (line {self.tree.line(runs)}) evaluates it outside DDP's forward, on each rank's own statistics")
                ))

    def _part_run_outside_ddp(self, model: TrainedModel) -> cst.Call | None:
        """A part of a model with BatchNorm run or handed on outside its training loops
        (`knn_score(model.encoder, X, y)`, `model.encoder(x)` after the epoch): it runs on this
        rank's statistics, so an early stop on what it gives split the ranks (helper corpus CC,
        repro 04: one rank stopped, the other waited)."""
        cls = self._model_class(model)
        if cls is None or not model.batch_norms:
            return None
        init = self.program.class_methods(cls).get("__init__")
        parts = {
            name[5:] for node in self.program.scope_nodes(init) if type(node) is cst.Assign and self._builds_a_layer(node.value)
            for t in node.targets if (name := dotted(t.target) or "").startswith("self.") and name.count(".") == 1
        } if init is not None else set()  # fmt: skip
        parts -= set(self.program.class_methods(cls))
        loops = [loop.loop for loop in self.facts.train_loops]
        for call in self.program.calls_in(model.function):
            if any(self.tree.inside(call, loop) for loop in loops):
                continue
            func = call.func
            if type(func) is cst.Attribute and dotted(func.value) == model.ref and func.attr.value in parts:
                return call  # `model.encoder(x)`
            target = self.program.callee(call, model.function)
            if target is None or self.program.owner_class(target[0]) is not None:
                continue
            for a in call.args:  # `knn_score(model.encoder, X, y)`, whose body runs `encoder(...)`
                expr = a.value
                if type(expr) is cst.Attribute and dotted(expr.value) == model.ref and expr.attr.value in parts:
                    param = self.program.parameter_for(call, target[0], expr)
                    if param is not None and any(dotted(c.func) == param for c in self.program.calls_in(target[0])):
                        return call
        return None

    def _run_outside_ddp(self, model: TrainedModel) -> cst.Call | None:
        """A method of the model's own called outside its training loops (`model.predict_proba(X_val)`,
        which becomes `model.module.predict_proba`): it runs on this rank's BatchNorm statistics,
        which DDP shares only at its own forward, so an early stop on it split the ranks (helper
        corpus BA, repro 01)."""
        loops = [loop.loop for loop in self.facts.train_loops]
        cls = self._model_class(model)
        for call, function in self.facts.custom_method_calls() if cls is not None else ():
            if type(call.func) is cst.Attribute and dotted(call.func.value) == model.ref and not any(self.tree.inside(call, loop) for loop in loops):
                if (function is model.function or model.ref in self.facts.model_refs.get(function, set())) and self._runs_layers(cls, call.func.attr.value):  # type: ignore[arg-type]
                    return call
        return None

    def _runs_layers(self, cls: cst.ClassDef, attribute: str, depth: int = 2) -> bool:
        """`attribute` of the model's class runs some of its layers: a layer itself
        (`model.backbone(x)`), or a method calling `self(...)`, a layer, or such a method
        (`predict_proba`; not `get_block_size`, nor nn.Module's own `named_modules`)."""
        methods = self.program.class_methods(cls)
        if attribute not in methods:
            init = methods.get("__init__")
            return init is not None and any(
                type(v) is cst.Call and self._builds_a_layer(v) for v, i in self.program.assignments(init, f"self.{attribute}") if i is None
            )
        for call in self.program.calls_in(methods[attribute]):
            if type(call.func) is cst.Name and call.func.value == "self":
                return True
            called = dotted(call.func) or ""
            if called.startswith("self.") and called.count(".") == 1 and depth > 0 and self._runs_layers(cls, called[5:], depth - 1):
                return True
        return False

    def _copy_attribute(self, holder: cst.BaseExpression, function: cst.FunctionDef | None) -> tuple[str, str] | None:
        """The attribute an averaging object keeps the model's copy in, and the method that lists
        the copy's tensors: in its same-file class, a module `self.ema = copy.deepcopy(model)`, or
        one built and then loaded (`self.net = build(); self.net.load_state_dict(model.state_dict())`,
        helper corpus AQ, repro 02), or a dict of the model's state (`self.shadow = {k: v.clone() for
        k, v in model.state_dict().items()}`, helper corpus AO, repro 08); or timm's ModelEma (`ema`)
        and ModelEmaV2/V3 (`module`)."""
        cls = self.program.instance_of(holder, function)
        if cls is not None:
            init = self.program.class_methods(cls).get("__init__")
            if init is None:
                return None
            loaded = set()  # `self.net.load_state_dict(model.state_dict())`
            for node in self.program.scope_nodes(init):
                found = s.method_call(node) if type(node) is cst.Call else None
                if found is not None and found[1] == "load_state_dict" and node.args and _state_of_a_model(node.args[0].value):
                    loaded.add(dotted(found[0]))
            for node in self.program.scope_nodes(init):
                if type(node) is cst.Assign and len(node.targets) == 1 and (target := dotted(node.targets[0].target)) is not None:
                    if not (target.startswith("self.") and target.count(".") == 1):
                        continue
                    value = unchained(node.value) if type(node.value) is cst.Call else node.value
                    deep_copy = self.tree.is_call_to(value, {"copy.deepcopy"}) and not (value.args and _state_of_a_model(value.args[0].value))  # type: ignore[union-attr]
                    if deep_copy or target in loaded:
                        return target[5:], "buffers"
                    if any(_state_of_a_model(n) for n in self.tree.walk(node.value)):
                        return target[5:], "values"  # a dict of copies of the model's state
            return None
        for origin in self.program.origins(holder, function):
            name = self.tree.qname(origin.node.func) if type(origin.node) is cst.Call else None
            if name in ("timm.utils.ModelEma", "timm.utils.model_ema.ModelEma"):
                return "ema", "buffers"
            if name is not None and name.startswith(("timm.utils.ModelEmaV", "timm.utils.model_ema.ModelEmaV")):
                return "module", "buffers"
        return None

    def _was_data_parallel(self, model) -> bool:
        """`model = nn.DataParallel(model)` (or `nn.DataParallel(Net()).cuda()`) where the model is
        trained: the script may hand it batches on the CPU (pytorch/examples' ImageNet moves them
        only under --gpu)."""
        return any(
            any(self.tree.is_call_to(c, s.DATA_PARALLEL) for c in self.tree.calls(value))
            for value, _ in self.program.assignments(model.function, model.ref)
        )

    def _attribute_by_name(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        """`getattr(model, "num_classes", 1000)`, `hasattr(model, "_orig_mod")`, and the model as
        getattr's default (`getattr(model, "_orig_mod", model)`, torch.compile's unwrap): the
        model's own attributes, read from the plain model as `model.num_classes` is. On the
        wrapper they gave the default, or the wrapper itself, whose keys start with `module.`."""
        name = string_value(call.args[1].value) if len(call.args) >= 2 else None
        if name is None or name in s.WRAPPER_ATTRIBUTES or name.startswith("__"):
            return
        unwrapped = [a.value for a in (call.args[0], *call.args[2:3]) if not a.keyword]
        test = self.tree.parent(call)
        if type(test) is cst.IfExp and test.test is call:  # `model._orig_mod if hasattr(model, "_orig_mod") else model`
            unwrapped.append(test.orelse)
        for value in unwrapped:
            if self.facts.is_model(value, function):
                ref = code(value)
                self.plan.replace(value, cst.parse_expression(self.plain(ref, call)))
                self.change(call, f"`{code(call.func)}({ref}, {code(call.args[1].value)}, ...)` reads the plain model (`.module`): the DDP wrapper has no `{name}`")

    def _of_averaging(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`swa_model.update_parameters(model)`: a method of an AveragedModel, which reads the
        parameters it is handed (the plain model's are the wrapper's)."""
        return type(call.func) is cst.Attribute and any(
            self.tree.is_call_to(o.node, AVERAGING) for o in self.program.origins(call.func.value, function)
        )

    def _outside_training(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`early_stopping(valid_loss, model)` after the batch loop: a monitor that does not train
        the model (not in a training loop, handed no optimizer or loader, not named for training)."""
        name = (self.tree.qname(call.func) or dotted(call.func) or "").rsplit(".", 1)[-1].lower()
        named = any(word in name for word in MONITOR_WORDS) and not any(word in name for word in TRAINING_WORDS)
        if not named and not self._callable_that_does_not_train(call, function):
            return False  # `tune(model)` may train it with an optimizer of its own: the wrapper keeps that loud
        if any(self.tree.inside(call, loop.loop) for loop in self.facts.train_loops):
            return False
        for a in call.args:
            if self.program.loader(a.value, function) is not None or self._is_optimizer(a.value, function):
                return False
        return True

    def _callable_that_does_not_train(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`ckpt(model, epoch)` on an object of a same-file class whose `__call__` runs no
        backward (a checkpoint saver): whatever its name, it does not train the model."""
        if type(call.func) is not cst.Name:
            return False
        cls = self.program.instance_of(call.func, function)
        method = self.program.methods.get(cls, {}).get("__call__") if cls is not None else None
        return method is not None and method not in self.program.training_functions

    def _into_a_container(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`models.append(model)` on a list or set this file makes (`models = []`): no function of
        another module, nothing to warn about."""
        found = s.method_call(call)
        if found is None or found[1] not in ("append", "extend", "insert", "add", "appendleft") or type(found[0]) is not cst.Name:
            return False
        origins = [o.node for o in self.program.origins(found[0], function)]
        return bool(origins) and all(type(o) in (cst.List, cst.Set, cst.ListComp) or (type(o) is cst.Call and self.tree.is_builtin_call(o, "list")) for o in origins)

    def _lambda_loading(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`restore_best(net)` where this file binds `restore_best` to a lambda that loads weights
        into what it is handed: no monitor of another module, but a load every rank must run (on
        rank 0 alone, the other replicas kept their last weights)."""
        lambdas = self.program.lambdas_called(call, function)
        return bool(lambdas) and all(any((m := s.method_call(c)) is not None and m[1] == "load_state_dict" for c in self.tree.calls(f.body)) for f in lambdas)

    def _saves_privately(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`stopper(val_loss, model)` on an object of a same-file class whose `__call__` saves only
        into a temporary folder of the process's own (`EarlyStopper(os.path.join(tempfile.mkdtemp(),
        "best.pt"))`): every rank runs it, saving and reading back its own copy. On rank 0 alone,
        the path broadcast to the others named a file only rank 0's folder held."""
        cls = self.program.instance_of(call.func, function)
        method = self.program.methods.get(cls, {}).get("__call__") if cls is not None else None
        if method is None:
            return False
        writes = [out for c in self.program.calls_in(method) if (out := self.facts.outputs.of(c, method)) is not None and out.kind in WRITES]
        return bool(writes) and all(out.destination is not None and private_to_process(self.tree, self.program, out.destination, method) for out in writes)

    def _monitor_on_rank_0(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """`early_stopping(valid_loss, model)` as a statement of its own: rank 0 runs it (its
        prints and checkpoint once), then broadcasts what the script reads of the object
        (`early_stopping.early_stop`), so every rank takes the same decision."""
        statement = self.tree.statement(call)
        obj = dotted(call.func)
        if (
            obj is None
            or not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1)
            or not (isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call)
            or self.facts.syncs(statement, function)
        ):
            return False
        read: list[str] = []
        for node in self.program.scope_nodes(function):
            if isinstance(node, cst.Attribute) and dotted(node.value) == obj:
                parent = self.tree.parent(node)
                if isinstance(parent, cst.Call) and parent.func is node:
                    return False  # a method of it runs elsewhere: its state would have to be the same on every rank
                if node.attr.value not in read:
                    read.append(node.attr.value)
        condition = self.is_main_process(function, statement)
        self.plan.guard(statement, condition)
        if read:
            state = next(n for n in (f"{obj.rsplit('.', 1)[-1]}_state", "monitor_state", "monitor_state_") if not self.program.binds(function, n))
            values = ", ".join(f"{obj}.{a}" for a in read)
            lines = [
                f"{state} = [{values}]  # rank 0 ran it: what the script reads of it, the same on every rank",
                f"dist.broadcast_object_list({state})",
                *(f"{obj}.{a} = {state}[{i}]" for i, a in enumerate(read)),
            ]
            self.plan.insert_after(statement, statements("\n".join(lines) + "\n"))
        shared = f" and broadcasts {', '.join(f'`{obj}.{a}`' for a in read)}" if read else ""
        self.change(call, f"`{code(call.func)}(...)` runs on rank 0 (its prints and files once){shared}, so every rank decides alike")
        return True

    def _is_optimizer(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        return any(
            isinstance(o.node, cst.Call) and (self.tree.qname(o.node.func) or "").startswith("torch.optim.")
            for o in self.program.origins(expr, function)
        ) or "optim" in (dotted(expr) or "").lower()

    def _uses_after_wrap(self) -> None:
        for function, refs in self.facts.model_refs.items():
            for node in self.program.scope_nodes(function):
                if type(node) is cst.Subscript and self.facts.is_model(node.value, function):
                    # `model[0]` of an nn.Sequential: the wrapper cannot be indexed
                    ref = dotted(node.value)
                    self.plan.replace(node.value, cst.parse_expression(self.plain(ref, node)))
                    self.change(node, f"`{ref}[...]` indexes the plain model (`.module`): the DDP wrapper cannot be indexed")
                    continue
                if type(node) is cst.Call and (self.tree.is_builtin_call(node, "getattr") or self.tree.is_builtin_call(node, "hasattr")):
                    self._attribute_by_name(node, function)
                    continue
                if type(node) is cst.Call and node.args and self.tree.qname(node.func) in FUNCTIONAL_CALLS and self.facts.is_model(node.args[0].value, function):
                    # `functional_call(model, params, x)` off the training path (the analysis refuses training through it):
                    # the parameters come from `model.module.named_parameters()`, whose names have no `module.`
                    ref = dotted(node.args[0].value)
                    self.plan.replace(node.args[0].value, cst.parse_expression(self.plain(ref, node)))
                    self.change(node, f"`{code(node.func)}({ref}, ...)` runs the plain model (`.module`): its parameters are named as the plain model's")
                    continue
                walked = node.iter if type(node) in (cst.For, cst.CompFor) else None  # type: ignore[attr-defined]
                if type(node) is cst.Call and any(self.tree.is_builtin_call(node, f) for f in CONTAINER_READS) and node.args:
                    walked = node.args[0].value
                if walked is not None and isinstance(walked, (cst.Name, cst.Attribute)) and self.facts.is_model(walked, function):
                    # `for m in model`, `len(model)` of an nn.Sequential: the wrapper is neither iterable nor sized
                    ref = dotted(walked)
                    self.plan.replace(walked, cst.parse_expression(self.plain(ref, node)))
                    self.change(node, f"`{ref}`'s layers are walked through the plain model (`.module`): the DDP wrapper is neither iterable nor sized")
                    continue
                if type(node) in (cst.IfExp, cst.Assign):
                    self._unwrap_beside_an_attribute(node, function)  # type: ignore[arg-type]
                    continue
                if not isinstance(node, cst.Attribute) or not self.facts.is_model(node.value, function):
                    continue
                attr = node.attr.value
                if attr in s.WRAPPER_ATTRIBUTES or attr.startswith("__"):
                    continue
                ref = dotted(node.value)
                self.plan.replace(node.value, cst.parse_expression(self.plain(ref, node)))
                parent = self.tree.parent(node)
                if isinstance(parent, cst.Call) and parent.func is node:
                    # The analysis refused scripts that train through such a method.
                    if attr in s.MODULE_METHODS:  # `named_parameters()`: the wrapper has it, with other names
                        self.change(node, f"`{ref}.{attr}(...)` called on the plain model (`.module`): through the DDP wrapper every name would start with `module.`")
                    else:
                        self.change(node, f"`{ref}.{attr}(...)` called on the plain model (`.module`): DDP has no `{attr}`, and this call does not train")
                else:
                    self.change(node, f"`{ref}.{attr}` read through `.module` (the DDP wrapper has no `{attr}`)")

    def _unwrap_beside_an_attribute(self, node: cst.IfExp | cst.Assign, function: cst.FunctionDef | None) -> None:
        """`raw = model._orig_mod if args.compile else model` (or the same as an if/else of two
        assignments): one branch reaches the plain model through `.module`, the other held the
        DDP wrapper, so `raw.state_dict()` saved `module.` keys without --compile (helper corpus
        AU, repros 01 and 01b). The bare model goes through `.module` too, unless the name trains."""
        if type(node) is cst.IfExp:
            test = node.test
            if type(test) is cst.Call and test.args and any(self.tree.is_builtin_call(test, f) for f in ("isinstance", "hasattr", "getattr")):
                return  # `model.module if hasattr(model, "module") else model`: decided at run time, or folded with DataParallel
            pairs = [(node.body, node.orelse), (node.orelse, node.body)]
            target = self.tree.parent(node)
            name = dotted(target.targets[0].target) if type(target) is cst.Assign and len(target.targets) == 1 else None
        else:
            if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                return
            name = node.targets[0].target.value
            others = [v for v, i in self.program.assignments(function, name) if i is None and v is not node.value]
            pairs = [(node.value, other) for other in others]
        for bare, other in pairs:
            if not (type(bare) is cst.Name and self.facts.is_model(bare, function) and self._unwrapped_attribute(other, function)):
                continue
            if name is not None and any(type(c.func) is cst.Name and c.func.value == name for c in self.program.calls_in(function)):
                return  # `raw(x)` runs the model: it keeps the wrapper
            ref = bare.value
            self.plan.replace(bare, cst.parse_expression(self.plain(ref, bare)))
            self.change(bare, f"`{ref}` goes through `.module` here, as the other value given to `{name or 'it'}` does: both hold the plain model")
            return

    def _unwrapped_attribute(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """`model._orig_mod`: an attribute of the model the wrapper does not answer, reached through `.module`."""
        return type(expr) is cst.Attribute and self.facts.is_model(expr.value, function) and expr.attr.value not in s.WRAPPER_ATTRIBUTES and not expr.attr.value.startswith("__")


def _stored_in(target: cst.BaseExpression) -> str:
    """The dotted name an assignment stores into: `model.fc`, and `model.heads` for `model.heads["b"]`."""
    while type(target) is cst.Subscript:
        target = target.value
    return dotted(target) or ""


def _state_of_a_model(node: cst.CSTNode) -> bool:
    """`x.state_dict()`: what a copy of a model's state is made from."""
    return type(node) is cst.Call and (found := s.method_call(node)) is not None and found[1] == "state_dict"


def _part_root(part: cst.BaseExpression) -> cst.BaseExpression:
    """`model` of `model[0]` and of `model.encoder.layer`."""
    while type(part) in (cst.Attribute, cst.Subscript):
        part = part.value  # type: ignore[union-attr]
    return part


def part_name(call: cst.Call, ref: str) -> str:
    """`encoder` of `knn_score(model.encoder, X)` or of `model.encoder(x)`."""
    for expr in [call.func, *(a.value for a in call.args)]:
        if type(expr) is cst.Attribute and dotted(expr.value) == ref:
            return expr.attr.value
    return "?"
