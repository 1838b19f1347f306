"""The `ddpify` command line: a thin click layer that parses options and dispatches.

Each subcommand lives in its own module here; the work lives in the importable API
(`ddpify.convert`, `ddpify.lint`, `ddpify.launcher`, `ddpify.verify`).
"""

from __future__ import annotations

import importlib

import click

from ddpify import __version__

# name -> (module, attribute): a command's module (and what it needs: the converter, the lint
# rules, the verify runner) is imported only when that command runs, so `ddpify lint` in a
# pre-commit hook does not pay for the converter.
COMMANDS = {
    "convert": ("ddpify.cli.convert", "convert_command"),
    "diff": ("ddpify.cli.convert", "diff_command"),
    "lint": ("ddpify.cli.lint", "lint_command"),
    "rules": ("ddpify.cli.lint", "rules_command"),
    "rule": ("ddpify.cli.lint", "rule_command"),
    "verify": ("ddpify.cli.verify", "verify_command"),
    "launcher": ("ddpify.cli.launcher", "launcher_command"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpify")
def cli() -> None:
    """Migrate single-GPU PyTorch training scripts to DistributedDataParallel."""


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="ddpify")
