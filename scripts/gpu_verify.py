#!/usr/bin/env python
"""Train every converted golden fixture under DDP on this machine and write a markdown report.

Usage:
    python scripts/gpu_verify.py [--out report.md]          # a machine with CUDA
    python scripts/gpu_verify.py --cpu --cases a,b          # CI: 2 gloo ranks on CPU

GPU mode runs each fixture's golden `train_ddp.py` twice: one NCCL rank per visible GPU, then
2 ranks sharing the first GPU through gloo (ddpify verify forces gloo and maps LOCAL_RANK onto
that GPU; NCCL refuses two ranks on one device). --cpu runs 2 gloo ranks on CPU instead.

Per run: every rank exits 0 (a hang is killed after --timeout seconds without progress); the
epoch lines come from one rank only and no line is printed by more than one rank; there are
`epochs` epoch lines and the loss of the last is below the first; each checkpoint in case.toml
is written, loads, has no `module.` keys and loads strictly into the plain model (case.toml
`model`, evaluated after the original script's imports, classes and functions). For
`equivalence = true` the run's `params_file` must match (rtol 1e-4, atol 1e-5) the one the
original train.py writes as one process on the same device.

--benchmark (on by default with CUDA): the `torchvision_fakedata` original (plain python) and
converted (torchrun, world size 1) scripts, on the first GPU, in the same invocation and
alternating, with constants scaled up by text substitution (--bench-sub) so that batches load
the GPU. A prelude in each process counts samples per optimizer step (batch size of the first
top-level module call) and times the steps after --bench-warmup with CUDA synchronized; the
report gives samples/s of each and the converted/original ratio.

Needs only torch and torchvision (and whatever the fixtures import): it runs the golden files
already in fixtures/convert/ and loads the ddpify/verify package by path, which imports only the
standard library. Exit status: 0 every fixture passed, 1 one failed, 2 bad usage (no CUDA without --cpu,
an unknown case).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FIXTURES = REPO / "fixtures" / "convert"
BENCH_CASE = "torchvision_fakedata"
# Scale the fixture up: 64 steps of 256 images of 128x128, fed by 12 workers, in one epoch, through
# a ResNet-152, so that the GPU and not FakeData's workers set the pace (with ResNet-18 an H200
# waited for the workers, about 650 images/s each, and the ratio measured CPU contention).
DEFAULT_BENCH_SUBS = (
    "EPOCHS = 2=>EPOCHS = 1",
    "BATCH_SIZE = 16=>BATCH_SIZE = 256",
    "size=64,=>size=16384,",
    "image_size=(3, 32, 32)=>image_size=(3, 128, 128)",
    "num_workers=0=>num_workers=12",
    "models.resnet18(num_classes=10)=>models.resnet152(num_classes=10)",
)
EQUIVALENCE_RTOL = 1e-4
EQUIVALENCE_ATOL = 1e-5


def load_verify_module():
    """The ddpify/verify package by path: standard library only, so no ddpify dependencies are needed."""
    package = REPO / "ddpify" / "verify"
    spec = importlib.util.spec_from_file_location(
        "ddpify_verify_standalone", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


verify = load_verify_module()

BENCH_PRELUDE = r'''
"""gpu_verify benchmark hooks: samples/s over the optimizer steps after the warm-up."""
import atexit
import json
import os
import time

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

_out = os.environ["GPU_VERIFY_BENCH_OUT"]
_warmup = int(os.environ["GPU_VERIFY_BENCH_WARMUP"])
_state = {"depth": 0, "batch": None, "steps": 0, "samples": 0, "t0": None, "t1": None, "last": None, "waited": 0.0}


def _first_dim(value):
    if isinstance(value, torch.Tensor):
        return value.shape[0] if value.dim() > 0 else None
    if isinstance(value, (list, tuple)):
        value = list(value)
    elif isinstance(value, dict):
        value = list(value.values())
    else:
        return None
    for item in value:
        found = _first_dim(item)
        if found is not None:
            return found
    return None


def _pre(module, args):
    # The first top-level module call of a step is the model (DDP or plain): its batch counts.
    if _state["depth"] == 0 and _state["batch"] is None:
        _state["batch"] = _first_dim(args)
        if _state["last"] is not None:  # from the last measured step to this forward: waiting for the batch
            _state["waited"] += time.perf_counter() - _state["last"]
    _state["depth"] += 1


def _post(module, args, output):
    _state["depth"] -= 1


def _step(optimizer, args, kwargs):
    _state["steps"] += 1
    batch, _state["batch"] = _state["batch"], None
    if _state["steps"] < _warmup:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    now = time.perf_counter()
    if _state["steps"] == _warmup:
        _state["t0"] = now
    else:
        _state["samples"] += batch or 0
        _state["t1"] = now
    _state["last"] = now


def _write():
    seconds = (_state["t1"] - _state["t0"]) if _state["t1"] is not None else 0.0
    with open(_out, "w") as out:
        json.dump({"steps": _state["steps"], "measured_steps": max(0, _state["steps"] - _warmup),
                   "samples": _state["samples"], "seconds": seconds, "waited": _state["waited"]}, out)


if os.environ.get("RANK", "0") == "0":
    register_module_forward_pre_hook(_pre)
    register_module_forward_hook(_post)
    register_optimizer_step_post_hook(_step)
    atexit.register(_write)
'''


# --- case.toml ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    description: str
    expect: str
    run_args: tuple[str, ...]
    epochs: int
    epoch_line: str
    loss: str
    checkpoints: tuple[str, ...]
    state_dict_key: str
    model: str
    original_runs_on_cpu: bool
    equivalence: bool
    params_file: str
    entry: str = ""  # a library fixture: the companion script that drives train.py


def read_case(path: Path) -> Case:
    data = parse_toml((path / "case.toml").read_text())
    return Case(
        name=path.name,
        path=path,
        description=data.get("description", ""),
        expect=data.get("expect", "convert"),
        run_args=tuple(data.get("run_args", ())),
        epochs=int(data.get("epochs", 0)),
        epoch_line=data.get("epoch_line", r"^epoch \d+"),
        loss=data.get("loss", r"loss ([0-9.eE+-]+)"),
        checkpoints=tuple(data.get("checkpoints", ())),
        state_dict_key=data.get("state_dict_key", ""),
        model=data.get("model", ""),
        original_runs_on_cpu=bool(data.get("original_runs_on_cpu", True)),
        equivalence=bool(data.get("equivalence", False)),
        params_file=data.get("params_file", ""),
        entry=data.get("entry", ""),
    )


def parse_toml(text: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return parse_flat_toml(text)
    return tomllib.loads(text)


def parse_flat_toml(text: str) -> dict:
    """Enough TOML for case.toml on Python < 3.11 without tomli: one `key = value` per line."""
    data = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            data[key.strip()] = _toml_value(value.strip())
    return data


def _toml_value(text: str):
    if text.startswith("'"):
        return text[1 : text.index("'", 1)]  # literal string: no escapes
    if text.startswith(("[", '"')):
        return json.JSONDecoder().raw_decode(text)[0]  # basic strings and arrays of them
    text = text.split("#", 1)[0].strip()
    if text in ("true", "false"):
        return text == "true"
    return float(text) if any(c in text for c in ".eE") else int(text)


# --- runs and checks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    name: str  # "nccl", "gloo-shared", "gloo-cpu"
    nproc: int
    cuda_visible_devices: str | None  # None: every GPU this process sees

    @property
    def label(self) -> str:
        return f"{self.name}×{self.nproc}"


@dataclass
class Cell:
    ok: bool
    text: str


@dataclass
class RunReport:
    mode: Mode
    wall_time: float = 0.0
    cells: dict[str, Cell] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    logs: str = ""

    @property
    def ok(self) -> bool:
        return all(cell.ok for cell in self.cells.values())


@dataclass
class FixtureReport:
    case: Case
    status: str  # PASS, FAIL, SKIP
    note: str = ""
    runs: list[RunReport] = field(default_factory=list)


COLUMNS = ("exit", "epochs", "loss", "single output", "checkpoints", "verify", "equivalence")


def gpu_modes() -> list[Mode]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else []
    first = ids[0] if ids else "0"
    return [Mode("nccl", torch.cuda.device_count(), None), Mode("gloo-shared", 2, first)]


def check_fixture(case: Case, modes: list[Mode], options: argparse.Namespace, scratch: Path) -> FixtureReport:
    if case.expect != "convert":
        return FixtureReport(case, "SKIP", f"expect = {case.expect!r}: nothing converted")
    if options.cpu and not case.original_runs_on_cpu:
        return FixtureReport(case, "SKIP", "needs CUDA (original_runs_on_cpu = false)")
    script = case.path / "train_ddp.py"
    if not script.is_file():
        return FixtureReport(case, "FAIL", "train_ddp.py missing: the golden converted file is not there")
    if case.entry:  # a library: its driver runs, with the converted file in the original's place
        staged = scratch / case.name / "library"
        staged.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(script, staged / "train.py")
        shutil.copyfile(case.path / case.entry, staged / case.entry)
        script = staged / case.entry
    reference = None
    if case.equivalence:
        reference = run_reference(case, modes[-1], options, scratch / case.name / "reference")
    report = FixtureReport(case, "PASS")
    for mode in modes:
        workdir = scratch / case.name / mode.name
        run = check_run(case, script, mode, options, workdir, reference)
        report.runs.append(run)
        status = "ok" if run.ok else "FAIL"
        print(f"  {case.name} [{mode.label}] {status} {run.wall_time:.1f} s", file=sys.stderr)
    if not all(run.ok for run in report.runs):
        report.status = "FAIL"
    return report


def run_options(options: argparse.Namespace, mode: Mode, workdir: Path, args, **overrides):
    """ddpify verify's options for one run of `mode` in `workdir`, which the caller keeps."""
    workdir.mkdir(parents=True, exist_ok=True)
    return verify.VerifyOptions(
        nproc=mode.nproc,
        timeout=options.timeout,
        python=options.python,
        script_args=tuple(args),
        workdir=workdir,
        cuda_visible_devices=mode.cuda_visible_devices,
        **overrides,
    )


