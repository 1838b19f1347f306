"""`ddpify launcher` (stub; owned by the launcher work)."""

import click


@click.command("launcher")
def launcher_command() -> None:
    """Not implemented yet."""
    raise click.ClickException("not implemented yet")
