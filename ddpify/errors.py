"""Errors that carry the file they are about and a reason a user can act on."""

from __future__ import annotations


class InputError(Exception):
    """Bad input: unreadable, undecodable or unparsable file, missing path, unwritable output."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
