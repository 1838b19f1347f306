"""Launchers for a converted DDP script: torchrun (bash), SLURM (sbatch) and Kubeflow (PyTorchJob).

All three kinds render from one typed `LaunchSpec` through jinja2 templates that live in the
repository's `templates/` folder (shipped in the wheel as `ddpify/templates`)::

    spec = LaunchSpec(kind="slurm", script="train_ddp.py", nodes=2, gpus_per_node=4)
    text = render(spec)

    write_launcher(Path("train_ddp.py"), "torchrun", ["--epochs", "3"])  # -> train_ddp.sh

Every value that reaches a shell goes through `shlex.quote`, every value that reaches YAML is a
double-quoted scalar, and values that land in places no quoting protects (`#SBATCH` lines, k8s
names) are validated instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2

import ddpify
from ddpify import sources

KINDS = ("torchrun", "slurm", "k8s")

_TEMPLATES = {"torchrun": "torchrun.sh.j2", "slurm": "slurm.sbatch.j2", "k8s": "pytorchjob.yaml.j2"}
_SUFFIXES = {"torchrun": ".sh", "slurm": ".sbatch", "k8s": ".yaml"}
_SHELL_KINDS = frozenset({"torchrun", "slurm"})

# sbatch reads `#SBATCH` lines itself, without a shell, so their values are checked, not quoted.
_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}")
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_SLURM_PARTITION = re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
# The training operator names pods and services after the job: an RFC 1035 label.
_K8S_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


class LaunchSpecError(ValueError):
    """A `LaunchSpec` value that no launcher can carry safely."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs; the same spec renders as any of the `KINDS`.

    `script` is the path as the launcher refers to it: relative to the launcher's own folder
    for torchrun and SLURM (where the launcher is normally written beside the script), and the
    path inside the container image (relative to `workdir`) for k8s.

    `gpus_per_node=None` means every visible GPU for torchrun (counted when the launcher runs)
    and one GPU per node for SLURM and k8s, which must request a number up front.
    """

    kind: str
    script: str
    script_args: tuple[str, ...] = ()
    nodes: int = 1
    gpus_per_node: int | None = None
    max_restarts: int = 0
    # SLURM job name, k8s metadata.name, and the torchrun rendezvous id.
    job_name: str = "ddp"
    # SLURM only.
    time: str = "01:00:00"
    partition: str | None = None
    # k8s only.
    image: str | None = None
    workdir: str | None = None

    def __post_init__(self) -> None:
        # Accept any sequence of arguments, keep a hashable tuple.
        object.__setattr__(self, "script_args", tuple(self.script_args))
        if self.kind not in KINDS:
            raise LaunchSpecError(f"unknown launcher kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if not self.script:
            raise LaunchSpecError("script must not be empty")
        if not all(isinstance(arg, str) for arg in self.script_args):
            raise LaunchSpecError("script_args must be strings")
        _check_count("nodes", self.nodes, minimum=1)
        if self.gpus_per_node is not None:
            _check_count("gpus_per_node", self.gpus_per_node, minimum=1)
        _check_count("max_restarts", self.max_restarts, minimum=0)
        if self.kind == "slurm":
            _check_pattern("time", self.time, _SLURM_TIME, "D-HH:MM:SS, HH:MM:SS or minutes")
            _check_pattern("job_name", self.job_name, _SLURM_NAME, "letters, digits and _.+-")
            if self.partition is not None:
                _check_pattern("partition", self.partition, _SLURM_PARTITION, "letters, digits and _.+-")
        elif self.kind == "k8s":
            if not self.image:
                raise LaunchSpecError("a k8s launcher needs a container image")
            if any(ch.isspace() for ch in self.image):
                raise LaunchSpecError(f"image {self.image!r} contains whitespace")
            _check_pattern(
                "job_name", self.job_name, _K8S_NAME, "lowercase letters, digits and '-', starting with a letter"
            )
        else:
            _check_pattern("job_name", self.job_name, _SLURM_NAME, "letters, digits and _.+-")

    @property
    def gpus_requested(self) -> int:
        """GPUs per node that SLURM and k8s ask the scheduler for."""
        return 1 if self.gpus_per_node is None else self.gpus_per_node


def _check_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LaunchSpecError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_pattern(name: str, value: object, pattern: re.Pattern[str], expected: str) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise LaunchSpecError(f"{name} {value!r} is not valid here: expected {expected}")


def launcher_path(script: Path, kind: str) -> Path:
    """Where the launcher for `script` goes by default: beside it, e.g. train_ddp.py -> train_ddp.sh."""
    if kind not in KINDS:
        raise LaunchSpecError(f"unknown launcher kind {kind!r}; choose one of {', '.join(KINDS)}")
    return script.with_suffix(_SUFFIXES[kind])


def default_job_name(script: Path, kind: str) -> str:
    """A job name derived from the script's file name that `kind` accepts."""
    stem = script.stem
    if kind == "k8s":
        name = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
        if not name[:1].isalpha():
            name = f"job-{name}".rstrip("-")
        return name[:63].rstrip("-")
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", stem).strip("-") or "ddp"


