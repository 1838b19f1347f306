"""Each transform on small scripts: what it rewrites, what it must leave alone, what it warns about.

Every converted snippet must also compile and convert to itself (idempotence).
"""

from __future__ import annotations

import textwrap

import pytest

from ddpify.convert import ConvertOptions, convert_source

DEVICE = 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'
LOADER = "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)"
LOOP = """\
for epoch in range(2):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def script(body: str, helpers: str = "", imports: str = "") -> str:
    return (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        + imports
        + "\n\n"
        + (textwrap.dedent(helpers) + "\n\n" if helpers else "")
        + "def main():\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + '\n\nif __name__ == "__main__":\n    main()\n'
    )


def standard(
    model: str = "model = nn.Linear(4, 1).to(device)", device: str = DEVICE, loop: str = LOOP, after: str = "", loader: str = LOADER
) -> str:
    return script(f"{device}\n{loader}\n{model}\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n{loop}{after}")


def convert(source: str, **options):
    result = convert_source(source, ConvertOptions(**options))
    if result.status == "converted":
        compile(result.output, "converted.py", "exec")
        again = convert_source(result.output, ConvertOptions(**options))
        assert again.output == result.output and again.reason.startswith("already distributed")
    return result


def warnings(result) -> list[str]:
    return [n.message for n in result.warnings]


# --- devices ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param("model = nn.Linear(4, 1).cuda()", "model = nn.Linear(4, 1).to(device)", id="cuda"),
        pytest.param("model = nn.Linear(4, 1).cuda(0)", "model = nn.Linear(4, 1).to(device)", id="cuda-index"),
        pytest.param('model = nn.Linear(4, 1).to("cuda:0")', "model = nn.Linear(4, 1).to(device)", id="to-string"),
        pytest.param("model = nn.Linear(4, 1).to(0)", "model = nn.Linear(4, 1).to(device)", id="to-int"),
        pytest.param('model = nn.Linear(4, 1).to(torch.device("cuda", 0))', "model = nn.Linear(4, 1).to(device)", id="torch-device-index"),
        pytest.param("model = nn.Linear(4, 1).cuda(args_gpu)", "model = nn.Linear(4, 1).to(device)", id="gpu-id-name"),
        pytest.param('model = nn.Linear(4, 1, device="cuda")', "model = nn.Linear(4, 1, device=device)", id="device-keyword"),
    ],
)
def test_devices_fixes(before: str, after: str) -> None:
    source = standard(model=before.replace("args_gpu", "gpu"), device="gpu = 0\n" + DEVICE)
    output = convert(source).output
    assert after in output
    assert 'torch.device("cuda" if' not in output  # the user's device line is replaced by the setup


@pytest.mark.parametrize(
    "device",
    [
        pytest.param('device = "cuda" if torch.cuda.is_available() else "cpu"', id="string"),
        pytest.param('device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")', id="cuda-0"),
        pytest.param("device = torch.device('cuda', 0) if torch.cuda.is_available() else torch.device('cpu')", id="index"),
        pytest.param(
            "device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device('cpu')",
            id="accelerator",
        ),
    ],
)
def test_device_variable_becomes_the_rank_device(device: str) -> None:
    output = convert(standard(device=device)).output
    assert device not in output
    assert '        device = torch.device("cuda", local_rank)\n' in output


def test_string_device_gives_its_type_where_a_string_is_needed() -> None:
    loop = LOOP.replace("        loss = nn", "        with torch.autocast(device_type=device, enabled=device == 'cuda'):\n            pass\n        loss = nn")
    output = convert(standard(device='device = "cuda" if torch.cuda.is_available() else "cpu"', loop=loop)).output
    assert "torch.autocast(device_type=device.type, enabled=device.type == 'cuda')" in output


def test_devices_noop_outside_the_entry_point() -> None:
    helpers = '''
    class Evaluator:
        def __init__(self):
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            self.scale = torch.ones(1, device=self.device)

    def amp():
        return torch.autocast("cuda", enabled=torch.cuda.is_available())
    '''
    output = convert(script(f"{DEVICE}\n{LOADER}\nmodel = nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n{LOOP}", helpers)).output
    assert 'self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")' in output
    assert 'torch.autocast("cuda", enabled=torch.cuda.is_available())' in output


def test_cuda_tensor_type_gets_a_cpu_fallback_and_set_device_goes() -> None:
    loop = LOOP.replace("        loss = nn", "        ones = torch.cuda.FloatTensor(x.size(0), 1).fill_(1.0)\n        loss = nn")
    source = standard(model="torch.cuda.set_device(0)\nmodel = nn.Linear(4, 1).cuda()", loop=loop)
    source = source.replace("def main():\n", 'def main():\n    os.environ["CUDA_VISIBLE_DEVICES"] = "0"\n').replace("import torch\n", "import os\nimport torch\n", 1)
    result = convert(source)
    assert "(torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor)(x.size(0), 1)" in result.output
    assert "torch.cuda.set_device(0)" not in result.output and "CUDA_VISIBLE_DEVICES" not in result.output


# --- DataParallel and the wrap ----------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        pytest.param("model = nn.Linear(4, 1)\nmodel = nn.DataParallel(model)\nmodel.to(device)", id="statement"),
        pytest.param("model = nn.Linear(4, 1)\nif torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)\nmodel.to(device)", id="conditional"),
        pytest.param("model = nn.DataParallel(nn.Linear(4, 1)).to(device)", id="inline"),
    ],
)
def test_data_parallel_is_replaced_by_ddp(model: str) -> None:
    output = convert(standard(model=model)).output
    assert "DataParallel(" not in output.replace("DistributedDataParallel", "")
    assert output.count("model = DDP(model, device_ids=[local_rank] if device.type == \"cuda\" else None)") == 1


def test_wrap_goes_after_the_move_and_loads_go_through_module() -> None:
    model = 'model = nn.Linear(4, 1)\nmodel.load_state_dict(torch.load("init.pt"))\nmodel.to(device)\nmodel.load_state_dict(torch.load("resume.pt"))'
    output = convert(standard(model=model)).output
    lines = [line.strip() for line in output.splitlines()]
    assert lines.index("model.to(device)") + 1 == lines.index('model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)')
    assert 'model.load_state_dict(torch.load("init.pt", map_location=device))' in lines
    assert 'model.module.load_state_dict(torch.load("resume.pt", map_location=device))' in lines


def test_a_model_that_is_only_evaluated_is_not_wrapped() -> None:
    model = "teacher = nn.Linear(4, 1).to(device).eval()\nmodel = nn.Linear(4, 1).to(device)"
    output = convert(standard(model=model)).output
    assert "teacher = DDP(" not in output and "model = DDP(" in output


def test_custom_method_calls_are_warned_about_and_attribute_reads_go_through_module() -> None:
    loop = LOOP.replace("model(x)", "model.features(x)") + 'print(model.weight.shape)\n'
    result = convert(standard(loop=loop))
    assert "model.features(x)" in result.output and "model.module.weight.shape" in result.output
    assert any("`model.features(...)` is not forward()" in w for w in warnings(result))


# --- data ---------------------------------------------------------------------------------------


def test_sampler_takes_the_shuffle_and_the_dataset_is_named() -> None:
    output = convert(standard()).output
    assert "train_dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))" in output
    assert "loader = DataLoader(train_dataset, batch_size=8, sampler=DistributedSampler(train_dataset, shuffle=True))" in output
    assert "        loader.sampler.set_epoch(epoch)\n        for x, y in loader:" in output


def test_sampler_noop_for_a_loader_with_its_own_sampler_and_for_eval_loaders() -> None:
    source = standard().replace("shuffle=True)", "sampler=torch.utils.data.RandomSampler(range(64)))")
    source = source.replace("    for epoch", "    val = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=8)\n    for epoch")
    result = convert(source)
    assert "DistributedSampler" not in result.output and "val = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=8)" in result.output
    assert any("already has a sampler" in w for w in warnings(result))


def test_positional_shuffle_and_trailing_comma_layout() -> None:
    source = standard(loader="dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\nloader = DataLoader(\n    dataset,\n    8,\n    True,\n)")
    output = convert(source).output
    assert "    loader = DataLoader(\n        dataset,\n        8,\n        sampler=DistributedSampler(dataset, shuffle=True),\n    )" in output


def test_loader_from_a_helper_and_epoch_loop_in_a_caller() -> None:
    helpers = '''
    def make_loader():
        data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        return DataLoader(data, batch_size=8, shuffle=True)

    def train_one_epoch(model, loader, optimizer, device):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    '''
    body = f"{DEVICE}\ntrain_loader = make_loader()\nmodel = nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor epoch in range(3):\n    train_one_epoch(model, train_loader, optimizer, device)\n"
    output = convert(script(body, helpers)).output
    assert "return DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=True))" in output
    assert "        train_loader.sampler.set_epoch(epoch)\n        train_one_epoch(" in output


def test_step_loop_uses_its_counter_for_set_epoch() -> None:
    loop = "step = 0\nwhile step < 10:\n" + textwrap.indent(LOOP.split("\n", 1)[1].replace("        optimizer.step()", "        optimizer.step()\n        step += 1"), "")
    output = convert(standard(loop=loop)).output
    assert "    while step < 10:\n        loader.sampler.set_epoch(step)\n" in output


def test_keep_global_batch_divides_the_batch_size() -> None:
    assert "batch_size=8 // world_size" in convert(standard(), keep_global_batch=True).output
    assert "world_size = dist.get_world_size()" not in convert(standard()).output


# --- output on rank 0 ---------------------------------------------------------------------------


def test_output_is_guarded_and_merged_into_one_if() -> None:
    after = 'print("done")\ntorch.save(model.state_dict(), "model.pt")\nif epoch > 0:\n    print("trained", epoch)\n'
    output = convert(standard(after=after)).output
    assert '    if rank == 0:\n        print("done")\n        torch.save(model.module.state_dict(), "model.pt")\n' in output
    assert "    if rank == 0 and epoch > 0:\n" in output


def test_output_that_runs_the_model_is_hoisted_before_the_guard() -> None:
    helpers = "def evaluate(model, x):\n    with torch.no_grad():\n        return model(x).mean().item()\n"
    after = 'print(f"val {evaluate(model, torch.randn(4, 4)):.3f}")\n'
    output = convert(script(f"{DEVICE}\n{LOADER}\nmodel = nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n{LOOP}{after}", helpers)).output
    assert "    evaluate_result = evaluate(model, torch.randn(4, 4))\n    if rank == 0:\n        print(f\"val {evaluate_result:.3f}\")" in output


def test_logging_tqdm_tensorboard_wandb() -> None:
    imports = "import logging\nimport wandb\nfrom tqdm import tqdm\nfrom torch.utils.tensorboard import SummaryWriter\n\nlogger = logging.getLogger(__name__)\n"
    loop = LOOP.replace("for x, y in loader:", "for x, y in tqdm(loader, disable=False):")
    after = 'writer = SummaryWriter("runs")\nrun = wandb.init(project="p")\nwandb.log({"loss": 1.0})\nlogger.info("epoch done")\nwriter.add_scalar("loss", 1.0, 0)\n'
    output = convert(standard(loop=loop, after=after).replace("import torch\n", imports + "import torch\n", 1)).output
    assert "tqdm(loader, disable=False or rank != 0)" in output
    assert 'writer = SummaryWriter("runs") if rank == 0 else None' in output
    assert 'run = wandb.init(project="p") if rank == 0 else None' in output
    assert '    if rank == 0:\n        wandb.log({"loss": 1.0})\n        logger.info("epoch done")\n        writer.add_scalar("loss", 1.0, 0)\n' in output


# --- metrics, checkpoints, accumulation ----------------------------------------------------


@pytest.mark.parametrize(
    ("report", "reduced"),
    [
        pytest.param("print(total / len(loader))", "total = (totals / world_size).item()", id="per-batch-mean"),
        pytest.param("print(total / len(loader.dataset))", "total = totals.item()", id="per-sample-sum"),
    ],
)
def test_totals_over_the_sharded_loader_are_reduced(report: str, reduced: str) -> None:
    loop = LOOP.replace("for epoch in range(2):\n", "for epoch in range(2):\n    total = 0.0\n") + "    total += loss.item()\n".replace("    total", "        total") + "    " + report + "\n"
    output = convert(standard(loop=loop)).output
    assert "dist.all_reduce(totals)" in output and reduced in output


def test_tensor_totals_are_reduced_in_place() -> None:
    loop = LOOP.replace("for epoch in range(2):\n", "for epoch in range(2):\n    total = torch.zeros(1, device=device)\n") + "        total += loss.detach()\n    print(total.item())\n"
    output = convert(standard(loop=loop)).output
    assert "        dist.all_reduce(total)\n        total /= world_size\n" in output


def test_gradient_accumulation_syncs_only_on_the_update_step() -> None:
    loop = """\
