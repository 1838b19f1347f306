"""Run a DDP script on N ranks and judge whether it trains right, not only whether it exits 0.

`verify_script(script, options) -> VerifyResult` runs the script under torchrun with
`options.nproc` ranks in a scratch working directory (`run.py`), each rank inside a shim
(`rank_shim.py`) that records what the rank did without adding any collective. The result's
`checks` judge the run (`checks.py` for the facts the shim recorded):

- each rank's exit status, or a hang with the line each stuck rank was blocked on;
- replicas: every DDP model has the same parameters on every rank at the end;
- forward through DDP: the training forward ran through the DDP wrapper;
- data sharding: each rank trained on its own samples;
- side effects: no two ranks wrote the same file (writes by ranks other than 0 are listed);
- process group: initialized once and destroyed once on every rank;
- lines printed by more than one rank; checkpoints that do not load or carry `module.` keys;
- with `options.single`, the script also runs as one plain process and must succeed;
- the wall time.

`options.steps` stops every rank after its K-th optimizer step, so a long real training script
can be judged on its first steps. `format_table` and `format_json` render a result.

Sharing GPUs: NCCL refuses two ranks on one device, so when the interpreter sees fewer CUDA
devices than ranks (or `backend="gloo"`), the shim forces gloo by wrapping
`torch.distributed.init_process_group` (the backend argument becomes "gloo") and sets
`LOCAL_RANK` to `local_rank % device_count`, so a script's `torch.cuda.set_device(local_rank)`
lands on a device that exists. The true local rank stays in `DDPIFY_VERIFY_LOCAL_RANK`.

This package imports only the standard library: ddpify never imports torch (torch runs in the
subprocesses, under `options.python`), and scripts/gpu_verify.py loads it by path on GPU
machines that have torch but none of ddpify's own dependencies.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import checks as judge
from .checks import FAIL, HANG, INFO, OK, UNCHECKED, Check
from .run import (
    CHECKPOINT_SUFFIXES,
    ENV_FORCE_GLOO,
    ENV_PRELUDE,
    ENV_SHARED_GPUS,
    ENV_STATE_DIR,
    ENV_STEPS,
    ENV_TRUE_LOCAL_RANK,
    Progress,
    ProgressCallback,
    RankResult,
    RunResult,
    Setup,
    VerifyInputError,
    VerifyOptions,
    base_env,
    last_error_line,
    probe_setup,
    run_ranks,
)

__all__ = [
    "CHECKPOINT_SUFFIXES", "ENV_FORCE_GLOO", "ENV_PRELUDE", "ENV_SHARED_GPUS", "ENV_STATE_DIR", "ENV_STEPS",
    "ENV_TRUE_LOCAL_RANK", "FAIL", "HANG", "INFO", "OK", "UNCHECKED", "Check", "CheckpointReport",
    "DuplicateLine", "Progress", "ProgressCallback", "RankResult", "RunResult", "Setup", "StateDictReport",
    "VerifyInputError", "VerifyOptions", "VerifyResult", "describe_checkpoint", "find_duplicate_lines",
    "format_json", "format_table", "load_checkpoints", "probe_setup", "run_ranks", "verify_script",
]  # fmt: skip

STATE_DICT_PREFIX = "module."

CHECKPOINT_LOADER = r"""
import json, sys, torch

def state_dict_report(key, mapping):
    keys = [str(k) for k in mapping.keys()]
    return {"key": key, "num_keys": len(keys),
            "prefixed": [k for k in keys if k.startswith("module.")]}

def is_state_dict(value):
    return (isinstance(value, dict) and len(value) > 0
            and all(isinstance(k, str) for k in value)
            and all(isinstance(v, torch.Tensor) for v in value.values()))

