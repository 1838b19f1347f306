"""Launching the ranks: torchrun (or one plain process) around the rank shim, watched for hangs.

`run_ranks` starts `python -m torch.distributed.run --standalone` with the shim
(`rank_shim.py`, copied into the run's state folder) in each rank; with `launcher="direct"`,
`launch.py` instead, which the fork server (`forkserver.py`) forks where it can, and so the
plain one-process run. A rank that has no exit file
when the run stops making progress (no rank output and no file change in the scratch folder for
`options.timeout` seconds) counts as hung: verify asks it for its stack (faulthandler on
SIGUSR1), then kills every rank's process group and torchrun's.

Standard library only: torch runs in the subprocesses, under `options.python`.
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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import forkserver

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pth.tar", ".pt.tar")  # the ImageNet example's `checkpoint.pth.tar`
SHIM = Path(__file__).resolve().with_name("rank_shim.py")
LAUNCH = Path(__file__).resolve().with_name("launch.py")
SHIM_NAME = "ddpify_rank_shim.py"

# Environment variables the shim reads.
ENV_STATE_DIR = "DDPIFY_VERIFY_STATE_DIR"
ENV_FORCE_GLOO = "DDPIFY_VERIFY_FORCE_GLOO"
ENV_SHARED_GPUS = "DDPIFY_VERIFY_SHARED_GPUS"
ENV_TRUE_LOCAL_RANK = "DDPIFY_VERIFY_LOCAL_RANK"
ENV_PRELUDE = "DDPIFY_VERIFY_PRELUDE"
ENV_STEPS = "DDPIFY_VERIFY_STEPS"

PROBE_SCRIPT = r"""
import json, torch
print(json.dumps({
    "torch": torch.__version__,
    "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
}))
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
    # Who starts the ranks: "torchrun", or "direct" (launch.py: the same environment, no elastic
    # agent, no torch import of its own).
    launcher: str = "torchrun"
    # Also run the script as one plain process, in a scratch folder of its own (a copy of
    # `workdir` when one is given, taken before the ranks start); it must succeed.
    single: bool = False
    # Stop every rank right after its K-th optimizer step (0: run to the end).
    steps: int = 0
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
    # What the shim recorded in this rank (rank_shim.py's Facts.to_json); None if nothing was.
    facts: Mapping | None = None

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
        last = last_error_line(self.stderr)
        return f"exit {self.exit_code}" + (f": {last}" if last else "")


@dataclass(frozen=True)
class RunResult:
    """What happened when the ranks ran: no judgement of it yet."""

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

    @property
    def ok(self) -> bool:
        return not self.hung and bool(self.ranks) and all(r.ok for r in self.ranks)


@dataclass(frozen=True)
class Progress:
    elapsed: float
    finished_ranks: int
    nproc: int
    idle: float  # seconds since the last sign of progress


ProgressCallback = Callable[[Progress], None]


def probe_setup(options: VerifyOptions) -> Setup:
    """Ask the interpreter for its torch version and visible GPUs; decide how ranks share them."""
    env = base_env(options)
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
        detail = last_error_line(proc.stderr) or f"exit {proc.returncode}"
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
    state_dir = root / "state"
    state_dir.mkdir(parents=True)
    if options.workdir is None:
        workdir = root / "work"
        workdir.mkdir()
    else:
        workdir = Path(options.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    shim = state_dir / SHIM_NAME
    shutil.copyfile(SHIM, shim)
    nproc = options.nproc if options.torchrun else 1

    env = base_env(options)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # a plain run is a world of one even when verify runs inside torchrun
    env[ENV_STATE_DIR] = str(state_dir)
    env["PYTHONUNBUFFERED"] = "1"
    if setup.force_gloo:
        env[ENV_FORCE_GLOO] = "1"
        env[ENV_SHARED_GPUS] = str(setup.shared_gpus)
    if options.prelude is not None:
        env[ENV_PRELUDE] = str(Path(options.prelude).resolve())
    if options.steps:
        env[ENV_STEPS] = str(options.steps)
    if options.torchrun and options.launcher == "direct":
        command = [options.python, str(LAUNCH), str(nproc), str(shim), str(script), *options.script_args]
    elif options.torchrun:
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
        launcher: subprocess.Popen | forkserver.ForkedRun
        if options.launcher == "direct" and forkserver.usable(options.python):
            launcher = forkserver.start(command[1:], workdir, env, launcher_log)
        else:
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
                    _dump_stacks(state_dir, nproc, launcher.pid)
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
        facts = _read_json(state_dir / f"rank{rank}.facts.json")
        ranks.append(RankResult(rank, exit_code, stdout, stderr, rank_hung, stuck_at, started, facts))
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


def base_env(options: VerifyOptions) -> dict[str, str]:
    env = dict(os.environ)
    # torchrun would set this to 1 itself, with a banner; ranks on one machine should not oversubscribe.
    env.setdefault("OMP_NUM_THREADS", "1")
    if options.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = options.cuda_visible_devices
    env.update(options.extra_env)
    return env


def last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line):
            return line[:200]
    return lines[-1][:200] if lines else ""


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
            try:
                entries.append((entry.name, entry.stat().st_size))
            except FileNotFoundError:
                continue  # a rank's `.tmp` file renamed into place while we looked
    return tuple(sorted(entries))


def _dump_stacks(state_dir: Path, nproc: int, launcher: int) -> None:
    """SIGUSR1 to every rank still running: the shim's faulthandler writes its stack to stderr."""
    if not hasattr(signal, "SIGUSR1"):
        return
    asked = False
    for rank in range(nproc):
        pid = _read_int(state_dir / f"rank{rank}.pid")
        finished = (state_dir / f"rank{rank}.exit").exists()
        if pid is not None and not finished and _is_rank_process(pid, state_dir, rank, launcher):
            try:
                os.kill(pid, signal.SIGUSR1)
                asked = True
            except OSError:
                pass
    if asked:
        time.sleep(1.0)


def _terminate(launcher: subprocess.Popen | forkserver.ForkedRun, state_dir: Path, nproc: int) -> None:
    """Kill every rank's process group (torchrun starts each rank in its own session), then torchrun."""
    for rank in range(nproc):
        pid = _read_int(state_dir / f"rank{rank}.pid")
        if pid is not None and _is_rank_process(pid, state_dir, rank, launcher.pid):
            _kill_group(pid, signal.SIGKILL)
    _kill_group(launcher.pid, signal.SIGTERM)
    try:
        launcher.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill_group(launcher.pid, signal.SIGKILL)
        launcher.wait()


def _is_rank_process(pid: int, state_dir: Path, rank: int, launcher: int) -> bool:
    """Whether `pid` is still our rank (Linux): its command line names the shim, or it is the
    launcher or the launcher's child (a rank forked by the fork server has the server's command
    line); else, where there is no /proc, whether it has no exit file.

    A rank that wrote its exit file may still be alive (stuck in interpreter teardown); one that
    exited may have had its pid reused, so only /proc can tell those apart.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return not (state_dir / f"rank{rank}.exit").exists()
    parent = int(stat.rsplit(")", 1)[1].split()[1])  # after the command name, which may hold spaces
    return str(state_dir / SHIM_NAME).encode() in cmdline or launcher in (pid, parent)


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


def _read_json(path: Path) -> Mapping | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