def run_reference(case: Case, mode: Mode, options, workdir: Path):
    """The original train.py as one plain process on `mode`'s device: its params_file, or an error."""
    one_process = Mode("reference", 1, mode.cuda_visible_devices)
    result = verify.verify_script(
        case.path / "train.py",
        run_options(options, one_process, workdir, case.run_args, torchrun=False),
    )
    params = workdir / case.params_file
    if not result.run.ranks or result.run.ranks[0].exit_code != 0:
        return f"original train.py failed: {result.run.ranks[0].describe() if result.run.ranks else 'no run'}"
    if not params.is_file():
        return f"original train.py wrote no {case.params_file}"
    return torch.load(params, map_location="cpu", weights_only=False)


def check_run(case: Case, script: Path, mode: Mode, options, workdir: Path, reference) -> RunReport:
    report = RunReport(mode)
    try:
        result = verify.verify_script(script, run_options(options, mode, workdir, case.run_args))
    except verify.VerifyInputError as exc:
        report.cells["exit"] = Cell(False, "did not run")
        report.problems.append(str(exc))
        return report
    report.wall_time = result.run.wall_time
    ranks = result.run.ranks

    bad = [r for r in ranks if not r.ok]
    exit_ok = not bad and not result.run.hung
    report.cells["exit"] = Cell(exit_ok, "ok" if exit_ok else "FAIL")
    for rank in bad:
        report.problems.append(f"rank {rank.rank}: {rank.describe()}")
        if rank.started:
            report.logs += f"--- rank {rank.rank} stderr (last lines)\n" + _tail(rank.stderr, 15)
    if result.run.hung and not result.run.hung_ranks:
        report.problems.append("every rank finished but torchrun did not exit")
    if not all(r.started for r in ranks):
        report.logs += "--- torchrun (last lines)\n" + _tail(result.run.launcher_output, 15)

    epoch_re = re.compile(case.epoch_line)
    epoch_lines = {r.rank: [line for line in r.stdout.splitlines() if epoch_re.search(line)] for r in ranks}
    printing = [rank for rank, lines in epoch_lines.items() if lines]
    single = len(printing) == 1 and not result.duplicates
    report.cells["single output"] = Cell(single, "ok" if single else "FAIL")
    if len(printing) > 1:
        report.problems.append(f"epoch lines printed by ranks {', '.join(map(str, printing))}")
    for duplicate in result.duplicates[:3]:
        report.problems.append(f"printed by ranks {duplicate.ranks}: {duplicate.text!r}")

    lines = epoch_lines[printing[0]] if printing else []
    report.cells["epochs"] = Cell(len(lines) == case.epochs, f"{len(lines)}/{case.epochs}")
    if len(lines) != case.epochs:
        report.problems.append(f"{len(lines)} epoch lines, expected {case.epochs}")
    losses = [float(m.group(1)) for m in map(re.compile(case.loss).search, lines) if m]
    loss_ok = len(losses) >= 2 and losses[-1] < losses[0]
    loss_text = f"{losses[0]:.4g} → {losses[-1]:.4g}" if losses else "none"
    report.cells["loss"] = Cell(loss_ok, loss_text)
    if not loss_ok:
        report.problems.append(f"loss does not go down: {losses}")

    # ddpify verify's own judgement: replicas, forward through DDP, data sharding, side effects...
    failed = [check for check in result.failures if not check.name.startswith(("rank ", "checkpoint"))]
    report.cells["verify"] = Cell(not failed, "ok" if not failed else ", ".join(c.name for c in failed))
    report.problems += [f"verify {check.name}: {check.detail}" for check in failed]

    problems = check_checkpoints(case, result, workdir)
    report.cells["checkpoints"] = Cell(not problems, "ok" if not problems else "FAIL")
    report.problems += problems

    if case.equivalence:
        ok, text = compare_params(reference, workdir / case.params_file)
        report.cells["equivalence"] = Cell(ok, text)
        if not ok:
            report.problems.append(f"equivalence: {text}")
    return report


