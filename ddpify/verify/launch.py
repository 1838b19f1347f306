"""Start N ranks on this machine the way torchrun does, without importing torch.

    python launch.py NPROC COMMAND...

Each rank runs `python COMMAND...` in a session of its own with the environment torchrun gives
a single-node job: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID. There is no elastic agent:
rank 0 hosts the rendezvous store (`init_process_group`'s env:// default). Like torchrun, when
one rank fails the others are killed and the exit status is 1; 0 when every rank exits 0.

`ddpify verify --launcher direct` uses it: it saves the launcher's own torch import (about
3 CPU-seconds a run) when many runs are judged in a row, as the test suite does.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


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


def main(argv: list[str]) -> int:
    nproc, command = int(argv[0]), argv[1:]
    port = free_port()
    ranks = [
        subprocess.Popen([sys.executable, *command], env=rank_env(rank, nproc, port), start_new_session=True)
        for rank in range(nproc)
    ]
    while True:
        codes = [rank.poll() for rank in ranks]
        if any(code not in (None, 0) for code in codes):
            for rank, code in zip(ranks, codes):
                if code is None:
                    os.killpg(rank.pid, signal.SIGKILL)
                    rank.wait()
            return 1
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