reports = []
for path in sys.argv[1:]:
    report = {"path": path, "loaded": False, "error": None, "state_dicts": []}
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except BaseException as exc:
        report["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        reports.append(report)
        continue
    report["loaded"] = True
    if isinstance(obj, torch.nn.Module):
        # A pickled module: what matters is the state dict it would give.
        report["state_dicts"].append(state_dict_report("<%s>" % type(obj).__name__, obj.state_dict()))
    elif is_state_dict(obj):
        report["state_dicts"].append(state_dict_report("", obj))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, torch.nn.Module):
                value = value.state_dict()
            if is_state_dict(value):
                report["state_dicts"].append(state_dict_report(str(key), value))
    reports.append(report)
print(json.dumps(reports))
"""


@dataclass(frozen=True)
class DuplicateLine:
    text: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class StateDictReport:
    key: str  # "" when the checkpoint is the state dict itself
    num_keys: int
    prefixed: tuple[str, ...]
    wrapper: bool | None = None  # came from a DistributedDataParallel's state_dict (None: read from the file, unknown)

    @property
    def wrapped_keys(self) -> bool:
        """`module.` keys of a DDP wrapper: not an AveragedModel's or a ModelEma's own `module`."""
        return bool(self.prefixed) and self.wrapper is not False


@dataclass(frozen=True)
class CheckpointReport:
    path: str  # relative to the workdir
    loaded: bool
    error: str | None
    state_dicts: tuple[StateDictReport, ...]

    @property
    def prefixed_keys(self) -> int:
        return sum(len(sd.prefixed) for sd in self.state_dicts if sd.wrapped_keys)

    @property
    def ok(self) -> bool:
        return self.loaded and self.prefixed_keys == 0


@dataclass(frozen=True)
class VerifyResult:
    script: Path
    options: VerifyOptions
    setup: Setup
    run: RunResult
    duplicates: tuple[DuplicateLine, ...]
    checkpoints: tuple[CheckpointReport, ...]
    single_run: RunResult | None = None  # the plain one-process run, with options.single

    @property
    def facts(self) -> dict[int, Mapping]:
        return {r.rank: r.facts for r in self.run.ranks if r.facts is not None}

    @functools.cached_property
    def checks(self) -> tuple[Check, ...]:
        return self._judge()

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.ok)

    def check(self, name: str) -> Check:
        (found,) = [c for c in self.checks if c.name == name]
        return found

    def _judge(self) -> tuple[Check, ...]:
        run = self.run
        failed = [r.rank for r in run.ranks if r.exit_code not in (None, 0)]
        result = []
        for r in run.ranks:
            detail = r.describe()
            if r.started and r.exit_code is None and not r.hung and failed:
                detail = f"stopped by torchrun after rank {failed[0]} failed"
            result.append(Check(f"rank {r.rank}", HANG if r.hung else (OK if r.ok else FAIL), detail))
        if run.hung and not run.hung_ranks:
            result.append(Check("torchrun", HANG, "every rank finished but torchrun did not exit"))
        elif not any(r.started for r in run.ranks):
            detail = last_error_line(run.launcher_output) or "no rank started"
            result.append(Check("torchrun", FAIL, f"exit {run.launcher_exit}: {detail}"))

        facts = self.facts
        finished = run.ok and len(facts) == len(run.ranks)
        stopped = [rank for rank, f in facts.items() if f.get("stopped")]
        if self.options.steps:
            detail = (
                f"stopped after optimizer step {self.options.steps} on rank(s) {_ranks(stopped)}"
                if stopped else f"the script ended before {self.options.steps} optimizer steps"
            )  # fmt: skip
            result.append(Check("steps", INFO, detail))
        if facts or run.ranks:
            result.append(judge.replicas(facts, finished))
            result.append(judge.forward_through_ddp(facts, finished))
            result.append(judge.data_sharding(facts, finished))
            # also the machine's temp folder, which the ranks of a node share (`os.path.join(tempfile.gettempdir(), "best.pt")`
            # by every rank: helper corpora CC, CH, CI, CL); a process's own mkdtemp() folder there differs per rank
            roots = [run.workdir, self.script.parent]
            result.append(judge.side_effects(facts, roots, run.workdir, run.written_files, [Path(tempfile.gettempdir())]))
            result.append(judge.process_group(facts, {r.rank: r.exit_code for r in run.ranks}))

        if self.duplicates:
            first = self.duplicates[0]
            more = f" (+{len(self.duplicates) - 1} more)" if len(self.duplicates) > 1 else ""
            detail = f"{len(self.duplicates)} line(s) printed on ranks {_ranks(first.ranks)}: {first.text!r}{more}"
            evidence = {"lines": [{"text": d.text, "ranks": list(d.ranks)} for d in self.duplicates[:20]]}
            result.append(Check("duplicate lines", FAIL, detail, evidence))
        else:
            result.append(Check("duplicate lines", OK, "none"))
        if not self.checkpoints:
            result.append(Check("checkpoints", INFO, "none written"))
        for ckpt in self.checkpoints:
            result.append(Check(f"checkpoint {ckpt.path}", OK if ckpt.ok else FAIL, describe_checkpoint(ckpt)))
        if self.single_run is not None:
            result.append(_single_check(self.single_run))
        result.append(Check("wall time", INFO, f"{run.wall_time:.1f} s"))
        return tuple(result)


def verify_script(
    script: Path | str,
    options: VerifyOptions = VerifyOptions(),
    progress: ProgressCallback | None = None,
) -> VerifyResult:
    """Run `script` under torchrun with `options.nproc` ranks (and, with `single`, as one process)."""
    script = Path(script).resolve()
    if not script.is_file():
        raise VerifyInputError(f"{script}: no such file")
    if options.nproc < 1:
        raise VerifyInputError("nproc must be at least 1")
    if options.steps < 0:
        raise VerifyInputError("steps must be at least 1")
    if options.launcher not in ("torchrun", "direct"):
        raise VerifyInputError(f"unknown launcher {options.launcher!r}: torchrun or direct")
    setup = probe_setup(options)
    root = Path(tempfile.mkdtemp(prefix="ddpify-verify-"))
    try:
        single = None
        if options.single and options.torchrun:
            single_workdir = None
            if options.workdir is not None:  # the data the script reads is there: a copy, as it is now
                single_workdir = root / "single-work"
                if Path(options.workdir).is_dir():
                    shutil.copytree(options.workdir, single_workdir, symlinks=True)
            single_options = dataclasses.replace(options, torchrun=False, workdir=single_workdir)
            single = _Background(run_ranks, script, single_options, setup, root / "single")
            if setup.cuda_devices or _names_fixed_places(script):
                # one after the other: the plain run and the ranks would share GPU memory, or a folder outside
                # their scratch directories (`OUT = "/tmp/ft_run"`, made, then removed at the end: helper corpus BR, repro 05)
                single.join()
        run = run_ranks(script, options, setup, root / "ranks", progress)
        duplicates = find_duplicate_lines({r.rank: r.stdout for r in run.ranks})
        written = checkpoint_files(run.written_files, options.checkpoint_suffixes, _saved_paths(run))
        written += _saved_elsewhere(run, written)
        checkpoints = checkpoint_reports(written, run, options) if written else ()
        single_run = single.join() if single is not None else None
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)  # holds the workdirs unless one was given
    return VerifyResult(script, options, setup, run, duplicates, checkpoints, single_run)


def _names_fixed_places(script: Path) -> bool:
    """The script names a path outside its working directory (an absolute path, `~`, the node's
    temp folder): two runs at once would write and remove the same files."""
    try:
        text = script.read_text(errors="replace")
    except OSError:
        return False
    return bool(re.search(r"""["'](/|~/)|gettempdir\(|TMPDIR""", text))