def check_checkpoints(case: Case, result, workdir: Path) -> list[str]:
    problems = []
    for ckpt in result.checkpoints:
        if not ckpt.ok:
            problems.append(f"{ckpt.path}: {verify.describe_checkpoint(ckpt)}")
    for name in case.checkpoints:
        path = workdir / name
        if not path.is_file():
            problems.append(f"{name}: not written")
            continue
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
            state_dict = obj[case.state_dict_key] if case.state_dict_key else obj
            build_model(case).load_state_dict(state_dict, strict=True)
        except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
            problems.append(
                f"{name}: does not load into {case.model}: {type(exc).__name__}: {_first_line(exc)}"
            )
    return problems


_model_namespaces: dict[Path, dict] = {}


def build_model(case: Case) -> torch.nn.Module:
    """`case.model` evaluated after the original script's imports, classes and functions only."""
    namespace = _model_namespaces.get(case.path)
    if namespace is None:
        source = (case.path / "train.py").read_text()
        tree = ast.parse(source)
        kept = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        tree.body = [node for node in tree.body if isinstance(node, kept)]
        namespace = {"__name__": f"gpu_verify_{case.name}"}
        # the script imports its companions (utils.py beside it) as `python train.py` would find them;
        # they leave sys.modules again so that another fixture's utils.py is not taken for this one
        before = set(sys.modules)
        sys.path.insert(0, str(case.path))
        try:
            exec(compile(tree, str(case.path / "train.py"), "exec"), namespace)
        finally:
            sys.path.remove(str(case.path))
            for name in set(sys.modules) - before:
                if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(case.path)):
                    del sys.modules[name]
        _model_namespaces[case.path] = namespace
    return eval(case.model, namespace)


