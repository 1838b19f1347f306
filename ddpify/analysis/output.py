"""What a call outputs: printing, logging, progress bars, TensorBoard and wandb, file writes,
folders. One classification, read by convert (which statements run on rank 0 only) and by lint
(DDP301 writes, DDP303 side effects, what a rank-0 guard may enclose); each side decides which
kinds it acts on."""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Program
from ddpify.syntax import Tree, code, dotted

# Writes by qualified name: name -> (position, keyword) of the destination, None where the call
# names no path we can read.
WRITE_FUNCTIONS: dict[str, tuple[int | None, str] | None] = {
    "torch.save": (1, "f"),
    "torch.jit.save": (1, "f"),
    "torch.export.save": (1, "f"),
    "torch.onnx.export": (2, "f"),
    "safetensors.torch.save_file": (1, "filename"),
    "safetensors.torch.save_model": (1, "filename"),
    "numpy.save": (0, "file"),
    "numpy.savez": (0, "file"),
    "numpy.savez_compressed": (0, "file"),
    "numpy.savetxt": (0, "fname"),
    "matplotlib.pyplot.savefig": (0, "fname"),
    "shutil.copy": (1, "dst"),
    "shutil.copy2": (1, "dst"),
    "shutil.copyfile": (1, "dst"),
    "shutil.move": (1, "dst"),
    "shutil.copytree": (1, "dst"),
    # changes to files and folders the script writes: rank 0's, with the writes
    # (`os.replace(tmp, final)` after `torch.save(state, tmp)`, removing old checkpoints)
    "os.replace": (1, "dst"),
    "os.rename": (1, "dst"),
    "os.remove": (0, "path"),
    "os.unlink": (0, "path"),
    "os.rmdir": (0, "path"),
    "shutil.rmtree": (0, "path"),
    "torchvision.utils.save_image": None,
    "matplotlib.pyplot.imsave": None,
    "imageio.imwrite": None,
    "imageio.imsave": None,
    "imageio.mimsave": None,
    "imageio.v2.imwrite": None,
    "imageio.v3.imwrite": None,
    "cv2.imwrite": None,
    "scipy.io.savemat": None,
    "skimage.io.imsave": None,
    "joblib.dump": (1, "filename"),  # a fitted scaler or encoder kept beside the model (helper corpus BF, repro 03)
}
# Writes into a file object: qualified name -> (position, keyword) of the file object.
DUMPS = {
    "json.dump": (1, "fp"),
    "pickle.dump": (1, "file"),
    "yaml.dump": (1, "stream"),
    "yaml.safe_dump": (1, "stream"),
}
# Method writes: name -> (position, keyword) of the destination; None: the receiver is the path.
WRITE_METHODS: dict[str, tuple[int, str] | None] = {
    "savefig": (0, "fname"),
    "to_csv": (0, "path_or_buf"),
    "to_json": (0, "path_or_buf"),
    "to_parquet": (0, "path"),
    "to_pickle": (0, "path"),
    "save_pretrained": (0, "save_directory"),
    "write_text": None,
    "write_bytes": None,
    "tofile": (0, "fid"),  # numpy's `array.tofile(path)`
}
# pathlib's changes to a file the receiver names (`ckpt.unlink()`, `tmp.replace(final)`).
PATH_CHANGES = {"unlink", "rmdir", "rename", "replace", "touch"}
# Of the writes above, those that remove what they name (the destination is what goes).
REMOVALS = {"os.remove", "os.unlink", "os.rmdir", "shutil.rmtree", "unlink", "rmdir"}
# pathlib's removals named unbound (`map(Path.unlink, stale)`: helper corpus CB, repro 05)
PATH_REMOVALS = {"pathlib.Path.unlink", "pathlib.Path.rmdir", "pathlib.PurePath.unlink"}
# pathlib methods whose value is a path, or paths (`out.glob("*.pt")`), when their receiver is one
PATH_METHODS = {"glob", "rglob", "iterdir", "with_suffix", "with_name", "with_stem", "joinpath", "resolve", "absolute", "expanduser"}
# builtins that hand on the paths of their first argument (`sorted(out.glob(...))[:-2]`)
PATH_KEEPERS = {"sorted", "list", "reversed", "tuple", "next", "max", "min"}
FILE_METHODS = {"write", "writelines", "flush"}  # of a file object opened for writing
STREAMS = {"sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__"}
# `tqdm.write(...)` prints a line above the bars, like print.
STREAM_WRITES = {"sys.stdout.write", "sys.stderr.write", *(f"{bar}.write" for bar in s.TQDM)}
# other libraries' print: click's CLI output, pprint
PRINTS = {"click.echo", "click.secho", "pprint.pprint", "pprint.pp"}
FILE_HANDLERS = {
    "logging.FileHandler", "logging.handlers.RotatingFileHandler", "logging.handlers.TimedRotatingFileHandler",
    "logging.handlers.WatchedFileHandler",
}  # fmt: skip
STAR_REEXPORTED = {"sys", "logging"}  # modules a `from utils import *` brings along with the names it imports
LOUD_LEVELS = {"error", "exception", "critical", "fatal"}  # a rank's own failure: every rank may report it
# What another module's function or object does, known only by its name:
PRINTING_HELPERS = ("progress_bar", "print_")
SAVING_HELPERS = ("save_", "write_", "dump_", "export_")
# ... and a function of the script's own modules named for writing (`utils.loss_plot(hist, path)`,
# `get_submission(model, loader, path)`); libraries' plotting calls only draw (`plt.plot`).
WRITING_WORDS = ("plot", "animation", "submission", "submit")
LIBRARIES = ("matplotlib.", "seaborn.", "plotly.", "pandas.", "numpy.", "sklearn.", "scipy.", "PIL.", "cv2.", "torchvision.", "IPython.", "visdom.")
LOG_OBJECTS = {"log", "logger", "printer", "reporter", "visualizer", "vis", "viz", "tracker", "plotter"}  # `log = Log(...)`; `log(model, loss)`

