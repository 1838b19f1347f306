"""Start the direct launcher and the plain run from one process that imported torch once.

`launch.py` lets a run's ranks share one torch import: it imports torch and forks them. Verify
runs in a row (the test suite judges every fixture) still paid one import per launcher and one
per plain `--single` run, about 3 CPU-seconds each. With `launcher="direct"` on Linux, both are
forked instead from a fork server: a separate interpreter, started on first use, that imports
torch once (never initializing it: no CUDA, no threads) and forks a child per run. The child
becomes `python COMMAND...` exactly as a rank forked by the launcher does (`launch.run_forked`:
its own session, the run's environment, argv, sys.path[0], reseeded torch), in the run's folder,
reading nothing and writing to the run's log.

The calling process never imports torch (ddpify does not). It talks to the server over the
server's stdin and stdout, one JSON line a message: a request to start COMMAND; the server
answers with the child's pid, and later with its exit status. The server stays single-threaded
(it polls), as forking requires, and exits when the caller closes its stdin (at the caller's exit).
Where torch cannot be imported or the import left threads running, the server says so and
verify starts its runs as subprocesses instead.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import launch

_ROOT = str(Path(__file__).resolve().parents[2])  # where the ddpify package is importable from


def usable(python: str) -> bool:
    """Whether runs under `python` can be forked by the server: Linux, the interpreter running
    verify, and this package imported as `ddpify.verify` (gpu_verify loads it by path); and the
    server, once started, could import torch without starting threads."""
    return (
        sys.platform == "linux"
        and __name__ == "ddpify.verify.forkserver"
        and os.path.realpath(python) == os.path.realpath(sys.executable)
        and _server() is not None
    )


class ForkedRun:
    """A run the fork server started, polled and waited like the subprocess.Popen it replaces.
    `returncode` is negative when a signal killed it."""

    def __init__(self, server: _Server, pid: int) -> None:
        self._server = server
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self._server.exit_codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._server.changed:
            if not self._server.changed.wait_for(lambda: self.pid in self._server.exit_codes, timeout):
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            return self._server.exit_codes[self.pid]


def start(command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path) -> ForkedRun:
    """Fork `python COMMAND...` (COMMAND without the interpreter) in `cwd`, its output to `log`."""
    server = _server()
    assert server is not None, "start() after usable()"
    return ForkedRun(server, server.start({"command": list(command), "cwd": str(cwd), "env": dict(env), "log": str(log)}))


class _Server:
    """The caller's side: requests written under a lock, replies read by a thread."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.changed = threading.Condition()
        self.started: dict[int, int] = {}  # request id -> pid
        self.exit_codes: dict[int, int] = {}  # pid -> exit status
        self._ids = itertools.count()
        self._write = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def start(self, request: dict) -> int:
        with self._write:
            request["id"] = number = next(self._ids)
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        with self.changed:
            self.changed.wait_for(lambda: number in self.started or self.process.poll() is not None)
            if number not in self.started:
                raise RuntimeError("verify's fork server stopped")
            return self.started[number]

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            with self.changed:
                if "started" in message:
                    self.started[message["id"]] = message["started"]
                else:
                    self.exit_codes[message["pid"]] = message["exit"]
                self.changed.notify_all()
        self.process.wait()
        with self.changed:  # the server died: nobody can tell these runs' ends any more
            for pid in set(self.started.values()) - set(self.exit_codes):
                self.exit_codes[pid] = 1
            self.changed.notify_all()


_lock = threading.Lock()
_servers: list[_Server | None] = []  # at most one: None where the server cannot fork


def _server() -> _Server | None:
    with _lock:
        if not _servers:
            _servers.append(_start_server())
        return _servers[0]


def _start_server() -> _Server | None:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (_ROOT, env.get("PYTHONPATH"))))
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", "from ddpify.verify.forkserver import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        )  # fmt: skip
    except OSError:
        return None
    ready = process.stdout.readline().strip()
    if ready != "forking":
        process.stdin.close()
        process.wait()
        return None
    atexit.register(_stop, process)
    return _Server(process)


def _stop(process: subprocess.Popen) -> None:
    """At the caller's exit: the server exits when its stdin ends (the runs it started are over)."""
    process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()


def serve() -> None:
    """The server's loop (in its own interpreter): import torch, then fork one child per request."""
    if not launch.preload_torch():
        print("no-fork", flush=True)
        return
    print("forking", flush=True)
    children: set[int] = set()
    buffer = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the caller is gone; its runs go on, unwatched
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _become(request["command"], request["cwd"], request["env"], request["log"])
                children.add(pid)
                _send({"id": request["id"], "started": pid})
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                _send({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


def _send(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _become(command: list[str], cwd: str, env: dict[str, str], log: str) -> None:
    """In the forked child: read nothing, write to `log`, move to `cwd`, run the program to its end."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    launch.run_forked(command, env, handlers={})  # the server's handlers are the interpreter's own
