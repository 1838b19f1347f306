"""`analysis.output`: the one classification of output calls that convert (rank-0 guards) and
lint (DDP301 writes, DDP303 side effects) both read."""

from __future__ import annotations

import libcst as cst
import pytest

from ddpify.analysis.output import Outputs
from ddpify.program import Program
from ddpify.syntax import Tree, code

SOURCE = '''
import json, logging, os, pprint, shutil, sys, tempfile
import click
import helpers
from pathlib import Path
import numpy as np
import torch
import wandb
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm
from torchvision.utils import save_image
from PIL import Image
from helpers import save_checkpoint, progress_bar, make_logger, Log

logger = logging.getLogger(__name__)
writer = SummaryWriter("runs")
log = Log("train")
fig_file = open("loss.txt", "w")

def step(model, out_dir):
    print("loss")
    sys.stdout.write("loss")
    logging.info("epoch")
    logging.error("nan")
    logger.warning("slow")
    logger.exception("failed")
    logging.basicConfig(filename="train.log")
    logging.basicConfig(handlers=[logging.FileHandler("a.log"), logging.StreamHandler()])
    logging.FileHandler("b.log", mode="w")
    tqdm(range(3))
    SummaryWriter("runs2")
    writer.add_scalar("loss", 1.0)
    wandb.init(project="p")
    wandb.log({"loss": 1.0})
    torch.save(model.state_dict(), "model.pt")
    torch.save(model.state_dict(), tempfile.mktemp())
    np.save("x.npy", 1)
    shutil.copy("a", "b")
    save_image(model, "img.png")
    json.dump({}, fig_file)
    json.dump({}, out_dir)
    open("out.txt", "w")
    fig_file.write("x")
    fig_file.flush()
    os.makedirs("out")
    os.mkdir("out")
    Path("out").mkdir()
    out_dir.mkdir()
    helpers.mkdir("out")
    Path("a.txt").write_text("x")
    model.save_pretrained("dir")
    model.save_pretrained("dir", is_main_process=True)
    Image.fromarray(model).save("a.png")
    save_checkpoint(model)
    progress_bar(1, 2)
    log.train(1)
    log(model)
    model(out_dir)
    os.path.join("a", "b")
    torch.nn.functional.relu(model)
    click.echo("loss")
    pprint.pprint({})
    np.lib.format.open_memmap("a.npy", mode="w+", shape=(2,))
    np.memmap("a.bin", dtype="float32", mode="r")
    np.zeros(2).tofile("a.bin")
'''

