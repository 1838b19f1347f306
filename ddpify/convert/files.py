"""Converting files: which files, where the output goes, what is written, and how it is reported.

The CLI only folds its flags into a `Mode` and calls `convert_paths`.
"""

from __future__ import annotations

import difflib
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ddpify import launcher as launchers
from ddpify import sources
from ddpify.convert import ConvertOptions, ConvertResult, convert_source
from ddpify.errors import InputError
from ddpify.report import Report

STDIN = "-"


class Mode(Enum):
    WRITE = "write"  # a new file beside the source (or -o)
    IN_PLACE = "in-place"
    CHECK = "check"  # write nothing; exit 1 if anything would change
    DIFF = "diff"  # print the diff; write nothing


@dataclass(frozen=True)
class Settings:
    mode: Mode = Mode.WRITE
    output: Path | None = None
    launcher: str | None = "torchrun"  # None: no launcher
    report: bool = False
    color: bool = False
    options: ConvertOptions = ConvertOptions()


Echo = Callable[[str], None]


def output_path(source: Path) -> Path:
    """train.py -> train_ddp.py, beside the source."""
    return source.with_name(f"{source.stem}_ddp{source.suffix or '.py'}")


def discover(paths: Sequence[str]) -> list[tuple[str, bool]]:
    """The files to convert: (path, named explicitly). Folders give their *.py training scripts."""
    found: list[tuple[str, bool]] = []
    for raw in paths:
        if raw == STDIN:
            found.append((raw, True))
            continue
        path = Path(raw)
        if path.is_dir():
            # our own outputs (*_ddp.py) are not converted again
            found += [(str(f), False) for f in sources.python_files(path) if not f.stem.endswith("_ddp")]
        elif path.exists():
            found.append((raw, True))
        else:
            raise InputError(raw, "no such file or folder")
    return found


def convert_paths(paths: Sequence[str], settings: Settings, out: Echo, err: Echo) -> Report:
    report = Report(check=settings.mode is Mode.CHECK)
    try:
        files = discover(paths)
    except InputError as error:
        err(f"error: {error}")
        report.failed += 1
        return report
    if settings.output is not None and len(files) != 1:
        err("error: -o/--output takes exactly one input file")
        report.failed += 1
        return report
    for path, explicit in files:
        try:
            _convert_one(path, explicit, settings, report, out, err)
        except InputError as error:
            err(f"error: {error}")
            report.failed += 1
        except Exception:  # noqa: BLE001 - reported as an internal error, exit 123
            err(f"error: {path}: internal error, please report it:\n{traceback.format_exc()}")
            report.crashed += 1
    return report


def _convert_one(path: str, explicit: bool, settings: Settings, report: Report, out: Echo, err: Echo) -> None:
    if path == STDIN:
        source = sources.decode(sys.stdin.buffer.read(), "<stdin>")
    else:
        source = sources.read(Path(path))
    result = convert_source(source.text, settings.options, path=source.path)
    if result.status == "unchanged":
        report.unchanged += 1
        if explicit or not (result.reason or "").startswith(("nothing to train", "nothing to convert", "empty file")):
            err(f"unchanged {source.path}: {result.reason}")
    elif result.changed:
        report.changed += 1
    _print_notes(result, source.path, settings.report, err)
    if settings.mode is Mode.CHECK:
        if result.changed:
            err(f"would convert {source.path}")
        return
    if path == STDIN:
        if settings.mode is Mode.DIFF:
            out(_diff(result, "<stdin>", "<stdout>", settings.color))
        else:
            out(result.output)
        return
    target = _target(Path(path), settings)
    if settings.mode is Mode.DIFF:
        if result.changed:
            out(_diff(result, path, str(target), settings.color))
        return
    if not result.changed:
        return
    data = result.output.encode(source.encoding)
    launcher_text = launcher_file = None
    if settings.launcher is not None:
        launcher_file = launchers.launcher_path(target, settings.launcher)
        try:
            launcher_text = launchers.render(launchers.spec_for_script(target, settings.launcher, launcher=launcher_file))
        except launchers.LaunchSpecError as error:
            raise InputError(
                path, f"cannot write a {settings.launcher} launcher ({error}); use --no-launcher and `ddpify launcher {target} --kind {settings.launcher} ...`"
            ) from None
    sources.write_atomic(target, data, like=Path(path))
    written = f"converted {path} -> {target}"
    if launcher_file is not None and launcher_text is not None:
        sources.write_atomic(launcher_file, launcher_text.encode(), executable=settings.launcher != "k8s")
        written += f" (launcher: {launcher_file})"
    err(written)


def _target(source: Path, settings: Settings) -> Path:
    if settings.mode is Mode.IN_PLACE:
        return source
    return settings.output if settings.output is not None else output_path(source)


def _print_notes(result: ConvertResult, path: str, everything: bool, err: Echo) -> None:
    for note in result.notes:
        if everything or note.kind == "warning":
            err(note.render(path))


def _diff(result: ConvertResult, before: str, after: str, color: bool) -> str:
    lines = difflib.unified_diff(
        result.source.splitlines(keepends=True), result.output.splitlines(keepends=True), before, after
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return _colorize(text) if color else text


# ANSI colors by line prefix, most specific first: headers bold, hunks cyan, + green, - red.
DIFF_COLORS = (("+++", "1"), ("---", "1"), ("@@", "36"), ("+", "32"), ("-", "31"))


def _colorize(diff: str) -> str:
    colored = []
    for line in diff.splitlines(keepends=True):
        color = next((c for prefix, c in DIFF_COLORS if line.startswith(prefix)), None)
        colored.append(f"\033[{color}m{line.rstrip(chr(10))}\033[0m\n" if color else line)
    return "".join(colored)