def compare_params(reference, path: Path) -> tuple[bool, str]:
    if not isinstance(reference, dict):
        return False, reference or "no reference"
    if not path.is_file():
        return False, f"{path.name} not written"
    params = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(params, dict) or not params:
        return False, f"{path.name} is not a state dict"
    if set(params) != set(reference):
        return False, f"keys differ: {sorted(set(params) ^ set(reference))[:4]}"
    max_diff = max((params[k].float() - reference[k].float()).abs().max().item() for k in params)
    close = all(
        torch.allclose(params[k].float(), reference[k].float(), rtol=EQUIVALENCE_RTOL, atol=EQUIVALENCE_ATOL)
        for k in params
    )
    return close, f"max abs diff {max_diff:.1e}"


# --- benchmark ------------------------------------------------------------------------------------


@dataclass
class Benchmark:
    case: str
    subs: tuple[str, ...]
    warmup: int
    original: list[float] = field(default_factory=list)  # samples/s, one per repeat
    converted: list[float] = field(default_factory=list)  # under torchrun, one rank
    converted_plain: list[float] = field(default_factory=list)  # `python train_ddp.py`: a world of one, no torchrun
    waited: list[float] = field(default_factory=list)  # share of each run's measured time spent waiting for batches
    steps: int = 0
    error: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.original or not self.converted:
            return None
        return statistics.median(self.converted) / statistics.median(self.original)


