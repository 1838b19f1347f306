"""`ddpify verify`: parse options, run `ddpify.verify.verify_script`, print its table."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TextIO

import click

from ddpify import verify as verify_api

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL_ERROR = 123

EPILOG = """\b
Checks (each row of the table; --format json gives the same with evidence):
  rank N               the rank's exit status; a hang names the line it is stuck on
  steps                with --steps: where the ranks were stopped
  replicas             every DDP model ends with the same parameters on every
                       rank, and so do parameters an optimizer steps outside
                       DDP; backward() with no DDP model at all fails
  forward through DDP  the training forward ran through the DDP wrapper, not
                       model.module(...) or a custom method of the model
  data sharding        each DataLoader that fed backward() gave each rank its
                       own samples (disjoint indices apart from padding; for an
                       IterableDataset, different first batches), and a
                       shuffling DistributedSampler changed order per epoch;
                       data not from a DataLoader is reported as unchecked
  side effects         files written under the scratch or the script's folder
                       by ranks other than 0 are listed; a path written by two
                       ranks fails
  process group        initialized once and destroyed once on every rank
  duplicate lines      no output line printed by more than one rank
  checkpoint PATH      each checkpoint loads and has no 'module.' keys
  single process       with --single: `python SCRIPT` as one process exits 0
The facts are recorded inside every rank by a shim that adds no collective.

\b
Ranks share GPUs through gloo when there are fewer GPUs than ranks (NCCL refuses
two ranks on one device): verify then makes init_process_group use gloo and sets
LOCAL_RANK to local_rank % device_count in each rank (the true local rank is in
DDPIFY_VERIFY_LOCAL_RANK). Relative paths in SCRIPT_ARGS resolve against the
scratch directory.

\b
Exit codes:
  0    all checks passed (unchecked and info rows do not fail)
  1    a check failed
  2    bad input: missing script, an interpreter that cannot import torch
  123  internal error
"""


class Spinner:
    """A one-line progress indicator on a terminal stream, redrawn on each progress report."""

    FRAMES = "|/-\\"

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.frame = 0
        self.width = 0

    def __call__(self, progress: verify_api.Progress) -> None:
        self.frame = (self.frame + 1) % len(self.FRAMES)
        text = (
            f"{self.FRAMES[self.frame]} {progress.elapsed:5.1f} s  "
            f"{progress.finished_ranks}/{progress.nproc} ranks finished"
        )
        if progress.idle >= 5:
            text += f"  (no output for {progress.idle:.0f} s)"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


@click.command(
    "verify",
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--nproc", type=click.IntRange(min=1), default=2, show_default=True, help="Number of ranks.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Seconds without progress (no rank output, no new file) before the ranks still running "
    "count as hung and are killed.",
)
@click.option(
    "--python",
    "python",
    default=sys.executable,
    show_default="this interpreter",
    help="Interpreter that has torch; runs torchrun and loads the checkpoints.",
)
@click.option("--gloo", is_flag=True, help="Force gloo even when every rank has its own GPU.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Scratch working directory for the run (default: a new temporary directory).",
)
@click.option("--keep", is_flag=True, help="Keep the scratch directory and the per-rank logs.")
@click.option(
    "--single",
    is_flag=True,
    help="Also run SCRIPT as one plain process (no torchrun), in a scratch directory of its own "
    "(a copy of --workdir when given); the check fails if that run fails.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    metavar="K",
    help="Stop every rank right after its K-th optimizer step and judge the run so far.",
)
@click.option(
    "--launcher",
    type=click.Choice(["torchrun", "direct"]),
    default="torchrun",
    show_default=True,
    help="torchrun, or direct: verify starts the ranks itself with the environment torchrun sets "
    "(no elastic agent; one torch import less per run).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table: one row per check; json: one object with each check, its status and evidence.",
)
def verify_command(
    script: Path,
    script_args: tuple[str, ...],
    nproc: int,
    timeout: float,
    python: str,
    gloo: bool,
    workdir: Path | None,
    keep: bool,
    single: bool,
    steps: int | None,
    launcher: str,
    output_format: str,
) -> None:
    """Run a DDP SCRIPT under torchrun with --nproc ranks and judge the run.

    Beyond exit codes and hangs, verify checks what silently trains wrong: replicas
    that diverge, training that bypasses DDP, data every rank shares, files written
    by several ranks, a process group not set up and torn down once; then output
    printed by several ranks and checkpoints with 'module.' keys. Pass the script's
    own arguments after `--`:

        ddpify verify train_ddp.py --nproc 2 --single --steps 20 -- --epochs 1
    """
    options = verify_api.VerifyOptions(
        nproc=nproc,
        timeout=timeout,
        python=python,
        script_args=script_args,
        workdir=workdir,
        keep=keep,
        backend="gloo" if gloo else "auto",
        single=single,
        steps=steps or 0,
        launcher=launcher,
    )
    spinner = Spinner(sys.stderr) if sys.stderr.isatty() else None
    try:
        result = verify_api.verify_script(script, options, progress=spinner)
    except verify_api.VerifyInputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except Exception:
        click.echo("error: internal error in ddpify verify:", err=True)
        click.echo(traceback.format_exc(), err=True)
        sys.exit(EXIT_INTERNAL_ERROR)
    finally:
        if spinner is not None:
            spinner.clear()
    render = verify_api.format_json if output_format == "json" else verify_api.format_table
    click.echo(render(result), nl=False)
    if keep:
        click.echo(f"scratch directory: {result.run.workdir}", err=True)
        click.echo(f"per-rank logs: {result.run.state_dir}", err=True)
    sys.exit(EXIT_OK if result.ok else EXIT_CHECK_FAILED)