PRINT, LOGGING, TQDM, TENSORBOARD, WANDB, MLFLOW = "print", "logging", "tqdm", "TensorBoard", "wandb", "MLflow"
CHECKPOINT, FILE_WRITE, FOLDER = "checkpoint save", "file write", "folder"
WRITES = (CHECKPOINT, FILE_WRITE)


class Output(NamedTuple):
    kind: str  # PRINT, LOGGING, TQDM, TENSORBOARD, WANDB, MLFLOW, CHECKPOINT, FILE_WRITE or FOLDER
    label: str  # the call as a report names it: `print`, `torch.save`, `.savefig`, `open`
    destination: cst.BaseExpression | None = None  # the path (or file object, for a dump) written
    loud: bool = False  # error-level logging: a rank's own failure
    creates: bool = False  # `SummaryWriter(...)`, `wandb.init(...)`, `mlflow.start_run()`: makes the logger object or run
    by_name: bool = False  # known only by the name of another module's function or object
    into_open_file: bool = False  # a dump into a file object `open(..., "w")` made in this file


class Outputs:
    """`of(call, function)`: what the call outputs, or None."""

    def __init__(self, tree: Tree, program: Program) -> None:
        self.tree = tree
        self.program = program
        self._writers: dict[str, bool] = {}  # `_companion_writes`, by qualified name
        self._seen: dict[tuple[int, int], tuple[cst.Call, Output | None]] = {}  # `of`, by the ids of call and function
        self._followed: set[int] = set()  # the lambdas `_through_lambda` is inside of

    def removes(self, call: cst.Call) -> bool:
        """The call removes what it names: `shutil.rmtree(p)`, `os.remove(p)`, `ckpt.unlink()`."""
        found = s.method_call(call)
        return (self.tree.qname(call.func) or (found[1] if found is not None else "")) in REMOVALS

    def of(self, call: cst.BaseExpression, function: cst.FunctionDef | None) -> Output | None:
        """Asked of most calls by several rules and transforms: worked out once per call."""
        if type(call) is not cst.Call:
            return None
        key = (id(call), id(function))
        seen = self._seen.get(key)
        if seen is None or seen[0] is not call:  # the call is kept with its answer: its id stays its own
            seen = self._seen[key] = (call, self._of(call, function))
        return seen[1]

    def _of(self, call: cst.Call, function: cst.FunctionDef | None) -> Output | None:
        tree = self.tree
        if tree.is_builtin_call(call, "print"):
            return Output(PRINT, "print")
        if tree.is_builtin_call(call, "map") and len(call.args) == 2 and (
            tree.qname(call.args[0].value) in WRITE_FUNCTIONS or (tree.qname(call.args[0].value) or "") in PATH_REMOVALS
        ):
            # `list(map(os.remove, old[:-2]))`, `any(map(Path.unlink, stale))`: the function writes (removes) each path
            return Output(FILE_WRITE, code(call.args[0].value), call.args[1].value)
        name = tree.qname(call.func) or self.program.star_imported(call.func, function) or self._star_imported_module(call.func, function)
        if name is not None:
            found = self._by_qualified_name(call, name, function)
            if found is not None:
                return found
            if self._companion_writes(name):
                return Output(FILE_WRITE, code(call.func))
        if tree.opens_for_writing(call):
            argument = s.arg(call, 0, "file") or s.arg(call, None, "filename")  # a memory map's
            label = "open" if tree.is_builtin_call(call, "open") else code(call.func)
            return Output(FILE_WRITE, label, argument.value if argument is not None else None)
        if isinstance(call.func, cst.Name) and self.is_log_object(call.func, function):
            return Output(LOGGING, call.func.value, by_name=True)
        found = s.method_call(call)
        if found is not None:
            return self._method(call, found[0], found[1], function) or self._through_alias(call, function)
        return self._through_lambda(call, function) or self._through_alias(call, function)

    def _through_alias(self, call: cst.Call, function: cst.FunctionDef | None) -> Output | None:
        """`echo = print`, `write = sys.stdout.write`, `say = functools.partial(print, flush=True)`,
        then `echo("done")` (helper corpus CK, repro 08): the function the name holds prints. Also
        a logger's method (`info = logger.info`), an attribute (`self.emit = sys.stderr.write`),
        and a parameter whose default and every argument print (`def train(..., log_fn=print)`,
        handed `tqdm.write`: helper corpus CM, repros 02, 03 and script 05)."""
        func = call.func
        held: list[tuple[cst.BaseExpression, cst.FunctionDef | None]] = []
        if type(func) is cst.Name and function is not None and func.value in self.program.param_names(function) and not self.program.assignments(function, func.value):
            held = self._handed(function, func.value)
            if not held:
                return None
        elif type(func) is cst.Name:
            value, scope = self.program.bound_where_read(func.value, function)
            held = [(value, scope)] if isinstance(value, cst.BaseExpression) else []
        elif type(func) is cst.Attribute and type(func.value) is cst.Name and (cls := self.program.instance_of(func.value, function)) is not None:
            # `self.emit(...)` in a method, or `reporter.emit(...)` on an object of a same-file class
            held = [
                (self.program.element(value, i), method)  # type: ignore[misc]
                for method in self.program.methods.get(cls, {}).values() for value, i in self.program.assignments(method, f"self.{func.attr.value}")
            ]
        kinds = [self._held_output(value, scope) for value, scope in held]
        if not kinds or None in kinds:
            return None
        return Output(LOGGING if LOGGING in kinds else PRINT, code(func))

    def _handed(self, function: cst.FunctionDef, param: str) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None]]:
        """What `function`'s parameter holds: its default, and what every call hands it (none
        when a call hands nothing and there is no default)."""
        default = self.program.default(function, param)
        sites = self.program.call_sites(function)
        handed = [(a, caller) for c, caller in sites if (a := self.program.argument_for(c, function, param)) is not None]
        if default is None and len(handed) < len(sites):
            return []
        return handed + ([(default, self.tree.function(function))] if default is not None else [])

    def _held_output(self, held: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 2) -> str | None:
        """PRINT or LOGGING when `held` is a function that prints or logs: `print`,
        `sys.stdout.write`, `tqdm.write`, `logging.info`, a logger's method (`logger.info`,
        `logging.getLogger("x").warning`), a `functools.partial` of one, or a name bound to one
        (`note = tqdm.write`, handed on as `log_fn=note`)."""
        held = self.program.partial_of(held) or held
        if type(held) is cst.BooleanOperation and type(held.operator) is cst.Or and depth > 0:
            # `progress = progress or print`, the parameter left None by every caller (helper corpus CP, repro 06)
            sides = [held.left, held.right]
            if type(held.left) is cst.Name and scope is not None and held.left.value in self.program.param_names(scope):
                handed = self._handed(scope, held.left.value)
                if handed and all(type(v) is cst.Name and v.value == "None" for v, _ in handed):
                    sides = [held.right]
            kinds = [self._held_output(side, scope, depth - 1) for side in sides]
            return kinds[0] if None not in kinds and len(set(kinds)) == 1 else None
        if type(held) is cst.Lambda and type(held.body) is cst.Call:  # `printer=lambda s: print(s, flush=True)` (helper corpus CP, script 04)
            out = self.of(held.body, self.tree.function(held))
            return out.kind if out is not None and out.kind in (PRINT, LOGGING) else None
        if type(held) is cst.Name and depth > 0 and scope is not None and held.value in self.program.param_names(scope) and not self.program.assignments(scope, held.value):
            # `self.printer = printer`, a parameter of `__init__`: what its callers hand it, or its default
            kinds = [self._held_output(value, where, depth - 1) for value, where in self._handed(scope, held.value)]
            return kinds[0] if kinds and None not in kinds and len(set(kinds)) == 1 else None
        if type(held) is cst.Name and depth > 0 and self.tree.qname(held) is None and held.value != "print":
            value, where = self.program.bound_where_read(held.value, scope)
            return self._held_output(value, where, depth - 1) if isinstance(value, cst.BaseExpression) else None
        if type(held) not in (cst.Name, cst.Attribute):
            return None
        name = self.tree.qname(held) or ""
        if name in ("builtins.print", "print") or (type(held) is cst.Name and held.value == "print" and not self.program.binds(None, "print")):
            return PRINT
        if name in PRINTS or name in STREAM_WRITES or name in s.LOGGING_EMIT:
            return PRINT if name not in s.LOGGING_EMIT else LOGGING
        if type(held) is cst.Attribute and held.attr.value in (*s.LOGGER_METHODS, "write"):
            logged = self._method(cst.Call(held), held.value, held.attr.value, scope)  # `stream.write` with `stream = sys.stderr`
            return logged.kind if logged is not None and logged.kind in (PRINT, LOGGING) else None
        return None

    def _through_lambda(self, call: cst.Call, function: cst.FunctionDef | None) -> Output | None:
        """`log("done")` with `log = lambda msg: print(f"[train] {msg}")`, `save()` with `save =
        lambda: torch.save(...)`: the lambda's one call is the output. What it writes is spelled in
        the lambda's scope, not the caller's: no destination."""
        for lam in self.program.lambdas_called(call, function):
            if type(lam.body) is cst.Call and id(lam) not in self._followed:
                self._followed.add(id(lam))  # `a = lambda: b()`, `b = lambda: a()`: each followed once
                try:
                    out = self.of(lam.body, self.tree.function(lam))
                finally:
                    self._followed.discard(id(lam))
                if out is not None:
                    return out._replace(label=code(call.func), destination=None, into_open_file=False)
        return None

    def _companion_writes(self, name: str) -> bool:
        """A function of the script's own module beside it (read, not rewritten) that writes files
        and does nothing else the ranks must do together: no collective, no backward or step, no
        call of its module's other functions, and nothing returned (`utils.finalize(dir, history)`
        dumping a JSON file)."""
        if name not in self._writers:
            found = self.program.companion_function(name)
            self._writers[name] = found is not None and _only_writes(*found)
        return self._writers[name]

    def _star_imported_module(self, func: cst.BaseExpression, function: cst.FunctionDef | None) -> str | None:
        """`sys.stdout.write(...)` where only `from utils import *` binds `sys`: the module it
        re-exports (CycleGAN's progress line). Only the standard modules whose calls print."""
        root = func
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is not cst.Name or root.value not in STAR_REEXPORTED or self.program.star_imported(root, function) is None:
            return None
        return dotted(func)

    def _file_handlers(self, call: cst.Call) -> bool:
        """`basicConfig(handlers=[logging.FileHandler("train.log"), ...])`."""
        handlers = s.arg(call, None, "handlers")
        return handlers is not None and any(self.tree.is_call_to(n, FILE_HANDLERS) for n in self.tree.walk(handlers.value))

    def _by_qualified_name(self, call: cst.Call, name: str, function: cst.FunctionDef | None) -> Output | None:
        found = self._named(call, name, function)
        return found._replace(label=code(call.func)) if found is not None else None  # rendered only for output

    def _named(self, call: cst.Call, name: str, function: cst.FunctionDef | None) -> Output | None:
        label = ""
        if name in STREAM_WRITES or name in PRINTS:
            return Output(PRINT, label)
        if name in s.LOGGING_EMIT:
            return Output(LOGGING, label, loud=name.rsplit(".", 1)[-1] in LOUD_LEVELS)
        if name == "logging.basicConfig" and (s.arg(call, None, "filename") is not None or self._file_handlers(call)):
            return Output(LOGGING, label, creates=True)  # the log file
        if name in FILE_HANDLERS:
            return Output(LOGGING, label, creates=True)  # opens (mode "w": truncates) the log file when made
        if name in s.TQDM:
            return Output(TQDM, label)
        if name in s.SUMMARY_WRITER:
            return Output(TENSORBOARD, label, creates=True)
        if name.startswith("wandb."):
            return Output(WANDB, label, creates=name == "wandb.init")
        if name.startswith("mlflow."):
            return Output(MLFLOW, label, creates=name == "mlflow.start_run")
        if name in WRITE_FUNCTIONS:
            spec = WRITE_FUNCTIONS[name]
            argument = s.arg(call, *spec) if spec is not None else None
            return Output(CHECKPOINT if name in s.TORCH_SAVE else FILE_WRITE, label, argument.value if argument is not None else None)
        if name in DUMPS:
            argument = s.arg(call, *DUMPS[name])
            opened = argument is not None and any(self.tree.opens_for_writing(o.node) for o in self.program.origins(argument.value, function))
            return Output(FILE_WRITE, label, argument.value if argument is not None else None, into_open_file=opened)
        if name in s.MAKE_FOLDER or name == "pathlib.Path.mkdir":
            return Output(FOLDER, label)
        if name.startswith(("torch.", "builtins.", "pathlib.")):
            return None  # pathlib's writes are methods (below)
        last = name.rsplit(".", 1)[-1]
        if last.startswith(PRINTING_HELPERS):
            return Output(PRINT, label, by_name=True)  # `progress_bar(...)` from another module
        named = last.startswith(SAVING_HELPERS) or (any(word in last.lower() for word in WRITING_WORDS) and not name.startswith(LIBRARIES))
        if named and self.program.callee(call, function) is None:
            return Output(FILE_WRITE, label, by_name=True)  # `save_checkpoint(model, optimizer)` from another module
        return None

    def _method(self, call: cst.Call, obj: cst.BaseExpression, method: str, function: cst.FunctionDef | None) -> Output | None:
        tree = self.tree
        label = f".{method}"
        if self.is_log_object(obj, function):
            return Output(LOGGING, label, by_name=True)
        origins = [o.node for o in self.program.origins(obj, function)]
        if method in s.LOGGER_METHODS and any(tree.is_call_to(o, s.GET_LOGGER) for o in origins):
            return Output(LOGGING, label, loud=method in LOUD_LEVELS)
        if any(tree.is_call_to(o, s.SUMMARY_WRITER) for o in origins):
            return Output(TENSORBOARD, label)
        if method in FILE_METHODS and any(tree.opens_for_writing(o) for o in origins):
            return Output(FILE_WRITE, label)
        if method in ("write", "writelines") and any(type(o) in (cst.Attribute, cst.Name) and tree.qname(o) in STREAMS for o in origins):
            return Output(PRINT, label)  # `self.terminal.write(msg)` with `self.terminal = sys.stdout` (a Logger/Tee)
        if method == "close" and type(obj) is cst.Call and tree.opens_for_writing(obj):
            return Output(FILE_WRITE, label)  # `open(path, "w").close()`: truncates the file
        if method == "mkdir":  # pathlib's (or a method of no imported name): a folder; another module's: a write
            return Output(FOLDER if tree.qname(call.func) in (None, "pathlib.Path.mkdir") else FILE_WRITE, label)
        if method in WRITE_METHODS:
            if method == "save_pretrained" and s.arg(call, None, "is_main_process") is not None:
                return None  # transformers skips the write on the other ranks itself
            spec = WRITE_METHODS[method]
            if spec is None:
                return Output(FILE_WRITE, label, obj)
            argument = s.arg(call, *spec)
            return Output(FILE_WRITE, label, argument.value if argument is not None else None)
        saved = s.arg(call, 0, "f") if method == "save" else None
        if method == "save" and any(tree.is_call_to(o, s.IMAGE_MAKERS) for o in origins):
            return Output(FILE_WRITE, label, saved.value if saved is not None else None)
        if method in PATH_CHANGES and self.is_path(obj, function):
            return Output(FILE_WRITE, label, obj)
        if method == "open" and s.writing_mode(s.arg(call, 0, "mode")) and self.is_path(obj, function):
            return Output(FILE_WRITE, label, obj)  # `with (output_dir / "log.txt").open("a") as f:` (DETR's main.py: helper corpus CV, script 02)
        if method == "save" and any(tree.is_call_to(o, s.SCRIPTED_EXPORTS) for o in origins):
            # `traced = torch.jit.trace(model, x)`, `traced.save(path)`: the path, so that one into the process's own
            # temp folder that every rank loads back stays every rank's (helper corpus CL, repro 01)
            return Output(FILE_WRITE, label, saved.value if saved is not None else None)
        return None

    def is_path(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 8) -> bool:
        """A pathlib path, or a sequence of them: `Path(...)`, `out / "x.pt"`, `out.glob("*.pt")`,
        `sorted(...)[:-2]`, `.parent`, an element of those (`for p in out.glob(...)`, `ckpts.pop(0)`),
        or a name bound to one."""
        if depth < 0:
            return False
        tree = self.tree
        kind = type(expr)
        if kind is cst.BinaryOperation and type(expr.operator) is cst.Divide:
            return self.is_path(expr.left, function, depth - 1)
        if kind is cst.Subscript:
            return self.is_path(expr.value, function, depth - 1)
        if kind in (cst.List, cst.Tuple):  # `[Path("a.pt"), ...]`
            return any(self.is_path(e.value, function, depth - 1) for e in expr.elements)
        if kind is cst.Attribute and expr.attr.value in ("parent", "parents"):
            return self.is_path(expr.value, function, depth - 1)
        if kind is cst.Attribute:  # `self.out_dir`, `trainer.out_dir`: what the class binds to it
            held = self.program.origins(expr, function) if dotted(expr.value) == "self" else self.program.kept_values(expr, function)
            return any(o.node is not expr and self.is_path(o.node, o.function, depth - 1) for o in held)
        if kind is cst.Call:
            if (tree.qname(expr.func) or "").startswith("pathlib."):
                return True
            found = s.method_call(expr)
            if found is not None and (found[1] in PATH_METHODS or found[1] == "pop"):
                return self.is_path(found[0], function, depth - 1)
            return type(expr.func) is cst.Name and expr.func.value in PATH_KEEPERS and tree.qname(expr.func) in (None, f"builtins.{expr.func.value}") and bool(expr.args) and self.is_path(expr.args[0].value, function, depth - 1)
        if kind is not cst.Name:
            return False
        for loop in self.program.loops_binding(function, expr.value):
            if self.is_path(loop.iter, function, depth - 1):
                return True
        for made in (a for a in tree.ancestors(expr) if type(a) in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            comp = made.for_in  # type: ignore[attr-defined]  # `any(p.unlink() for p in old)` (helper corpus BZ, repro 02)
            while comp is not None:
                if expr.value in self.program.names_in(comp.target) and self.is_path(comp.iter, function, depth - 1):
                    return True
                comp = comp.inner_for_in
        return any(o.node is not expr and self.is_path(o.node, o.function, depth - 1) for o in self.program.origins(expr, function))

    def is_log_object(self, obj: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """`log = Log(...)` from another module (`log.train(...)`, `log(model, loss)`): its calls print."""
        name = dotted(obj)
        if name is None or name.rsplit(".", 1)[-1].lower() not in LOG_OBJECTS:
            return False
        origins = self.program.origins(obj, function)
        return bool(origins) and all(
            isinstance(o.node, cst.Call)
            and self.program.callee(o.node, o.function) is None
            and not (self.tree.qname(o.node.func) or "").startswith(("logging.", "torch."))
            for o in origins
        )


def _only_writes(program: Program, function: cst.FunctionDef) -> bool:
    """Whether a function of the module `program` reads writes files and does nothing else the
    ranks must do together (see Outputs._companion_writes)."""
    outputs, writes = Outputs(program.tree, program), False
    for node in program.scope_nodes(function):
        if type(node) is cst.Return and node.value is not None:
            return False
        if type(node) is not cst.Call:
            continue
        called = program.tree.qname(node.func) or ""
        method = s.method_call(node)
        if called.startswith("torch.distributed") or program.callee(node, function) is not None or (method is not None and method[1] in ("backward", "step")):
            return False
        out = outputs.of(node, function)
        writes = writes or (out is not None and out.kind in WRITES)
    return writes
