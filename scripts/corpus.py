"""Convert every corpus script, then judge the runnable ones with `ddpify verify`.

    python scripts/corpus.py [CORPUS_DIR] [NAME ...] [--no-run] [--steps K] [--jobs N] [-v] [--out DIR]

CORPUS_DIR (default: ../shared/corpus beside this checkout) holds `files/NAME.py`, MANIFEST.tsv,
`companions/`, `fixtures/` and `stubs/` (see its README). For each script:

1. `convert_source` rewrites it: converted, or unchanged with the reason; the warnings it prints.
2. If the manifest says how to run it on CPU and it was converted, the converted script is staged
   as the corpus runner stages it (companions and fixture data copied into a fresh folder that
   mirrors the repository, the script's folder as working directory, CORPUS_FAKE_DATA=1 and the
   stubs on PYTHONPATH) and `ddpify verify` runs it on 2 gloo ranks, then (in a fresh staging)
   as one plain process. The 2-rank run gets NPROC x CORPUS_FAKE_N synthetic samples, so each
   rank sees as many as the plain run (the manifest sizes the split for one process: yunjey_gan
   needs whole batches of 100, which a real dataset gives every rank but 100 samples cannot). A row `entry=REL` is a library file driven by the companion REL: the converted file
   takes its place, REL is converted too (a driver: its output goes to rank 0) and run.

Prints one row per script and the totals. A development tool, not part of the test suite: the
runs take minutes. `--out DIR` keeps the converted files and each verify report (JSON).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ddpify import verify  # noqa: E402
from ddpify.convert import ConvertOptions, convert_source  # noqa: E402
from ddpify.errors import InputError  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"
ENV_WORD = re.compile(r"^[A-Z_][A-Z0-9_]*=")
NPROC = 2
FAKE_N_DEFAULT = "64"  # the stubs' synthetic split when the manifest names no CORPUS_FAKE_N


@dataclass
class Row:
    name: str
    path: str  # the script's path in its repository
    run: str  # the manifest's run column: "-" when it cannot run here
    status: str = ""  # converted, unchanged, error
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    convert_ms: float = 0.0
    verdict: str = ""  # pass, FAIL, or why it was not run
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def runnable(self) -> bool:
        return self.run != "-"


def read_manifest(corpus: Path) -> list[Row]:
    with open(corpus / "MANIFEST.tsv", newline="") as f:
        return [Row(r["name"], r["path"], r["run"]) for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def split_run(run: str) -> tuple[str | None, dict[str, str], list[str]]:
    """'entry=m.py A=1 --x 3' -> ('m.py', {'A': '1'}, ['--x', '3'])."""
    words = shlex.split(run)
    entry, env = None, {}
    while words and (ENV_WORD.match(words[0]) or words[0].startswith("entry=")):
        key, _, value = words.pop(0).partition("=")
        if key == "entry":
            entry = value
        else:
            env[key] = value
    return entry, env, words


def convert(row: Row, corpus: Path) -> str | None:
    path = corpus / "files" / f"{row.name}.py"
    source = path.read_bytes().decode("utf-8", errors="surrogateescape")
    start = time.perf_counter()
    try:
        result = convert_source(source, ConvertOptions(), path=str(path))
    except InputError as error:
        row.status, row.reason = "error", str(error).split(": ", 1)[-1]
        return None
    finally:
        row.convert_ms = (time.perf_counter() - start) * 1000
    row.status = result.status
    row.reason = result.reason or ""
    row.warnings = [f"{note.line}: {note.message}" for note in result.warnings]
    return result.output if result.status == "converted" else None


def stage(row: Row, corpus: Path, converted: str) -> tuple[Path, Path]:
    """A fresh folder laid out like the script's repository: (root, the script to run)."""
    entry, _, _ = split_run(row.run)
    root = Path(tempfile.mkdtemp(prefix=f"corpus-{row.name}-"))
    for kind in ("companions", "fixtures"):
        if (corpus / kind / row.name).is_dir():
            shutil.copytree(corpus / kind / row.name, root, dirs_exist_ok=True)
    target = root / row.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(converted, encoding="utf-8", errors="surrogateescape")
    if entry:  # the driver is converted too, as a user converts both files (its output goes to rank 0)
        driver = root / entry
        result = convert_source(driver.read_text(encoding="utf-8", errors="surrogateescape"), ConvertOptions(), path=str(driver))
        if result.status == "converted":
            driver.write_text(result.output, encoding="utf-8", errors="surrogateescape")
    return root, (root / entry if entry else target)