for epoch in range(2):
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device)) / 4
        loss.backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    output = convert(standard(loop=loop)).output
    assert "            with contextlib.nullcontext() if (i + 1) % 4 == 0 else model.no_sync():\n                loss = nn" in output
    assert "import contextlib" in output


def test_barrier_before_reading_back_what_rank_0_saved() -> None:
    after = 'torch.save(model.state_dict(), "best.pt")\nmodel.load_state_dict(torch.load("best.pt"))\n'
    output = convert(standard(after=after)).output
    assert '    dist.barrier()  # rank 0 wrote this file: wait until it is complete\n    model.module.load_state_dict(torch.load("best.pt", map_location=device))' in output


def test_existing_map_location_is_kept() -> None:
    after = 'state = torch.load("x.pt", map_location="cpu")\n'
    assert 'torch.load("x.pt", map_location="cpu")' in convert(standard(after=after)).output


# --- process group, local rank, entry points ---------------------------------------------------


def test_setup_and_teardown_around_a_docstring_and_returns() -> None:
    body = f'"""Train."""\n{DEVICE}\n{LOADER}\nmodel = nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nif optimizer is None:\n    return\n{LOOP}return 0\n'
    output = convert(script(body)).output
    assert '    """Train."""\n    # One process per GPU' in output
    assert "        dist.destroy_process_group()\n        return\n" in output
    assert output.count("dist.destroy_process_group()") == 2  # before each return, none after the last