def run_benchmark(case_dir: Path, mode: Mode, options: argparse.Namespace, scratch: Path) -> Benchmark:
    bench = Benchmark(case_dir.name, tuple(options.bench_sub), options.bench_warmup)
    bench_dir = scratch / "benchmark"
    bench_dir.mkdir(parents=True, exist_ok=True)
    try:
        scripts = {
            name: substitute(case_dir / f"{name}.py", bench.subs, bench_dir / f"{name}.py")
            for name in ("train", "train_ddp")
        }
    except (OSError, ValueError) as exc:
        bench.error = str(exc)
        return bench
    prelude = bench_dir / "bench_prelude.py"
    prelude.write_text(BENCH_PRELUDE)
    for repeat in range(options.bench_repeats):
        # Alternate original and converted so that drift (clocks, thermals) hits both alike.
        for name, torchrun, samples in (
            ("train", False, bench.original),
            ("train_ddp", True, bench.converted),
            ("train_ddp", False, bench.converted_plain),
        ):
            label = f"{name}{'' if torchrun or name == 'train' else '.plain'}.{repeat}"
            out = bench_dir / f"{label}.json"
            workdir = bench_dir / label
            result = verify.verify_script(
                scripts[name],
                run_options(
                    options, Mode("bench", 1, mode.cuda_visible_devices), workdir, (),
                    torchrun=torchrun, prelude=prelude,
                    extra_env={
                        "GPU_VERIFY_BENCH_OUT": str(out),
                        "GPU_VERIFY_BENCH_WARMUP": str(options.bench_warmup),
                    },
                ),
            )  # fmt: skip
            if not result.run.ok or not out.is_file():  # the original is no DDP script: exit status only
                rank = result.run.ranks[0] if result.run.ranks else None
                bench.error = f"{name}.py: {rank.describe() if rank else 'did not start'}"
                return bench
            data = json.loads(out.read_text())
            if data["measured_steps"] < 1 or data["seconds"] <= 0:
                bench.error = (
                    f"{name}.py: {data['steps']} steps, not more than --bench-warmup {options.bench_warmup}"
                )
                return bench
            samples.append(data["samples"] / data["seconds"])
            bench.waited.append(data.get("waited", 0.0) / data["seconds"])
            bench.steps = data["measured_steps"]
            how = "torchrun" if torchrun else "python"
            print(f"  benchmark {name}.py ({how}) run {repeat + 1}: {samples[-1]:.1f} samples/s", file=sys.stderr)
    return bench


