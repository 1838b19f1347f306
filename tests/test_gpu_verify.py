"""scripts/gpu_verify.py in --cpu mode on two real fixtures, asserting on the written report.

One invocation (module fixture) checks `equivalence` with 2 gloo ranks on CPU (every fixture
is verified by test_convert_run; this is the script's own report) and runs the overhead
benchmark harness on `main_argparse` (small, so it stays cheap); the tests read the markdown it
writes. The CUDA path itself needs a GPU machine.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_verify.py"
FIXTURES = REPO / "fixtures" / "convert"
CASES = ("equivalence",)


def load_gpu_verify():
    spec = importlib.util.spec_from_file_location("gpu_verify", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def table(report: str) -> dict[str, dict[str, str]]:
    """The fixture table's rows, by fixture name, as {column: cell}."""
    lines = [line for line in report.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))]
        if len(cells) == len(header) and cells[0] in CASES:
            rows[cells[0]] = dict(zip(header, cells))
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    missing = [case for case in CASES if not (FIXTURES / case / "train_ddp.py").is_file()]
    assert not missing, f"golden converted files missing: {', '.join(missing)}"
    out = tmp_path_factory.mktemp("gpu_verify") / "report.md"
    proc = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--cpu", "--cases", ",".join(CASES), "--out", str(out),
            "--timeout", "120",
            "--benchmark", "--bench-case", "main_argparse", "--bench-sub", "default=3=>default=2",
            "--bench-warmup", "2", "--bench-repeats", "1",
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.is_file(), proc.stderr
    text = out.read_text()
    assert proc.returncode == 0, text + proc.stderr
    return text


def test_report_header_names_device_and_torch(report: str) -> None:
    import torch

    assert "- device: CPU" in report
    assert f"- torch: {torch.__version__}" in report
    assert "- runs per fixture: gloo-cpu×2" in report


@pytest.mark.parametrize("case", CASES)
def test_fixture_row_passes_every_check(report: str, case: str) -> None:
    row = table(report)[case]
    epochs = tomllib.loads((FIXTURES / case / "case.toml").read_text())["epochs"]
    assert row["result"] == "PASS"
    assert row["runs"].startswith("gloo-cpu×2 ")
    assert (row["exit"], row["single output"], row["checkpoints"]) == ("ok", "ok", "ok")
    assert row["epochs"] == f"{epochs}/{epochs}"
    first, last = map(float, row["loss"].split(" → "))
    assert last < first


def test_equivalence_compares_parameters(report: str) -> None:
    rows = table(report)
    match = re.fullmatch(r"max abs diff (\S+)", rows["equivalence"]["equivalence"])
    assert match and float(match[1]) < 1e-5


def test_benchmark_reports_both_scripts_and_ratio(report: str) -> None:
    overhead = report.split("## Overhead", 1)[1]
    rows = re.findall(r"^\| (train(?:_ddp)?\.py) [^|]*\| ([^|]+) \|.*\| ([0-9.]+) \|$", overhead, re.M)
    assert [(script, how.strip()) for script, how, _ in rows] == [
        ("train.py", "python"), ("train_ddp.py", "torchrun, 1 rank"), ("train_ddp.py", "python, a world of one"),
    ]  # fmt: skip
    assert all(float(rate) > 0 for _, _, rate in rows)
    ratio = re.search(r"ratio converted / original: \*\*([0-9.]+)\*\* under torchrun, ([0-9.]+) as plain python \((\d+) measured steps", overhead)
    assert ratio and float(ratio[1]) > 0 and float(ratio[2]) > 0 and int(ratio[3]) >= 1


def test_flat_toml_fallback_reads_every_case_like_tomllib() -> None:
    """Python < 3.11 without tomli: the fallback parser must agree on every real case.toml."""
    gpu_verify = load_gpu_verify()
    cases = sorted(FIXTURES.glob("*/case.toml"))
    assert cases
    for path in cases:
        text = path.read_text()
        assert gpu_verify.parse_flat_toml(text) == tomllib.loads(text), path


def test_imports_neither_ddpify_nor_its_dependencies() -> None:
    """The GPU machine has torch and torchvision only."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('gpu_verify', {str(SCRIPT)!r})\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['gpu_verify'] = module\n"
        "spec.loader.exec_module(module)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'ddpify', 'click', 'libcst', 'jinja2'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert proc.stdout.strip() == "[]"


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available(),
    reason="this machine has CUDA",
)
def test_gpu_mode_without_cuda_is_bad_usage(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "", "--out", str(tmp_path / "r.md")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--cpu" in proc.stderr


def test_model_of_a_script_that_imports_a_companion_is_built() -> None:
    """companion_utils imports utils.py beside it; the H200 run failed to load its checkpoint for that."""
    gpu_verify = load_gpu_verify()
    case = gpu_verify.read_case(FIXTURES / "companion_utils")
    model = gpu_verify.build_model(case)
    assert sum(p.numel() for p in model.parameters()) > 0
    assert "utils" not in sys.modules or not str(getattr(sys.modules["utils"], "__file__", "")).startswith(
        str(FIXTURES / "companion_utils")
    )
