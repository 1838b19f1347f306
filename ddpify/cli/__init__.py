"""The `ddpify` command line: a thin click layer that parses options and dispatches.

Each subcommand lives in its own module here; the work lives in the importable API
(`ddpify.convert`, `ddpify.lint`, `ddpify.launcher`, `ddpify.verify`).
"""

from __future__ import annotations

import click

from ddpify import __version__
from ddpify.cli import convert, launcher, lint, verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpify")
def cli() -> None:
    """Migrate single-GPU PyTorch training scripts to DistributedDataParallel."""


cli.add_command(convert.convert_command)
cli.add_command(convert.diff_command)
cli.add_command(lint.lint_command)
cli.add_command(lint.rules_command)
cli.add_command(lint.rule_command)
cli.add_command(verify.verify_command)
cli.add_command(launcher.launcher_command)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="ddpify")
