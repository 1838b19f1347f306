"""Dataset downloads and data preparation happen once: rank 0 does them, the other ranks wait,
then every rank reads.

`datasets.MNIST(root, download=True, ...)` on every rank at once would have each rank write the
same files. Rank 0 first builds the dataset with the download arguments alone (no transforms),
then a barrier lets the others through to the unchanged statement, which finds the files there.
"""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.analysis.destinations import node_local
from ddpify.convert.transforms.base import Transform
from ddpify.edit import statements
from ddpify.syntax import code

# Arguments that shape the samples, not the files: left out of rank 0's download.
SAMPLE_ARGUMENTS = {"transform", "target_transform", "transforms"}


class Downloads(Transform):
    name = "download"
    DESCRIPTION = "download=True datasets: rank 0 downloads first, a barrier, then every rank reads"

    def run(self) -> None:
        for statement in self.facts.preparation:
            self._prepare_once(statement)
        for call in self.facts.prepared_calls:
            self._call_first_on_one_rank(call)
        done: set[cst.CSTNode] = set(self.facts.preparation)
        for call in self.tree.calls():
            download = s.arg(call, None, "download")
            if download is None or _is_false(download.value):
                continue
            statement = self.tree.statement(call)
            function = self.tree.function(call)
            if statement in done or self._inside_loop(statement):
                continue
            if self.facts.in_dataset(function):
                # Dataset code runs wherever the dataset is built (and in loader workers): a
                # barrier there would hang; its builder's own `download=True` call is guarded
                if isinstance(download.value, cst.Name) and download.value.value == "True":
                    self.warn(call, "this Dataset downloads whenever it is built: build it once on rank 0 before the other ranks do (a barrier between), or every rank writes the same files")
                continue
            done.add(statement)
            args = [_plain_arg(a) for a in call.args if a.keyword is None or a.keyword.value not in SAMPLE_ARGUMENTS]
            download_call = code(cst.Call(func=call.func, args=args))
            if self._node_local(statement, function):
                condition = f"{self.facts.local_rank_expr(function, statement)} == 0"
                once, who = "once per node (its own temp folder)", "each node's first rank downloads the data to its temp folder"
            else:
                condition, once, who = self.is_main_process(function), "once", "rank 0 downloads the data"
            self.plan.insert_before(
                statement,
                statements(
                    f"if {condition}:  # download {once}, before the other ranks read the files\n"
                    f"    {download_call}\n"
                    "dist.barrier()\n"
                ),
            )
            self.change(call, f"{who} first; the other ranks wait at a barrier, then read it")

    def _prepare_once(self, statement: cst.BaseStatement) -> None:
        """`download_and_unzip(...)`, `create_csvs(...)`: rank 0 prepares the files, the others wait."""
        function = self.facts.entry.function
        condition = self.is_main_process(function)
        helper = any(self.program.callee(c, function) is not None for c in self.tree.calls(statement))
        once, what = ("rank 0 prepared the data files", "data files are") if helper else ("rank 0 made the files that were missing", "files made when missing are")
        if self._node_local(statement, function):
            # the machine's own temp folder: every node needs the files, its first rank makes them
            condition, once = f"{self.facts.local_rank_expr(function, statement)} == 0", "each node's first rank prepared its data files"
        if isinstance(statement, cst.If) and statement.orelse is None:
            self.plan.replace(statement, lambda updated: updated.with_changes(
                test=cst.BooleanOperation(left=cst.parse_expression(condition), operator=cst.And(), right=_parenthesized(updated.test))
            ))
        else:
            self.plan.guard(statement, condition)
        self.plan.insert_after(statement, statements(f"dist.barrier()  # {once}: wait for them\n"))
        if once.startswith("each node"):
            self.change(statement, "data files in the machine's temp folder are prepared once per node, by its first rank (LOCAL_RANK 0); the other ranks wait at a barrier, then read them")
        else:
            self.change(statement, f"{what} prepared once, on rank 0; the other ranks wait at a barrier, then read them")

    def _call_first_on_one_rank(self, call: cst.Call) -> None:
        """`data = np.load(download_or_prepare(root))`: every rank needs the value, so every rank
        still calls the helper, after rank 0 called it first and made the files it finds there."""
        function = self.facts.entry.function
        statement = self.tree.statement(call)
        who, condition = "rank 0", self.is_main_process(function, statement)
        if self._node_local(statement, function):
            who, condition = "each node's first rank", f"{self.facts.local_rank_expr(function, statement)} == 0"
        self.plan.insert_before(statement, statements(
            f"if {condition}:  # makes the data files when they are missing: once, before the other ranks look\n"
            f"    {code(call)}\n"
            "dist.barrier()\n"
        ))
        self.change(call, f"`{code(call.func)}(...)` makes the data files it finds missing: {who} calls it first, the other ranks wait at a barrier, then call it to find them there")

    def _node_local(self, statement: cst.BaseStatement, function: cst.FunctionDef | None) -> bool:
        """The files go to the machine's own temp folder (`tempfile.gettempdir()`, `/tmp/...`):
        rank 0's files would exist on its node only."""
        return any(node_local(self.tree, self.program, arg.value, function) for call in self.tree.calls(statement) for arg in call.args)

    def _inside_loop(self, statement: cst.CSTNode) -> bool:
        return bool(self.tree.loops(statement))


def _is_false(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value in {"False", "None"}


def _parenthesized(test: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(test, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)) and not (
        isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)
    ):
        return test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return test


def _plain_arg(arg: cst.Arg) -> cst.Arg:
    """The argument laid out on one line, the way a new short statement holds it."""
    if arg.keyword is not None:
        return cst.Arg(value=arg.value, keyword=arg.keyword, equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    return cst.Arg(value=arg.value, star=arg.star)
