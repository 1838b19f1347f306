"""The rule base class and the finding it reports.

A rule is a read-only LibCST visitor over one script. Its docstring is its documentation,
in Ruff's sections (What it does / Why is this bad? / Example / Use instead / Fix safety /
References); `ddpify rule CODE` prints it and docs/rules.md is generated from it.
"""

from __future__ import annotations

import inspect
import re
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
        self.tree.module.visit(self)
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
