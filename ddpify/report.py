"""Counts what a run did and owns the exit code (black's `Report`, ddpify's codes)."""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0  # done, or nothing to do
EXIT_CHANGES = 1  # --check: something would change (lint: findings)
EXIT_BAD_INPUT = 2  # unparsable file, missing path, unwritable output
EXIT_INTERNAL = 123  # a bug in ddpify

EXIT_CODES_HELP = (
    "Exit codes: 0 done or nothing to do; 1 something would change (with --check); "
    "2 bad input (unparsable or undecodable file, missing path, missing output folder); "
    "123 internal error."
)


@dataclass
class Report:
    check: bool = False
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    crashed: int = 0

    @property
    def exit_code(self) -> int:
        if self.crashed:
            return EXIT_INTERNAL
        if self.failed:
            return EXIT_BAD_INPUT
        if self.check and self.changed:
            return EXIT_CHANGES
        return EXIT_OK

    def summary(self) -> str:
        verb = "would be converted" if self.check else "converted"
        parts = [f"{_files(self.changed)} {verb}", f"{_files(self.unchanged)} unchanged"]
        if self.failed:
            parts.append(f"{_files(self.failed)} failed")
        if self.crashed:
            parts.append(f"{_files(self.crashed)} hit an internal error")
        return ", ".join(parts) + "."


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"
