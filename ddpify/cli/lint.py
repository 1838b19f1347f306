"""`ddpify lint`, `ddpify rules`, `ddpify rule` (work in progress)."""

import click


@click.command("lint")
def lint_command() -> None:
    """Check DDP scripts for pitfalls."""
    raise click.ClickException("not implemented yet")


@click.command("rules")
def rules_command() -> None:
    """List the lint rules."""
    raise click.ClickException("not implemented yet")


@click.command("rule")
def rule_command() -> None:
    """Print one rule's documentation."""
    raise click.ClickException("not implemented yet")