def checkpoint_files(paths: Sequence[Path], suffixes: Sequence[str] = CHECKPOINT_SUFFIXES, saved: Collection[str] = ()) -> list[Path]:
    """The written files verify loads as checkpoints: those a rank wrote with torch.save (`saved`,
    whatever their names: the tutorials' `checkpoint.tar`), and those named like one (`model.pt`,
    the ImageNet example's `checkpoint.pth.tar`), which another writer may have made."""
    endings = tuple(s.lower() for s in suffixes)
    return [p for p in paths if p.name.lower().endswith(endings) or str(p) in saved]


def _saved_elsewhere(run: RunResult, written: Sequence[Path]) -> list[Path]:
    """The files rank 0's torch.save wrote that are not among the run's files at its end: outside
    its folders (the node's temp folder, a folder of the process's own) or removed before it ended
    (helper corpora CH and CR: "none written" where a checkpoint was saved and read back). The
    shim recorded what each held when it was saved."""
    known = {str(p) for p in written}
    first = min(run.ranks, key=lambda r: r.rank, default=None)
    saved = (first.facts or {}).get("checkpoints", {}) if first is not None else {}
    return [Path(p) for p in sorted(saved) if p not in known]


def _saved_paths(run: RunResult) -> set[str]:
    """The files the rank shim saw torch.save write, on any rank."""
    return {path for rank in run.ranks for path in (rank.facts or {}).get("checkpoints", {})}


