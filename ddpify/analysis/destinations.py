"""Where a write goes: destinations that belong to one process, which every rank may write."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from ddpify import syntax as s
from ddpify.program import Program
from ddpify.syntax import Tree, dotted, string_value

IN_MEMORY = {"io.BytesIO", "io.StringIO"}
# A machine's own temporary folder: the ranks of one node share it, other nodes have theirs.
NODE_TEMP = {"tempfile.gettempdir", "tempfile.gettempdirb", "tempfile.tempdir"}
NODE_LOCAL_FOLDERS = ("/tmp/", "/dev/shm/", "/var/tmp/", "/scratch/local/")


def private_to_process(tree: Tree, program: Program, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
    """A buffer in memory, a temporary file or directory made for this process (`tempfile.mkdtemp()`,
    `TemporaryDirectory()`, also through a path joined onto one; not `tempfile.gettempdir()`, the
    node's folder, which its ranks share), or os.devnull: each process has its own, so a write
    there by every rank is no duplicate, and a rank reads back only what it wrote itself."""

    def private(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call:
            return tree.qname(node.func) == "os.getpid"  # `f"stop_{os.getpid()}"`: named for this process (helper corpus CS, repro 08)
        if type(node) is not cst.Name and type(node) is not cst.Attribute:
            return False
        name = tree.qname(node)
        return name is not None and (name in IN_MEMORY or (name.startswith("tempfile.") and name not in NODE_TEMP) or name == "os.devnull")

    return _derives(tree, program, expr, function, private)


def node_local(tree: Tree, program: Program, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
    """A path in the machine's own temporary folder (`tempfile.gettempdir()`, `"/tmp/data"`,
    `$TMPDIR`), also through a path joined onto one: each node has its own, which the ranks on
    that node share. Files prepared there once are prepared once per node."""

    def local(node: cst.CSTNode) -> bool:
        if type(node) is cst.Name or type(node) is cst.Attribute:
            return tree.qname(node) in NODE_TEMP
        if type(node) is cst.SimpleString:
            text = string_value(node)
            return text is not None and (text == "TMPDIR" or (text.rstrip("/") + "/").startswith(NODE_LOCAL_FOLDERS))
        if type(node) is cst.FormattedString and node.parts and type(node.parts[0]) is cst.FormattedStringText:
            return node.parts[0].value.startswith(NODE_LOCAL_FOLDERS)
        return False

    return _derives(tree, program, expr, function, local)


def _derives(tree: Tree, program: Program, expr: cst.BaseExpression, function: cst.FunctionDef | None, test: Callable[[cst.CSTNode], bool], depth: int = 3) -> bool:
    """Whether `expr` holds a node `test` accepts, or reads a name whose value does (`depth` assignments back)."""
    if any(test(node) for node in tree.walk(expr)):
        return True
    if depth == 0:
        return False
    for node in tree.walk(expr):
        if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
            # `self.path`: what the class's methods bind to it (`self.path = path` in `__init__`), below; or its class
            # body (`folder = os.path.join(tempfile.gettempdir(), f"stop_{os.getpid()}")`: helper corpus CS, repro 08)
            cls = program.owner_class(function) if function is not None else None
            if cls is not None and any(_derives(tree, program, value, None, test, depth - 1) for value in _class_defaults(cls, node.attr.value)):
                return True
        elif type(node) is cst.Attribute and isinstance(node.value, (cst.Name, cst.Attribute)) and (cls := program.instance_of(node.value, function)) is not None:
            # `stopper.path` of a same-file class's object: what its methods bind to `self.path` (helper
            # corpus CO, repro 01); `self.cfg.workdir`, of the object `__init__` keeps (CP, script 04)
            held = f"self.{node.attr.value}"
            if any(_derives(tree, program, program.element(value, i), method, test, depth - 1) for method in program.methods.get(cls, {}).values() for value, i in program.assignments(method, held)):
                return True
            if any(_derives(tree, program, value, None, test, depth - 1) for value in _class_defaults(cls, node.attr.value)):
                return True  # a dataclass field, `workdir: str = field(default_factory=tempfile.mkdtemp)` (helper corpus CP, repro 01)
            continue
        elif type(node) is cst.Attribute and (dotted(node) or "").startswith("self."):
            pass  # `self.a.b` of no known class: where the name itself is bound, as before
        elif type(node) is cst.Call:
            pass  # `self.ckpt_path("best")`: what the same-file function returns (helper corpus CP, script 04)
        elif type(node) is cst.Name:
            parent = tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue
        else:
            continue
        for origin in program.origins(node, function):
            if origin.node is not node and _derives(tree, program, origin.node, origin.function, test, depth - 1):
                return True
    return False


def _class_defaults(cls: cst.ClassDef, name: str) -> list[cst.BaseExpression]:
    """What the class body binds `name` to (`workdir: str = field(default_factory=...)`)."""
    found: list[cst.BaseExpression] = []
    for statement in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if type(small) is cst.AnnAssign and type(small.target) is cst.Name and small.target.value == name and small.value is not None:
                found.append(small.value)
            elif type(small) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == name for t in small.targets):
                found.append(small.value)
    return found


def node_local_default(tree: Tree, program: Program, expr: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """The command-line option `expr` reads whose default is in the node's temp folder
    (`--out` with `default=os.path.join(tempfile.gettempdir(), "run")`, read as `args.out`), and
    that default: what the ranks of one node share, unless the user passes another folder."""
    defaults = {}
    for call in tree.calls():
        found = s.method_call(call)
        if found is None or found[1] != "add_argument" or not call.args or (flag := string_value(call.args[0].value)) is None:
            continue
        dest = s.arg(call, None, "dest")
        name = string_value(dest.value) if dest is not None else flag.lstrip("-").replace("-", "_")
        default = s.arg(call, None, "default")
        if name and default is not None:
            defaults[name] = (flag, default.value)
    for node in tree.walk(expr):
        if type(node) is cst.Attribute and type(node.value) is cst.Name and (held := defaults.get(node.attr.value)) is not None:
            if node_local(tree, program, held[1], None):
                return held
    return None
