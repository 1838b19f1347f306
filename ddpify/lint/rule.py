"""The rule base class and the finding it reports.

A rule is a read-only LibCST visitor over one script. Its docstring is its documentation,
in Ruff's sections (What it does / Why is this bad? / Example / Use instead / Fix safety /
References); `ddpify rule CODE` prints it and docs/rules.md is generated from it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar, Literal

import libcst as cst

from ddpify.edit import Plan
from ddpify.lint.script import Script
from ddpify.syntax import Tree

SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References")
FixKind = Literal["safe", "partial", "by convert", "no"]


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    column: int
    code: str
    message: str
    fixable: bool = False
    node: cst.CSTNode | None = field(default=None, compare=False, repr=False, hash=False)
    # The fix, attached by the rule when it reports (what it found is in the closure): records
    # the edit in a Plan and says what it did, or None when it cannot.
    fix: Callable[[Plan], str | None] | None = field(default=None, compare=False, repr=False, hash=False)

    def render(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"

    @property
    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.code)


@lru_cache(maxsize=None)
def _handlers(rule: type) -> frozenset[str]:
    """The `visit_*` / `leave_*` methods a rule class defines itself (not LibCST's defaults)."""
    names = set()
    for klass in rule.__mro__:
        if klass in (cst.CSTVisitor, object) or klass.__module__.startswith("libcst"):
            continue
        names |= {n for n in vars(klass) if n.startswith(("visit_", "leave_"))}
    return frozenset(names)


def visit_all(tree: Tree, rules: Sequence[Rule]) -> None:
    """One read-only walk of the tree for every rule: `visit_<Node>` in preorder; a rule whose
    visit returns False is not shown that node's descendants. Each rule sees the events it would
    see walking alone, in the same order. Only the nodes some rule visits are walked, taken from
    the tree's index by type (LibCST's own `visit` rebuilds every node). Rules only visit:
    a `leave_<Node>` handler is refused."""
    visits: dict[type, list[tuple[Rule, Callable]]] = {}
    for rule in rules:
        for handler in sorted(_handlers(type(rule))):
            kind, _, node_type = handler.partition("_")
            if kind != "visit":
                raise TypeError(f"{type(rule).__name__}.{handler}: lint rules only visit")
            visits.setdefault(getattr(cst, node_type), []).append((rule, getattr(rule, handler)))
    skip_until: dict[int, int] = {}  # id(rule) -> the preorder position where its skipping ends
    for node in tree.of_type(*visits):
        position = tree.order(node)
        for rule, handler in visits[type(node)]:
            if skip_until and skip_until.get(id(rule), 0) > position:
                continue
            if handler(node) is False:
                skip_until[id(rule)] = tree.end_order(node)


class Rule(cst.CSTVisitor):
    code: ClassVar[str]
    name: ClassVar[str]  # the pattern flagged, kebab-case ("unguarded-checkpoint-save")
    default: ClassVar[bool] = True  # on unless selected explicitly when False
    fix: ClassVar[FixKind] = "no"

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script
        self.tree = script.tree
        self.program = script.program
        self.findings: list[Finding] = []

    def report(self, node: cst.CSTNode, message: str, fix: Callable[[Plan], str | None] | None = None) -> None:
        """A finding at `node`; `fix` (from a rule with a safe or partial fix) makes it fixable."""
        self.findings.append(
            Finding(
                self.script.path,
                self.tree.line(node),
                self.tree.column(node),
                self.code,
                message,
                fixable=fix is not None and self.fix in ("safe", "partial"),
                node=node,
                fix=fix,
            )
        )

    # documentation

    @classmethod
    def summary(cls) -> str:
        return cls.sections().get("What it does", "(undocumented)").split("\n\n")[0].replace("\n", " ")

    @classmethod
    def sections(cls) -> dict[str, str]:
        doc = inspect.cleandoc(cls.__doc__ or "")
        found: dict[str, str] = {}
        parts = re.split(r"^## (.+)$", doc, flags=re.MULTILINE)
        for title, body in zip(parts[1::2], parts[2::2]):
            found[title.strip()] = body.strip()
        return found

    @classmethod
    def documentation(cls) -> str:
        state = "on by default" if cls.default else "off by default: select it to enable"
        header = f"# {cls.code} {cls.name}\n\nFix: {cls.fix}. {state[0].upper()}{state[1:]}.\n"
        return header + "\n" + inspect.cleandoc(cls.__doc__ or "") + "\n"
