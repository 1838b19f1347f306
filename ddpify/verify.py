"""Run a DDP script under torchrun and check what a single-process run cannot show.

`verify_script(script, options) -> VerifyResult` runs the script with `options.nproc` ranks in a
scratch working directory and reports, per rank, how it ended (exit status, or a hang with the
line each stuck rank was blocked on), lines printed by more than one rank (a missing rank-0
guard), the checkpoint files the run wrote (whether each loads and whether a state dict carries
`module.` keys), and the wall time. `format_table(result)` renders the short table that
`ddpify verify` prints.

How it runs ranks: `python -m torch.distributed.run --standalone` starts a small rank shim
(`RANK_SHIM` below) in each rank. The shim sends the rank's stdout/stderr to its own files,
records its pid and, when the script ends, its exit status; it registers faulthandler on
SIGUSR1 so a hung rank can be asked where it is stuck before it is killed. A rank that has no
exit file when the run stops making progress (no rank output and no file change in the scratch
directory for `timeout` seconds) is reported as hung; verify then kills every rank's process
group and torchrun's.

Sharing GPUs: NCCL refuses two ranks on one device, so when the interpreter sees fewer CUDA
devices than ranks (or `backend="gloo"`), the shim forces gloo by wrapping
`torch.distributed.init_process_group` (the backend argument becomes "gloo") and sets
`LOCAL_RANK` to `local_rank % device_count`, so a script's `torch.cuda.set_device(local_rank)`
lands on a device that exists. The true local rank stays in `DDPIFY_VERIFY_LOCAL_RANK`.

This module imports only the standard library: ddpify never imports torch (torch runs in the
subprocesses, under `options.python`), and scripts/gpu_verify.py loads this file by path on GPU
machines that have torch but none of ddpify's own dependencies.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")
STATE_DICT_PREFIX = "module."

# Environment variables the shim reads.
ENV_STATE_DIR = "DDPIFY_VERIFY_STATE_DIR"
ENV_FORCE_GLOO = "DDPIFY_VERIFY_FORCE_GLOO"
ENV_SHARED_GPUS = "DDPIFY_VERIFY_SHARED_GPUS"
ENV_TRUE_LOCAL_RANK = "DDPIFY_VERIFY_LOCAL_RANK"
ENV_PRELUDE = "DDPIFY_VERIFY_PRELUDE"

RANK_SHIM = r'''
"""ddpify verify rank shim: run one rank of a script, recording its output and exit status."""
import faulthandler
import functools
import os
import runpy
import signal
import sys
import traceback

state_dir = os.environ["DDPIFY_VERIFY_STATE_DIR"]
rank = int(os.environ.get("RANK", "0"))


def rank_file(suffix):
    return os.path.join(state_dir, "rank%d.%s" % (rank, suffix))


# Per-rank logs at the file-descriptor level, so C++ output and DataLoader workers land there too.
for fd, suffix in ((1, "stdout"), (2, "stderr")):
    log_fd = os.open(rank_file(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log_fd, fd)
    os.close(log_fd)
sys.stdout.reconfigure(line_buffering=True)
sys.stderr.reconfigure(line_buffering=True)
with open(rank_file("pid"), "w") as pid_file:
    pid_file.write(str(os.getpid()))
if hasattr(signal, "SIGUSR1"):
    # Lets verify ask a hung rank where it is blocked, even inside a C++ collective.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

if os.environ.get("DDPIFY_VERIFY_FORCE_GLOO") == "1":
    shared_gpus = int(os.environ.get("DDPIFY_VERIFY_SHARED_GPUS", "0"))
    if shared_gpus > 0:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        os.environ["DDPIFY_VERIFY_LOCAL_RANK"] = str(local_rank)
        os.environ["LOCAL_RANK"] = str(local_rank % shared_gpus)
    import torch.distributed
    import torch.distributed.distributed_c10d as c10d

    original_init = c10d.init_process_group

    @functools.wraps(original_init)
    def init_process_group(*args, **kwargs):
        # NCCL refuses two ranks on one GPU; gloo does not. Drop NCCL-only arguments.
        if args:
            args = ("gloo",) + tuple(args[1:])
        else:
            kwargs["backend"] = "gloo"
        kwargs.pop("device_id", None)
        kwargs.pop("pg_options", None)
        return original_init(*args, **kwargs)

    torch.distributed.init_process_group = init_process_group
    c10d.init_process_group = init_process_group

prelude = os.environ.get("DDPIFY_VERIFY_PRELUDE")
if prelude:
    runpy.run_path(prelude, run_name="__ddpify_prelude__")

script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
exit_code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exc:
    if exc.code is None:
        exit_code = 0
    elif isinstance(exc.code, int):
        exit_code = exc.code
    else:
        print(exc.code, file=sys.stderr)
        exit_code = 1
except BaseException:
    traceback.print_exc()
    exit_code = 1
finally:
    sys.stdout.flush()
    sys.stderr.flush()
    with open(rank_file("exit"), "w") as exit_file:
        exit_file.write(str(exit_code))
sys.exit(exit_code)
'''

PROBE_SCRIPT = r"""
import json, torch
print(json.dumps({
    "torch": torch.__version__,
    "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
}))
"""

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


class VerifyInputError(Exception):
    """The script or the interpreter cannot be used (exit code 2 on the command line)."""


@dataclass(frozen=True)
class VerifyOptions:
    nproc: int = 2
    # Seconds without progress (no rank output, no file change in the scratch dir) before the
    # ranks still running count as hung and are killed.
    timeout: float = 300.0
    python: str = sys.executable
    script_args: tuple[str, ...] = ()
    # The scratch working directory; None makes a temporary one, removed afterwards unless keep.
    workdir: Path | None = None
    keep: bool = False
    # "auto": the script's own choice (nccl on GPUs), gloo when ranks must share a GPU.
    # "gloo": force gloo even when there is one GPU per rank.
    backend: str = "auto"
    # Restrict the GPUs the ranks see (CUDA_VISIBLE_DEVICES); None inherits, "" hides all.
    cuda_visible_devices: str | None = None
    # False runs one plain `python script` process (through the same shim) instead of torchrun.
    torchrun: bool = True
    # A Python file each rank runs before the script (scripts/gpu_verify.py's benchmark hooks).
    prelude: Path | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    checkpoint_suffixes: tuple[str, ...] = CHECKPOINT_SUFFIXES


@dataclass(frozen=True)
class Setup:
    """How the ranks were placed: what the interpreter saw and what verify forced."""

    torch_version: str
    cuda_devices: int
    force_gloo: bool
    shared_gpus: int  # > 0 when ranks share this many GPUs through gloo

    def describe(self, nproc: int) -> str:
        if self.cuda_devices == 0:
            return f"{nproc} rank(s), gloo on CPU"
        if self.shared_gpus:
            return f"{nproc} rank(s) sharing {self.shared_gpus} GPU(s) through gloo"
        if self.force_gloo:
            return f"{nproc} rank(s) on {self.cuda_devices} GPU(s), gloo forced"
        return f"{nproc} rank(s) on {self.cuda_devices} GPU(s), script's backend (nccl)"


@dataclass(frozen=True)
class RankResult:
    rank: int
    # None: the rank recorded no exit status (killed because it hung, or by torchrun).
    exit_code: int | None
    stdout: str
    stderr: str
    hung: bool = False
    # "file:line in function" where a hung rank was blocked, from its faulthandler dump.
    stuck_at: str | None = None
    started: bool = True  # False: torchrun never started it (the launcher failed first)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        if not self.started:
            return "did not start"
        if self.hung:
            where = f", stuck at {self.stuck_at}" if self.stuck_at else ""
            return f"did not finish (hang{where})"
        if self.exit_code is None:
            return "killed before it finished (no exit status)"
        if self.exit_code == 0:
            return "exit 0"
        last = _last_error_line(self.stderr)
        return f"exit {self.exit_code}" + (f": {last}" if last else "")


@dataclass(frozen=True)
class RunResult:
    """What happened when the ranks ran: no analysis of their output yet."""

    ranks: tuple[RankResult, ...]
    hung: bool
    launcher_exit: int | None
    launcher_output: str
    wall_time: float
    written_files: tuple[Path, ...]  # new or changed files in the workdir, absolute paths
    workdir: Path
    state_dir: Path  # the shim, per-rank logs and exit files, torchrun's log

    @property
    def hung_ranks(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.hung)


@dataclass(frozen=True)
class DuplicateLine:
    text: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class StateDictReport:
    key: str  # "" when the checkpoint is the state dict itself
    num_keys: int
    prefixed: tuple[str, ...]


@dataclass(frozen=True)
class CheckpointReport:
    path: str  # relative to the workdir
    loaded: bool
    error: str | None
    state_dicts: tuple[StateDictReport, ...]

    @property
    def prefixed_keys(self) -> int:
        return sum(len(sd.prefixed) for sd in self.state_dicts)

    @property
    def ok(self) -> bool:
        return self.loaded and self.prefixed_keys == 0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    status: str = ""  # overrides "ok"/"FAIL" in the table ("hang", "info")


@dataclass(frozen=True)
class VerifyResult:
    script: Path
    options: VerifyOptions
    setup: Setup
    run: RunResult
    duplicates: tuple[DuplicateLine, ...]
    checkpoints: tuple[CheckpointReport, ...]

    @property
    def checks(self) -> tuple[Check, ...]:
        failed = [r.rank for r in self.run.ranks if r.exit_code not in (None, 0)]
        checks = []
        for r in self.run.ranks:
            detail = r.describe()
            if r.started and r.exit_code is None and not r.hung and failed:
                detail = f"stopped by torchrun after rank {failed[0]} failed"
            checks.append(Check(f"rank {r.rank}", r.ok, detail, "hang" if r.hung else ""))
        if self.run.hung and not self.run.hung_ranks:
            checks.append(Check("torchrun", False, "every rank finished but torchrun did not exit", "hang"))
        elif not any(r.started for r in self.run.ranks):
            detail = _last_error_line(self.run.launcher_output) or "no rank started"
            checks.append(Check("torchrun", False, f"exit {self.run.launcher_exit}: {detail}"))
        if self.duplicates:
            first = self.duplicates[0]
            more = f" (+{len(self.duplicates) - 1} more)" if len(self.duplicates) > 1 else ""
            detail = (
                f"{len(self.duplicates)} line(s) printed on ranks {_ranks(first.ranks)}: {first.text!r}{more}"
            )
            checks.append(Check("duplicate lines", False, detail))
        else:
            checks.append(Check("duplicate lines", True, "none"))
        if not self.checkpoints:
            checks.append(Check("checkpoints", True, "none written", "info"))
        for ckpt in self.checkpoints:
            checks.append(Check(f"checkpoint {ckpt.path}", ckpt.ok, describe_checkpoint(ckpt)))
        checks.append(Check("wall time", True, f"{self.run.wall_time:.1f} s", "info"))
        return tuple(checks)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.ok)


@dataclass(frozen=True)
class Progress:
    elapsed: float
    finished_ranks: int
    nproc: int
    idle: float  # seconds since the last sign of progress


ProgressCallback = Callable[[Progress], None]


def verify_script(
    script: Path | str,
    options: VerifyOptions = VerifyOptions(),
    progress: ProgressCallback | None = None,
) -> VerifyResult:
    """Run `script` under torchrun with `options.nproc` ranks and check the run."""
    script = Path(script).resolve()
    if not script.is_file():
        raise VerifyInputError(f"{script}: no such file")
    if options.nproc < 1:
        raise VerifyInputError("nproc must be at least 1")
    setup = probe_setup(options)
    root = Path(tempfile.mkdtemp(prefix="ddpify-verify-"))
    try:
        run = run_ranks(script, options, setup, root, progress)
        duplicates = find_duplicate_lines({r.rank: r.stdout for r in run.ranks})
        suffixes = tuple(s.lower() for s in options.checkpoint_suffixes)
        written = [p for p in run.written_files if p.suffix.lower() in suffixes]
        checkpoints = load_checkpoints(written, run.workdir, options) if written else ()
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)  # holds the workdir unless one was given
    return VerifyResult(script, options, setup, run, duplicates, checkpoints)


def probe_setup(options: VerifyOptions) -> Setup:
    """Ask the interpreter for its torch version and visible GPUs; decide how ranks share them."""
    env = _base_env(options)
    info = _probe_torch(options.python, env.get("CUDA_VISIBLE_DEVICES"))
    devices = int(info["cuda_devices"])
    shared = devices if 0 < devices < options.nproc else 0
    force_gloo = devices > 0 and (options.backend == "gloo" or shared > 0)
    return Setup(str(info["torch"]), devices, force_gloo, shared)


@functools.lru_cache(maxsize=None)
def _probe_torch(python: str, cuda_visible_devices: str | None) -> dict[str, object]:
    """One torch import per interpreter and device mask: verify runs in a row skip the second."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    try:
        proc = subprocess.run(
            [python, "-c", PROBE_SCRIPT], env=env, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VerifyInputError(f"cannot run {python}: {exc}") from exc
    if proc.returncode != 0:
        detail = _last_error_line(proc.stderr) or f"exit {proc.returncode}"
        raise VerifyInputError(f"{python} cannot import torch ({detail}); pass --python")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_ranks(
    script: Path,
    options: VerifyOptions,
    setup: Setup,
    root: Path,
    progress: ProgressCallback | None = None,
) -> RunResult:
    """Launch the ranks, watch for progress, kill everything on a hang; collect per-rank results.

    `root` (empty) receives the per-rank state and, unless `options.workdir` is given, the workdir.
    """
    state_dir = root / "ranks"
    state_dir.mkdir()
    if options.workdir is None:
        workdir = root / "work"
        workdir.mkdir()
    else:
        workdir = Path(options.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    shim = state_dir / "ddpify_rank_shim.py"
    shim.write_text(RANK_SHIM)
    nproc = options.nproc if options.torchrun else 1

    env = _base_env(options)
    env[ENV_STATE_DIR] = str(state_dir)
    env["PYTHONUNBUFFERED"] = "1"
    if setup.force_gloo:
        env[ENV_FORCE_GLOO] = "1"
        env[ENV_SHARED_GPUS] = str(setup.shared_gpus)
    if options.prelude is not None:
        env[ENV_PRELUDE] = str(Path(options.prelude).resolve())
    if options.torchrun:
        command = [
            options.python, "-m", "torch.distributed.run",
            "--standalone", f"--nproc-per-node={nproc}", f"--log-dir={state_dir / 'torchrun'}",
            str(shim), str(script), *options.script_args,
        ]  # fmt: skip
    else:
        command = [options.python, str(shim), str(script), *options.script_args]

    before = _snapshot(workdir)
    launcher_log = state_dir / "launcher.log"
    start = time.monotonic()
    hung = False
    with open(launcher_log, "wb") as log:
        launcher = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            last_activity, last_files, last_scan = None, before, start
            last_progress = start
            while launcher.poll() is None:
                time.sleep(0.25)
                now = time.monotonic()
                activity = _activity(state_dir)
                if activity != last_activity:
                    last_activity, last_progress = activity, now
                if now - last_scan >= 2.0:  # the workdir may be large (a downloaded dataset)
                    files, last_scan = _snapshot(workdir), now
                    if files != last_files:
                        last_files, last_progress = files, now
                finished = sum(1 for r in range(nproc) if (state_dir / f"rank{r}.exit").exists())
                if progress is not None:
                    progress(Progress(now - start, finished, nproc, now - last_progress))
                if now - last_progress > options.timeout:
                    hung = True
                    _dump_stacks(state_dir, nproc)
                    break
        finally:
            if launcher.poll() is None:
                _terminate(launcher, state_dir, nproc)
    wall_time = time.monotonic() - start
    after = _snapshot(workdir)
    written = tuple(sorted(workdir / rel for rel, stat in after.items() if before.get(rel) != stat))

    ranks = []
    for rank in range(nproc):
        started = (state_dir / f"rank{rank}.pid").exists()
        exit_code = _read_int(state_dir / f"rank{rank}.exit")
        stderr = _read_text(state_dir / f"rank{rank}.stderr")
        rank_hung = hung and started and exit_code is None
        stuck_at = _stuck_at(stderr, script) if rank_hung else None
        stdout = _read_text(state_dir / f"rank{rank}.stdout")
        ranks.append(RankResult(rank, exit_code, stdout, stderr, rank_hung, stuck_at, started))
    return RunResult(
        ranks=tuple(ranks),
        hung=hung,
        launcher_exit=launcher.returncode if not hung else None,
        launcher_output=_read_text(launcher_log),
        wall_time=wall_time,
        written_files=written,
        workdir=workdir,
        state_dir=state_dir,
    )


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


def load_checkpoints(
    paths: Sequence[Path], workdir: Path, options: VerifyOptions
) -> tuple[CheckpointReport, ...]:
    """Load each checkpoint with torch.load in a subprocess of `options.python`."""
    env = _base_env(options)
    env["CUDA_VISIBLE_DEVICES"] = ""  # map_location="cpu" anyway; keep the loader off the GPUs
    proc = subprocess.run(
        [options.python, "-c", CHECKPOINT_LOADER, *map(str, paths)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        error = _last_error_line(proc.stderr) or f"loader exit {proc.returncode}"
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
    rows += [(c.name, c.status or ("ok" if c.ok else "FAIL"), c.detail) for c in result.checks]
    name_width = max(len(r[0]) for r in rows)
    status_width = max(len(r[1]) for r in rows)
    lines = [header] + [f"{n:<{name_width}}  {s:<{status_width}}  {d}".rstrip() for n, s, d in rows]
    failed = len(result.failures)
    lines.append("all checks passed" if not failed else f"{failed} check(s) failed")
    return "\n".join(lines) + "\n"


def describe_checkpoint(ckpt: CheckpointReport) -> str:
    if not ckpt.loaded:
        return f"does not load: {ckpt.error}"
    if not ckpt.state_dicts:
        return "loads; no state dict found in it"
    parts = []
    for sd in ckpt.state_dicts:
        where = f"[{sd.key!r}]" if sd.key else "state dict"
        if sd.prefixed:
            parts.append(
                f"{where}: {len(sd.prefixed)}/{sd.num_keys} keys start with {STATE_DICT_PREFIX!r}"
                f" (e.g. {sd.prefixed[0]!r})"
            )
        else:
            parts.append(f"{where}: {sd.num_keys} keys, no {STATE_DICT_PREFIX!r} prefix")
    return "loads; " + "; ".join(parts)


def _base_env(options: VerifyOptions) -> dict[str, str]:
    env = dict(os.environ)
    # torchrun would set this to 1 itself, with a banner; ranks on one machine should not oversubscribe.
    env.setdefault("OMP_NUM_THREADS", "1")
    if options.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = options.cuda_visible_devices
    env.update(options.extra_env)
    return env


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of every file under `directory`, by relative path."""
    result: dict[str, tuple[int, int]] = {}
    for dirpath, _, filenames in os.walk(directory):
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            try:
                stat = os.stat(path)
            except OSError:
                continue  # removed while we looked
            result[os.path.relpath(path, directory)] = (stat.st_mtime_ns, stat.st_size)
    return result


def _activity(state_dir: Path) -> tuple[tuple[str, int], ...]:
    """Sizes of the rank logs and which exit files exist: changes mean the ranks make progress."""
    entries = []
    for entry in os.scandir(state_dir):
        if entry.name.startswith("rank") and entry.is_file():
            entries.append((entry.name, entry.stat().st_size))
    return tuple(sorted(entries))


def _dump_stacks(state_dir: Path, nproc: int) -> None:
    """SIGUSR1 to every rank still running: the shim's faulthandler writes its stack to stderr."""
    if not hasattr(signal, "SIGUSR1"):
        return
    asked = False
    for rank in range(nproc):
        pid = _read_int(state_dir / f"rank{rank}.pid")
        finished = (state_dir / f"rank{rank}.exit").exists()
        if pid is not None and not finished and _is_rank_process(pid, state_dir, rank):
            try:
                os.kill(pid, signal.SIGUSR1)
                asked = True
            except OSError:
                pass
    if asked:
        time.sleep(1.0)


def _terminate(launcher: subprocess.Popen, state_dir: Path, nproc: int) -> None:
    """Kill every rank's process group (torchrun starts each rank in its own session), then torchrun."""
    for rank in range(nproc):
        pid = _read_int(state_dir / f"rank{rank}.pid")
        if pid is not None and _is_rank_process(pid, state_dir, rank):
            _kill_group(pid, signal.SIGKILL)
    _kill_group(launcher.pid, signal.SIGTERM)
    try:
        launcher.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill_group(launcher.pid, signal.SIGKILL)
        launcher.wait()


def _is_rank_process(pid: int, state_dir: Path, rank: int) -> bool:
    """Whether `pid` is still our rank: its command line names the shim (Linux), else no exit file.

    A rank that wrote its exit file may still be alive (stuck in interpreter teardown); one that
    exited may have had its pid reused, so only /proc can tell those apart.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not (state_dir / f"rank{rank}.exit").exists()
    return str(state_dir / "ddpify_rank_shim.py").encode() in cmdline


def _kill_group(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except OSError:
        pass  # already gone


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def _stuck_at(stderr: str, script: Path) -> str | None:
    """The innermost frame in `script` of the last faulthandler dump in a rank's stderr."""
    dump_start = stderr.rfind("most recent call first")
    if dump_start < 0:
        return None
    for line in stderr[dump_start:].splitlines():
        match = _FRAME.match(line)
        if match and Path(match["file"]).resolve() == script:
            return f"{script.name}:{match['line']} in {match['func']}"
    return None


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line):
            return line[:200]
    return lines[-1][:200] if lines else ""


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))


def _relative(path: Path, workdir: Path) -> str:
    try:
        return str(Path(path).relative_to(workdir))
    except ValueError:
        return str(path)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
