"""A run's name drawn per process (a uuid, a timestamp) is rank 0's on every rank.

`run_dir = os.path.join("runs", uuid.uuid4().hex[:8])` gives each rank a folder of its own:
rank 0 saves `best.pt` into its folder, and another rank, loading it back after the barrier,
looks in a folder nothing was written to. A timestamp differs too when the ranks start a second
apart. Rank 0 broadcasts its value (`rank0_value`, emitted once) right after the assignment.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.destinations import private_to_process
from ddpify.analysis.exits import CLOCKS
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import code, dotted, method_call

HELPER = '''

def rank0_value(value):
    """Rank 0's `value` on every rank: a name drawn in each process (a uuid, a timestamp)
    names one run, whose files every rank then finds in the same place."""
    values = [value]
    dist.broadcast_object_list(values, src=0)
    return values[0]
'''

# Draws that differ from process to process: uuids, and clocks read as text or numbers.
DRAWS = CLOCKS | {
    "uuid.uuid1", "uuid.uuid4", "time.strftime", "time.localtime", "time.ctime", "time.asctime",
    "datetime.datetime.today", "datetime.date.today", "os.getpid", "socket.gethostname",
}  # fmt: skip
# A seed drawn at random, and what seeds with it.
SEED_DRAWS = {"random.randint", "random.randrange", "random.random", "numpy.random.randint", "torch.randint", "time.time", "time.time_ns"}
SEEDERS = {"torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "random.seed", "numpy.random.seed"}
# Calls whose arguments name a file or folder.
PATH_CALLS = ("os.", "pathlib.", "shutil.", "glob.", "builtins.open", "torch.save", "torch.load", "torch.utils.tensorboard.")


class SharedRunNames(Transform):
    name = "run-name"
    DESCRIPTION = "a run name drawn per process (uuid, timestamp) is rank 0's on every rank"

    def run(self) -> None:
        done = False
        entry = self.facts.entry
        if entry.kind == "library":
            return
        for function, assign in self._assignments():
            name = dotted(assign.targets[0].target)
            if name is None or self.tree.loops(assign):
                continue
            if function is not entry.function:
                # `stamp = datetime.datetime.now().strftime(...)`, then `self.run_dir = os.path.join("runs", f"lr{lr}_{stamp}")`, in
                # the `__init__` of a class that trains (helper corpus BK, repro 01): drawn on every rank, as the entry's names are
                if self._draws(assign.value) and self._names_files(name, function):
                    statement = self.tree.statement(assign)
                    self.plan.insert_after(statement, statements(f"{name} = rank0_value({name})  # one run: the same name on every rank\n"))
                    self.change(statement, f"`{name}` is drawn in each process (`{code(assign.value)}`): every rank takes rank 0's (rank0_value)")
                    done = True
                continue
            if type(assign.targets[0].target) is cst.Name and self._picks_a_free_name(assign.value, entry.function) and not self.facts.before_setup(entry.function, assign):
                # YOLO's `save_dir = increment_path("runs/exp")`: each rank would look, find another folder free and make it
                # (helper corpus BX, repro 02): rank 0 alone picks and makes it, and every rank takes its name
                statement = self.tree.statement(assign)
                value = f"rank0_value({code(assign.value)} if {self.is_main_process(entry.function, statement)} else None)"
                self.plan.replace(assign.value, cst.parse_expression(value))
                self.change(statement, f"`{name}` is a folder `{code(assign.value.func)}` picks by what exists (`{code(assign.value)}`): rank 0 picks and makes it, every rank takes its name (rank0_value)")  # type: ignore[attr-defined]
                done = True
                continue
            if self._temp_for_an_option(assign, entry.function):
                # `if args.save_dir is None: args.save_dir = tempfile.TemporaryDirectory().name`: each process made its own
                # folder, rank 0 saved into its own and the others read theirs (helper corpus BY, repro 04); a path
                # the user passes is the same on every rank, so taking rank 0's is right either way (one node)
                outer = self._outermost_if(assign, entry.function)
                self.plan.insert_after(outer, statements(f"{name} = rank0_value({name})  # one folder: rank 0's temporary one when none was given\n"))
                self.change(outer, f"`{name}` may be a temporary folder each process makes (`{code(assign.value)}`): every rank takes rank 0's (rank0_value)")
                done = True
                continue
            if type(assign.targets[0].target) is cst.Name and self._draws(assign.value) and self._names_files(name, entry.function):
                why, what = "one run: the same name on every rank", "drawn in each process"
            elif self._draws_a_seed(assign.value) and self._seeds(name, entry.function):
                # DCGAN's `opt.manualSeed = random.randint(1, 10000)`: every rank its own split and data
                why, what = "one seed: the same data and splits on every rank", "a seed drawn in each process"
            else:
                continue
            statement = self.tree.statement(assign)
            self.plan.insert_after(statement, statements(f"{name} = rank0_value({name})  # {why}\n"))
            self.change(statement, f"`{name}` is {what} (`{code(assign.value)}`): every rank takes rank 0's (rank0_value)")
            done = True
        for call in self.program.calls_in(entry.function):
            if id(call) not in self.program.shared_seeds:
                continue
            # `seed = torch.seed()`: a fresh seed per run, which each process would draw and set for itself
            statement = self.tree.statement(call)
            parent = self.tree.parent(call)
            name = dotted(parent.targets[0].target) if type(parent) is cst.Assign else None
            again = f"{name} = rank0_value({name})  # one seed: the same data and splits on every rank\ntorch.manual_seed({name})\n" if name else (
                "torch.manual_seed(rank0_value(torch.initial_seed()))  # one seed: the same data and splits on every rank\n"
            )
            self.plan.insert_after(statement, statements(again))
            self.change(statement, f"`{code(call)}` draws and sets a seed in each process: every rank takes rank 0's (rank0_value) and seeds with it")
            done = True
        if done:
            assert self.facts.imports_end is not None
            self.plan.insert_after(self.facts.imports_end, statements(HELPER))

    def _assignments(self):
        """Single assignments of the entry function, then of the functions every rank runs: those
        that train, and the `__init__` of a class with a method that trains (the object that
        trains is made on every rank). Not other functions: one may run on rank 0 alone, where a
        broadcast would wait for the others forever."""
        entry = self.facts.entry.function
        scopes = [entry]
        trains = self.program.training_functions
        for function in sorted(trains, key=self.tree.order):
            cls = self.program.owner_class(function)
            init = self.program.class_methods(cls).get("__init__") if cls is not None else None
            scopes += [f for f in (init, function) if f is not None and f is not entry and f not in scopes and self.facts.runs_after_setup(f) and not self.facts.before_setup(f, None)]
        for function in scopes:
            for assign in self.program.scope_nodes(function):
                if type(assign) is cst.Assign and len(assign.targets) == 1 and isinstance(self.tree.parent(assign), cst.SimpleStatementLine):
                    yield function, assign

    def _temp_for_an_option(self, assign: cst.Assign, function: cst.FunctionDef | None) -> bool:
        """`args.save_dir = tmp.name` (`tmp = tempfile.TemporaryDirectory()`) or `= tempfile.mkdtemp()`
        under an `if` of the entry: a parsed option, or a name, given a per-process temporary folder
        only on some runs. The name names files (it is saved into and read back)."""
        target = assign.targets[0].target
        name = dotted(target)
        if name is None or not self._ifs_around(assign, function):
            return False
        if not private_to_process(self.tree, self.program, assign.value, function):
            return False
        root = name.split(".")[0]
        option = type(target) is cst.Attribute and function is not None and self.program.parsed_options(root, function)
        return (option or type(target) is cst.Name) and self._names_files(name, function) and not self.facts.before_setup(function, assign)

    def _outermost_if(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> cst.BaseStatement:
        """The outermost `if` around `node` in its function's block."""
        ifs = self._ifs_around(node, function)
        return ifs[-1] if ifs else self.tree.statement(node)

    def _ifs_around(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> list[cst.If]:
        """The `if` statements around `node` in its function, innermost first; not the `__main__` guard."""
        return [a for a in self.tree.ancestors(node) if type(a) is cst.If and self.tree.function(a) is function and not self.tree.is_main_guard(a)]

    def _picks_a_free_name(self, value: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """A call of a same-file function that looks at what exists to pick a new folder and makes
        it (`increment_path`: `while path.exists(): ...`, then `path.mkdir(...)`)."""
        target = self.program.callee(value, function) if type(value) is cst.Call else None
        if target is None:
            return False
        calls = self.program.calls_in(target[0])
        names = [(self.tree.qname(c.func) or "", (method_call(c) or (None, ""))[1]) for c in calls]
        looks = any(q in ("os.path.exists", "os.path.isdir", "os.listdir", "glob.glob") or m in ("exists", "is_dir", "iterdir", "glob") for q, m in names)
        makes = any(q in ("os.makedirs", "os.mkdir") or m == "mkdir" for q, m in names)
        return looks and makes

    def _draws_a_seed(self, value: cst.BaseExpression) -> bool:
        return any(self.tree.is_call_to(call, SEED_DRAWS) for call in self.tree.calls(value))

    def _seeds(self, name: str, function: cst.FunctionDef | None) -> bool:
        """`name` seeds a generator: `torch.manual_seed(name)`, `random.seed(name)`, `g.manual_seed(name)`."""
        for call in self.program.calls_in(function):
            found = method_call(call)
            if self.tree.is_call_to(call, SEEDERS) or (found is not None and found[1] == "manual_seed"):
                if any(dotted(a.value) == name for a in call.args):
                    return True
        return False

    def _draws(self, value: cst.BaseExpression) -> bool:
        return any(self.tree.is_call_to(call, DRAWS) for call in self.tree.calls(value))

    def _names_files(self, name: str, function: cst.FunctionDef | None) -> bool:
        """`name` is read in the arguments of a call that takes paths (`os.path.join(run_dir, ...)`,
        `torch.save(..., run_dir + "/best.pt")`, `open(f"{run_dir}/log.txt")`)."""
        for call in self.program.calls_in(function):
            qualified = self.tree.qname(call.func) or ""
            if not qualified.startswith(PATH_CALLS):
                continue
            # `torch.save(ckpt, "out/model.pt")`: the path, not the object saved (helper corpus CL, repro 03: a checkpoint
            # dict holding a training time was broadcast whole)
            saved = s.arg(call, 1, "f") if qualified == "torch.save" else None
            args = [saved] if saved is not None else call.args
            if any(type(n) in (cst.Name, cst.Attribute) and dotted(n) == name for a in args for n in self.tree.walk(a.value)):
                return True
        return False
