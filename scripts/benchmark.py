"""How fast ddpify converts and lints: milliseconds per file over the fixture corpus.

    python scripts/benchmark.py [--repeat 5]

Prints numbers; it asserts nothing (speed goals live here, not in timed tests).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ddpify.convert import convert_source
from ddpify.lint import Selection, lint_source

REPO = Path(__file__).resolve().parent.parent


def timed(fn, sources: list[str], repeat: int) -> list[float]:
    per_file = []
    for _ in range(repeat):
        start = time.perf_counter()
        for source in sources:
            fn(source)
        per_file.append((time.perf_counter() - start) / len(sources) * 1000)
    return per_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    originals = [p.read_text() for p in sorted((REPO / "fixtures" / "convert").glob("*/train.py"))]
    converted = [p.read_text() for p in sorted((REPO / "fixtures" / "convert").glob("*/train_ddp.py"))]
    lines = sum(s.count("\n") for s in originals) / len(originals)
    every_rule = Selection(("ALL",))
    for label, fn, sources in (
        ("convert", convert_source, originals),
        ("lint (all rules)", lambda s: lint_source(s, selection=every_rule), converted),
    ):
        samples = timed(fn, sources, args.repeat)
        print(f"{label:<18} {len(sources)} files, {lines:.0f} lines on average: median {statistics.median(samples):.1f} ms/file, best {min(samples):.1f} ms/file")


if __name__ == "__main__":
    main()