def test_local_rank_option_becomes_the_environment_variable() -> None:
    body = 'import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument("--local-rank", type=int, default=0)\nargs = parser.parse_args()\nprint(args.local_rank)\n'
    output = convert(standard(device=body + DEVICE)).output
    assert "--local-rank" not in output and "print(local_rank)" in output


def test_top_level_script_gets_the_setup_after_its_imports() -> None:
    body = f"{DEVICE}\n{LOADER}\nmodel = nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n{LOOP}"
    source = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n" + body
    output = convert(source).output
    assert "import DistributedSampler\n\n# One process per GPU" in output
    assert output.rstrip().endswith("dist.destroy_process_group()")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        pytest.param("", "empty file", id="empty"),
        pytest.param("import torch\nmodel = torch.nn.Linear(2, 2)\nprint(model(torch.ones(2)))\n", "nothing to train", id="inference"),
        pytest.param("import torch.distributed as dist\ndist.init_process_group('gloo')\n", "already distributed", id="ddp"),
        pytest.param("from accelerate import Accelerator\nimport torch\n", "already distributed: uses Hugging Face Accelerate", id="accelerate"),
        pytest.param("import lightning as L\n", "already distributed: uses Lightning", id="lightning"),
    ],
)
def test_scripts_left_unchanged(source: str, reason: str) -> None:
    result = convert(source)
    assert result.status == "unchanged" and result.output == source and result.reason.startswith(reason)


