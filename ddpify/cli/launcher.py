"""`ddpify launcher`: write a torchrun, SLURM or Kubernetes launcher for a DDP script."""

from __future__ import annotations

from pathlib import Path

import click

from ddpify.launcher import (
    KINDS,
    LaunchSpecError,
    launcher_path,
    render,
    spec_for_script,
    write_launcher,
)

# Options that only one kind reads; giving them to another kind is a mistake worth reporting.
_KIND_ONLY = {"time": "slurm", "partition": "slurm", "image": "k8s", "workdir": "k8s"}


class LauncherError(click.ClickException):
    """A failure that is not about the command line itself (e.g. the file cannot be written)."""

    exit_code = 2


@click.command("launcher", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--kind", type=click.Choice(KINDS), default="torchrun", show_default=True, help="Launcher to write.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Number of nodes.")
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=1),
    help="Processes (GPUs) per node. Default: every visible GPU for torchrun, 1 for slurm and k8s.",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Times torchrun restarts the workers after a failure.",
)
@click.option("--job-name", help="SLURM job name, k8s job name, torchrun rendezvous id. Default: from SCRIPT.")
@click.option("--time", help="SLURM time limit, e.g. 04:00:00 or 1-00:00:00.  [default: 01:00:00]")
@click.option("--partition", help="SLURM partition.")
@click.option("--image", help="Container image that holds the script (required for k8s).")
@click.option("--workdir", help="k8s: the container's working directory, where SCRIPT lies in the image.")
@click.option(
    "-o",
    "--output",
    help="Where to write the launcher; '-' for stdout.  [default: beside SCRIPT, e.g. train_ddp.sh]",
)
def launcher_command(
    script: Path,
    script_args: tuple[str, ...],
    kind: str,
    nodes: int,
    gpus_per_node: int | None,
    max_restarts: int,
    job_name: str | None,
    time: str | None,
    partition: str | None,
    image: str | None,
    workdir: str | None,
    output: str | None,
) -> None:
    """Write a launcher for the DDP script SCRIPT.

    Arguments after `--` are baked in as the script's arguments; the torchrun and SLURM
    launchers also pass on their own arguments.

    \b
      ddpify launcher train_ddp.py                      # train_ddp.sh, torchrun
      ddpify launcher train_ddp.py --kind slurm --nodes 2 --gpus-per-node 4 -- --epochs 10
      ddpify launcher train_ddp.py --kind k8s --image registry/project:1.0 -o job.yaml

    Exits 0 when the launcher was written, 2 on an error.
    """
    kind_only = {"time": time, "partition": partition, "image": image, "workdir": workdir}
    for name, value in kind_only.items():
        if value is not None and _KIND_ONLY[name] != kind:
            raise click.UsageError(f"--{name} applies to --kind {_KIND_ONLY[name]} only")
    if kind == "k8s" and not image:
        raise click.UsageError("--kind k8s needs --image, the container image that holds the script")

    options = dict(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        max_restarts=max_restarts,
        job_name=job_name,
        **kind_only,
    )
    try:
        if output == "-":
            spec = spec_for_script(script, kind, script_args, launcher=launcher_path(script, kind), **options)
            click.echo(render(spec), nl=False)
            return
        target = Path(output) if output is not None else launcher_path(script, kind)
        if not target.parent.is_dir():
            raise click.UsageError(f"output folder {target.parent} does not exist")
        if target.is_dir():
            raise click.UsageError(f"output {target} is a folder")
        written = write_launcher(script, kind, script_args, output=target, **options)
    except LaunchSpecError as error:
        raise click.UsageError(str(error)) from error
    except OSError as error:
        raise LauncherError(f"cannot write {error.filename or 'the launcher'}: {error.strerror}") from error
    click.echo(f"ddpify: wrote {written} ({kind} launcher)", err=True)
