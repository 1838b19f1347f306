"""Checkpoints hold the plain model: `model.module.state_dict()`, `.module.load_state_dict()`.

`torch.load` gets a `map_location` (tensors saved from cuda:0 would otherwise land on GPU 0
in every rank), and a file that rank 0 saved is read back by the other ranks only after a
`dist.barrier()`.
"""

from __future__ import annotations

import re

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.destinations import node_local, node_local_default, private_to_process
from ddpify.analysis.ranks import RANK_NAMES
from ddpify.names import COMPREHENSIONS
from ddpify.convert.transforms.base import Transform
from ddpify.edit import add_keyword, statements
from ddpify.syntax import code, dotted, string_value

# Without a device variable: this rank's GPU (set_device) where there is one.
FALLBACK = '"cuda" if torch.cuda.is_available() else "cpu"'


# pathlib's reads and writes of the file a path names
PATH_READS = {"read_text", "read_bytes"}
# tables and arrays read from a path, or written to one by a DataFrame method (`df.to_csv(path)`)
TABLE_READS = {f"pandas.read_{kind}" for kind in ("csv", "json", "parquet", "pickle", "table", "feather", "excel")} | {"numpy.load", "numpy.loadtxt", "numpy.genfromtxt"}
TABLE_WRITES = {"numpy.save", "numpy.savetxt", "numpy.savez"}
FRAME_WRITES = {"to_csv", "to_json", "to_parquet", "to_pickle", "to_feather"}
PATH_WRITES = {"write_text", "write_bytes"}


# Calls that list a folder's files.
FOLDER_LISTINGS = {"glob.glob", "glob.iglob", "os.listdir", "os.scandir"}
# Calls that write a file as a copy of another: (src, dst).
FILE_COPIES = {"shutil.copyfile", "shutil.copy", "shutil.copy2", "shutil.move", "os.replace", "os.rename"}
# What reads a saved model back, here or through a helper: the loads the pass over reads after saves sees.
READS_BACK = s.TORCH_LOAD | {"torch.jit.load"}
# the keyword each of s.MODEL_EXPORTS takes the model by (`quantize_dynamic(model=...)`, `trace(func=...)`)
EXPORTED_KEYWORDS = {"model", "module", "mod", "func", "obj", "graph_module"}