def substitute(source: Path, subs, target: Path) -> Path:
    text = source.read_text()
    for sub in subs:
        old, sep, new = sub.partition("=>")
        if not sep or old not in text:
            raise ValueError(f"--bench-sub {sub!r}: {old!r} not found in {source.name}")
        text = text.replace(old, new)
    target.write_text(text)
    return target


# --- report -------------------------------------------------------------------------------------


def device_lines(cpu: bool) -> list[str]:
    if cpu:
        return [f"- device: CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), gloo"]
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return [f"- device: {len(names)} × {', '.join(sorted(set(names)))} (CUDA {torch.version.cuda})"]


def write_report(
    path: Path, reports: list[FixtureReport], modes: list[Mode], bench: Benchmark | None, cpu: bool
) -> None:
    try:
        import torchvision

        vision = torchvision.__version__
    except ImportError:
        vision = "not installed"
    lines = [
        "# ddpify GPU verification" if not cpu else "# ddpify verification (CPU, --cpu)",
        "",
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        *device_lines(cpu),
        f"- torch: {torch.__version__}, torchvision: {vision}, python: {platform.python_version()}",
        f"- runs per fixture: {', '.join(mode.label for mode in modes)}",
        "",
        "| fixture | result | runs | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (3 + len(COLUMNS)),
    ]
    for fixture in reports:
        if not fixture.runs:
            cells = [fixture.note] + ["–"] * len(COLUMNS)
        else:
            runs = "; ".join(f"{run.mode.label} {run.wall_time:.1f} s" for run in fixture.runs)
            cells = [runs] + [_merge_cells(fixture.runs, column) for column in COLUMNS]
        cells = [fixture.case.name, fixture.status, *cells]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    if bench is not None:
        lines += [
            "",
            "## Overhead",
            "",
            f"`{bench.case}` at world size 1: samples/s over the optimizer steps after the first"
            f" {bench.warmup}, both scripts in this run, alternating.",
        ]
        lines += ["", f"- substitutions: {', '.join(f'`{s}`' for s in bench.subs)}"]
        if bench.error:
            lines += [f"- benchmark failed: {bench.error}"]
        else:
            lines += [
                "",
                "| script | launched as | samples/s (each run) | median |",
                "|---|---|---|---|",
                _bench_row("train.py (original)", "python", bench.original),
                _bench_row("train_ddp.py (converted)", "torchrun, 1 rank", bench.converted),
                _bench_row("train_ddp.py (converted)", "python, a world of one", bench.converted_plain),
                "",
                f"- ratio converted / original: **{bench.ratio:.3f}** under torchrun, "
                f"{statistics.median(bench.converted_plain) / statistics.median(bench.original):.3f} as plain python "
                f"({bench.steps} measured steps per run)",
                f"- time spent waiting for the next batch (from an optimizer step to the next forward): "
                f"{min(bench.waited):.0%} to {max(bench.waited):.0%} of a run; near 0 means the GPU set the pace",
            ]
    failing = [(f, run) for f in reports for run in f.runs if run.problems]
    if failing or any(f.status == "FAIL" and not f.runs for f in reports):
        lines += ["", "## Failures"]
        for fixture in reports:
            if fixture.status == "FAIL" and not fixture.runs:
                lines += ["", f"### {fixture.case.name}", "", f"- {fixture.note}"]
        for fixture, run in failing:
            lines += ["", f"### {fixture.case.name} [{run.mode.label}]", ""]
            lines += [f"- {problem}" for problem in run.problems]
            if run.logs:
                lines += ["", "```", run.logs.rstrip(), "```"]
    path.write_text("\n".join(lines) + "\n")


