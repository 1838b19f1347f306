"""How fast ddpify converts and lints: milliseconds per file over the fixture corpus, convert
time against LibCST's parse time over the real-script corpus, and `ddpify lint --select ALL`
against `ruff check --select ALL` over torchvision's installed sources plus the corpus.

    pip install -e ".[bench]"     # ruff, for the comparison
    python scripts/benchmark.py [--repeat 5]

Prints numbers; it asserts nothing (speed goals live here, not in timed tests).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import libcst as cst

from ddpify.convert import convert_source
from ddpify.lint import Selection, lint_source

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "files"


def timed(fn, sources: list[str], repeat: int) -> list[float]:
    per_file = []
    for _ in range(repeat):
        start = time.perf_counter()
        for source in sources:
            fn(source)
        per_file.append((time.perf_counter() - start) / len(sources) * 1000)
    return per_file


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` runs: the machine is shared, so slower runs measure the neighbours."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def fixtures(repeat: int) -> None:
    originals = [p.read_text() for p in sorted((REPO / "fixtures" / "convert").glob("*/train.py"))]
    converted = [p.read_text() for p in sorted((REPO / "fixtures" / "convert").glob("*/train_ddp.py"))]
    lines = sum(s.count("\n") for s in originals) / len(originals)
    every_rule = Selection(("ALL",))
    for label, fn, sources in (
        ("convert", convert_source, originals),
        ("lint (all rules)", lambda s: lint_source(s, selection=every_rule), converted),
    ):
        samples = timed(fn, sources, repeat)
        print(f"{label:<18} {len(sources)} files, {lines:.0f} lines on average: median {statistics.median(samples):.1f} ms/file, best {min(samples):.1f} ms/file")
    slowest = max(best_ms(lambda s=s: lint_source(s, selection=every_rule), repeat) for s in converted)
    print(f"lint one script    slowest converted fixture: {slowest:.1f} ms (target: under 100 ms)")


def corpus(repeat: int) -> None:
    """Convert time next to parse time, file by file (the best of `repeat` runs each)."""
    if not CORPUS.is_dir():
        print(f"corpus: {CORPUS} not found, skipped")
        return
    parse_ms, convert_ms, ratios = [], [], []
    for path in sorted(CORPUS.glob("*.py")):
        source = path.read_text()
        try:
            cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue  # does not parse: convert reports the error
        parse = best_ms(lambda: cst.parse_module(source), repeat)
        convert = best_ms(lambda: convert_source(source, path=str(path)), repeat)
        parse_ms.append(parse)
        convert_ms.append(convert)
        ratios.append((convert / parse, path.name))
    worst_ratio, worst_file = max(ratios)
    print(
        f"corpus             {len(convert_ms)} files: convert median {statistics.median(convert_ms):.1f} ms, max {max(convert_ms):.1f} ms;"
        f" parse median {statistics.median(parse_ms):.1f} ms, max {max(parse_ms):.1f} ms;"
        f" convert/parse median {statistics.median(r for r, _ in ratios):.2f}, max {worst_ratio:.2f} ({worst_file})"
    )


def lint_vs_ruff(repeat: int) -> None:
    """Wall time of the two command lines, startup included, the best of `repeat` runs each."""
    spec = importlib.util.find_spec("torchvision")  # finds it without importing torch
    paths = [str(Path(location)) for location in (spec.submodule_search_locations or [])] if spec else []
    if CORPUS.is_dir():
        paths.append(str(CORPUS))
    ruff = shutil.which("ruff")
    if not paths or ruff is None:
        print("lint vs ruff       skipped: needs torchvision and ruff (pip install -e '.[bench]')")
        return
    files = sum(1 for p in paths for _ in Path(p).rglob("*.py"))
    commands = {
        "ddpify": [sys.executable, "-m", "ddpify", "lint", "--select", "ALL", *paths],
        "ruff": [ruff, "check", "--select", "ALL", "--no-cache", "--quiet", *paths],
    }
    run = lambda command: subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: E731
    ms = {name: best_ms(lambda c=command: run(c), repeat) for name, command in commands.items()}
    print(
        f"lint vs ruff       {files} files (torchvision + corpus), --select ALL: ddpify {ms['ddpify']:.0f} ms,"
        f" ruff {ms['ruff']:.0f} ms, ratio {ms['ddpify'] / ms['ruff']:.2f} (target: within 2)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    fixtures(args.repeat)
    corpus(args.repeat)
    lint_vs_ruff(args.repeat)


if __name__ == "__main__":
    main()
