"""The edit plan: what the transforms decided, applied to the tree in one pass.

Transforms never mutate the tree. Each one reads the facts and records edits keyed by
nodes of the *original* tree (replace a node, insert statements around a statement, remove
a statement, put a statement under a rank-0 guard, add an import) plus a one-line reason
for the report. `apply()` then rebuilds the tree bottom-up in a single pass over the paths
from the edited nodes to the module (the rest is kept as parsed), so edits to a node and to
its statement compose (a `torch.save(model.state_dict())` rewritten inside and guarded
outside); then the imports the edits asked for are added (and unused ones dropped) as
LibCST's `AddImportsVisitor` and `RemoveImportsVisitor` would.
"""

from __future__ import annotations

import re

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import libcst as cst

from ddpify.edit.imports import add_imports, drop_unused_imports
from ddpify.edit.rebuild import PathRebuilder, dirty_paths
from ddpify.edit.render import render
from ddpify.syntax import Tree

BLANK = cst.EmptyLine(indent=False)
Replacement = Callable[[cst.CSTNode], cst.CSTNode]
Block = cst.IndentedBlock | cst.Module


@dataclass(frozen=True)
class Group:
    """Adjacent statements with equal keys are rebuilt together into one compound statement."""

    key: object
    build: Callable[[list[cst.BaseStatement]], cst.BaseCompoundStatement]


@dataclass(frozen=True)
class Note:
    """One line of the report: a change made, or a warning about something left alone."""

    line: int
    kind: Literal["change", "warning"]
    topic: str
    message: str

    def render(self, path: str) -> str:
        if self.kind == "warning":
            return f"{path}:{self.line}: warning {self.message}"
        return f"{path}:{self.line}: {self.topic}: {self.message}"


