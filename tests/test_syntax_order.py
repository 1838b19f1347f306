"""`Tree.exclusive` and `Tree.may_follow` (which statements can run after which), `Tree.grad_disabled`, and
`Tree.positions` against LibCST's PositionProvider."""

from __future__ import annotations

import random
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpify.syntax import Tree

SOURCE = """
if distributed:
    if gpu is not None:
        wrap_gpu()
        after_wrap_gpu()
    else:
        wrap_cpu()
elif gpu is not None:
    single_gpu()
else:
    data_parallel()
after_chain()
for epoch in epochs:
    if epoch == 0:
        first_epoch()
    else:
        later_epoch()
value = on_true() if flag else on_false()
match mode:
    case "train":
        train_case()
    case _:
        other_case()
outer(inner())
"""


@pytest.fixture(scope="module")
def calls() -> tuple[Tree, dict[str, cst.Call]]:
    tree = Tree.parse(cst.parse_module(SOURCE))
    return tree, {c.func.value: c for c in tree.calls() if isinstance(c.func, cst.Name)}


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param("wrap_gpu", "wrap_cpu", True, id="if-else"),
        pytest.param("wrap_gpu", "single_gpu", True, id="nested-if-vs-elif"),
        pytest.param("wrap_gpu", "data_parallel", True, id="nested-if-vs-else"),
        pytest.param("single_gpu", "data_parallel", True, id="elif-vs-else"),
        pytest.param("on_true", "on_false", True, id="conditional-expression"),
        pytest.param("train_case", "other_case", True, id="match-cases"),
        pytest.param("wrap_gpu", "after_wrap_gpu", False, id="same-branch"),
        pytest.param("wrap_gpu", "after_chain", False, id="after-the-chain"),
        pytest.param("first_epoch", "later_epoch", False, id="branches-inside-a-loop"),
        pytest.param("inner", "outer", False, id="argument"),
    ],
)
def test_exclusive(calls, a, b, expected) -> None:
    tree, by_name = calls
    assert tree.exclusive(by_name[a], by_name[b]) is expected
    assert tree.exclusive(by_name[b], by_name[a]) is expected


@pytest.mark.parametrize(
    ("first", "then", "expected"),
    [
        pytest.param("wrap_gpu", "after_wrap_gpu", True, id="later-in-branch"),
        pytest.param("wrap_gpu", "after_chain", True, id="after-the-chain"),
        pytest.param("wrap_gpu", "data_parallel", False, id="exclusive-branch"),
        pytest.param("after_wrap_gpu", "wrap_gpu", False, id="earlier"),
        pytest.param("first_epoch", "later_epoch", True, id="next-iteration"),
        pytest.param("inner", "outer", True, id="call-after-its-argument"),
        pytest.param("outer", "inner", False, id="argument-before-its-call"),
        pytest.param("wrap_gpu", "wrap_gpu", False, id="itself"),
    ],
)
def test_may_follow(calls, first, then, expected) -> None:
    tree, by_name = calls
    assert tree.may_follow(by_name[first], by_name[then]) is expected


GRAD_SOURCE = """
import torch

with torch.no_grad():
    under_with()
with torch.set_grad_enabled(False):
    disabled_by_flag()
with torch.set_grad_enabled(True):
    enabled_by_flag()

@torch.inference_mode()
def evaluate():
    in_decorated()

    def later():
        defined_inside_but_called_later()

with torch.no_grad():
    def helper():
        in_function_defined_under_with()

@torch.no_grad
def bare_decorator():
    under_bare_decorator()

trained()
"""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("under_with", True),
        ("disabled_by_flag", True),
        ("enabled_by_flag", False),
        ("in_decorated", True),
        ("defined_inside_but_called_later", False),  # runs when called, not where it is defined
        ("in_function_defined_under_with", False),
        ("under_bare_decorator", True),
        ("trained", False),
    ],
)
def test_grad_disabled(name: str, expected: bool) -> None:
    """One test of "gradients are off here", read by convert and lint alike."""
    tree = Tree.parse(cst.parse_module(GRAD_SOURCE))
    (call,) = [c for c in tree.calls() if isinstance(c.func, cst.Name) and c.func.value == name]
    assert tree.grad_disabled(call) is expected


# Every eighth script of the fixtures (convert inputs and goldens, lint cases): some 25 files.
FIXTURE_SCRIPTS = sorted((Path(__file__).parent.parent / "fixtures").glob("**/*.py"))[::8]


@pytest.mark.parametrize("path", FIXTURE_SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_positions_match_libcsts_position_provider(path: Path) -> None:
    """`Tree.positions` counts lines without rendering where it can and renders only part of a
    statement (up to the node asked about) where it cannot; asked in any order, every node's
    line, and then its whole range, are the ones LibCST's PositionProvider gives."""
    module = cst.parse_module(path.read_text())
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = [n for n in Tree.parse(module).walk() if n in expected]
    random.Random(0).shuffle(nodes)
    lines = Tree.parse(module)
    for node in nodes:
        assert lines.line(node) == expected[node].start.line, (type(node).__name__, expected[node])
    ranges = Tree.parse(module)
    for node in nodes:
        assert ranges.positions[node] == expected[node], (type(node).__name__, expected[node])


def test_walk_skipping_leaves_out_nested_scopes() -> None:
    """Adjacent and nested functions, a class and a lambda are left out, with all they hold;
    what is left is `walk()`'s preorder."""
    source = "a = 1\ndef f():\n    b = 2\ndef g():\n    def h():\n        c = 3\n    d = lambda: e\nclass K:\n    k = 4\nz = 5\n"
    tree = Tree.parse(cst.parse_module(source))
    names = [n.value for n in tree.walk_skipping(tree.module, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) if isinstance(n, cst.Name)]
    assert names == ["a", "z"]
    (g,) = [n for n in tree.of_type(cst.FunctionDef) if n.name.value == "g"]
    inside_g = [n.value for n in tree.walk_skipping(g.body, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) if isinstance(n, cst.Name)]
    assert inside_g == ["d"]