class Checkpoints(Transform):
    name = "checkpoint"
    DESCRIPTION = "state_dict through model.module, map_location on torch.load, barrier before reading back"

    def run(self) -> None:
        self._read_at: dict[int, cst.Call] = {}  # a helper's load (by id) -> the call of the helper in the function walked
        self._kept_paths: dict[int, list[cst.BaseExpression]] = {}  # a load of paths kept in a list (by id) -> the saved paths
        for function in [None, *self.program.all_functions]:
            if self.facts.in_dataset(function):
                continue  # data files a Dataset writes and reads: rank 0 downloads first (Downloads)
            saves: list[cst.Call] = []
            written: dict[str, cst.Call] = {}  # path as spelled -> the `open(path, "w")` that writes it
            waited: set[str] = set()
            loads: list[cst.Call] = []  # what every rank reads before rank 0 may remove it
            self._reads: dict[str, list[cst.Call]] = {}  # path as spelled -> the calls reading it so far
            # `to_file = lambda line: open(LOG, "a").write(line)` (rank 0's where it is called), then `open(LOG)` on every
            # rank (helper corpus CK, script 07): the lambda's write counts where the lambda is made
            in_lambdas = {id(c): c for lam in self.tree.of_type(cst.Lambda) if self.tree.function(lam) is function for c in self.tree.walk(lam.body) if type(c) is cst.Call}
            for node in sorted([*self.program.calls_in(function), *in_lambdas.values()], key=self.tree.order):
                self._read_after_write(node, function, written, waited)
                if id(node) in in_lambdas:
                    continue
                found = s.method_call(node)
                if found and found[1] in {"state_dict", "load_state_dict"} and (
                    self.facts.is_model(found[0], function) or self._in_model_list(found[0]) or self._held_in_a_dict(found[0], function)
                ):
                    ref = code(found[0])
                    self.plan.replace(found[0], cst.parse_expression(self.plain(ref, node)))
                    self.change(node, f"`{ref}.{found[1]}` goes through `.module`: no `module.` prefix in the keys")
                elif self.tree.is_call_to(node, s.TORCH_SAVE):
                    saves.append(node)
                    self._save_plain_model(node, function)
                elif self.tree.is_call_to(node, s.TORCH_LOAD) or self._load_alias(node, function) is not None:
                    self._load(node, function, saves)
                    loads.append(node)
                elif read := self._loads_in_helper(node, function):
                    self._load_through_helper(node, function, saves, read)
                    loads += read
                    self._read_at.update((id(load), node) for load in read)  # a removal after it waits where the helper is called
                elif self.tree.is_builtin_call(node, "open") and node.args and not self.tree.opens_for_writing(node) and self._reads_from_training(node, function):
                    loads.append(node)  # `with open(os.path.join(OUT, "train.log")) as fh:` on every rank, then rank 0 removes OUT (helper corpus CK, script 07)
                elif loads and self._removed(node, function) is not None and self._removed_after_reading(node, function, loads):
                    loads = []  # one barrier serves the removals after it
                elif loads and self._removed_through_helper(node, function, loads):
                    loads = []
                elif self.tree.is_call_to(node, s.MODEL_EXPORTS):
                    self._export_plain_model(node, function)
            self._saved_in_lambdas(function)
            self._reads_after_saves(function)

    def _held_in_a_dict(self, item: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """`state["model"]` where `state = {"model": model}` was made after the wrap, also in a
        caller that hands the dict on (`save_best(state)`: helper corpus CP, repro 07): the wrapper,
        whose state_dict keys start with `module.`."""
        if type(item) is not cst.Subscript or len(item.slice) != 1 or type(item.slice[0].slice) is not cst.Index:
            return False
        key = string_value(item.slice[0].slice.value)
        held = [
            (e.value, o.function) for o in self.program.origins(item.value, function) if type(o.node) is cst.Dict
            for e in o.node.elements if type(e) is cst.DictElement and key is not None and string_value(e.key) == key
        ]
        return bool(held) and all(self.facts.is_model(value, scope) for value, scope in held)

    def _reads_after_saves(self, function: cst.FunctionDef | None) -> None:
        """Reads back that no path test above matched, after rank 0's saves in this function or in
        a same-file function it calls: `average_checkpoints(list(recent))`, a manager's
        `mgr.restore(model)` reading `self.best`, `[Zoo.load(p)(x) for p in paths]`, `for _, p in
        sorted(heap): model.load_state_dict(torch.load(p))` (helper corpus CG, repros 03 to 06:
        rank 1 read a file rank 0 had not finished, or that it had removed). A barrier before the
        first read after the saves, where every rank passes, unless one is planned between; and one
        before a removal of rank 0's after those reads."""
        events = []  # (order, "save" | "read" | "remove", call)
        for call in self.program.calls_in(function):
            target = self.program.callee(call, function)
            shared = [c for c, scope in self._saves_of(target[0]) if (p := s.arg(c, 1, "f")) is None or not private_to_process(self.tree, self.program, p.value, scope)] if (
                target is not None and target[0] is not function
            ) else []  # a function saving into its process's own temp folder only: nothing of rank 0's to wait for
            exported = self._scripted_save(call, function)  # `scripted.save("export/model.ts")` (helper corpus CL, repro 02)
            if self.tree.is_call_to(call, s.TORCH_SAVE) or shared or exported is not None:
                path = s.arg(call, 1, "f") if self.tree.is_call_to(call, s.TORCH_SAVE) else exported
                if path is None or not private_to_process(self.tree, self.program, path.value, function):
                    events.append((self.tree.order(call), "save", call))
                    continue
            loads = self.tree.is_call_to(call, READS_BACK) or self._load_alias(call, function) is not None
            if loads or self._loads_in_helper(call, function):
                path = s.arg(call, 0, "f") if loads else None
                if path is None or not private_to_process(self.tree, self.program, path.value, function):
                    events.append((self.tree.order(call), "read", call))
            elif (removed := self._removed(call, function)) is not None and not private_to_process(self.tree, self.program, removed, function):
                events.append((self.tree.order(call), "remove", call))
        # saves from the training on: files written before it (preprocessed data) are waited for where they are
        # written (RankZeroGuards), once
        starts = self._training_starts(function)
        if not starts and self._called_after_training(function):
            starts = [self.tree.order(function)]  # `export_and_reload(model, ...)` after the training (helper corpus CM, repro 07): all its saves count
        if not starts:
            return
        events = [e for e in events if e[1] != "save" or e[0] >= min(starts)]
        events.sort(key=lambda e: e[0])
        saved: cst.Call | None = None
        read: cst.CSTNode | None = None  # the statement of a read waited for, or a read with no save before it
        read_from: set[str] | None = None  # what a read with no save before it names, when it names a path
        for _, kind, call in events:
            if kind == "save":
                saved, read = call, None
            elif kind == "read" and saved is not None:
                read = self._wait(saved, call, "rank 0 saved the files read here: wait until they are complete", f"which reads back what rank 0 saved at line {self.tree.line(saved)}")
                saved, read_from = None, None
            elif kind == "read" and not any(e[1] == "save" for e in events):
                # what a helper exported (`scripted.save(path)`) read back by another (helper corpus CS, script 08): removed after it
                path = s.arg(call, 0, "f") if self.tree.is_call_to(call, READS_BACK) else None
                read, read_from = call, (self._path_parts(path.value, function) if path is not None else None)
            elif kind == "remove" and read is not None:
                removed = self._removed(call, function)
                if read_from is not None and removed is not None and not read_from & self._path_parts(removed, function):
                    continue  # another file (a history rank 0 wrote), not what was read
                self._wait(read, call, "every rank read from here above: wait for them before rank 0 removes it", "as rank 0 removes what every rank read above")
                read = None

    def _wait(self, after: cst.CSTNode, call: cst.Call, comment: str, why: str) -> cst.BaseStatement | None:
        """A barrier before the statement holding `call` that every rank passing `after` reaches,
        unless one is planned between them; that statement, or None where there is none."""
        anchor = self._passed_after(after, call)
        if anchor is not None and not self._barrier_between(after, call):
            self.plan.insert_before(anchor, statements(f"dist.barrier()  # {comment}\n"))
            self.change(call, f"barrier before `{code(call.func)}(...)`, {why}")
        return anchor

    def _scripted_save(self, call: cst.Call, function: cst.FunctionDef | None) -> cst.Arg | None:
        """The path of `torch.jit.save(m, path)`, or of `.save(path)` on a scripted or traced model."""
        if self.tree.is_call_to(call, {"torch.jit.save"}):
            return s.arg(call, 1, "f")
        out = self.facts.outputs.of(call, function)
        found = s.method_call(call)
        if out is None or found is None or found[1] != "save" or not any(self.tree.is_call_to(o.node, s.SCRIPTED_EXPORTS) for o in self.program.origins(found[0], function)):
            return None
        return s.arg(call, 0, "f")

    def _passed_after(self, before: cst.CSTNode, call: cst.Call) -> cst.BaseStatement | None:
        """The statement holding `call` in the block that holds `before` (or an enclosing block of
        it), when every rank that passes `before` reaches it; None otherwise."""
        anchor = self.tree.statement(call)
        while not self.tree.inside(before, self.tree.block(anchor)):
            owner = next((a for a in self.tree.ancestors(anchor) if isinstance(a, cst.BaseCompoundStatement)), None)
            if owner is None or type(owner) in (cst.FunctionDef, cst.ClassDef):
                return None
            anchor = owner
        if self.tree.inside(before, anchor) or not self._after_in_its_block(before, anchor):
            return None
        return anchor

    def _barrier_between(self, first: cst.CSTNode, last: cst.CSTNode) -> bool:
        """A barrier planned (or written) after `first` and before `last`."""
        start, end = self.tree.order(first), self.tree.order(last)
        for planned in (self.plan.before, self.plan.after):
            for statement, lines in planned.items():
                if start < self.tree.order(statement) <= end and any("dist.barrier()" in code(line) for line in lines):
                    return True
        return any(self.tree.is_call_to(c, {"torch.distributed.barrier"}) and start < self.tree.order(c) < end for c in self.tree.calls())

    def _saved_in_lambdas(self, function: cst.FunctionDef | None) -> None:
        """`save = lambda: torch.save(model.state_dict(), path)`: the lambda reads the model of
        its scope when it is called, after the wrap; the plain model is saved there too. (Its call
        is rank 0's: Outputs.of follows the lambda.)"""
        seen: set[int] = set()
        for ref in sorted(self.facts.model_refs.get(function, ())):
            for node in self.program.lambda_calls(function, ref):
                if id(node) in seen:
                    continue
                seen.add(id(node))
                found = s.method_call(node)
                if found and found[1] == "state_dict" and code(found[0]) == ref:
                    # made before the wrap, it may be called before it too: the wrapper's module, or the plain model
                    plain = self.plain(ref, node) if self.facts.is_model(found[0], function) else f'getattr({ref}, "module", {ref})'
                    self.plan.replace(found[0], cst.parse_expression(plain))
                    self.change(node, f"`{ref}.state_dict` goes through `.module`: no `module.` prefix in the keys")
                elif self.tree.is_call_to(node, s.TORCH_SAVE):
                    self._save_plain_model(node, function)

    def _reads_from_training(self, read: cst.Call, function: cst.FunctionDef | None) -> bool:
        """Whether `read` comes after the training in `function` starts: a file read before it (a
        configuration, a vocabulary) is no output of rank 0's that a removal could race with."""
        starts = self._training_starts(function)
        return bool(starts) and self.tree.order(read) > min(starts)

    def _called_after_training(self, function: cst.FunctionDef | None) -> bool:
        """Whether every call of `function` comes after training starts in the function that
        makes it (a helper that exports and reloads the trained model), and there is one."""
        sites = self.program.call_sites(function) if function is not None else []
        return bool(sites) and all(
            (starts := self._training_starts(caller)) and min(starts) < self.tree.order(call) for call, caller in sites
        )  # fmt: skip

    def _training_starts(self, function: cst.FunctionDef | None) -> list[int]:
        """Where training happens in `function`, in tree order: its training loops, and its calls
        of same-file functions that train."""
        starts = [self.tree.order(lp.loop) for lp in self.facts.train_loops if lp.function is function]
        return starts + [
            self.tree.order(c) for c in self.program.calls_in(function)
            if (t := self.program.callee(c, function)) is not None and t[0] in self.program.training_functions
        ]  # fmt: skip

    def _removed_after_reading(self, removal: cst.Call, function: cst.FunctionDef | None, loads: list[cst.Call]) -> bool:
        """`shutil.rmtree(run_dir)` (rank 0's) after every rank loaded `run_dir/best.pt`: rank 0
        may remove it while another rank still reads it (FileNotFoundError). A barrier first, where
        every rank passes: in the block of the load, outside any loop the load is not in."""
        removed = self._removed(removal, function)
        if removed is None or private_to_process(self.tree, self.program, removed, function):
            return False
        loop = next((lp for lp in self.tree.loops(removal) if type(lp) is cst.For and code(lp.target) == code(removed)), None)
        if loop is not None:  # `for f in glob.glob(os.path.join("ckpts", "*.pth")): os.remove(f)`
            removed = loop.iter  # type: ignore[union-attr]
            while type(removed) is cst.Call and any(self.tree.is_builtin_call(removed, k) for k in ("sorted", "list", "reversed")) and removed.args:
                removed = removed.args[0].value  # `sorted(out.rglob("*.pt"))` (helper corpus BO, script 01)
            listed = s.method_call(removed)
            if listed is not None and listed[1] in ("iterdir", "glob", "rglob") and not self.tree.is_call_to(removed, {"glob.glob", "glob.iglob"}):
                removed = listed[0]  # `for f in WORK.iterdir(): f.unlink()`: the folder listed (helper corpus BJ, repro 03)
        parts = self._path_parts(removed, function)
        for load in loads:
            read = s.arg(load, 0, "f")
            site = self._read_at.get(id(load))
            scope = function
            if site is not None and read is not None:
                # `CheckpointIO.load_into("ck/e0.pt", model)`: the path its parameter is handed (helper corpus CE, repro 06);
                # a path the helper makes itself, in the helper (`path = max(glob.glob(...))`: CE, script 03)
                path, scope = self._read_path(load, site, function)
                read = cst.Arg(path)
            listing = self._listing(read.value, scope, load) if read is not None else None
            read_parts = (self._path_parts(read.value, scope) | (self._path_parts(listing.value, scope) if listing is not None else set())) if read is not None else set()
            read_parts |= {part for saved in self._kept_paths.get(id(load), []) for part in self._path_parts(saved, function)}
            if site is not None and scope is not function and scope is not None:
                # `os.path.join(out_dir, "m.pt")` in the helper: the folder its caller hands it (helper corpus CM, repro 07)
                handed = [self.program.argument_for(site, scope, p) for p in read_parts & set(self.program.param_names(scope))]
                read_parts |= {part for a in handed if a is not None for part in self._path_parts(a, function)}
            if not parts & read_parts and not self._returned_path(read, scope):
                continue
            statement = self.tree.statement(removal)
            block = self.tree.block(self.tree.statement(self._read_at.get(id(load), load)))
            if not self.tree.inside(statement, block):
                # a load in a branch of its own (`if args.load_best_at_end:`, helper corpus BS, repro 09): the barrier
                # goes before the removal, in its block, where every rank that loaded passes
                while block is not None and not self.tree.inside(statement, block):
                    owner = next((a for a in self.tree.ancestors(block) if isinstance(a, cst.BaseCompoundStatement)), None)  # the `if` or loop whose body it is
                    block = self.tree.block(owner) if owner is not None and type(owner) is not cst.FunctionDef else None
                if block is None:
                    continue
            while self.tree.block(statement) is not block:  # `if os.path.exists(p): os.remove(p)`, `for f in os.listdir(d): os.remove(...)`:
                statement = self.tree.statement(self.tree.parent(statement))  # type: ignore[arg-type]  # before the `if` or loop, which becomes rank 0's
            remover = "this node's first rank" if node_local(self.tree, self.program, removed, function) else "rank 0"
            self.plan.insert_before(statement, statements(f"dist.barrier()  # every rank read from here above: wait for them before {remover} removes it\n"))
            self.change(removal, f"barrier before `{code(removal.func)}(...)`: rank 0 removes what every rank loaded at line {self.tree.line(load)}")
            return True
        return False

    def _saved_and_returned(self, path: cst.BaseExpression, function: cst.FunctionDef | None, load: cst.Call) -> list[cst.Call]:
        """`best_path = Trainer(...).fit(2)`, whose `fit` saves to `best` (rank 0's save) and
        returns it, then `torch.load(best_path)`: the save the returned path names (helper
        corpus BF, repro 02)."""
        if type(path) is not cst.Name:
            return []
        bound = [v for v, i in self.program.assignments(function, path.value) if i is None and self.tree.order(v) < self.tree.order(load)]
        made = bound[-1] if bound else None
        target = self.program.callee(made, function) if type(made) is cst.Call else None
        if target is None or self.tree.loops(load):
            return []
        returned = {dotted(r) for r in self.program.returns(target[0])} - {None}
        return [
            save for save in self.program.calls_in(target[0])
            if self.tree.is_call_to(save, s.TORCH_SAVE) and (saved := s.arg(save, 1, "f")) is not None and dotted(saved.value) in returned
        ]  # fmt: skip

    def _removed(self, call: cst.Call, function: cst.FunctionDef | None) -> cst.BaseExpression | None:
        """What a call removes, as the output analysis reads its destination: `shutil.rmtree(path)`,
        `os.remove(path)`, or pathlib's `ckpt.unlink()` of a path (helper corpus BE, repro 03)."""
        out = self.facts.outputs.of(call, function)
        return out.destination if out is not None and self.facts.outputs.removes(call) else None

    def _path_parts(self, path: cst.BaseExpression, function: cst.FunctionDef | None) -> set[str]:
        """The variables and string literals a path is built from (`os.path.join("ckpt", name)`:
        `ckpt`, `name`, and what `name` is built from)."""
        def literals(expr: cst.CSTNode) -> set[str]:
            found = {part for n in self.tree.walk(expr) if type(n) is cst.SimpleString and (value := string_value(n)) for part in value.split("/")}
            # `f"ck/e{epoch}.pt"`: the folders before the last slash of each literal piece (`ck`)
            found |= {part for n in self.tree.walk(expr) if type(n) is cst.FormattedStringText for part in n.value.split("/")[:-1]}
            return found - {"", "."}

        if type(path) is cst.Name:  # `ckpt` of `ckpt.unlink()`: the name itself (not the method read off it), and what it is made from
            values = [value for value, _ in self.program.assignments(function, path.value)]
            return {path.value} | {part for value in values for part in literals(value) | self._path_names(value, function, 1)}  # type: ignore[arg-type]
        root = (dotted(path) or "").split(".")[0] if type(path) is cst.Attribute else ""  # `ckpt.root`, `ckpt.best`: one manager's paths
        names = self._path_names(path, function)
        # `os.path.join(output_dir, "best.pth")` with `output_dir = "runs/exp1"`: also `runs`, which `shutil.rmtree("runs")` removes (helper corpus BN, repro 07)
        folders = {part for name in names if "." not in name for value, _ in self.program.assignments(function, name) for part in literals(value)}
        return literals(path) | names | folders | ({root} if root and root != "self" else set())

    def _read_after_write(self, call: cst.Call, function: cst.FunctionDef | None, written: dict[str, cst.Call], waited: set[str]) -> None:
        """`open("config.json", "w")` (rank 0's), then `open("config.json")` to read it on every
        rank: the others must wait for rank 0 to finish writing (a barrier before the first read)."""
        if self.facts.in_dataset(function):
            return
        path, writes = self._file_access(call, function)
        if path is None or private_to_process(self.tree, self.program, path, function):
            return
        spelled = code(path)
        if writes:
            written.setdefault(spelled, call)
            waited.discard(spelled)
            self._read_earlier_in_the_loop(call, spelled, waited)
            return
        self._reads.setdefault(spelled, []).append(call)
        # in the same loop as the write, or after the loops it is in (a log appended to each epoch, read back after
        # the epochs to pick the best: helper corpus CP, repro 05)
        if spelled not in written or spelled in waited or not self.tree.in_loops_of(call, written[spelled]):
            return
        if self._prepared(written[spelled]):
            return  # data made when missing: its barrier follows the preparation
        statement = self.tree.statement(call)
        if not self._after_in_its_block(written[spelled], call):
            return  # `if not exists: write ... else: read`: a barrier in one branch would hang the ranks in the other
        waited.add(spelled)
        if self._barrier_between(written[spelled], statement):
            return  # one already planned since the write (after files written before training, before a load here)
        self.plan.insert_before(statement, statements("dist.barrier()  # rank 0 wrote this file: wait until it is complete\n"))
        self.change(call, f"barrier before reading {spelled} back: rank 0 writes it, every rank reads it")

    def _read_earlier_in_the_loop(self, write: cst.Call, spelled: str, waited: set[str]) -> None:
        """`if key in load_done(RESULTS): continue` at the top of a trial loop, `with open(RESULTS,
        "a")` (rank 0's) at its bottom: from the second trial on, the read follows the write, and
        rank 1 read the file before rank 0 appended, so the ranks skipped different trials and
        hung (helper corpus BK, repro 04). A barrier before the read, where every rank passes."""
        loops = self.tree.loops(write)
        for read in self._reads.get(spelled, []):
            if not loops or self.tree.order(read) > self.tree.order(write) or self.tree.loops(read) != loops:
                continue
            statement = self.tree.statement(read)
            if self.tree.block(statement) is not loops[0].body or self._prepared(write) or spelled in waited:
                continue
            waited.add(spelled)
            self.plan.insert_before(statement, statements("dist.barrier()  # rank 0 wrote this file in the last pass: wait until it is complete\n"))
            self.change(read, f"barrier before reading {spelled} back: rank 0 writes it later in the loop, every rank reads it in the next pass")
            return

    def _file_access(self, call: cst.Call, function: cst.FunctionDef | None, depth: int = 1) -> tuple[cst.BaseExpression | None, bool]:
        """The path a call opens, and whether it writes it: `open(p)`, `open(p, "w")`,
        `Path(p).read_text()`, `Path(p).write_text(...)`, or a same-file helper that opens the path
        it is handed (`cfg = load_config(path)`)."""
        if self.tree.is_builtin_call(call, "open"):
            path = s.arg(call, 0, "file")
            return (path.value if path is not None else None), self.tree.opens_for_writing(call)
        if self.tree.is_call_to(call, TABLE_READS | TABLE_WRITES) and call.args:  # `pd.read_csv(log)` after the epochs (helper corpus CS, repro 07)
            return call.args[0].value, self.tree.is_call_to(call, TABLE_WRITES)
        found = s.method_call(call)
        if found is not None and found[1] in FRAME_WRITES and call.args and call.args[0].keyword is None:
            return call.args[0].value, True  # `pd.DataFrame(rows).to_csv(path, index=False)`
        if found is not None and found[1] in PATH_READS | PATH_WRITES and type(found[0]) is cst.Call and (self.tree.qname(found[0].func) or "").startswith("pathlib.") and found[0].args:
            return found[0].args[0].value, found[1] in PATH_WRITES
        if found is not None and found[1] == "open" and type(found[0]) in (cst.Name, cst.Attribute) and self.facts.outputs.is_path(found[0], function):
            return found[0], s.writing_mode(s.arg(call, 0, "mode"))  # `log_path.open()`, `log_path.open("a")` on a pathlib path
        target = self.program.callee(call, function) if depth > 0 else None
        if target is None or self.program.owner_class(target[0]) is not None:
            return None, False
        params = set(self.program.param_names(target[0]))
        for inner in self.program.calls_in(target[0]):
            path, writes = self._file_access(inner, target[0], depth - 1)
            if not writes and type(path) is cst.Name and path.value in params:
                argument = self.program.argument_for(call, target[0], path.value)
                return argument, False
        return None, False

    def _prepared(self, write: cst.CSTNode) -> bool:
        """A write in a statement that prepares data files (on rank 0, a barrier after it)."""
        return any(self.tree.inside(write, statement) for statement in self.facts.preparation)

    def _after_in_its_block(self, write: cst.CSTNode, read: cst.CSTNode) -> bool:
        """The write lies inside the block that holds the read, or that holds the `if` the read is
        under when every rank takes that `if` alike (`if val_ds is not None:` on a parameter: helper
        corpus BK, repro 02): every rank that gets past the write (or the branch around it) reaches
        a barrier put right before the read."""
        statement = self.tree.statement(read)
        while not self.tree.inside(write, self.tree.block(statement)):
            parent = self.tree.parent(self.tree.parent(statement))  # the block, then the `if` (or `else`) it belongs to
            if type(parent) is cst.Else:
                parent = self.tree.parent(parent)
            if type(parent) is cst.For and parent.orelse is None and self._walked_alike(parent.iter, self.tree.function(parent)):
                statement = parent  # `for fold in range(n_folds):` reloading each fold's best (helper corpus CF, repro 02)
                continue
            if type(parent) is not cst.If or not self._alike_on_every_rank(parent.test, self.tree.function(parent)):
                return False
            statement = parent
        return True

    def _owner_if(self, statement: cst.CSTNode) -> cst.CSTNode | None:
        """The `if` whose body (or `else`) holds `statement`, if that is what holds it."""
        parent = self.tree.parent(self.tree.parent(statement))
        return self.tree.parent(parent) if type(parent) is cst.Else else parent

    def _walked_alike(self, iterated: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """`range(n_folds)` or a name or literal every rank holds alike: a loop each rank runs as often."""
        if self.tree.is_builtin_call(iterated, "range"):
            return all(self._alike_on_every_rank(a.value, function) for a in iterated.args)  # type: ignore[attr-defined]
        return self._alike_on_every_rank(iterated, function)

    def _alike_on_every_rank(self, test: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 1) -> bool:
        """A test that reads only what every rank was handed alike: parameters the function never
        rebinds and module globals, compared with constants; no call (a file's existence, a clock)
        and no rank."""
        if any(type(n) in (cst.Call, cst.Lambda, cst.NamedExpr) for n in self.tree.walk(test)):
            return False
        for n in s.read_names(test) or []:
            if n.value in RANK_NAMES:
                return False
            if n.value in ("True", "False", "None"):
                continue
            if function is not None and n.value in self.program.all_param_names(function):
                if self.program.assignments(function, n.value) or n.value in self.program.loop_targets(function):
                    return False
                continue
            if function is not None and self.program.binds(function, n.value):
                if self.program.parsed_options(n.value, function):
                    continue  # `if args.restore_best:` on `args = parser.parse_args()` (helper corpus BO, script 01)
                if depth == 0 or not self._optional_alike(n.value, function, depth - 1):
                    return False
                continue
            if not self.program.assignments(None, n.value) or self.program.global_writers(n.value):
                return False
        return True

    def _optional_alike(self, name: str, function: cst.FunctionDef, depth: int) -> bool:
        """`val_loader = DataLoader(val_ds, ...) if val_ds is not None else None`: whether it is
        None is decided by a test every rank takes alike (helper corpus BK, script 10)."""
        values = [v for v, i in self.program.assignments(function, name) if i is None]
        if not values or len(values) != len(self.program.assignments(function, name)) or name in self.program.loop_targets(function):
            return False
        made = lambda v: type(v) is cst.Call or (type(v) is cst.Name and v.value == "None")  # noqa: E731
        return all(type(v) is cst.IfExp and made(v.body) and made(v.orelse) and self._alike_on_every_rank(v.test, function, depth) for v in values)

    def _same_place(self, saved: cst.BaseExpression, loaded: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """The save may have written what the load reads: the same path, or paths built from the
        same folder name (`os.path.join(run_dir, ...)` saved as `path + ".tmp"` and renamed)."""
        if code(saved) == code(loaded):
            return True
        if type(saved) is cst.FormattedString and type(loaded) is cst.SimpleString and (text := string_value(loaded)) is not None:
            # `torch.save(..., f"peer{k}.pt")` in a loop, then `torch.load("peer0.pt")` (helper corpus BC, repro 03)
            pattern = "".join(re.escape(p.value) if type(p) is cst.FormattedStringText else ".*" for p in saved.parts)
            if re.fullmatch(pattern, text):
                return True
        return bool(self._path_names(saved, function) & self._path_names(loaded, function))

    def _path_names(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, depth: int = 2) -> set[str]:
        """The variables a path is built from, through their assignments (`path` ->
        `os.path.join(run_dir, name)` -> `run_dir`, `name`), less modules and loop counters."""
        names = set()
        for n in self.tree.walk(expr):
            if type(n) is not cst.Name or self.tree.qname(n) is not None:
                continue  # a module or an imported function
            parent = self.tree.parent(n)
            if isinstance(parent, cst.Attribute) and parent.attr is n:
                continue
            top: cst.CSTNode = n
            while type(parent) is cst.Attribute and parent.value is top:  # `args.cache`, not `args`: another option is another file
                called = self.tree.parent(parent)
                if type(called) is cst.Call and called.func is parent:
                    break  # `CKPT.iterdir()`: the folder `CKPT`, not a method read off it (helper corpus CM, repro 04)
                top, parent = parent, called
            if top is not n:
                names.add(s.dotted(top) or n.value)
                continue
            names.add(n.value)
            if depth > 0:
                for value, _ in self.program.assignments(function, n.value):
                    names |= self._path_names(value, function, depth - 1)
        return names - self.program.loop_targets(function)

    def _save_plain_model(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        """`torch.save(model, path)`, `torch.save({"model": model}, path)`: the plain model is
        pickled, never the DDP wrapper (which would not load without a process group)."""
        saved = s.arg(call, 0, "obj")
        if saved is None:
            return
        roots: list[cst.CSTNode] = [saved.value]
        if isinstance(saved.value, cst.Name):  # `state = {"net": net, "acc": acc}; torch.save(state, path)`
            roots += [o.node for o in self.program.origins(saved.value, function) if isinstance(o.node, cst.Dict) and o.function is function]
        for node in (n for root in roots for n in self.tree.walk(root)):
            if isinstance(node, (cst.Name, cst.Attribute)) and self.facts.is_model(node, function):
                parent = self.tree.parent(node)
                if isinstance(parent, cst.Attribute) and parent.value is node:
                    continue  # model.state_dict(), model.module: handled where they are
                ref = code(node)
                self.plan.replace(node, cst.parse_expression(self.plain(ref, node)))
                self.change(node, f"`{ref}` is saved as the plain model (`{ref}.module`), not its DDP wrapper")

    def _export_plain_model(self, call: cst.Call, function: cst.FunctionDef | None) -> None:
        """`torch.jit.trace(model, x)`, `torch.jit.script(model)`, `torch.export.export(model,
        ...)`, `torch.onnx.export(model, ...)`: the plain model is exported. The wrapper fails to
        trace (its forward broadcasts buffers through the process group; scripting refuses its
        `*inputs`), and what does export carries `module.` in every name."""
        first = s.arg(call, 0, None) or next((a for a in call.args if a.keyword is not None and a.keyword.value in EXPORTED_KEYWORDS), None)
        exported = first.value if first is not None else None  # `quantize_dynamic(model=net, ...)`
        exported = s.unchained(exported) if exported is not None else None  # `torch.jit.script(model.eval())`: eval() returns the wrapper
        if exported is None or not isinstance(exported, (cst.Name, cst.Attribute)) or not self.facts.is_model(exported, function):
            return
        ref = code(exported)
        self.plan.replace(exported, cst.parse_expression(self.plain(ref, exported)))
        self.change(call, f"`{code(call.func)}(...)` exports the plain model (`{self.plain(ref, exported)}`), not its DDP wrapper")

    def _in_model_list(self, node: cst.BaseExpression) -> bool:
        """`nets[1]`, or `m` of `for k, m in enumerate(models):` (or of a comprehension over
        them): an element of a list whose models were wrapped one by one."""
        listed = {model.ref for model in self.facts.models if model.element is not None}
        if isinstance(node, cst.Subscript):
            return s.dotted(node.value) in listed
        if type(node) is not cst.Name:
            return False
        for ancestor in self.tree.ancestors(node):
            loop = ancestor if type(ancestor) is cst.For else ancestor.for_in if type(ancestor) in (cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.SetComp) else None
            if loop is None or node.value not in {n.value for n in self.tree.walk(loop.target) if type(n) is cst.Name}:  # type: ignore[union-attr]
                continue
            iterated = self.program.unwrap_iterable(loop.iter)  # type: ignore[union-attr]  # `enumerate(models)`
            return s.dotted(iterated) in listed or (
                type(iterated) is cst.Call and self.tree.is_builtin_call(iterated, "zip") and any(s.dotted(a.value) in listed for a in iterated.args)
            )
        return False

    def _load_alias(self, call: cst.Call, function: cst.FunctionDef | None) -> cst.BaseExpression | None:
        """What a name called as torch.load holds: `load = torch.load`, or `load =
        functools.partial(torch.load, map_location=device)` (helper corpus CK, script 02), bound
        once in the scope or the module."""
        if type(call.func) is not cst.Name:
            return None
        held, _ = self.program.bound_where_read(call.func.value, function)
        loads = self.program.partial_of(held) or held
        return held if isinstance(loads, cst.BaseExpression) and self.tree.qname(loads) in s.TORCH_LOAD else None  # type: ignore[return-value]

    def _load(self, call: cst.Call, function: cst.FunctionDef | None, saves: list[cst.Call]) -> None:
        held = self._load_alias(call, function)
        if s.arg(call, 1, "map_location") is None and not (type(held) is cst.Call and s.arg(held, None, "map_location") is not None):
            location = self.device(function, call) or FALLBACK
            self.plan.replace(call, add_keyword("map_location", location))
            self.change(call, f"torch.load maps tensors to {location}, not to the GPU they were saved from")
        argument = s.arg(call, 0, "f")
        opened = self._opened(argument.value, function, call) if argument is not None else None
        path = s.arg(opened, 0, "file") if opened is not None else argument  # `with open(p, "rb") as f: torch.load(f)`
        listing = self._listing(path.value, function, call) if path is not None else None
        written = [
            save for save in saves
            if (p := s.arg(save, 1, "f")) is not None and path is not None and (
                self._same_place(self._saved_path(save, p.value, function), path.value, function)
                or (listing is not None and self._path_parts(self._saved_path(save, p.value, function), function) & self._path_parts(listing.value, function))
            )
        ]  # fmt: skip
        kept_in = self._kept_saves(path.value, call, saves) if path is not None and not written else None
        if kept_in is not None:
            written = kept_in[1]
            self._kept_paths[id(call)] = [s.arg(save, 1, "f").value for save in written]  # type: ignore[union-attr]
        if written and path is not None and private_to_process(self.tree, self.program, path.value, function):
            written = []  # a temporary file of this process: each rank saved its own copy
        written = [save for save in written if not self._prepared(save)]
        if written and not any(self._after_in_its_block(save, opened or call) for save in written):
            # `if os.path.exists(best): load` apart from the save: a barrier only some ranks reach hangs
            self.warn(call, f"{code(path.value)} is read back where not every rank may get (a branch apart from its save): wait for rank 0's save (dist.barrier()) where every rank passes")  # type: ignore[union-attr]
            written = []
        if not written and path is not None and not saves and not private_to_process(self.tree, self.program, path.value, function):
            written = self._saved_elsewhere(call, path.value, function) or self._saved_and_returned(path.value, function, call)
        if not written and listing is not None and not private_to_process(self.tree, self.program, path.value, function):  # type: ignore[union-attr]
            written = self._saved_by_helpers_before(listing, function)
        if written:
            statement = self.tree.statement(opened if opened is not None else call)  # before the file is opened
            if kept_in is not None and type(kept_in[0]) is cst.For:
                statement = kept_in[0]  # `for p in recent: torch.load(p)`: once, before the loop
            if listing is not None and any(self.tree.order(save) < self.tree.order(listing) for save in written):
                statement = self.tree.statement(listing)  # before the folder is listed: the newest checkpoint is the same on every rank
            writer = "this node's first rank" if node_local(self.tree, self.program, path.value, function) else "rank 0"  # type: ignore[union-attr]
            if writer == "rank 0" and (option := node_local_default(self.tree, self.program, path.value)) is not None:  # type: ignore[union-attr]
                self.warn(call, (  # helper corpus CH, repro 03 and script 01
                    f"`{option[0]}` defaults to the node's temp folder (`{code(option[1])}`): rank 0 saves there and every rank reads "
                    "it back, so on more than one node the other nodes' ranks find no file; pass a folder every node shares"
                ))
            last = max(written, key=self.tree.order)
            if self.tree.function(last) is not function or not self._barrier_between(last, statement):  # one after the last save here serves every read after it
                self.plan.insert_before(statement, statements(f"dist.barrier()  # {writer} wrote this file: wait until it is complete\n"))
                self.change(call, f"barrier before reading {code(path.value)} back: rank 0 saves it, every rank loads it")
        elif (
            path is not None and not saves and not private_to_process(self.tree, self.program, path.value, function)
            and (trainer := self._trained_and_saved_before(call, function)) is not None
        ):
            statement = self.tree.statement(opened if opened is not None else call)
            while self.tree.loops(statement) and not any(self.tree.inside(trainer, loop) for loop in self.tree.loops(statement)):
                statement = self.tree.statement(self.tree.parent(statement))  # type: ignore[arg-type]  # `for d in dirs: torch.load(...)`: before the loop
            while not self._after_in_its_block(trainer, statement) and type(owner := self._owner_if(statement)) is cst.If:
                statement = owner  # `if os.path.exists(p): load`: before the `if`, which each rank takes its own way
            if self._after_in_its_block(trainer, statement):  # where every rank that trained gets
                self.plan.insert_before(statement, statements("dist.barrier()  # rank 0 saved in the training above: wait until it is done\n"))
                self.change(call, f"barrier before reading {code(path.value)}: `{code(trainer.func)}(...)` (line {self.tree.line(trainer)}) trains and saves on rank 0 first")
        elif (
            path is not None and (helper := self._handed_the_model_before(call, function)) is not None and not self.tree.loops(call)
            and not private_to_process(self.tree, self.program, path.value, function)  # each rank wrote its own (helper corpus CO, repro 01)
        ):
            statement = self.tree.statement(opened if opened is not None else call)  # before the file is opened
            self.plan.insert_before(statement, statements("dist.barrier()  # a helper handed the model may have written this file: wait until every rank is done\n"))
            self.change(call, (
                f"barrier before reading {code(path.value)}: `{code(helper.func)}(...)` {self.origin_of(helper, self.tree.function(helper))}, handed the model "
                f"(line {self.tree.line(helper)}), may have written it"
            ))

    def _listing(self, path: cst.BaseExpression, function: cst.FunctionDef | None, at: cst.CSTNode, depth: int = 1) -> cst.Assign | None:
        """`last = sorted(glob.glob(os.path.join("ckpts", "ep*.pth")))[-1]` before `torch.load(last)`:
        the assignment that picks the file from a listing of a folder (helper corpus BB, repro 06),
        also through a name the listing is bound to first (`ckpts = glob.glob("ckpts/*.pt")`, then
        `best = min(ckpts, key=...)`: helper corpus CI, repro 05), and through a path joined from
        such a pick (`torch.load(os.path.join(CKPT, best))`: CK, repro 06)."""
        if type(path) is not cst.Name:
            names = [n for n in self.tree.walk(path) if type(n) is cst.Name] if type(path) in (cst.Call, cst.BinaryOperation, cst.FormattedString) else []
            return next((found for n in names if (found := self._listing(n, function, at, depth))), None)
        bound = [v for v, i in self.program.assignments(function, path.value) if i is None and self.tree.order(v) < self.tree.order(at)]
        if len(bound) != 1:
            return None
        parent = self.tree.parent(bound[0])
        if any(self._lists_a_folder(c, function) for c in self.tree.calls(bound[0])):
            return parent if type(parent) is cst.Assign else None
        if depth == 0:
            return None
        return next((found for n in self.tree.walk(bound[0]) if type(n) is cst.Name and n.value != path.value and (found := self._listing(n, function, bound[0], depth - 1))), None)

    def _lists_a_folder(self, call: cst.Call, function: cst.FunctionDef | None, depth: int = 1) -> bool:
        """`glob.glob(...)`, `os.listdir(...)`, `root.glob(...)`, or a same-file function that
        does (`ck = latest(root)`: helper corpus CB, repro 06, where the barrier came after the
        pick and rank 1 loaded an older checkpoint)."""
        if self.tree.is_call_to(call, FOLDER_LISTINGS) or ((m := s.method_call(call)) is not None and m[1] in ("glob", "rglob", "iterdir")):
            return True
        target = self.program.callee(call, function)
        return depth > 0 and target is not None and any(self._lists_a_folder(c, target[0], depth - 1) for c in self.program.calls_in(target[0]))

    def _opened(self, expr: cst.BaseExpression, function: cst.FunctionDef | None, at: cst.CSTNode) -> cst.Call | None:
        """The `open(...)` a file object used at `at` comes from: the `with open(path, "rb") as f`
        around it, or `f = open(path)`."""
        if type(expr) is not cst.Name:
            return None
        for ancestor in self.tree.ancestors(at):
            if type(ancestor) is cst.With:
                for item in ancestor.items:
                    if item.asname is not None and code(item.asname.name) == expr.value:
                        return item.item if type(item.item) is cst.Call and self.tree.is_builtin_call(item.item, "open") else None
        for value, _ in self.program.assignments(function, expr.value):
            if type(value) is cst.Call and self.tree.is_builtin_call(value, "open"):
                return value
        return None

    def _saved_path(self, save: cst.Call, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> cst.BaseExpression:
        """The path a save writes: through the file object it is handed (`torch.save(model, f)`)."""
        opened = self._opened(expr, function, save)
        path = s.arg(opened, 0, "file") if opened is not None else None
        return path.value if path is not None else expr

    def _saved_elsewhere(self, call: cst.Call, path: cst.BaseExpression, function: cst.FunctionDef | None) -> list[cst.Call]:
        """Saves in other same-file functions that write the file names the load reads (a
        Trainer's checkpoint callback writes `best.pt`, main() loads it after `fit()`), when the
        load is one every rank reaches: straight in the body of a function that trains (through
        the functions it calls), outside any loop or branch."""
        names = self._file_names(path, function)
        if not names or self.tree.loops(call) or (function is not None and function not in self.program.training_functions):
            return []
        block = self.tree.block(self.tree.statement(call))
        main_block = self.facts.entry.block if function is None and self.facts.entry.kind == "main-block" else None
        if block is not (function.body if function is not None else self.tree.module) and block is not main_block:
            return []  # (the `if __name__ == "__main__":` block runs straight through: helper corpus BS, repro 07)
        found, unknown = [], []
        for other in self.program.all_functions:
            if other is function or self.facts.in_dataset(other):
                continue
            for save in self.program.calls_in(other):
                if self.tree.is_call_to(save, s.TORCH_SAVE):
                    saved = s.arg(save, 1, "f")
                else:  # `shutil.copyfile(filename, best)`: MoCo's save_checkpoint (helper corpus BB, repro 05)
                    saved = s.arg(save, 1, "dst") if self.tree.is_call_to(save, FILE_COPIES) else None
                if saved is None:
                    continue
                written = self._file_names(self._saved_path(save, saved.value, other), other)
                if names & written:
                    found.append(save)
                elif not written:
                    unknown.append(save)
        if not found and unknown:
            # a path handed through objects (a checkpoint callback's path, given to the trainer):
            # the save counts when a same-file object or function handed the model here makes it
            reach = self._handed_here(call, function)
            found = [save for save in unknown if self.tree.function(save) in reach]
        return found

    def _handed_here(self, call: cst.Call, function: cst.FunctionDef | None) -> set[cst.FunctionDef]:
        """The same-file functions run by the calls before `call` in `function` that are handed
        the model (`Trainer(model, ...)` and its methods), and those they call."""
        at = self.tree.order(call)
        roots: set[cst.FunctionDef] = set()
        for other in self.program.calls_in(function):
            if self.tree.order(other) >= at or not any(self.facts.is_model(a.value, function) for a in other.args):
                continue
            if type(other.func) is cst.Name and other.func.value in self.program.classes:
                roots |= set(self.program.class_methods(self.program.classes[other.func.value]).values())
            elif (target := self.program.callee(other, function)) is not None:
                roots.add(target[0])
        return self.program.called_from(roots) if roots else set()

    def _file_names(self, path: cst.BaseExpression, function: cst.FunctionDef | None) -> set[str]:
        """The file names written as literals in a path, through where it comes from
        (`os.path.join(out, "best.pt")`, a parameter given `"best.pt"`): `{"best.pt"}`."""
        names = set()
        held: list[cst.CSTNode] = []
        if type(path) is cst.Attribute and type(path.value) is cst.Name:  # `ckpt.best`, `self.best`: what the class binds it to
            cls = self.program.owner_class(function) if path.value.value == "self" else self.program.instance_of(path.value, function)
            held = [v for m in (self.program.class_methods(cls).values() if cls is not None else ()) for v, _ in self.program.assignments(m, f"self.{path.attr.value}")]
        for node in [path, *(o.node for o in self.program.resolve(path, function)), *held]:
            for inner in self.tree.walk(node):
                value = string_value(inner) if type(inner) is cst.SimpleString else None
                name = value.rsplit("/", 1)[-1] if value else ""
                if "." in name.strip("."):
                    names.add(name)
        return names

    def _kept_saves(self, path: cst.BaseExpression, call: cst.Call, saves: list[cst.Call]) -> tuple[cst.CSTNode, list[cst.Call]] | None:
        """`torch.save(..., path)` then `recent.append(path)` in the epoch loop, and after it
        `[torch.load(p) for p in recent]` (the last checkpoints averaged: helper corpus CB, repro
        03): the loop or comprehension walking the list, and the saves whose paths it keeps."""
        if type(path) is cst.Subscript and type(path.value) is cst.Name:
            # `torch.load(recent[-1])`: the newest path the list keeps (helper corpus CB, script 02)
            found = self._saves_kept_in(path.value.value, call, saves)
            return (self.tree.statement(call), found) if found else None
        if type(path) is not cst.Name:
            return None
        for walker in self.tree.ancestors(call):
            fors = [walker] if type(walker) is cst.For else [f for f in self.tree.walk(walker) if type(f) is cst.CompFor] if type(walker) in COMPREHENSIONS else []
            for loop in fors:
                targets = [loop.target] if type(loop.target) is cst.Name else [e.value for e in getattr(loop.target, "elements", [])]
                if not any(type(n) is cst.Name and n.value == path.value for n in targets) or type(loop.iter) is not cst.Name:
                    continue  # `for p in recent`, or `for _, p in top` over (score, path) pairs
                found = self._saves_kept_in(loop.iter.value, call, saves)
                return (walker, found) if found else None
        return None

    def _saved_by_helpers_before(self, listing: cst.Assign, function: cst.FunctionDef | None) -> list[cst.Call]:
        """`mgr.save(model, step)` in the epoch loop, a same-file method saving with torch.save,
        then `latest = mgr.latest()` listing the folder and `torch.load(latest)` (helper corpus CB,
        script 09: rank 1 picked an older checkpoint and the replicas parted): the helpers' saves,
        when a call of one comes before the listing where every rank passes it."""
        found = []
        for site in self.program.calls_in(function):
            if self.tree.order(site) >= self.tree.order(listing) or (target := self.program.callee(site, function)) is None or target[0] is function:
                continue
            inner = [c for c in self.program.calls_in(target[0]) if self.tree.is_call_to(c, s.TORCH_SAVE)]
            if inner and self._after_in_its_block(site, listing.value) and type(listing.value) is cst.Call:  # type: ignore[arg-type]
                found += inner
        return found

    def _saves_kept_in(self, listed: str, call: cst.Call, saves: list[cst.Call]) -> list[cst.Call]:
        """The saves whose path `listed.append(path)` keeps, in the function of `call`."""
        kept: set[str | None] = set()
        for c in self.program.calls_in(self.tree.function(call)):
            if (m := s.method_call(c)) is not None and m[1] == "append" and dotted(m[0]) == listed and c.args:
                item = c.args[0].value
            elif self.tree.is_call_to(c, {"heapq.heappush"}) and len(c.args) == 2 and dotted(c.args[0].value) == listed:
                item = c.args[1].value  # `heapq.heappush(top, (score, path))`: the best K kept (helper corpus CE, repro 03)
            else:
                continue
            kept |= {dotted(e.value) for e in item.elements} if type(item) is cst.Tuple else {dotted(item)}
        # not data files written before training (`parts.append(path)` of preprocessed parts): a barrier follows their loop already
        first = min((self.tree.order(lp.loop) for lp in self.facts.train_loops if lp.function is self.tree.function(call)), default=None)
        return [
            save for save in saves
            if (f := s.arg(save, 1, "f")) is not None and dotted(f.value) in kept and (first is None or self.tree.order(save) > first)
        ]  # fmt: skip

    def _loads_in_helper(self, call: cst.Call, function: cst.FunctionDef | None) -> list[cst.Call]:
        """The torch.load calls of a same-file function that `call` runs and that trains nothing
        (`net = load_best(net)`, whose body reads `best.pth` back)."""
        target = self.program.callee(call, function)
        if target is None:
            # `restore_best = lambda m: m.load_state_dict(torch.load(BEST))` (helper corpus CE, repro 07)
            bodies = [f.body for f in self.program.lambdas_called(call, function)]
            return [c for body in bodies for c in self.tree.calls(body) if self.tree.is_call_to(c, READS_BACK) and s.arg(c, 0, "f") is not None]
        if target is None or target[0] is function or target[0] in self.program.training_functions or self.facts.in_dataset(target[0]):
            return []
        return [c for c in self.program.calls_in(target[0]) if self.tree.is_call_to(c, READS_BACK) and s.arg(c, 0, "f") is not None]  # also torch.jit.load (helper corpus CM, repro 07)

    def _load_through_helper(self, call: cst.Call, function: cst.FunctionDef | None, saves: list[cst.Call], read: list[cst.Call]) -> None:
        """`torch.save(net.state_dict(), os.path.join(WORK, "best.pth"))` (rank 0's) in the epoch
        loop, then `net = load_best(net)`, which loads that file: the barrier goes before the call,
        where every rank passes (helper corpus CB, repro 07: rank 1 found no file)."""
        paths = [self._read_path(load, call, function) for load in read]
        names = {name for path, scope in paths for name in self._file_names(path, scope)}
        spelled = {code(path) for path, scope in paths if scope is function}  # `read_ckpt(f"{OUT}/f{fold}.bin")`: no literal name, the same spelling
        copies = [c for c in self.program.calls_in(function) if self.tree.is_call_to(c, FILE_COPIES) and self.tree.order(c) < self.tree.order(call)]
        written = [
            save for save in [*saves, *copies]
            if (p := s.arg(save, 1, "f" if save in saves else "dst")) is not None
            and (names & self._file_names(self._saved_path(save, p.value, function), function) or code(p.value) in spelled)
            and self._after_in_its_block(save, call) and not private_to_process(self.tree, self.program, p.value, function)
        ]  # fmt: skip  # `shutil.copyfile(ck, BEST)` writes the best too (helper corpus CE, script 08)
        if written and all(type(lp) is cst.For for lp in self.tree.loops(call)):  # a fold loop (CG, script 07): every rank passes each time
            self.plan.insert_before(self.tree.statement(call), statements("dist.barrier()  # rank 0 wrote the file this reads back: wait until it is complete\n"))
            self.change(call, f"barrier before `{code(call.func)}(...)`, which reads back what rank 0 saved at line {self.tree.line(written[-1])}")
        elif (
            not saves and not self.tree.loops(call) and (trainer := self._trained_and_saved_before(call, function)) is not None
            and not all(private_to_process(self.tree, self.program, path, scope) for path, scope in paths)  # each rank saved its own (CP, script 04)
            and (self._same_object(trainer, call) or self._reads_what_it_saved(trainer, function, call, read)) and self._after_in_its_block(trainer, call)
        ):
            # `exp.fit()` saves `self.best` on rank 0, then `exp.restore_best()` loads it (helper corpus CB, repro 04)
            self.plan.insert_before(self.tree.statement(call), statements("dist.barrier()  # rank 0 saved in the training above: wait until it is done\n"))
            self.change(call, f"barrier before `{code(call.func)}(...)`, which reads back what `{code(trainer.func)}(...)` (line {self.tree.line(trainer)}) saved on rank 0")

    def _read_path(self, load: cst.Call, call: cst.Call, function: cst.FunctionDef | None) -> tuple[cst.BaseExpression, cst.FunctionDef | None]:
        """The path a helper's load reads, and the scope it is spelled in: for a lambda's
        parameter, what the call hands it (`read_ckpt = lambda p: torch.load(p)`, then
        `read_ckpt("out/best.bin")`: helper corpus CG, repro 02)."""
        path = s.arg(load, 0, "f").value  # type: ignore[union-attr]
        lam = next((a for a in self.tree.ancestors(load) if type(a) is cst.Lambda), None)
        helper = self.program.callee(call, function) if lam is None else None
        if helper is not None and type(path) is cst.Name and path.value in self.program.param_names(helper[0]):
            # `def read_ckpt(p): return torch.load(p)`, called `read_ckpt("out/best.bin")`
            handed = self.program.argument_for(call, helper[0], path.value)
            return (handed, function) if handed is not None else (path, helper[0])
        if lam is not None and type(path) is cst.Name:
            params = [p.name.value for p in lam.params.params]
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            keyword = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            if path.value in params:
                index = params.index(path.value)
                handed = keyword.get(path.value, positional[index] if index < len(positional) else None)
                if handed is not None:
                    return handed, function
        return path, self.tree.function(load)

    def _returned_path(self, read: cst.Arg | None, function: cst.FunctionDef | None) -> bool:
        """`best_path = trainer.fit(3)`, then `torch.load(best_path)`: a path a same-file function
        returns, which may be in any folder it wrote (helper corpus BF, script 09)."""
        if read is None or type(read.value) is not cst.Name:
            return False
        values = [v for v, _ in self.program.assignments(function, read.value.value)]
        return bool(values) and all(type(v) is cst.Call and self.program.callee(v, function) is not None for v in values)

    def _reads_what_it_saved(self, trainer: cst.Call, function: cst.FunctionDef | None, call: cst.Call, read: list[cst.Call]) -> bool:
        """`stage(model, opt, loader, device)` saves into `CKPT_DIR` (rank 0's), then
        `resume_latest(model, device)` loads the newest file of `CKPT_DIR` (helper corpus CE,
        script 03): the helper's path and the trainer's saves share a folder or name."""
        target = self.program.callee(trainer, function)
        if target is None:
            return False
        saved = {part for c, scope in self._saves_of(target[0]) if (p := s.arg(c, 1, "f")) is not None for part in self._path_parts(p.value, scope)}
        for load in read:
            path, scope = self._read_path(load, call, function)
            listing = self._listing(path, scope, load)
            if saved & (self._path_parts(path, scope) | (self._path_parts(listing.value, scope) if listing is not None else set())):
                return True
        return False

    def _same_object(self, one: cst.Call, other: cst.Call) -> bool:
        """Both calls are methods of one object (`exp.fit()`, `exp.restore_best()`)."""
        return type(one.func) is cst.Attribute and type(other.func) is cst.Attribute and dotted(one.func.value) is not None and dotted(one.func.value) == dotted(other.func.value)

    def _removed_through_helper(self, call: cst.Call, function: cst.FunctionDef | None, loads: list[cst.Call]) -> bool:
        """`exp.close()`, a same-file method removing the run folder (rank 0's), after
        `exp.restore_best()` loaded from it on every rank: a barrier before the call, when a load
        sits in its block (helper corpus CB, repro 04: rank 0 removed what rank 1 read)."""
        target = self.program.callee(call, function)
        if target is None or target[0] is function or target[0] in self.program.training_functions:
            return False
        if not any(self._removed(c, target[0]) is not None for c in self.program.calls_in(target[0])):
            return False
        statement = self.tree.statement(call)
        # any load before it in its block, straight or through a helper (`trainer.cleanup()` after `torch.load(trainer.out_dir / "last.pt")`:
        # helper corpus BW, repro 05; the removed folder is named inside the method, where the load's path cannot be matched)
        sites = [self._read_at.get(id(load), load) for load in loads]
        site = next((sc for sc in reversed(sites) if self.tree.block(self.tree.statement(sc)) is self.tree.block(statement)), None)
        if site is None:
            return False
        self.plan.insert_before(statement, statements("dist.barrier()  # every rank read from here above: wait for them before rank 0 removes it\n"))
        self.change(call, f"barrier before `{code(call.func)}(...)`: rank 0 removes files there, and every rank loaded at line {self.tree.line(site)}")
        return True

    def _trained_and_saved_before(self, call: cst.Call, function: cst.FunctionDef | None) -> cst.Call | None:
        """The last call before `call`, in its function, of a same-file function that trains and
        saves with torch.save, rank 0's (`dirs = [Experiment(lr).run(ds) for lr in grid]`, then
        `torch.load(os.path.join(d, "model.pt"))`: helper corpus BK, repro 01); in a loop around
        `call` too, where both sit straight in one block. Asked only where the path read names no
        save of this function that `_load` could match; the caller checks that every rank that
        passes the call reaches the barrier (`_after_in_its_block`)."""
        found = None
        for other in self.program.calls_in(function):
            if self.tree.order(other) < self.tree.order(call) and self._saves_in_training(other, function):
                found = other
        if found is not None and any(self.tree.inside(found, lp) for lp in self.tree.loops(call)):
            # trained and loaded in one loop (a fold loop: `trainer.fit(...)`, then `torch.load(f"fold{fold}.pt")`,
            # helper corpus CF, repro 01): only where both run straight in the same block, as every rank passes it
            if self.tree.block(self.tree.statement(found)) is not self.tree.block(self.tree.statement(call)):
                return None
        return found

    def _saves_in_training(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        target = self.program.callee(call, function)
        if target is None or target[0] not in self.program.training_functions:
            return False
        return bool(self._saves_of(target[0]))

    def _saves_of(self, function: cst.FunctionDef, depth: int = 1) -> list[tuple[cst.Call, cst.FunctionDef]]:
        """The torch.save calls `function` makes, also through the same-file functions it calls
        (`save_rotating(model, step)` in a stage: helper corpus CE, script 03), with their scope."""
        found = []
        for c in self.program.calls_in(function):
            if self.tree.is_call_to(c, s.TORCH_SAVE):
                found.append((c, function))
            elif depth > 0 and (target := self.program.callee(c, function)) is not None and target[0] is not function:
                found += self._saves_of(target[0], depth - 1)
        return found

    def _handed_the_model_before(self, call: cst.Call, function: cst.FunctionDef | None) -> cst.Call | None:
        """A call of another module's function, handed the model, earlier in this function (a
        checkpointing helper such as EarlyStopping, which saves the file this load reads)."""
        at = self.tree.order(call)
        for other in self.program.calls_in(function):
            if self.tree.order(other) >= at or self.program.callee(other, function) is not None or (self.tree.qname(other.func) or "").startswith(("torch.", "builtins.")):
                continue
            if any(self.facts.is_model(a.value, function) for a in other.args):
                return other
        return None

