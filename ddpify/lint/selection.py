"""Which rules run: --select/--ignore by code or prefix, `[tool.ddpify.lint]`, and `# noqa`."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ddpify.lint.rule import Rule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:\s*,\s*[A-Z]+[0-9]*)*))?", re.IGNORECASE)


@dataclass(frozen=True)
class Selection:
    select: tuple[str, ...] | None = None  # None: the default rules
    ignore: tuple[str, ...] = ()

    def merged(self, config: Selection) -> Selection:
        """`self` is the command line: its --select replaces the file's select and ignore
        (as in Ruff); without one, the file's select applies and both ignores add up."""
        if self.select is not None:
            return self
        return Selection(config.select, tuple(config.ignore) + tuple(self.ignore))

    def enabled(self, rules: Sequence[type[Rule]]) -> list[type[Rule]]:
        def matches(rule: type[Rule], patterns: Iterable[str]) -> bool:
            return any(p.upper() == "ALL" or rule.code.startswith(p.upper()) for p in patterns)

        chosen = [r for r in rules if (r.default if self.select is None else matches(r, self.select))]
        return [r for r in chosen if not matches(r, self.ignore)]


def unknown_codes(patterns: Iterable[str], rules: Sequence[type[Rule]]) -> list[str]:
    return [p for p in patterns if p.upper() != "ALL" and not any(r.code.startswith(p.upper()) for r in rules)]


def suppressed(line_text: str, code: str) -> bool:
    """`# noqa` silences every code on the line; `# noqa: DDP101, DDP2` those codes or prefixes."""
    match = NOQA.search(line_text)
    if match is None:
        return False
    codes = match.group("codes")
    if not codes:
        return True
    return any(code.startswith(c.strip().upper()) for c in codes.split(","))


@lru_cache(maxsize=None)
def config_for(folder: Path) -> tuple[Selection, Path | None]:
    """The nearest pyproject.toml with a [tool.ddpify.lint] table, walking up from `folder`."""
    for candidate in [folder, *folder.parents]:
        pyproject = candidate / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{pyproject}: {error}") from None
        table = data.get("tool", {}).get("ddpify", {}).get("lint")
        if table is None:
            continue
        select = table.get("select")
        ignore = table.get("ignore", [])
        if select is not None and not _strings(select) or not _strings(ignore):
            raise ConfigError(f"{pyproject}: [tool.ddpify.lint] select and ignore are lists of codes or prefixes")
        return Selection(tuple(select) if select is not None else None, tuple(ignore)), pyproject
    return Selection(), None


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


class ConfigError(Exception):
    pass
