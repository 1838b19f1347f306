"""`ddpify verify` (stub; owned by the verify work)."""

import click


@click.command("verify")
def verify_command() -> None:
    """Not implemented yet."""
    raise click.ClickException("not implemented yet")