def spec_for_script(
    script: Path,
    kind: str = "torchrun",
    script_args: Sequence[str] = (),
    *,
    launcher: Path | None = None,
    **options: Any,
) -> LaunchSpec:
    """The spec for launching `script` from a launcher at `launcher` (default: `launcher_path`).

    The script is referred to relative to the launcher's folder, so launchers hold no absolute
    paths and keep working when the project is moved or copied to a cluster.
    """
    if launcher is None:
        launcher = launcher_path(script, kind)
    allowed = {f.name for f in fields(LaunchSpec)} - {"kind", "script", "script_args"}
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"unknown launcher option(s): {', '.join(sorted(unknown))}")
    # None means "not given" (as from an unset CLI flag): the spec's default applies.
    options = {name: value for name, value in options.items() if value is not None}
    options.setdefault("job_name", default_job_name(script, kind))
    try:
        relative = os.path.relpath(script.resolve(), launcher.resolve().parent)
    except ValueError:  # another drive on Windows
        relative = str(script.resolve())
    return LaunchSpec(
        kind=kind,
        script=Path(relative).as_posix(),
        script_args=tuple(script_args),
        **options,
    )


def render(spec: LaunchSpec) -> str:
    """The launcher text for `spec`."""
    template = _environment().get_template(_TEMPLATES[spec.kind])
    return template.render(
        spec=spec,
        script_is_absolute=PurePosixPath(spec.script).is_absolute(),
        # Single-quoted `$`/backticks are what we want; shellcheck flags them (SC2016).
        quotes_expansions=any(ch in arg for arg in (spec.script, *spec.script_args) for ch in "$`"),
    )


def write_launcher(
    script: Path,
    kind: str = "torchrun",
    script_args: Sequence[str] = (),
    *,
    output: Path | None = None,
    **options: Any,
) -> Path:
    """Render the launcher for `script` and write it to `output` (default: `launcher_path`).

    `options` are `LaunchSpec` fields (nodes, gpus_per_node, max_restarts, job_name, time,
    partition, image, workdir). The file is replaced atomically and shell launchers are made
    executable. Returns the path written.
    """
    script = Path(script)
    target = Path(output) if output is not None else launcher_path(script, kind)
    if target.resolve() == script.resolve():
        raise LaunchSpecError(f"refusing to overwrite the script {script} with its launcher")
    spec = spec_for_script(script, kind, script_args, launcher=target, **options)
    sources.write_atomic(target, render(spec).encode(), executable=kind in _SHELL_KINDS)
    return target


def _templates_dir() -> Path:
    package = Path(ddpify.__file__).resolve().parent
    installed = package / "templates"
    return installed if installed.is_dir() else package.parent / "templates"


_env: jinja2.Environment | None = None


def _environment() -> jinja2.Environment:
    global _env
    if _env is None:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_templates_dir()),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
        )
        env.filters["sh"] = lambda value: shlex.quote(str(value))
        env.filters["yaml"] = yaml_quote
        env.filters["k8s_arg"] = lambda value: yaml_quote(str(value).replace("$", "$$"))
        env.filters["comment"] = comment_safe
        _env = env
    return _env


def yaml_quote(value: object) -> str:
    """`value` as a YAML double-quoted scalar.

    JSON strings are YAML; on top of what JSON escapes, YAML also treats NEL, LINE SEPARATOR and
    PARAGRAPH SEPARATOR as line breaks and forbids other non-printable characters, so those are
    escaped too.
    """
    return "".join(_yaml_char(ch) for ch in json.dumps(str(value), ensure_ascii=False))


def _yaml_char(ch: str) -> str:
    code = ord(ch)
    printable = (
        0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or (0xE000 <= code <= 0xFFFD and code != 0xFEFF)
        or code >= 0x10000
    ) and code not in (0x2028, 0x2029)
    if printable:
        return ch
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def comment_safe(value: object) -> str:
    """`value` for a `#` comment line: line breaks and control characters become '?'."""
    return "".join(
        "?" if (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch in "\u2028\u2029") else ch for ch in str(value)
    )
