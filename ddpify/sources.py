"""Reading scripts exactly as they are (encoding, BOM, CRLF) and writing them atomically."""

from __future__ import annotations

import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ddpify.errors import InputError


@dataclass(frozen=True)
class Source:
    path: str
    text: str
    encoding: str


SKIPPED_FOLDERS = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"}


def python_files(folder: Path) -> list[Path]:
    """The *.py files under `folder`, sorted, outside hidden and vendored folders."""
    return [
        path
        for path in sorted(folder.rglob("*.py"))
        if not any(p.startswith(".") or p in SKIPPED_FOLDERS for p in path.relative_to(folder).parts[:-1])
    ]


def decode(data: bytes, path: str) -> Source:
    """Decode with the encoding Python itself would use (PEP 263 cookie, BOM, else UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if "invalid or missing encoding declaration" not in str(error):
            raise InputError(path, f"cannot tell the encoding: {error}") from None
        encoding = "utf-8"  # undecodable bytes in the first two lines: say which, below
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        raise InputError(
            path, f"not valid {encoding}: byte 0x{data[error.start]:02x} at offset {error.start} (declare the encoding with a coding: comment)"
        ) from None
    return Source(path, text, encoding)


def read(path: Path) -> Source:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except IsADirectoryError:
        raise InputError(str(path), "is a directory") from None
    except OSError as error:
        raise InputError(str(path), error.strerror or str(error)) from None
    return decode(data, str(path))


def write_atomic(path: Path, data: bytes, executable: bool = False, like: Path | None = None) -> None:
    """Write `data` to `path` all at once: a temp file in the same folder, then a rename."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(str(path), f"cannot write: folder {folder} does not exist")
    fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if like is not None and like.exists():
            mode = stat.S_IMODE(like.stat().st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        if executable:
            mode |= (mode & 0o444) >> 2
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