def run_verify(row: Row, corpus: Path, converted: str, options: argparse.Namespace, out: Path | None) -> None:
    """verify on 2 ranks, and the plain run in a staging of its own (scripts read `../../data`,
    which a copy of the working folder alone would not hold)."""
    _, env, args = split_run(row.run)
    results = []
    for torchrun in (True, False):
        root, script = stage(row, corpus, converted)
        run_env = {**env, "CORPUS_FAKE_DATA": "1", "PYTHONPATH": f"{corpus / 'stubs'}:{script.parent}"}
        if torchrun:  # each rank gets the synthetic split the plain run gets, as a real dataset would allow
            run_env["CORPUS_FAKE_N"] = str(NPROC * int(env.get("CORPUS_FAKE_N", FAKE_N_DEFAULT)))
        try:
            results.append(
                verify.verify_script(
                    script,
                    verify.VerifyOptions(
                        nproc=NPROC, timeout=options.timeout, python=options.python, script_args=tuple(args),
                        workdir=script.parent, torchrun=torchrun, steps=options.steps, extra_env=run_env,
                    ),
                )  # fmt: skip
            )
        except verify.VerifyInputError as error:
            row.verdict = f"not run: {error}"
            return
        finally:
            shutil.rmtree(root, ignore_errors=True)
    ranks, single = results
    row.seconds = ranks.run.wall_time + single.run.wall_time
    row.failures = [f"{check.name}: {check.detail}" for check in ranks.failures]
    if not single.run.ok:
        row.failures.append(f"single process: {single.run.ranks[0].describe()}")
    row.verdict = "FAIL" if row.failures else "pass"
    row.failures += [f"{c.name} unchecked: {c.detail}" for c in ranks.checks if c.status == verify.UNCHECKED]
    if out is not None:
        (out / f"{row.name}.verify.json").write_text(verify.format_json(ranks))
        logs = "".join(f"--- rank {r.rank} stderr\n{r.stderr[-4000:]}\n" for r in ranks.run.ranks if not r.ok)
        if not single.run.ok:
            logs += f"--- single stderr\n{single.run.ranks[0].stderr[-4000:]}\n"
        if logs:
            (out / f"{row.name}.stderr.txt").write_text(logs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS, help="the corpus folder")
    parser.add_argument("names", nargs="*", help="only these scripts")
    parser.add_argument("--no-run", action="store_true", help="convert only")
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch for the runs")
    parser.add_argument("--timeout", type=float, default=120.0, help="verify's no-progress timeout")
    parser.add_argument("--steps", type=int, default=0, help="stop each run after K optimizer steps")
    parser.add_argument("--out", type=Path, help="keep converted files and verify reports here")
    parser.add_argument("--jobs", type=int, default=1, help="scripts run at once (converting stays one at a time)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print warnings and failures")
    options = parser.parse_args(argv)
    if not (options.corpus / "MANIFEST.tsv").is_file():
        options.names.insert(0, options.corpus.name)  # a name given without a corpus folder
        options.corpus = DEFAULT_CORPUS
    corpus = options.corpus.resolve()
    rows = read_manifest(corpus)
    if options.names:
        unknown = set(options.names) - {r.name for r in rows}
        if unknown:
            parser.error("unknown names: " + ", ".join(sorted(unknown)))
        rows = [r for r in rows if r.name in options.names]
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)

    # Convert every file first (one after another: the times are measured), then run the
    # runnable conversions, --jobs at a time (each run has its own staging folder and port).
    conversions = {}
    for row in rows:
        converted = conversions[row.name] = convert(row, corpus)
        if converted is not None and options.out is not None:
            (options.out / f"{row.name}.py").write_text(converted, encoding="utf-8", errors="surrogateescape")
        if not row.runnable:
            row.verdict = "-"
        elif converted is None:
            row.verdict = "not run (unchanged)"
    to_run = [row for row in rows if row.runnable and conversions[row.name] is not None and not options.no_run]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = {pool.submit(run_verify, row, corpus, conversions[row.name], options, options.out): row for row in to_run}
        for future in concurrent.futures.as_completed(futures):
            future.result()
            if options.jobs > 1:
                print(f"ran {futures[future].name}: {futures[future].verdict}", file=sys.stderr, flush=True)

    print(f"{'script':<24} {'convert':<10} {'warn':>4} {'ms':>6}  verify")
    for row in rows:
        verdict = row.verdict + (f" ({row.seconds:.0f} s)" if row.seconds else "")
        print(f"{row.name:<24} {row.status:<10} {len(row.warnings):>4} {row.convert_ms:>6.0f}  {verdict}", flush=True)
        if options.verbose:
            if row.reason:
                print(f"    reason: {row.reason}")
            for warning in row.warnings:
                print(f"    warning {warning}")
            for failure in row.failures:
                print(f"    {failure}")

    converted = [r for r in rows if r.status == "converted"]
    runnable = [r for r in rows if r.runnable]
    passed = [r for r in runnable if r.verdict == "pass"]
    median = sorted(r.convert_ms for r in rows)[len(rows) // 2] if rows else 0.0
    print(
        f"\n{len(rows)} scripts: {len(converted)} converted, {sum(r.status == 'unchanged' for r in rows)} unchanged, "
        f"{sum(r.status == 'error' for r in rows)} rejected as bad input; median convert {median:.0f} ms"
    )
    if not options.no_run:
        print(f"runnable: {len(runnable)}, verify passed: {len(passed)}, failed: {sum(r.verdict == 'FAIL' for r in runnable)}")
    if options.out is not None:
        (options.out / "summary.json").write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
