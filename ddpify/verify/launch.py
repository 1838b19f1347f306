"""Start N ranks on this machine the way torchrun does, without torchrun's agent.

    python launch.py NPROC COMMAND...

Each rank runs `python COMMAND...` in a session of its own with the environment torchrun gives
a single-node job: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID. There is no elastic agent:
rank 0 hosts the rendezvous store (`init_process_group`'s env:// default). Like torchrun, when
one rank fails the others are killed and the exit status is 1; 0 when every rank exits 0.

`ddpify verify --launcher direct` uses it where many runs are judged in a row, as the test suite
does: there is no agent to import torch, and the ranks share one torch import (verify forks the
launcher itself from its fork server, forkserver.py, which has torch imported already).

Why fork: `import torch` costs about 3 CPU-seconds a process. The launcher imports it once and
forks each rank from itself; the child becomes `python COMMAND...` (a session of its own, the
rank's environment, sys.argv, sys.path[0], the signal handlers the interpreter started with),
runs the program with runpy as `__main__`, finding torch in sys.modules, and exits as the
interpreter would. torch is imported in the launcher, never initialized: no CUDA context, no
thread pool (OMP_NUM_THREADS=1, the ranks' own default, is set before the import, so that BLAS
starts no threads either). Forking a process that has threads or CUDA is unsafe: in that case,
and where torch cannot be imported, each rank is a fresh `python COMMAND...` instead.

A forked rank reseeds torch's global generator from the OS, as a fresh import would (`random`
reseeds itself after a fork, and numpy's global generator is made on first use, in the rank).
What a forked rank does not get from a fresh interpreter: a hash seed of its own (all ranks share
the launcher's, so str hashes and set orders agree across ranks where torchrun's would not);
torch and what it imports come from where the launcher found them, even where the program's
folder has a module of the same name; torch's import-time warnings go to the launcher's output,
and an uncaught exception's traceback also shows the launcher's and runpy's frames.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn, Protocol


class Rank(Protocol):
    """A started rank: a subprocess.Popen, or a ForkedRank."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class ForkedRank:
    """A child of this process, polled like a subprocess.Popen (a negative code: killed by a signal)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._wait(os.WNOHANG)

    def wait(self) -> int:
        code = self._wait(0)
        assert code is not None
        return code

    def _wait(self, flags: int) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, flags)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK="0", ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RUN_ID="ddpify-verify",
    )  # fmt: skip
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def popen_rank(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *command], env=env, start_new_session=True)


def preload_torch() -> bool:
    """Import torch here so that forked ranks find it imported; False: fork nothing, use Popen.

    Through importlib: the package imports only the standard library (scripts/gpu_verify.py
    loads it where torch may be missing), and torch is an optional preload, not a dependency.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what rank_env gives the ranks, read at import
    try:
        torch = importlib.import_module("torch")
    except Exception:
        return False  # no torch here (or a broken one): each rank imports, and reports, its own
    return not torch.cuda.is_initialized() and thread_count() == 1


def thread_count() -> int:
    """This process's threads, native ones included where /proc tells (a BLAS pool started by an import)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def fork_rank(command: Sequence[str], env: Mapping[str, str], handlers: Mapping[int, object]) -> ForkedRank:
    """Start `python COMMAND...` as a child of this process, which has torch imported already.

    `handlers`: the signal handlers the launcher started with, restored in the child.
    """
    sys.stdout.flush()  # nothing buffered here may be written twice, once by the child
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run_forked(command, env, handlers)
    return ForkedRank(pid)


def run_forked(command: Sequence[str], env: Mapping[str, str], handlers: Mapping[int, object]) -> NoReturn:
    """In the child: run `python COMMAND...` to its end and exit; never return to the launcher."""
    status = 1
    try:
        status = run_program(command, env, handlers)
        # What the interpreter does on its way out: wait for the program's non-daemon threads, run
        # its atexit handlers, flush (multiprocessing's forked children do the same).
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status & 0xFF)  # neither the launcher's code nor its interpreter's teardown


def run_program(command: Sequence[str], env: Mapping[str, str], handlers: Mapping[int, object]) -> int:
    """Become `python COMMAND...` (session, environment, argv, path, signals) and run it as __main__."""
    try:
        os.setsid()
        torch = sys.modules.get("torch")
        if torch is not None:
            # A fresh interpreter seeds torch's generator from the OS at import; a fork would share
            # the launcher's, so an unseeded draw (a split, a shuffle) would agree across ranks here
            # and not under torchrun. (`random` reseeds itself after a fork; numpy.random is not
            # imported yet.)
            torch.seed()
        os.environ.clear()
        os.environ.update(env)
        for signum, handler in handlers.items():
            if signal.getsignal(signum) != handler:
                signal.signal(signum, handler)  # type: ignore[arg-type]
        program = command[0]
        sys.argv = list(command)
        sys.path[0] = os.path.dirname(os.path.realpath(program))
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exc:
        return exit_status(exc.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
        return 1
    return 0


def exit_status(code: object) -> int:
    """The exit status the interpreter gives `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    nproc, command = int(argv[0]), argv[1:]
    port = free_port()
    start: Callable[[Sequence[str], Mapping[str, str]], Rank] = popen_rank
    if nproc > 0 and command and sys.platform == "linux":  # macOS system libraries are not fork-safe
        # Before the import: the handlers the interpreter set up, which the ranks must start with.
        handlers = {signum: signal.getsignal(signum) for signum in signal.valid_signals()}
        handlers = {signum: handler for signum, handler in handlers.items() if handler is not None}
        if preload_torch():
            start = functools.partial(fork_rank, handlers=handlers)
    ranks = [start(command, rank_env(rank, nproc, port)) for rank in range(nproc)]
    while True:
        codes = [rank.poll() for rank in ranks]
        if any(code not in (None, 0) for code in codes):
            for rank, code in zip(ranks, codes):
                if code is None:
                    try:
                        os.killpg(rank.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass  # it ended (and its group with it) since the poll
                    rank.wait()
            return 1
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