def test_training_loop_in_another_module_is_named() -> None:
    source = "import torch\nfrom mylib.training import fit\n\nmodel = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfit(model, optimizer)\n"
    result = convert(source)
    assert result.status == "unchanged"
    assert any("training loop lives in `mylib.training.fit`" in w for w in warnings(result))


def test_names_the_setup_needs_are_not_taken_over() -> None:
    source = standard(device=DEVICE + "\nrank = 3")
    result = convert(source)
    assert result.status == "unchanged" and "`rank`" in result.reason


def test_comments_and_formatting_survive() -> None:
    source = standard().replace("    for epoch in range(2):", "    # train (two epochs)\n    for epoch in range(2):  # noqa: E501\n")
    output = convert(source).output
    assert "    # train (two epochs)\n    for epoch in range(2):  # noqa: E501\n" in output


def test_device_from_an_argument_is_kept_with_a_warning() -> None:
    device = 'import argparse\nargs = argparse.Namespace(device="cuda")\ndevice = torch.device(args.device)'
    result = convert(standard(device=device))
    assert "    device = torch.device(args.device)\n" in result.output
    assert any('make it "cuda" (not "cuda:N")' in w for w in warnings(result))


def test_model_built_in_another_module_is_named() -> None:
    source = standard(model="model = build_model(4)").replace("import torch\n", "import torch\nfrom mylib.models import build_model\n", 1)
    result = convert(source)
    assert "model = DDP(model" in result.output
    assert any("comes from `mylib.models.build_model` (another module" in w for w in warnings(result))


def test_positional_sampler_is_seen() -> None:
    loader = "data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\nloader = DataLoader(data, 8, False, torch.utils.data.RandomSampler(data))"
    result = convert(standard(loader=loader))
    assert "DistributedSampler" not in result.output
    assert any("already has a sampler" in w for w in warnings(result))