def _single_check(single: RunResult) -> Check:
    (rank,) = single.ranks
    if single.ok:
        return Check("single process", OK, f"as one plain process: exit 0 in {single.wall_time:.1f} s")
    return Check("single process", HANG if rank.hung else FAIL, f"as one plain process: {rank.describe()}")


def find_duplicate_lines(outputs: Mapping[int, str]) -> tuple[DuplicateLine, ...]:
    """Non-blank stdout lines (by rank) that more than one rank printed, in first-seen order.

    Decimal numbers are compared as placeholders: ranks see different data, so an unguarded
    `print(f"epoch {epoch} loss {loss:.4f}")` differs per rank in the loss only. Integers stay
    significant, so `rank 0 ready` and `rank 1 ready` are not duplicates.
    """
    seen: dict[str, tuple[str, list[int]]] = {}
    for rank, text in sorted(outputs.items()):
        lines: dict[str, str] = {}
        for raw in text.splitlines():
            line = raw.strip()
            if line:
                lines.setdefault(_DECIMAL.sub("<num>", line), line)
        for key, line in lines.items():
            seen.setdefault(key, (line, []))[1].append(rank)
    return tuple(DuplicateLine(line, tuple(ranks)) for line, ranks in seen.values() if len(ranks) > 1)


_DECIMAL = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE][-+]?\d))(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")


def checkpoint_reports(paths: Sequence[Path], run: RunResult, options: VerifyOptions) -> tuple[CheckpointReport, ...]:
    """What each checkpoint file holds: from the shim's record of the torch.save that wrote it
    (rank 0's first), else by loading the file with torch.load in a subprocess."""
    recorded: dict[str, Mapping] = {}
    for rank in sorted(run.ranks, key=lambda r: r.rank, reverse=True):
        recorded.update((rank.facts or {}).get("checkpoints", {}))
    reports = {}
    for path in paths:
        saved = recorded.get(str(path))
        if saved is not None:
            state_dicts = tuple(
                StateDictReport(sd["key"], sd["num_keys"], tuple(sd["prefixed"]), sd.get("wrapper")) for sd in saved["state_dicts"]
            )
            reports[path] = CheckpointReport(_relative(path, run.workdir), True, None, state_dicts)
    unrecorded = [p for p in paths if p not in reports]
    if unrecorded:
        reports.update(zip(unrecorded, load_checkpoints(unrecorded, run.workdir, options)))
    return tuple(reports[p] for p in paths)


class _Background:
    """A call run in a thread; `join()` returns its result or raises its exception."""

    def __init__(self, function, *args) -> None:
        self._result = self._error = None
        self._thread = threading.Thread(target=self._run, args=(function, *args), daemon=True)
        self._thread.start()

    def _run(self, function, *args) -> None:
        try:
            self._result = function(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller in join()
            self._error = exc

    def join(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result


def load_checkpoints(
    paths: Sequence[Path], workdir: Path, options: VerifyOptions
) -> tuple[CheckpointReport, ...]:
    """Load each checkpoint with torch.load in a subprocess of `options.python`."""
    env = base_env(options)
    env["CUDA_VISIBLE_DEVICES"] = ""  # map_location="cpu" anyway; keep the loader off the GPUs
    proc = subprocess.run(
        [options.python, "-c", CHECKPOINT_LOADER, *map(str, paths)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        error = last_error_line(proc.stderr) or f"loader exit {proc.returncode}"
        return tuple(CheckpointReport(_relative(p, workdir), False, error, ()) for p in paths)
    reports = []
    for raw in json.loads(proc.stdout.strip().splitlines()[-1]):
        state_dicts = tuple(
            StateDictReport(sd["key"], sd["num_keys"], tuple(sd["prefixed"])) for sd in raw["state_dicts"]
        )
        reports.append(
            CheckpointReport(_relative(Path(raw["path"]), workdir), raw["loaded"], raw["error"], state_dicts)
        )
    return tuple(reports)


def format_table(result: VerifyResult) -> str:
    """The short table `ddpify verify` prints: one row per check."""
    header = f"ddpify verify {result.script.name}: {result.setup.describe(len(result.run.ranks))}"
    rows = [("CHECK", "RESULT", "DETAIL")]
    rows += [(c.name, c.status, c.detail) for c in result.checks]
    name_width = max(len(r[0]) for r in rows)
    status_width = max(len(r[1]) for r in rows)
    lines = [header] + [f"{n:<{name_width}}  {s:<{status_width}}  {d}".rstrip() for n, s, d in rows]
    failed = len(result.failures)
    lines.append("all checks passed" if not failed else f"{failed} check(s) failed")
    return "\n".join(lines) + "\n"


def format_json(result: VerifyResult) -> str:
    """One JSON object: the run's setup, each check (status, detail, evidence), each rank."""
    data = {
        "script": str(result.script),
        "ok": result.ok,
        "setup": {
            "nproc": len(result.run.ranks),
            "description": result.setup.describe(len(result.run.ranks)),
            "torch": result.setup.torch_version,
            "cuda_devices": result.setup.cuda_devices,
            "force_gloo": result.setup.force_gloo,
            "steps": result.options.steps or None,
            "single": result.single_run is not None,
        },
        "checks": [
            {"name": c.name, "status": c.status.lower(), "ok": c.ok, "detail": c.detail, "evidence": c.evidence}
            for c in result.checks
        ],
        "ranks": [
            {"rank": r.rank, "exit_code": r.exit_code, "hung": r.hung, "stuck_at": r.stuck_at, "started": r.started}
            for r in result.run.ranks
        ],
        "wall_time": round(result.run.wall_time, 3),
    }
    return json.dumps(data, indent=2) + "\n"


def describe_checkpoint(ckpt: CheckpointReport) -> str:
    if not ckpt.loaded:
        return f"does not load: {ckpt.error}"
    if not ckpt.state_dicts:
        return "loads; no state dict found in it"
    parts = []
    for sd in ckpt.state_dicts:
        where = f"[{sd.key!r}]" if sd.key else "state dict"
        if sd.prefixed and not sd.wrapped_keys:
            parts.append(
                f"{where}: {len(sd.prefixed)}/{sd.num_keys} keys start with {STATE_DICT_PREFIX!r}, the model's own"
                f" (an attribute named module: an AveragedModel's or a ModelEma's copy), not a DDP wrapper's"
            )
        elif sd.prefixed:
            parts.append(
                f"{where}: {len(sd.prefixed)}/{sd.num_keys} keys start with {STATE_DICT_PREFIX!r}"
                f" (e.g. {sd.prefixed[0]!r})"
            )
        else:
            parts.append(f"{where}: {sd.num_keys} keys, no {STATE_DICT_PREFIX!r} prefix")
    return "loads; " + "; ".join(parts)


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))


def _relative(path: Path, workdir: Path) -> str:
    try:
        return str(Path(path).relative_to(workdir))
    except ValueError:
        return str(path)
