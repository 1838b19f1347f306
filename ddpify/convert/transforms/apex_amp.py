"""NVIDIA apex becomes native PyTorch: amp -> torch.autocast + GradScaler, apex DDP and SyncBN -> torch's.

apex's amp and DDP are deprecated in favour of torch's own (`torch.amp`, `DistributedDataParallel`).
This runs before the DDP rewrite, as a pass of its own: its output is an ordinary native-AMP
script (the forward under `torch.autocast`, a `GradScaler` scaling the loss and stepping the
optimizer), which the DDP transforms then convert like any other. A script apex already
distributes keeps its process group; only its apex parts change.

amp is rewritten all or nothing: one `model, optimizer = amp.initialize(model, optimizer, ...)`
(in a function body, or under one `if`), `with amp.scale_loss(loss, optimizer) as scaled:
scaled.backward()`, `amp.master_params(optimizer)`, `amp.state_dict()`/`load_state_dict()`, in
the function that calls `initialize` or in functions only it calls (they are handed the scaler).
Any other use of amp leaves every amp line as it is, with a warning naming the line; so do apex
optimizers and other apex modules.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan, appended, keyword, statements
from ddpify.program import Program
from ddpify.syntax import Tree, code, dotted, string_value

AMP = "apex.amp"
APEX_DDP = "apex.parallel.DistributedDataParallel"
APEX_SYNCBN = "apex.parallel.convert_syncbn_model"
# amp.initialize arguments that native autocast makes moot (or that only set apex's logging).
MOOT_INITIALIZE_ARGS = {"opt_level", "verbosity", "keep_batchnorm_fp32", "master_weights", "loss_scale"}
# apex DDP arguments about when and how it all-reduces: torch's DDP overlaps the all-reduce itself.
MOOT_DDP_ARGS = {"delay_allreduce", "message_size"}
SCALER_NAMES = ("scaler", "grad_scaler")


class NotUnderstood(Exception):
    """An apex use this pass cannot map; carries the node to name in the warning."""

    def __init__(self, node: cst.CSTNode, message: str) -> None:
        super().__init__(message)
        self.node = node


class ApexToNative:
    name = "apex"
    DESCRIPTION = "apex amp -> torch.autocast + GradScaler; apex DDP and convert_syncbn_model -> torch's"

    def __init__(self, tree: Tree, plan: Plan) -> None:
        self.tree = tree
        self.plan = plan
        self.converted: set[str] = set()  # qualified names whose every use was rewritten
        self.removed: set[cst.CSTNode] = set()  # statements this pass removes
        self.warned: set[str] = set()  # qualified names a warning already says stay
        self.emptied: list[cst.If] = []  # `if args.fp16:` blocks that go when nothing is left in them

    @cached_property
    def program(self) -> Program:
        return Program(self.tree)

    def run(self) -> None:
        if not any(_imports_apex(node) for node in self.tree.of_type(cst.Import, cst.ImportFrom)):
            return
        uses = self._uses()
        amp = [u for u in uses if u[1] == AMP or u[1].startswith(AMP + ".")]
        if amp:
            try:
                self._amp(amp)
                self.converted.add(AMP)
            except NotUnderstood as reason:
                self.plan.warn(reason.node, f"apex amp is left as is ({reason}): the script still needs apex")
                self.warned.add(AMP)
        self._parallel([u for u in uses if u[1] in (APEX_DDP, APEX_SYNCBN)])
        for node, name in uses:
            if not (name == AMP or name.startswith(AMP + ".") or name in (APEX_DDP, APEX_SYNCBN)):
                self.plan.warn(node, f"`{code(node)}` ({name}) is left as is: the script still needs apex{_native_hint(name)}")
                self.warned.add(name)
        self._imports(uses)

    # --- what the script uses of apex ---------------------------------------------------

    def _uses(self) -> list[tuple[cst.BaseExpression, str]]:
        """Each expression naming something of apex (longest dotted form), with its qualified name."""
        found = []
        for node in self.tree.walk():
            if type(node) is not cst.Name:
                continue
            name = self.tree.qname(node)
            if name is None or not (name == "apex" or name.startswith("apex.")):
                continue
            parent = self.tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue  # the head of the chain reports it
            expr: cst.BaseExpression = node
            while isinstance(parent := self.tree.parent(expr), cst.Attribute) and parent.value is expr:
                expr = parent
            found.append((expr, self.tree.qname(expr) or name))
        return found

    def _call(self, expr: cst.BaseExpression) -> cst.Call | None:
        parent = self.tree.parent(expr)
        return parent if isinstance(parent, cst.Call) and parent.func is expr else None

    # --- amp ---------------------------------------------------------------------------

    def _amp(self, uses: list[tuple[cst.BaseExpression, str]]) -> None:
        """Check every amp use, then rewrite them all (nothing is recorded unless all are understood)."""
        inits = [e for e, n in uses if n == f"{AMP}.initialize"]
        if len(inits) != 1:
            raise NotUnderstood(uses[0][0], "not one `amp.initialize(...)` call")
        model, optimizer, opt_level, site = self._initialize(inits[0])
        function = self.tree.function(site)
        scaler = next((n for n in SCALER_NAMES if not any(type(x) is cst.Name and x.value == n for x in self.tree.walk())), None)
        if scaler is None:
            raise NotUnderstood(site, "the names `scaler` and `grad_scaler` are both taken")
        edits = []
        models: dict[cst.FunctionDef | None, str | None] = {function: model}  # the model as each function spells it
        steps: dict[cst.Call, str] = {}
        for expr, name in uses:
            if expr is inits[0]:
                continue
            where = self.tree.function(expr)
            if where not in models:
                models[where] = self._helper(expr, where, function, model, site, scaler, edits)
            call = self._call(expr)
            if name == f"{AMP}.scale_loss" and call is not None:
                edits.append(self._scale_loss(call, models[where], scaler))
                spelled = s.arg(call, 1, "optimizers")
                if spelled is None or dotted(spelled.value) is None:
                    raise NotUnderstood(call, "`amp.scale_loss` without the optimizer it steps")
                for step in self._optimizer_steps(where, dotted(spelled.value), site if where is function else None, call):
                    steps[step] = dotted(spelled.value)  # type: ignore[assignment]
            elif name == f"{AMP}.master_params" and call is not None:
                edits.append(self._master_params(call, models[where], scaler))
            elif name in (f"{AMP}.state_dict", f"{AMP}.load_state_dict") and call is not None:
                if where is function and self.tree.line(call) < self.tree.line(site):
                    raise NotUnderstood(call, f"`{code(call)}` comes before `amp.initialize`")
                edits.append(self._state(call, name.rsplit(".", 1)[1], scaler))
            elif name == AMP and self._is_missing_guard(expr):
                guard = self.tree.statement(expr)
                edits.append(lambda guard=guard: self._remove(guard))
            else:
                raise NotUnderstood(expr, f"`{code(call or expr)}` has no native counterpart ddpify knows")
        if not steps:
            raise NotUnderstood(site, "no `with amp.scale_loss(...)` to rewrite")
        self._check_unscaled_backwards(site, [e for e, n in uses if n == f"{AMP}.scale_loss"])
        self._create_scaler(site, scaler, opt_level, function, model)
        for edit in edits:
            edit()
        for call, optimizer in steps.items():
            self.plan.replace(call, cst.parse_expression(f"{scaler}.step({optimizer})"))
            self.plan.insert_after(self.tree.statement(call), statements(f"{scaler}.update()\n"))
            self.plan.change(call, self.name, f"`{optimizer}.step()` becomes `{scaler}.step({optimizer})` and `{scaler}.update()`: steps are skipped while the scaled gradients overflow")

    def _check_unscaled_backwards(self, site: cst.BaseStatement, scales: list[cst.BaseExpression]) -> None:
        """`scaler.step()` unscales the gradients whenever the scaler is on, so every other backward()
        before such a step must run only while it is off: in the `else` of an `if` that tests what
        `amp.initialize` was under (`if args.fp16: scaled... else: loss.backward()`)."""
        owner = self.tree.parent(self.tree.block(site))
        condition = code(owner.test) if isinstance(owner, cst.If) else None
        blocks = [self.tree.statement(self._call(e) or e) for e in scales]
        for function in dict.fromkeys(self.tree.function(e) for e in scales):
            for call in self.program.calls_in(function):
                if not s.is_backward(call) or any(self.tree.inside(call, b) for b in blocks):
                    continue
                branch = next((a for a in self.tree.ancestors(call) if isinstance(a, cst.If) and a.orelse is not None and self.tree.inside(call, a.orelse)), None)
                if branch is None or condition is None or code(branch.test) != condition or not any(self.tree.inside(b, branch.body) for b in blocks):
                    raise NotUnderstood(call, f"`{code(call)}` runs without loss scaling where the GradScaler may be on")

    def _initialize(self, expr: cst.BaseExpression) -> tuple[str, str, cst.BaseExpression | None, cst.BaseStatement]:
        """`model, optimizer = amp.initialize(model, optimizer, opt_level=...)`: the names and the level."""
        call = self._call(expr)
        statement = self.tree.statement(expr)
        if call is None or not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            raise NotUnderstood(expr, "`amp.initialize` is not a statement of its own")
        assign = statement.body[0]
        models, optimizers = s.arg(call, 0, "models"), s.arg(call, 1, "optimizers")
        if not isinstance(assign, cst.Assign) or assign.value is not call or models is None or optimizers is None:
            raise NotUnderstood(call, "`amp.initialize` without `model, optimizer = amp.initialize(model, optimizer, ...)`")
        model, optimizer = dotted(models.value), dotted(optimizers.value)
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        names = [dotted(el.value) for el in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []
        if model is None or optimizer is None or names != [model, optimizer]:
            raise NotUnderstood(call, "`amp.initialize` of several models or optimizers")
        for argument in call.args:
            if argument.keyword is not None and argument.keyword.value not in MOOT_INITIALIZE_ARGS | {"models", "optimizers"}:
                raise NotUnderstood(call, f"`amp.initialize(..., {argument.keyword.value}=...)`")
            if argument.keyword is None and argument not in (models, optimizers):
                raise NotUnderstood(call, "`amp.initialize` with more than two positional arguments")
        loss_scale = s.arg(call, None, "loss_scale")
        if loss_scale is not None and string_value(loss_scale.value) != "dynamic":
            self.plan.warn(call, f"`loss_scale={code(loss_scale.value)}` is dropped: GradScaler scales the loss dynamically")
        level = s.arg(call, 2, "opt_level")
        if level is not None and string_value(level.value) == "O3":
            self.plan.warn(call, 'opt_level "O3" (pure float16) becomes mixed precision: the weights stay float32')
        block = self.tree.block(statement)
        owner = self.tree.parent(block)
        if not (self._in_body(statement) or (isinstance(owner, cst.If) and owner.orelse is None and self._in_body(owner))):
            raise NotUnderstood(call, "`amp.initialize` sits in a block other than a function body or one `if`")
        return model, optimizer, level.value if level is not None else None, statement

    def _in_body(self, statement: cst.CSTNode) -> bool:
        """Whether `statement` is one of the module's or of a function's own statements."""
        parent = self.tree.parent(statement)
        return isinstance(parent, cst.Module) or (isinstance(parent, cst.IndentedBlock) and isinstance(self.tree.parent(parent), cst.FunctionDef))

    def _create_scaler(self, site: cst.BaseStatement, scaler: str, level: cst.BaseExpression | None, function: cst.FunctionDef | None, model: str) -> None:
        """The GradScaler goes where amp.initialize was, on every path: under an `if` it is made
        before the `if`, with the condition folded into `enabled`, so the loop can always use it."""
        owner = self.tree.parent(self.tree.block(site))
        conditions = []
        anchor: cst.BaseStatement = site
        if isinstance(owner, cst.If):
            conditions.append(_operand(code(owner.test)))
            anchor = owner
        if level is not None:
            value = string_value(level)
            if value == "O0":
                conditions.append("False")
            elif value is None:
                conditions.append(f'{code(level)} != "O0"')
        conditions.append(self._cuda_test(function, anchor, model))
        enabled = "False" if "False" in conditions else " and ".join(conditions)  # O0: apex amp did nothing
        self.plan.insert_before(
            anchor,
            statements(f'{scaler} = torch.amp.GradScaler("cuda", enabled={enabled})\n'),
        )
        self._remove(site)
        if isinstance(anchor, cst.If):
            self.emptied.append(anchor)
        self.plan.add_import("torch")
        self.plan.change(site, self.name, f"`amp.initialize` becomes a GradScaler, enabled when {enabled}")

    def _cuda_test(self, function: cst.FunctionDef | None, before: cst.CSTNode, model: str) -> str:
        """How the script says it trains on CUDA: its device variable, else where the model is (apex
        wanted it on the GPU before `amp.initialize`)."""
        line = self.tree.line(before)
        for scope in dict.fromkeys([function, None]):
            for node in self.program.scope_nodes(scope):
                if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and self.tree.line(node) < line):
                    continue
                target = dotted(node.targets[0].target)
                if target is None or (scope is None and function is not None and self.program.binds(function, target.split(".")[0]) and "." not in target):
                    continue
                value = node.value
                if isinstance(value, cst.Call) and self.tree.qname(value.func) in s.TORCH_DEVICE:
                    return f'{target}.type == "cuda"'
                if any(s.is_gpu_string(n) for n in self.tree.walk(value) if isinstance(n, cst.BaseExpression)) and "device" in target:
                    return f'torch.device({target}).type == "cuda"'
        return f"next({model}.parameters()).is_cuda"

    def _scale_loss(self, call: cst.Call, model: str | None, scaler: str):
        """`with amp.scale_loss(loss, optimizer) as scaled: scaled.backward()` -> `scaler.scale(loss).backward()`,
        and the forward before it in the step goes under autocast."""
        item = self.tree.parent(call)
        statement = self.tree.parent(item) if isinstance(item, cst.WithItem) else None
        loss = s.arg(call, 0, "loss")
        if not isinstance(statement, cst.With) or len(statement.items) != 1 or item.asname is None or loss is None:
            raise NotUnderstood(call, "`amp.scale_loss` outside `with amp.scale_loss(loss, optimizer) as scaled_loss:`")
        for argument in call.args[2:]:
            if argument.keyword is None or argument.keyword.value != "delay_unscale":
                raise NotUnderstood(call, "`amp.scale_loss` with arguments other than the loss, the optimizer and delay_unscale")
        scaled = dotted(item.asname.name)
        body = statement.body.body
        only = body[0].body[0] if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 else None
        backward = only.value if isinstance(only, cst.Expr) else None
        if not (isinstance(backward, cst.Call) and s.is_backward(backward) and dotted(backward.func.value) == scaled):
            raise NotUnderstood(call, f"the `with amp.scale_loss(...)` block does more than `{scaled}.backward()`")
        span = self._forward_span(statement, model)
        arguments = ", ".join(code(a) for a in backward.args)

        def edit() -> None:
            new = statements(f"{scaler}.scale({code(loss.value)}).backward({arguments})\n")[0]
            self.plan.replace(statement, lambda _updated, new=new: new.with_changes(leading_lines=statement.leading_lines))
            self.plan.change(statement, self.name, f"`amp.scale_loss` becomes `{scaler}.scale({code(loss.value)}).backward()`")
            header = statements(f'with torch.autocast(device_type="cuda", dtype=torch.float16, enabled={scaler}.is_enabled()):\n    pass\n')[0]
            self.plan.wrap(span, lambda inner, header=header: header.with_changes(body=cst.IndentedBlock(body=inner)))
            self.plan.change(span[0], self.name, "the forward and the loss run under float16 autocast (apex amp cast them), on when the GradScaler is")

        return edit

    def _forward_span(self, backward: cst.With, model: str | None) -> list[cst.BaseStatement]:
        """The statements of the training step from the first that calls the model (or hands it to a
        helper: `loss = compute_loss(model, batch)`) up to the last assignment before the backward."""
        if model is None:
            raise NotUnderstood(backward, "the model initialized with amp has no name where `amp.scale_loss` is")
        loops = self.tree.loops(backward)
        current: cst.CSTNode = backward
        while True:
            block = self.tree.block(current)  # type: ignore[arg-type]
            body = list(block.body)
            index = body.index(current)
            for start, statement in enumerate(body[:index]):
                if any(dotted(c.func) == model or any(dotted(a.value) == model for a in c.args) for c in self.tree.calls(statement)):
                    span = body[start:index]
                    while len(span) > 1 and not _assigns(span[-1]):
                        span.pop()  # `optimizer.zero_grad()` and the like stay outside
                    return span
            owner = self.tree.parent(block)
            if owner is None or isinstance(owner, (cst.FunctionDef, cst.Module)) or (loops and owner is loops[0]):
                raise NotUnderstood(backward, f"no call of `{model}` before `amp.scale_loss` in the training step to put under autocast")
            current = owner if not isinstance(owner, cst.Else) else self.tree.parent(owner)
            while not isinstance(self.tree.parent(current), (cst.IndentedBlock, cst.Module)):
                current = self.tree.parent(current)

    def _master_params(self, call: cst.Call, model: str | None, scaler: str):
        """`clip_grad_norm_(amp.master_params(optimizer), ...)`: the model's parameters, unscaled first."""
        if model is None:
            raise NotUnderstood(call, "`amp.master_params` where the model initialized with amp has no name")
        optimizer = s.arg(call, 0, "optimizer")
        if optimizer is None or len(call.args) != 1:
            raise NotUnderstood(call, "`amp.master_params` of something other than one optimizer")
        statement = self.tree.statement(call)

        def edit() -> None:
            self.plan.replace(call, cst.parse_expression(f"{model}.parameters()"))
            self.plan.insert_before(statement, statements(f"{scaler}.unscale_({code(optimizer.value)})\n"))
            self.plan.change(call, self.name, f"`amp.master_params` becomes `{model}.parameters()`, unscaled by `{scaler}.unscale_` first")

        return edit

    def _state(self, call: cst.Call, method: str, scaler: str):
        def edit() -> None:
            self.plan.replace(call.func, cst.parse_expression(f"{scaler}.{method}"))
            self.plan.change(call, self.name, f"`amp.{method}` becomes `{scaler}.{method}`")
            if method == "load_state_dict":
                self.plan.warn(call, f"checkpoints saved with apex amp hold no GradScaler state: `{scaler}.load_state_dict` needs one saved after this conversion")

        return edit

    def _is_missing_guard(self, expr: cst.BaseExpression) -> bool:
        """`if amp is None: raise ImportError(...)`: apex's own check that it is installed."""
        comparison = self.tree.parent(expr)
        statement = self.tree.parent(comparison)
        return (
            isinstance(comparison, cst.Comparison)
            and len(comparison.comparisons) == 1
            and isinstance(comparison.comparisons[0].operator, cst.Is)
            and isinstance(statement, cst.If)
            and statement.test is comparison
            and statement.orelse is None
            and all(isinstance(st, cst.SimpleStatementLine) and all(isinstance(b, cst.Raise) for b in st.body) for st in statement.body.body)
        )

    def _optimizer_steps(self, function: cst.FunctionDef | None, optimizer: str, site: cst.CSTNode | None, scale: cst.Call) -> list[cst.Call]:
        """`optimizer.step()` calls in `function` (after amp.initialize, when it is there)."""
        steps = []
        for node in self.program.scope_nodes(function):
            found = s.method_call(node)
            if found and found[1] == "step" and dotted(found[0]) == optimizer and (site is None or self.tree.line(node) > self.tree.line(site)):
                statement = self.tree.statement(node)
                if node.args or not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and statement.body[0].value is node):
                    raise NotUnderstood(node, f"`{code(node)}` is not a statement `{optimizer}.step()` of its own")
                steps.append(node)
        if not steps:
            raise NotUnderstood(scale, f"no `{optimizer}.step()` in the function that calls `amp.scale_loss`")
        return steps

    def _helper(self, expr, where, function, model, site, scaler, edits) -> str | None:
        """A function other than the one calling amp.initialize uses amp (`train()` called from
        `main()`): apex's state was global, the GradScaler is handed to it. Returns the model as
        `where` spells it (None when it has none)."""
        if where is None or self.program.owner_class(where) is not None or where not in self.program.functions.values():
            raise NotUnderstood(expr, f"`{code(expr)}` is used outside the function that calls `amp.initialize`")
        if self.program.binds(where, scaler):
            raise NotUnderstood(expr, f"`{where.name.value}` binds the name `{scaler}` itself")
        sites = self.program.call_sites(where)
        if function is None:  # the scaler is a global
            return model if not self.program.binds(where, model.split(".")[0]) else self._parameter_for(where, sites, model)
        if not sites or any(caller is not function or self.tree.line(call) < self.tree.line(site) for call, caller in sites):
            raise NotUnderstood(expr, f"`{code(expr)}` is used in `{where.name.value}()`, which is not called only from the function that calls `amp.initialize`, after it")
        params = where.params
        plain = not (params.kwonly_params or isinstance(params.star_arg, cst.Param) or params.star_kwarg or any(p.default for p in params.params))

        def edit() -> None:
            new = cst.Param(cst.Name(scaler))
            if plain:
                self.plan.replace(params, lambda updated: updated.with_changes(params=[*updated.params, new]))
            else:
                star = params.star_arg if isinstance(params.star_arg, cst.Param) else cst.ParamStar()
                self.plan.replace(params, lambda updated, star=star: updated.with_changes(star_arg=star, kwonly_params=[*updated.kwonly_params, new]))
            arity = len(self.program.param_names(where))
            for call, _caller in sites:
                positional = plain and len(call.args) == arity and all(a.keyword is None and not a.star for a in call.args)
                argument = cst.Arg(cst.Name(scaler)) if positional else keyword(scaler, scaler)
                self.plan.replace(call, lambda updated, argument=argument: updated.with_changes(args=appended(updated, argument)))
            self.plan.change(where, self.name, f"`{scaler}` handed to `{where.name.value}()`: apex amp was global state, a GradScaler is an object")

        edits.append(edit)
        return self._parameter_for(where, sites, model)

    def _parameter_for(self, where: cst.FunctionDef, sites, model: str) -> str | None:
        """The parameter of `where` every call passes the model for."""
        for name in self.program.param_names(where):
            if sites and all(dotted(self.program.argument_for(call, where, name) or cst.Name("_")) == model for call, _ in sites):
                return name
        return None

    # --- apex.parallel -----------------------------------------------------------------

    def _parallel(self, uses: list[tuple[cst.BaseExpression, str]]) -> None:
        ddp_done = syncbn_done = True
        for expr, name in uses:
            call = self._call(expr)
            if name == APEX_SYNCBN:
                if call is None or len(call.args) != 1 or call.args[0].keyword is not None:
                    self.plan.warn(expr, f"`{code(call or expr)}` is left as is: only `convert_syncbn_model(model)` has a known torch counterpart")
                    self.warned.add(APEX_SYNCBN)
                    syncbn_done = False
                    continue
                self.plan.replace(call.func, cst.parse_expression("torch.nn.SyncBatchNorm.convert_sync_batchnorm"))
                self.plan.add_import("torch")
                self.plan.change(call, self.name, "apex `convert_syncbn_model` becomes `torch.nn.SyncBatchNorm.convert_sync_batchnorm`")
                continue
            extra = [a for a in (call.args[1:] if call is not None else []) if a.keyword is None or a.keyword.value not in MOOT_DDP_ARGS]
            if call is None or not call.args or call.args[0].keyword is not None or extra:
                self.plan.warn(expr, f"`{code(call or expr)}` is left as is: apex DDP with arguments torch's DDP has no counterpart for")
                self.warned.add(APEX_DDP)
                ddp_done = False
                continue
            args = [call.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            if isinstance(expr, cst.Name):
                self.plan.replace(call, lambda updated, args=args: updated.with_changes(args=args))
            else:
                self.plan.replace(call, lambda updated, args=args: updated.with_changes(func=cst.parse_expression("torch.nn.parallel.DistributedDataParallel"), args=args))
                self.plan.add_import("torch")
            dropped = [a.keyword.value for a in call.args[1:] if a.keyword is not None]
            self.plan.change(call, self.name, "apex DistributedDataParallel becomes torch's" + (f" ({', '.join(dropped)} dropped: torch's DDP overlaps the all-reduce with the backward itself)" if dropped else ""))
        if ddp_done and any(n == APEX_DDP for _, n in uses):
            self.converted.add(APEX_DDP)
        if syncbn_done and any(n == APEX_SYNCBN for _, n in uses):
            self.converted.add(APEX_SYNCBN)

    # --- imports -----------------------------------------------------------------------

    def _remove(self, statement: cst.BaseStatement) -> None:
        self.plan.remove(statement)
        self.removed.add(statement)

    def _imports(self, uses: list[tuple[cst.BaseExpression, str]]) -> None:
        """apex imports of what was rewritten go; a `try: import apex ... except ImportError:` goes whole.
        Once something was rewritten, apex names nothing reads go too, and what stays is warned about."""
        for node in self.tree.walk():
            if isinstance(node, cst.ImportFrom) and _imports_apex(node):
                module = code(node.module)  # type: ignore[arg-type]
                if not isinstance(node.names, (list, tuple)):
                    self._kept(node, [module], uses)
                    continue
                kept, moved = [], []
                for alias in node.names:
                    full = f"{module}.{alias.evaluated_name}"
                    if full == APEX_DDP and APEX_DDP in self.converted:
                        moved.append(alias)
                    elif not self._converted(full) and not (self._tidy(uses) and self._unread(alias)):
                        kept.append(alias)
                for alias in moved:
                    self.plan.add_import("torch.nn.parallel", "DistributedDataParallel", alias.evaluated_alias)
                if len(kept) < len(node.names):
                    self._drop_aliases(node, kept, tuple(moved))
                self._kept(node, [f"{module}.{alias.evaluated_name}" for alias in kept], uses)
            elif isinstance(node, cst.Import) and _imports_apex(node):
                if self._apex_unused():
                    self._drop_aliases(node, [a for a in node.names if a.evaluated_name.split(".")[0] != "apex"])
                else:
                    self._kept(node, [a.evaluated_name for a in node.names if a.evaluated_name.split(".")[0] == "apex"], uses)
        for statement in self.emptied:
            if all(st in self.removed for st in statement.body.body):
                self.plan.remove(statement)
                self.removed.add(statement)

    def _unread(self, alias: cst.ImportAlias) -> bool:
        """Whether no code reads the name an import binds (`from apex import optimizers`, never used)."""
        bound = alias.evaluated_alias or alias.evaluated_name
        return not any(type(n) is cst.Name and n.value == bound and self.tree.qname(n) is not None for n in self.tree.walk())

    def _tidy(self, uses: list[tuple[cst.BaseExpression, str]]) -> bool:
        """Whether apex imports are this pass's business: something was rewritten, or nothing uses apex."""
        return bool(self.converted) or not uses

    def _kept(self, node: cst.Import | cst.ImportFrom, names: list[str], uses: list[tuple[cst.BaseExpression, str]]) -> None:
        """An apex import that stays, once something else was rewritten: said, unless its uses were."""
        if not self._tidy(uses) or not names:
            return
        if all(any(w == n or w.startswith(n + ".") for w in self.warned) for n in names):
            return
        self.plan.warn(node, f"`{code(node)}` is kept: the script still needs apex")

    def _converted(self, name: str) -> bool:
        return name in self.converted or any(name.startswith(c + ".") for c in self.converted)

    def _apex_unused(self) -> bool:
        return all(self._converted(name) for _, name in self._uses())

    def _drop_aliases(self, node: cst.Import | cst.ImportFrom, kept: list[cst.ImportAlias], moved: tuple[cst.ImportAlias, ...] = ()) -> None:
        statement = self.tree.statement(node)
        dropped = [code(a.name) for a in node.names if not any(a is k for k in (*kept, *moved))]  # type: ignore[union-attr]
        if dropped:
            self.plan.change(node, self.name, f"apex import of {', '.join(f'`{d}`' for d in dropped)} removed: nothing needs it now")
        if moved:
            self.plan.change(node, self.name, "`DistributedDataParallel` is imported from torch.nn.parallel instead")
        if kept:
            fixed = [*kept[:-1], kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            self.plan.replace(node, node.with_changes(names=fixed, lpar=None, rpar=None) if isinstance(node, cst.ImportFrom) else node.with_changes(names=fixed))
        elif not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            self.plan.replace(node, cst.Pass())  # `try: from apex import amp` on one line, or `import apex; ...`
        else:
            self._remove(statement)
            self._settle_guard(statement)

    def _settle_guard(self, statement: cst.BaseStatement) -> None:
        """A `try:` around apex imports that all went: what ran when apex imported is what runs now
        (`try: from apex import amp; HAS_APEX = True / except ImportError: ...` -> `HAS_APEX = True`)."""
        owner = self.tree.parent(self.tree.block(statement))
        if not isinstance(owner, cst.Try) or owner.finalbody is not None or owner in self.removed:
            return
        remaining = [st for st in owner.body.body if st not in self.removed]
        if not all(_assigns_only(st) for st in remaining):
            return  # other imports or code: the try stays
        success = [*remaining, *(owner.orelse.body.body if owner.orelse is not None else ())]
        assigned = {dotted(t.target) for st in success for small in st.body for t in small.targets}  # type: ignore[attr-defined]
        for handler in owner.handlers:
            body = handler.body.body
            lines = [body] if isinstance(handler.body, cst.SimpleStatementSuite) else [getattr(st, "body", None) for st in body]
            for smalls in lines:
                if smalls is None or not all(isinstance(b, (cst.Raise, cst.Pass, cst.Expr, cst.Assign)) for b in smalls):
                    return
                for small in smalls:
                    if isinstance(small, cst.Assign):
                        for target in small.targets:
                            name = dotted(target.target)
                            if name not in assigned and self._read_elsewhere(name):
                                return  # `HAS_APEX = False` read later, and set nowhere else
        if success:
            self.plan.insert_before(owner, success)
        self._remove(owner)

    def _read_elsewhere(self, name: str | None) -> bool:
        """Whether code that stays reads `name` (reads of apex names are rewritten)."""
        for node in self.tree.walk():
            if type(node) is not cst.Name or node.value != name or isinstance(self.tree.parent(node), cst.AssignTarget):
                continue
            qname = self.tree.qname(node) or ""
            if not (qname == "apex" or qname.startswith("apex.")) and not any(self.tree.inside(node, r) for r in self.removed):
                return True
        return False


def _operand(test: str) -> str:
    """A condition as an operand of `and`."""
    expression = cst.parse_expression(test)
    if isinstance(expression, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)):
        return f"({test})"
    return test


def _native_hint(name: str) -> str:
    if name.startswith("apex.optimizers.Fused"):
        return f" (torch.optim.{name.rsplit('.', 1)[1].removeprefix('Fused')}(..., fused=True) is the native counterpart)"
    return ""


def _assigns(statement: cst.BaseStatement) -> bool:
    """`loss = ...`, `loss += ...`: a statement computing part of the loss."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)) for small in statement.body
    )


def _imports_apex(node: cst.Import | cst.ImportFrom) -> bool:
    if isinstance(node, cst.Import):
        return any(alias.evaluated_name.split(".")[0] == "apex" for alias in node.names)
    return node.module is not None and not node.relative and code(node.module).split(".")[0] == "apex"


def _assigns_only(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(isinstance(small, cst.Assign) for small in statement.body)
