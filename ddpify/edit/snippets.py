"""Small pieces of emitted code: statements parsed from text, keyword arguments added to calls."""

from __future__ import annotations

import functools

import libcst as cst


def statements(source: str) -> list[cst.BaseStatement]:
    """Parse statements; comment lines above the first one stay attached to it."""
    return list(_parsed(source))


@functools.lru_cache(maxsize=1024)
def _parsed(source: str) -> tuple[cst.BaseStatement, ...]:
    # Nodes are immutable: the same emitted code is parsed once and may appear in several places.
    return tuple(cst.parse_module("pass\n" + source).body[1:])


def keyword(name: str, value: str) -> cst.Arg:
    """`name=value` formatted the PEP 8 way."""
    return cst.Arg(
        keyword=cst.Name(name),
        value=cst.parse_expression(value),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def appended(call: cst.Call, new: cst.Arg) -> list[cst.Arg]:
    """The call's arguments with `new` last, in the call's own layout."""
    args = list(call.args)
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: one argument per line
        if len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
            separator = args[-2].comma
        else:
            separator = cst.Comma(whitespace_after=call.whitespace_before_args)
        return [*args[:-1], last.with_changes(comma=separator), new.with_changes(comma=last.comma)]
    # `f(\n    a, b\n)`: the line break before `)` belongs to the last argument; it moves to the new one
    closing = last.whitespace_after_arg
    last = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), whitespace_after_arg=cst.SimpleWhitespace(""))
    return [*args[:-1], last, new.with_changes(whitespace_after_arg=closing)]


def add_keyword(name: str, value: str):
    """A replacement that appends `name=value` to a call's arguments."""
    new = keyword(name, value)

    def add(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call)
        return updated.with_changes(args=appended(updated, new))

    return add