# the call's text -> (kind, label, destination, flags) or None
EXPECTED = {
    'print("loss")': ("print", "print", None, ""),
    'sys.stdout.write("loss")': ("print", "sys.stdout.write", None, ""),
    'logging.info("epoch")': ("logging", "logging.info", None, ""),
    'logging.error("nan")': ("logging", "logging.error", None, "loud"),
    'logger.warning("slow")': ("logging", ".warning", None, ""),
    'logger.exception("failed")': ("logging", ".exception", None, "loud"),
    'logging.basicConfig(filename="train.log")': ("logging", "logging.basicConfig", None, "creates"),
    'logging.basicConfig(handlers=[logging.FileHandler("a.log"), logging.StreamHandler()])': ("logging", "logging.basicConfig", None, "creates"),
    'logging.FileHandler("b.log", mode="w")': ("logging", "logging.FileHandler", None, "creates"),
    "tqdm(range(3))": ("tqdm", "tqdm", None, ""),
    'SummaryWriter("runs2")': ("TensorBoard", "SummaryWriter", None, "creates"),
    'writer.add_scalar("loss", 1.0)': ("TensorBoard", ".add_scalar", None, ""),
    'wandb.init(project="p")': ("wandb", "wandb.init", None, "creates"),
    'wandb.log({"loss": 1.0})': ("wandb", "wandb.log", None, ""),
    'torch.save(model.state_dict(), "model.pt")': ("checkpoint save", "torch.save", '"model.pt"', ""),
    "torch.save(model.state_dict(), tempfile.mktemp())": ("checkpoint save", "torch.save", "tempfile.mktemp()", ""),
    'np.save("x.npy", 1)': ("file write", "np.save", '"x.npy"', ""),
    'shutil.copy("a", "b")': ("file write", "shutil.copy", '"b"', ""),
    'save_image(model, "img.png")': ("file write", "save_image", None, ""),
    "json.dump({}, fig_file)": ("file write", "json.dump", "fig_file", "into_open_file"),
    "json.dump({}, out_dir)": ("file write", "json.dump", "out_dir", ""),
    'open("out.txt", "w")': ("file write", "open", '"out.txt"', ""),
    'fig_file.write("x")': ("file write", ".write", None, ""),
    "fig_file.flush()": ("file write", ".flush", None, ""),
    'os.makedirs("out")': ("folder", "os.makedirs", None, ""),
    'os.mkdir("out")': ("folder", "os.mkdir", None, ""),
    'Path("out").mkdir()': ("folder", 'Path("out").mkdir', None, ""),
    "out_dir.mkdir()": ("folder", ".mkdir", None, ""),
    'helpers.mkdir("out")': ("file write", ".mkdir", None, ""),
    'Path("a.txt").write_text("x")': ("file write", ".write_text", 'Path("a.txt")', ""),
    'model.save_pretrained("dir")': ("file write", ".save_pretrained", '"dir"', ""),
    'model.save_pretrained("dir", is_main_process=True)': None,
    'Image.fromarray(model).save("a.png")': ("file write", ".save", '"a.png"', ""),
    "save_checkpoint(model)": ("file write", "save_checkpoint", None, "by_name"),
    "progress_bar(1, 2)": ("print", "progress_bar", None, "by_name"),
    "log.train(1)": ("logging", ".train", None, "by_name"),
    "log(model)": ("logging", "log", None, "by_name"),
    "model(out_dir)": None,
    'os.path.join("a", "b")': None,
    "torch.nn.functional.relu(model)": None,
    'click.echo("loss")': ("print", "click.echo", None, ""),
    "pprint.pprint({})": ("print", "pprint.pprint", None, ""),
    'np.lib.format.open_memmap("a.npy", mode="w+", shape=(2,))': ("file write", "np.lib.format.open_memmap", '"a.npy"', ""),
    'np.memmap("a.bin", dtype="float32", mode="r")': None,
    'np.zeros(2).tofile("a.bin")': ("file write", ".tofile", '"a.bin"', ""),
}


def _classified() -> dict[str, tuple | None]:
    tree = Tree.parse(cst.parse_module(SOURCE))
    outputs = Outputs(tree, Program(tree))
    (step,) = [f for f in tree.of_type(cst.FunctionDef) if f.name.value == "step"]
    found = {}
    for statement in step.body.body:
        call = statement.body[0].value
        out = outputs.of(call, step)
        if out is None:
            found[code(call)] = None
            continue
        flags = [f for f in ("loud", "creates", "by_name", "into_open_file") if getattr(out, f)]
        found[code(call)] = (out.kind, out.label, code(out.destination) if out.destination is not None else None, " ".join(flags))
    return found


@pytest.mark.parametrize("call", list(EXPECTED))
def test_output_classification(call: str) -> None:
    assert _classified()[call] == EXPECTED[call]


def test_every_call_of_the_source_is_expected() -> None:
    assert set(_classified()) == set(EXPECTED)


STAR_SOURCE = '''
import numpy as np
from PIL import Image
from utils import *

def step(pixels):
    sys.stdout.write("loss")
    logging.info("epoch")
    os.getcwd()
    frames = []
    frames.append(Image.fromarray(pixels))
    frames[0].save("a.gif", save_all=True, append_images=frames[1:])
    last = frames[-1]
    last.save("b.png")
    arrays = [np.zeros(3)]
    arrays[0].save("c")
'''


def test_star_imported_modules_and_images_kept_in_lists() -> None:
    """CycleGAN's `sys.stdout.write` with `sys` bound only by `from utils import *`, and minRF's
    GIF frames (`frames[0].save(...)`, `last = frames[-1]; last.save(...)`) stayed on every rank."""
    tree = Tree.parse(cst.parse_module(STAR_SOURCE))
    outputs = Outputs(tree, Program(tree))
    (step,) = [f for f in tree.of_type(cst.FunctionDef) if f.name.value == "step"]
    kinds = {
        code(line.body[0].value): getattr(outputs.of(line.body[0].value, step), "kind", None)
        for line in step.body.body
        if isinstance(line.body[0], cst.Expr)
    }
    assert kinds == {
        'sys.stdout.write("loss")': "print",
        'logging.info("epoch")': "logging",
        "os.getcwd()": None,
        'frames.append(Image.fromarray(pixels))': None,
        'frames[0].save("a.gif", save_all=True, append_images=frames[1:])': "file write",
        'last.save("b.png")': "file write",
        'arrays[0].save("c")': None,
    }
