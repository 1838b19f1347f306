"""Linting files: discovery, per-file config, noqa, --fix, and the three output formats."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddpify import sources
from ddpify.errors import InputError
from ddpify.lint import Finding, Selection, fix_source, lint_source
from ddpify.lint.selection import ConfigError, config_for
from ddpify.report import EXIT_BAD_INPUT, EXIT_CHANGES, EXIT_INTERNAL, EXIT_OK

FORMATS = ("text", "json", "github")
Echo = Callable[[str], None]


@dataclass
class LintRun:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # bad input, one message each
    crashed: bool = False
    fixed: list[tuple[Finding, str]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.crashed:
            return EXIT_INTERNAL
        if self.errors:
            return EXIT_BAD_INPUT
        return EXIT_CHANGES if self.findings else EXIT_OK


def discover(paths: Sequence[str]) -> tuple[list[Path], list[str]]:
    files, errors = [], []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sources.python_files(path)
        elif path.is_file():
            files.append(path)
        else:
            errors.append(f"{raw}: no such file or folder")
    return files, errors


def lint_paths(paths: Sequence[str], cli: Selection, fix: bool = False) -> LintRun:
    run = LintRun()
    files, run.errors = discover(paths)
    for path in files:
        try:
            selection = cli.merged(config_for(path.resolve().parent)[0])
            source = sources.read(path)
            if fix:
                result = fix_source(source.text, str(path), selection)
                if result.fixed:
                    sources.write_atomic(path, result.output.encode(source.encoding), like=path)
                run.fixed += result.fixed
                run.findings += result.remaining
            else:
                run.findings += lint_source(source.text, str(path), selection)
        except InputError as error:
            run.errors.append(str(error))
        except ConfigError as error:
            run.errors.append(str(error))
        except Exception as error:  # noqa: BLE001 - a bug in ddpify: exit 123, keep going
            run.errors.append(f"{path}: internal error: {error!r}")
            run.crashed = True
    run.findings.sort(key=lambda f: f.sort_key)
    return run


def render(findings: Sequence[Finding], fmt: str) -> str:
    if fmt == "json":
        rows = [
            {"path": f.path, "line": f.line, "column": f.column, "code": f.code, "message": f.message, "fixable": f.fixable}
            for f in findings
        ]
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "github":
        return "".join(
            f"::error file={f.path},line={f.line},col={f.column},title={f.code}::{_escape(f.message)}\n" for f in findings
        )
    return "".join(f.render() + "\n" for f in findings)


def _escape(message: str) -> str:
    # workflow commands: %, CR and LF are escaped in the message
    return message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
