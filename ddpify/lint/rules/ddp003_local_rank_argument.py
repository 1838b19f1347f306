"""DDP003 local-rank-argument."""

from __future__ import annotations

import libcst as cst

from ddpify import syntax as s
from ddpify.edit import Plan, statements
from ddpify.lint.rule import Rule
from ddpify.lint.rules._setup_and_data import ensure_import, env_var, quote_of
from ddpify.syntax import code, dotted, method_call, string_value

OPTIONS = {"--local_rank", "--local-rank"}
LAUNCH = "torch.distributed.launch"
PARSE_METHODS = {"parse_args", "parse_known_args", "parse_intermixed_args"}


class LocalRankArgument(Rule):
    """## What it does
    Flags an argparse option `--local_rank` / `--local-rank`, and code that runs the
    deprecated `torch.distributed.launch` launcher (an import of it, or its module name
    handed to a subprocess).

    An option whose default already reads `LOCAL_RANK` from the environment
    (`default=int(os.environ.get("LOCAL_RANK", 0))`) is not flagged: it is right under
    `torchrun`.

    ## Why is this bad?
    `torchrun` (and `torch.distributed.launch` since PyTorch 2.0, unless `--use-env`) no
    longer passes the local rank as `--local_rank=N`: `torchrun` only sets the `LOCAL_RANK`
    environment variable, and the old launcher passes `--local-rank=N`, with a hyphen. A
    script that reads the rank from `--local_rank` either crashes with `unrecognized
    arguments: --local-rank=0`, or keeps the option's default on every rank, so every
    process picks GPU 0 and they all train on the same device.

    ## Example
    ```python
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    ```

    ## Use instead
    ```python
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
    torch.cuda.set_device(local_rank)
    ```
    and launch with `torchrun --nproc_per_node=N train.py`.

    ## Fix safety
    Safe: the `add_argument` statement goes, and the reads of `args.local_rank` read
    `int(os.environ.get("LOCAL_RANK", <the option's default>))` instead (through a
    `local_rank` variable set right after `parse_args()` when they all follow it in one
    function), which is what `torchrun` provides and keeps the option's default when the
    script runs without a launcher. No fix
    when the script assigns `args.local_rank` itself, and a `torch.distributed.launch` use is
    reported but not fixed: replace the launch command with `torchrun`.

    ## References
    - [torchrun: transitioning from torch.distributed.launch](https://pytorch.org/docs/stable/elastic/run.html#transitioning-from-torch-distributed-launch-to-torchrun)
    - [torch.distributed.launch deprecation](https://pytorch.org/docs/stable/distributed.html#launch-utility)
    - [huggingface/transformers#13850](https://github.com/huggingface/transformers/issues/13850): `--local_rank` and the newer launchers
    - [huggingface/pytorch-image-models#1728](https://github.com/huggingface/pytorch-image-models/issues/1728): `error: unrecognized arguments: --local-rank=0`
    """

    code = "DDP003"
    name = "local-rank-argument"
    fix = "safe"

    def visit_Call(self, node: cst.Call) -> None:
        option = self._option(node)
        if option is not None:
            self.report(
                node,
                f"`{option}` option: torchrun sets only the LOCAL_RANK environment variable; read `int(os.environ[\"LOCAL_RANK\"])` instead",
                fix=lambda plan: self._read_environment(plan, node),
            )

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        # `subprocess.run([sys.executable, "-m", "torch.distributed.launch", ...])`; a docstring is no use
        if string_value(node) == LAUNCH and not isinstance(self.tree.parent(node), cst.Expr):
            self.report(node, "runs the deprecated `torch.distributed.launch`: launch with `torchrun` and read LOCAL_RANK from the environment")

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if (dotted(alias.name) or "") == LAUNCH:
                self.report(node, "imports the deprecated `torch.distributed.launch`: launch with `torchrun` and read LOCAL_RANK from the environment")

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None else None
        names = [] if isinstance(node.names, cst.ImportStar) else [dotted(a.name) for a in node.names]
        if module == LAUNCH or (module == "torch.distributed" and "launch" in names):
            self.report(node, "imports the deprecated `torch.distributed.launch`: launch with `torchrun` and read LOCAL_RANK from the environment")

    def _option(self, call: cst.Call) -> str | None:
        found = method_call(call)
        if found is None or found[1] != "add_argument":
            return None
        names = [string_value(a.value) for a in call.args if a.keyword is None]
        option = next((n for n in names if n in OPTIONS), None)
        if option is None:
            return None
        default = s.arg(call, None, "default")
        if default is not None and any(env_var(self.tree, n) == "LOCAL_RANK" for n in self.tree.walk(default.value)):
            return None
        return option

    # --- fix ---------------------------------------------------------------------------

    def _read_environment(self, plan: Plan, call: cst.Call) -> str | None:
        statement = self.tree.statement(call)
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr)):
            return None
        if self.tree.parent(call) is not statement.body[0]:
            return None  # the call is part of something bigger
        default = s.arg(call, None, "default")
        dest = s.arg(call, None, "dest")
        attribute = string_value(dest.value) if dest is not None else "local_rank"
        if attribute is None:
            return None
        reads, writes = self._accesses(attribute)
        if writes:
            return None  # the script sets `args.local_rank` itself: which value a read sees is its business
        plan.remove(statement)
        if reads:
            ensure_import(plan, self.tree, "os")
        parsed = self._parse_statement(reads)
        if parsed is not None:  # one `local_rank = ...` after `args = parser.parse_args()`
            plan.insert_after(parsed, statements("local_rank = " + _env_read(default, '"') + "\n"))
            for read in reads:
                plan.replace(read, cst.Name("local_rank"))
        else:
            for read in reads:
                plan.replace(read, cst.parse_expression(_env_read(default, quote_of(read, self.tree))))
        return "--local_rank option removed; the local rank is read from LOCAL_RANK"

    def _parse_statement(self, reads: list[cst.Attribute]) -> cst.SimpleStatementLine | None:
        """`args = parser.parse_args()`, when every read follows it in the same function and
        that function has no `local_rank` of its own."""
        if not reads:
            return None
        function = self.tree.function(reads[0])
        name = reads[0].value
        assert isinstance(name, cst.Name)
        if any(self.tree.function(r) is not function or code(r.value) != name.value for r in reads):
            return None
        if self.program.binds(function, "local_rank") or (function is None and self.program.binds(None, "local_rank")):
            return None
        assigned = [v for v, i in self.program.assignments(function, name.value) if i is None]
        if len(assigned) != 1 or not (m := method_call(assigned[0])) or m[1] not in PARSE_METHODS:
            return None
        statement = self.tree.statement(assigned[0])
        if not isinstance(statement, cst.SimpleStatementLine) or self.tree.function(statement) is not function:
            return None
        end = self.tree.positions[statement].end
        if any((self.tree.line(r), self.tree.column(r)) <= (end.line, end.column) for r in reads):
            return None
        if any(not self.tree.inside(r, self.tree.block(statement)) for r in reads):
            return None
        return statement

    def _accesses(self, attribute: str) -> tuple[list[cst.Attribute], list[cst.Attribute]]:
        """`args.local_rank` reads and writes, on names that hold parsed arguments."""
        reads, writes = [], []
        for node in self.tree.walk():
            if not (isinstance(node, cst.Attribute) and node.attr.value == attribute and isinstance(node.value, cst.Name)):
                continue
            if not self._holds_arguments(node.value):
                continue
            parent = self.tree.parent(node)
            target = (
                (isinstance(parent, cst.AssignTarget) and parent.target is node)
                or (isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is node)
            )
            (writes if target else reads).append(node)
        return reads, writes

    def _holds_arguments(self, name: cst.Name) -> bool:
        function = self.tree.function(name)
        for origin in self.program.origins(name, function):
            node = origin.node
            if isinstance(node, cst.Subscript):  # parse_known_args()[0]
                node = node.value
            found = method_call(node)
            if found is not None and found[1] in PARSE_METHODS:
                return True
        return name.value in {"args", "opt", "opts", "flags", "cfg", "config"}


def _env_read(default: cst.Arg | None, quote: str) -> str:
    if default is None:
        return f"int(os.environ[{quote}LOCAL_RANK{quote}])"
    return f"int(os.environ.get({quote}LOCAL_RANK{quote}, {code(default.value)}))"
