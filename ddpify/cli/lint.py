"""`ddpify lint`, `ddpify rules`, `ddpify rule`: parse, dispatch, print."""

from __future__ import annotations

import sys

import click

from ddpify.lint.files import FORMATS, lint_paths, render
from ddpify.lint.rules import all_rules, rule_for
from ddpify.lint.selection import Selection, unknown_codes

LINT_EXIT_CODES = "Exit codes: 0 no findings; 1 findings; 2 bad input (unparsable file, missing path, bad config); 123 internal error."


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(c.strip() for c in value.split(",") if c.strip())


@click.command("lint", epilog=LINT_EXIT_CODES)
@click.argument("paths", nargs=-1, required=True)
@click.option("--select", help="Comma-separated codes or prefixes to run (DDP1, DDP303, ALL); replaces the defaults.")
@click.option("--ignore", help="Comma-separated codes or prefixes to skip.")
@click.option("--fix", is_flag=True, help="Apply the fixes marked safe, and print what was fixed.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
def lint_command(paths: tuple[str, ...], select: str | None, ignore: str | None, fix: bool, fmt: str) -> None:
    """Check DDP scripts for pitfalls that hang jobs or silently train wrong.

    Findings print as `path:line:col: CODE message`. Configure with [tool.ddpify.lint]
    (select, ignore) in pyproject.toml; silence a line with `# noqa` or `# noqa: DDP101`.
    """
    cli = Selection(_codes(select), _codes(ignore) or ())
    unknown = unknown_codes((cli.select or ()) + cli.ignore, all_rules())
    if unknown:
        raise click.UsageError(f"unknown rule code or prefix: {', '.join(unknown)} (see `ddpify rules`)")
    run = lint_paths(paths, cli, fix=fix)
    for finding, done in run.fixed:
        click.echo(f"fixed {finding.path}:{finding.line}: {finding.code} {done}", err=True)
    click.echo(render(run.findings, fmt), nl=False)
    for error in run.errors:
        click.echo(f"error: {error}", err=True)
    if fmt == "text" and (run.findings or run.fixed):
        fixable = sum(f.fixable for f in run.findings)
        tail = f" ({fixable} fixable with --fix)" if fixable and not fix else ""
        click.echo(f"Found {len(run.findings)} finding{'s' if len(run.findings) != 1 else ''}{tail}.", err=True)
    sys.exit(run.exit_code)


@click.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown"]), default="text", show_default=True)
def rules_command(fmt: str) -> None:
    """List the lint rules."""
    rules = all_rules()
    if fmt == "markdown":
        click.echo(rules_markdown(), nl=False)
        return
    for rule in rules:
        state = "on " if rule.default else "off"
        click.echo(f"{rule.code}  {state}  {rule.name:<40} fix: {rule.fix:<10} {rule.summary()}")


@click.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Print one rule's documentation (`ddpify rule DDP103`)."""
    rule = rule_for(code)
    if rule is None:
        raise click.UsageError(f"no rule {code} (see `ddpify rules`)")
    click.echo(rule.documentation(), nl=False)


def rules_markdown() -> str:
    """docs/rules.md: generated from the rules' docstrings."""
    rules = all_rules()
    lines = [
        "# ddpify lint rules",
        "",
        "Generated from the rules' docstrings by `ddpify rules --format markdown`; do not edit by hand.",
        "",
        "| code | name | default | fix | what it does |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| [{r.code}](#{r.code.lower()}-{r.name}) | {r.name} | {'on' if r.default else 'off'} | {r.fix} | {r.summary()} |" for r in rules]
    body = "\n".join(lines) + "\n"
    for rule in rules:
        body += "\n" + rule.documentation().replace("\n## ", "\n### ").replace("# ", "## ", 1)
    return body
