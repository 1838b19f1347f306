"""The fixture corpus: single-GPU scripts in fixtures/convert/<case>/ with their case.toml."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
CONVERT_FIXTURES = REPO / "fixtures" / "convert"


@dataclass(frozen=True)
class Case:
    name: str
    folder: Path
    config: dict

    @property
    def source(self) -> Path:
        return self.folder / "train.py"

    @property
    def converted(self) -> Path:
        return self.folder / "train_ddp.py"

    @property
    def launcher(self) -> Path:
        return self.folder / "train_ddp.sh"

    @property
    def report(self) -> Path:
        return self.folder / "report.txt"

    @property
    def expect_unchanged(self) -> bool:
        return self.config["expect"] == "unchanged"

    @property
    def convert_args(self) -> list[str]:
        return list(self.config.get("convert_args", []))

    def epoch_lines(self, stdout: str) -> list[str]:
        pattern = re.compile(self.config["epoch_line"])
        return [line for line in stdout.splitlines() if pattern.search(line)]

    def losses(self, stdout: str) -> list[float]:
        pattern = re.compile(self.config["loss"])
        return [float(m.group(1)) for line in self.epoch_lines(stdout) if (m := pattern.search(line))]

    def definitions(self) -> str:
        """The script's imports, classes and functions: enough to build its plain model."""
        module = ast.parse(self.source.read_text())
        kept = [n for n in module.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef))]
        return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def load_cases() -> list[Case]:
    cases = []
    for toml in sorted(CONVERT_FIXTURES.glob("*/case.toml")):
        cases.append(Case(toml.parent.name, toml.parent, tomllib.loads(toml.read_text())))
    return cases
