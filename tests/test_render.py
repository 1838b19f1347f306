"""`Plan.output`: the edited tree's text, copied from the source where no edit reached, is
exactly what LibCST's codegen makes of the whole tree."""

from __future__ import annotations

import libcst as cst
import pytest

from ddpify.edit.plan import Plan
from ddpify.syntax import Tree

SOURCE = '''\
"""A docstring."""
import torch


class Net(torch.nn.Module):
    # a comment above a method
    def forward(self, x):
        return x * 2


def train(model, loader):
\t# tabs inside this function
\tfor batch in loader:
\t\tloss = model(batch).sum()

\t\tloss.backward()
\t\tprint("loss", loss.item())
\tmatch mode:
\t\tcase "a":
\t\t\tkept()
\t\tcase _:
\t\t\tprint("other")
\treturn (
\t\tmodel
\t)


if __name__ == "__main__":
    train(Net(), [torch.ones(2)])  # trailing comment
'''


def _edited(source: str) -> tuple[Plan, str]:
    tree = Tree.parse(cst.parse_module(source))
    plan = Plan(tree)
    for call in tree.calls():
        if tree.call_name(call) == "print" or tree.is_builtin_call(call, "print"):
            plan.guard(tree.statement(call), "rank == 0")  # moved one indent deeper
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward":
            plan.insert_before(tree.statement(call), [cst.parse_statement("step += 1\n")])
        if isinstance(call.func, cst.Name) and call.func.value == "Net":
            plan.replace(call, cst.parse_expression("Net().to(device)"))
    return plan, source


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(SOURCE, id="spaces-tabs-match-comments"),
        pytest.param(SOURCE.replace("\n", "\r\n"), id="crlf"),
        pytest.param(SOURCE.rstrip("\n"), id="no-final-newline"),
        pytest.param(SOURCE.replace("    ", "  "), id="two-space-indent"),
    ],
)
def test_output_is_the_codegen_of_the_edited_tree(source: str) -> None:
    plan, source = _edited(source)
    edited = plan.apply()
    assert plan.output(source) == edited.code
    assert plan.output(source) != source  # the edits are there


def test_unedited_statements_are_copied_from_the_source() -> None:
    """A statement no edit reached is not rendered again: its text is the source's."""
    plan, source = _edited(SOURCE)
    output = plan.output(source)
    assert 'class Net(torch.nn.Module):\n    # a comment above a method\n    def forward(self, x):\n        return x * 2\n' in output
    assert '\t\tif rank == 0:\n\t\t    print("loss", loss.item())\n' in output  # a new block: the module's indent
    assert "\t\tstep += 1\n\t\tloss.backward()\n" in output
    assert "train(Net().to(device), [torch.ones(2)])  # trailing comment\n" in output


def test_no_edits_give_the_source_back() -> None:
    tree = Tree.parse(cst.parse_module(SOURCE))
    assert Plan(tree).output(SOURCE) == SOURCE
