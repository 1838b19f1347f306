"""`ddpify convert` and `ddpify diff`: parse flags, fold them into one Settings, dispatch."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ddpify.convert import ConvertOptions
from ddpify.convert.files import Mode, Settings, convert_paths
from ddpify.launcher import KINDS
from ddpify.report import EXIT_BAD_INPUT, EXIT_CODES_HELP

KEEP_GLOBAL_BATCH_HELP = "Divide the DataLoader batch size by the world size at run time, so N ranks optimize what one process did."
SYNC_BN_HELP = "Convert the model's BatchNorm layers to SyncBatchNorm before the DDP wrap (on GPUs), so their statistics cover the global batch."
SEED_PER_RANK_HELP = (
    "Offset the script's seeds (torch.manual_seed, np.random.seed, random.seed) by the rank once the model is wrapped, "
    "so that dropout and augmentation differ across ranks; the weights and the sampler's shuffle stay shared."
)


def _options(keep_global_batch: bool, sync_bn: bool, seed_per_rank: bool) -> ConvertOptions:
    return ConvertOptions(keep_global_batch=keep_global_batch, sync_bn=sync_bn, seed_per_rank=seed_per_rank)


def _echo_out(text: str) -> None:
    # color=True: ANSI codes are only there when --color (or a terminal) asked for them
    click.echo(text, nl=False, color=True)


def _echo_err(text: str) -> None:
    click.echo(text, err=True)


@click.command("convert", epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True, type=str)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the converted script here (one input only).")
@click.option("--in-place", is_flag=True, help="Rewrite the source file itself.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if anything would change.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the diff and write nothing.")
@click.option("--report", is_flag=True, help="Print every change with its line and reason (warnings are always printed).")
@click.option("--keep-global-batch", is_flag=True, help=KEEP_GLOBAL_BATCH_HELP)
@click.option("--sync-bn", is_flag=True, help=SYNC_BN_HELP)
@click.option("--seed-per-rank", is_flag=True, help=SEED_PER_RANK_HELP)
@click.option("--launcher", type=click.Choice(KINDS), default="torchrun", show_default=True, help="Launcher to write beside the output.")
@click.option("--no-launcher", is_flag=True, help="Do not write a launcher.")
@click.option("--color/--no-color", default=None, help="Color the --diff output (default: when stdout is a terminal).")
def convert_command(
    paths: tuple[str, ...],
    output: Path | None,
    in_place: bool,
    check: bool,
    show_diff: bool,
    report: bool,
    keep_global_batch: bool,
    sync_bn: bool,
    seed_per_rank: bool,
    launcher: str,
    no_launcher: bool,
    color: bool | None,
) -> None:
    """Rewrite single-GPU training scripts into DDP scripts.

    PATHS are scripts, folders (their training scripts) or - (stdin to stdout). The output
    goes beside the source as NAME_ddp.py with a torchrun launcher NAME_ddp.sh.
    """
    if output is not None and in_place:
        raise click.UsageError("-o/--output and --in-place exclude each other")
    if check and show_diff:
        raise click.UsageError("--check and --diff exclude each other")
    mode = Mode.CHECK if check else Mode.DIFF if show_diff else Mode.IN_PLACE if in_place else Mode.WRITE
    settings = Settings(
        mode=mode,
        output=output,
        launcher=None if no_launcher else launcher,
        report=report,
        color=sys.stdout.isatty() if color is None else color,
        options=_options(keep_global_batch, sync_bn, seed_per_rank),
    )
    _run(paths, settings)


@click.command("diff", epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True, type=str)
@click.option("--keep-global-batch", is_flag=True, help=KEEP_GLOBAL_BATCH_HELP)
@click.option("--sync-bn", is_flag=True, help=SYNC_BN_HELP)
@click.option("--seed-per-rank", is_flag=True, help=SEED_PER_RANK_HELP)
@click.option("--report", is_flag=True, help="Also print every change with its line and reason.")
@click.option("--color/--no-color", default=None, help="Color the diff (default: when stdout is a terminal).")
def diff_command(
    paths: tuple[str, ...], keep_global_batch: bool, sync_bn: bool, seed_per_rank: bool, report: bool, color: bool | None
) -> None:
    """Show, as a unified diff, what `ddpify convert` would do. Nothing is written."""
    settings = Settings(
        mode=Mode.DIFF,
        report=report,
        color=sys.stdout.isatty() if color is None else color,
        options=_options(keep_global_batch, sync_bn, seed_per_rank),
    )
    _run(paths, settings)


def _run(paths: tuple[str, ...], settings: Settings) -> None:
    report = convert_paths(paths, settings, _echo_out, _echo_err)
    if len(paths) > 1 or any(not p.endswith(".py") and p != "-" for p in paths):
        _echo_err(report.summary())
    sys.exit(report.exit_code)


__all__ = ["EXIT_BAD_INPUT", "convert_command", "diff_command"]