def _merge_cells(runs: list[RunReport], column: str) -> str:
    cells = [(run.mode, run.cells.get(column)) for run in runs]
    present = [(mode, cell) for mode, cell in cells if cell is not None]
    if not present:
        return "–"
    texts = {cell.text for _, cell in present}
    if len(present) == 1 or (len(texts) == 1 and all(cell.ok for _, cell in present)):
        return present[0][1].text
    return "; ".join(f"{mode.name}: {cell.text}" for mode, cell in present)


def _bench_row(script: str, launched_as: str, rates: list[float]) -> str:
    each = ", ".join(f"{rate:.1f}" for rate in rates)
    return f"| {script} | {launched_as} | {each} | {statistics.median(rates):.1f} |"


def _tail(text: str, n: int) -> str:
    return "".join(line + "\n" for line in text.splitlines()[-n:])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="2 gloo ranks on CPU instead of the GPU runs (CI)")
    parser.add_argument("--cases", help="comma-separated fixture names (default: all; '' runs none)")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES, help="fixture directory")
    parser.add_argument("--out", type=Path, default=Path("gpu_verify_report.md"), help="markdown report path")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds without progress before a run is a hang"
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the runs")
    parser.add_argument(
        "--scratch", type=Path, help="directory for the runs' working directories (default: temporary)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--jobs", type=int, default=1, help="fixtures checked at once (the benchmark runs alone after them)"
    )
    bench = parser.add_mutually_exclusive_group()
    bench.add_argument(
        "--benchmark",
        dest="benchmark",
        action="store_true",
        default=None,
        help="measure overhead (default with CUDA)",
    )
    bench.add_argument("--no-benchmark", dest="benchmark", action="store_false")
    parser.add_argument("--bench-case", default=BENCH_CASE)
    parser.add_argument(
        "--bench-sub",
        action="append",
        help="OLD=>NEW text substitution in both scripts (replaces the defaults)",
    )
    parser.add_argument(
        "--bench-warmup", type=int, default=10, help="optimizer steps excluded from the timing"
    )
    parser.add_argument("--bench-repeats", type=int, default=2)
    options = parser.parse_args(argv)
    if options.bench_sub is None:
        options.bench_sub = list(DEFAULT_BENCH_SUBS)
    if options.benchmark is None:
        options.benchmark = not options.cpu
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    if not options.cpu and not torch.cuda.is_available():
        print("error: no CUDA device; use --cpu for the CPU checks", file=sys.stderr)
        return 2
    all_cases = sorted(p.name for p in options.fixtures.iterdir() if (p / "case.toml").is_file())
    names = all_cases if options.cases is None else [n.strip() for n in options.cases.split(",") if n.strip()]
    unknown = sorted(set(names) - set(all_cases))
    if unknown:
        print(f"error: unknown case(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    modes = [Mode("gloo-cpu", 2, "")] if options.cpu else gpu_modes()
    scratch = Path(options.scratch or tempfile.mkdtemp(prefix="gpu-verify-")).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    reports, bench = [], None
    try:
        cases = [read_case(options.fixtures / name) for name in names]
        # Fixtures are independent (own scratch folders, torchrun picks free ports): --jobs runs
        # several at once; the benchmark below always runs alone.
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            reports = list(pool.map(lambda case: check_fixture(case, modes, options, scratch), cases))
        if options.benchmark:
            print(f"benchmark {options.bench_case}", file=sys.stderr)
            bench = run_benchmark(options.fixtures / options.bench_case, modes[-1], options, scratch)
    except verify.VerifyInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if not options.keep and options.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    write_report(options.out, reports, modes, bench, options.cpu)
    failed = [r.case.name for r in reports if r.status == "FAIL"] + (
        ["benchmark"] if bench and bench.error else []
    )
    print(
        f"report: {options.out} ({time.monotonic() - started:.0f} s); failed: {', '.join(failed) or 'none'}",
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