@dataclass
class Plan:
    tree: Tree
    replacements: dict[cst.CSTNode, list[Replacement]] = field(default_factory=dict)
    before: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    after: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    removed: set[cst.CSTNode] = field(default_factory=set)
    groups: dict[cst.CSTNode, Group] = field(default_factory=dict)
    prepended: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    appended: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    imports: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    unused_imports: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    separated: set[cst.CSTNode] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)  # setup names (rank, world_size) the edits refer to
    # the totals reduced over ranks right after a training loop, by id of the loop: the same on every rank from there
    reduced: dict[int, set[str]] = field(default_factory=dict)

    # --- report ----------------------------------------------------------------------

    def change(self, node: cst.CSTNode, topic: str, message: str) -> None:
        self.notes.append(Note(self.tree.line(node), "change", topic, _one_line(message)))

    def warn(self, node: cst.CSTNode | None, message: str) -> None:
        line = self.tree.line(node) if node is not None else 1
        self.notes.append(Note(line, "warning", "", _one_line(message)))

    @property
    def has_edits(self) -> bool:
        return any(
            (self.replacements, self.before, self.after, self.removed, self.groups, self.prepended, self.appended)
        )

    # --- edits -----------------------------------------------------------------------

    def replace(self, node: cst.CSTNode, new: cst.CSTNode | Replacement) -> None:
        """Replace `node`; a callable receives the node with its children already edited."""
        fn = new if callable(new) else (lambda _updated, _new=new: _new)
        self.replacements.setdefault(node, []).append(fn)

    def insert_before(self, statement: cst.CSTNode, statements: Sequence[cst.BaseStatement]) -> None:
        self.before.setdefault(statement, []).extend(statements)

    def insert_after(self, statement: cst.CSTNode, statements: Sequence[cst.BaseStatement]) -> None:
        self.after.setdefault(statement, []).extend(statements)

    def remove(self, statement: cst.CSTNode) -> None:
        self.removed.add(statement)

    def guard(self, statement: cst.CSTNode, condition: str) -> None:
        """Run `statement` only when `condition` holds (adjacent guards merge into one `if`)."""
        self.groups[statement] = Group(("if", condition), _if_builder(condition))

    def wrap(self, statements: Sequence[cst.CSTNode], build: Callable[[list[cst.BaseStatement]], cst.BaseCompoundStatement]) -> None:
        """Put adjacent statements of one block into the compound statement `build` makes."""
        group = Group(object(), build)
        for statement in statements:
            self.groups[statement] = group

    def prepend(self, block: Block, statements: Sequence[cst.BaseStatement], separate: bool = False) -> None:
        """Put statements at the top of a block (after a docstring); `separate` adds a blank line after them."""
        self.prepended.setdefault(block, []).extend(statements)
        if separate:
            self.separated.add(block)

    def append(self, block: Block, statements: Sequence[cst.BaseStatement]) -> None:
        self.appended.setdefault(block, []).extend(statements)

    def add_import(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        if (module, obj, asname) not in self.imports:
            self.imports.append((module, obj, asname))

    def drop_import_if_unused(self, module: str, obj: str | None = None, asname: str | None = None) -> None:
        self.unused_imports.append((module, obj, asname))

    # --- apply -----------------------------------------------------------------------

    def apply(self) -> cst.Module:
        module = self.tree.module.visit(_Applier(self))
        assert isinstance(module, cst.Module)
        if self.imports:
            module = add_imports(module, self.imports)
        if self.unused_imports:
            module = drop_unused_imports(module, self.unused_imports)
        return module

    def output(self, source: str) -> str:
        """The edited script's text (`source` is the text of the tree the plan edits). A script
        whose lines all end in CRLF keeps them: also inside text ddpify inserts (a helper's
        multi-line docstring, which LibCST writes as it was parsed)."""
        text = render(self.apply(), self.tree, source)
        if "\r\n" in source and source.count("\n") == source.count("\r\n") and text.count("\n") != text.count("\r\n"):
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        return text

    def edited_code(self, node: cst.CSTNode) -> str:
        """The code of `node` with the replacements planned inside it so far (`model.greedy_decode`
        made `model.module.greedy_decode`): for an expression moved elsewhere whole."""
        plan = self

        class _Inside(cst.CSTTransformer):
            def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def, override]
                if original_node is node:
                    return updated_node
                for fn in plan.replacements.get(original_node, ()):
                    updated_node = fn(updated_node)
                return updated_node

        return cst.Module([]).code_for_node(node.visit(_Inside()))

    def _edited(self) -> set[cst.CSTNode]:
        """The nodes whose subtrees `apply()` rebuilds: edited nodes, blocks gaining statements,
        statements gaining neighbours, being removed or grouped."""
        return {
            *self.replacements,
            *self.prepended,
            *self.appended,
            *self.before,
            *self.after,
            *self.removed,
            *self.groups,
        }


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _blank_lines(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    return [line for line in lines if line.comment is None]


class _Applier(PathRebuilder):
    def __init__(self, plan: Plan) -> None:
        super().__init__(dirty_paths(plan._edited(), plan.tree.parent))
        self.plan = plan

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        if original_node not in self.dirty:
            return updated_node
        updated = updated_node
        for fn in self.plan.replacements.get(original_node, ()):
            updated = fn(updated)
        if isinstance(original_node, (cst.IndentedBlock, cst.Module)):
            updated = self._rebuild(original_node, updated)
        return updated

    def _rebuild(self, original: Block, updated: Block) -> Block:
        plan = self.plan
        touched = (
            original in plan.prepended
            or original in plan.appended
            or any(
                s in plan.before or s in plan.after or s in plan.removed or s in plan.groups or _split_at(plan, s)
                for s in original.body
            )
        )
        if not touched:
            return updated
        body: list[cst.BaseStatement] = []
        pending: list[cst.BaseStatement] = []
        pending_group: Group | None = None
        carried_blank: list[cst.EmptyLine] = []

        def flush() -> None:
            nonlocal pending, pending_group
            if pending and pending_group is not None:
                first = pending[0]
                inner = [first.with_changes(leading_lines=[]), *(_unindented_blanks(s) for s in pending[1:])]
                built = pending_group.build(inner)  # its own comment lines follow the statement's
                body.append(built.with_changes(leading_lines=[*first.leading_lines, *built.leading_lines]))
            pending, pending_group = [], None

        def emit(statements: Sequence[cst.BaseStatement]) -> None:
            flush()
            body.extend(statements)

        pairs = list(zip(original.body, updated.body))
        prepended = plan.prepended.get(original, [])
        start = 1 if pairs and _is_docstring(pairs[0][0]) else 0
        for index, (orig, upd) in enumerate(pairs):
            if index == start and prepended:
                emit(prepended)
                if original in plan.separated and not _blank_lines(upd.leading_lines):
                    upd = upd.with_changes(leading_lines=[BLANK, *upd.leading_lines])
            if carried_blank and not getattr(upd, "leading_lines", ()):
                upd = upd.with_changes(leading_lines=carried_blank)
            carried_blank = []
            inserted = plan.before.get(orig, [])
            if inserted:
                # the statement's comments and blank lines now introduce the inserted code
                first = inserted[0].with_changes(leading_lines=[*upd.leading_lines, *inserted[0].leading_lines])
                emit([first, *inserted[1:]])
                upd = upd.with_changes(leading_lines=[])
            if orig in plan.removed:
                carried_blank = _blank_lines(upd.leading_lines)
            elif orig in plan.groups:
                group = plan.groups[orig]
                if pending and pending_group is not None and (pending_group.key != group.key or (_is_guard(group) and _heads_a_section(upd))):
                    flush()  # a blank line or comment above a statement starts the user's next section: a new guard
                pending.append(upd)
                pending_group = group
            elif _split_at(plan, orig):
                emit(_split(plan, orig, upd))  # type: ignore[arg-type]
            else:
                emit([upd])
            if plan.after.get(orig):
                emit(plan.after[orig])
        if not pairs and prepended:
            emit(prepended)
        flush()
        body.extend(plan.appended.get(original, []))
        if not body:
            body = [cst.SimpleStatementLine([cst.Pass()])]
        return updated.with_changes(body=_one_barrier(body))


def _one_barrier(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """A barrier right after another waits for nothing more: two edits that each wait for rank 0's
    files (written before training, then read back) leave one, with the first one's comment."""
    kept: list[cst.BaseStatement] = []
    for statement in body:
        if kept and _is_barrier(statement) and _is_barrier(kept[-1]) and not any(line.comment for line in statement.leading_lines):
            continue
        kept.append(statement)
    return kept


def _is_barrier(statement: cst.BaseStatement) -> bool:
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or type(statement.body[0]) is not cst.Expr:
        return False
    call = statement.body[0].value
    return type(call) is cst.Call and not call.args and cst.Module([]).code_for_node(call.func) == "dist.barrier"


def _split_at(plan: Plan, statement: cst.CSTNode) -> bool:
    """`opt.zero_grad(); loss.backward(); opt.step()` with code to insert before `opt.step()`."""
    return type(statement) is cst.SimpleStatementLine and any(small in plan.before for small in statement.body[1:])


def _split(plan: Plan, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """The line cut before each small statement with code inserted before it: the parts on lines
    of their own, the inserted code between them (the line's comments stay on its first part)."""
    parts: list[list[cst.BaseSmallStatement]] = [[]]
    inserted: list[list[cst.BaseStatement]] = []
    for orig, upd in zip(original.body, updated.body):
        if parts[-1] and orig in plan.before:
            inserted.append(plan.before[orig])
            parts.append([])
        parts[-1].append(upd)
    out: list[cst.BaseStatement] = []
    for index, part in enumerate(parts):
        last = part[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        line = cst.SimpleStatementLine(body=[*part[:-1], last])
        if index == 0:
            line = line.with_changes(leading_lines=updated.leading_lines)
        if index == len(parts) - 1:
            line = line.with_changes(trailing_whitespace=updated.trailing_whitespace)
        out.append(line)
        if index < len(inserted):
            out.extend(inserted[index])
    return out


def _is_guard(group: Group) -> bool:
    return isinstance(group.key, tuple) and group.key[0] == "if"


def _heads_a_section(statement: cst.BaseStatement) -> bool:
    return bool(getattr(statement, "leading_lines", ()))


def _unindented_blanks(statement: cst.BaseStatement) -> cst.BaseStatement:
    """Blank lines inside a new block stay empty (no indentation, no trailing spaces)."""
    lines = getattr(statement, "leading_lines", ())
    if not any(line.comment is None for line in lines):
        return statement
    fixed = [line.with_changes(indent=False, whitespace=cst.SimpleWhitespace("")) if line.comment is None else line for line in lines]
    return statement.with_changes(leading_lines=fixed)


def _if_builder(condition: str) -> Callable[[list[cst.BaseStatement]], cst.If]:
    def build(statements: list[cst.BaseStatement]) -> cst.If:
        return cst.If(test=cst.parse_expression(condition), body=cst.IndentedBlock(body=statements))

    return build


def _one_line(message: str) -> str:
    """A note is one `path:line: ...` line: code it quotes over several lines (with the comments
    on them) is joined, its line breaks and indentation one space."""
    if "\n" not in message:
        return message
    lines = [re.sub(r"\s+#.*$", "", line) for line in message.splitlines()]
    return re.sub(r"\s*\n\s*", " ", "\n".join(lines)).replace("( ", "(").replace(" )", ")")
