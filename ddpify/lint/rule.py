"""The rule base class and the finding it reports.

A rule is a read-only LibCST visitor over one script. Its docstring is its documentation,
in Ruff's sections (What it does / Why is this bad? / Example / Use instead / Fix safety /
References); `ddpify rule CODE` prints it and docs/rules.md is generated from it.
"""

from __future__ import annotations

import inspect
import re
from functools import lru_cache
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import libcst as cst

from ddpify.lint.script import Script

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

    def check(self) -> list[Finding]:
        """Visit the tree read-only: `visit_<Node>` before a node's children (returning False
        skips them), `leave_<Node>` after. The traversal uses the tree's cached children:
        LibCST's own `visit` rebuilds every node, which costs more than the rules do."""
        handlers = _handlers(type(self))
        stack: list[tuple[cst.CSTNode, bool]] = [(self.tree.module, False)]
        while stack:
            node, leaving = stack.pop()
            name = type(node).__name__
            if leaving:
                getattr(self, f"leave_{name}")(node)
                continue
            descend = getattr(self, f"visit_{name}")(node) if f"visit_{name}" in handlers else True
            if f"leave_{name}" in handlers:
                stack.append((node, True))
            if descend is not False:
                stack.extend((child, False) for child in reversed(self.tree.children(node)))
        return self.findings

    def report(self, node: cst.CSTNode, message: str, fixable: bool | None = None) -> None:
        self.findings.append(
            Finding(
                self.script.path,
                self.tree.line(node),
                self.tree.column(node),
                self.code,
                message,
                fixable=self.fix in ("safe", "partial") if fixable is None else fixable,
                node=node,
            )
        )

    def apply_fix(self, finding: Finding, plan) -> str | None:
        """Record the fix for `finding` in a convert `Plan`; return what was done, or None."""
        return None

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
