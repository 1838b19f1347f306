"""`ddpify convert` and `ddpify diff` (work in progress)."""

import click


@click.command("convert")
def convert_command() -> None:
    """Rewrite training scripts into DDP scripts."""
    raise click.ClickException("not implemented yet")


@click.command("diff")
def diff_command() -> None:
    """Show what convert would change."""
    raise click.ClickException("not implemented yet")
