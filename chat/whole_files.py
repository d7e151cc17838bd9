"""Writing a file whole: a reader, a crash or a full disk finds the old file
or the new one, never half of one.

The data goes to a temporary file beside the target (in its folder, so that
the rename stays on one file system), is flushed to the disk when it must
survive a power cut, and then takes the target's name in one step of the file
system. Whatever fails on the way, the temporary file is removed and the
target is as it was. Every file kvchat writes for later (settings, tool
permissions, saved KV states, unsent messages, exports, thread measures)
is written here. No Textual here: every layer uses it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

Buffer = bytes | bytearray | memoryview
Data = Buffer | str | Iterable[Buffer]
"""What is written: bytes, text (written as UTF-8), or bytes in pieces (a
saved KV state is tens of megabytes: it is not joined into one copy first)."""


def replace_whole(path: Path, data: Data, *, durable: bool = True, keep_mode: bool = False) -> int:
    """Put `data` in `path`, replacing what was there in one step; the number
    of bytes written. `durable`: on the disk before the rename (a power cut
    keeps the old file or the new one); a cache that checks what it reads may
    skip the wait. `keep_mode`: the new file gets the old one's permissions
    (else it is readable by its owner only). Raises `OSError`."""
    temporary, size = _write_beside(path.parent, f".{path.name}.", data, durable=durable)
    try:
        if keep_mode:
            with contextlib.suppress(FileNotFoundError):
                os.chmod(temporary, stat.S_IMODE(path.stat().st_mode))
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise
    return size


def write_new(folder: Path, names: Iterable[str], data: Data) -> Path:
    """Write `data` under the first of `names` that no file in `folder` has,
    and return that path: nothing is ever overwritten, even by a file another
    program creates meanwhile (the name is taken by a hard link, which fails
    where the name exists). Raises `OSError`; `FileExistsError` when every
    name is taken."""
    temporary, _ = _write_beside(folder, ".kvchat-new-", data, durable=True)
    try:
        for name in names:
            target = folder / name
            try:
                os.link(temporary, target)
            except FileExistsError:
                continue
            return target
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
    finally:
        _remove(temporary)


def _write_beside(folder: Path, prefix: str, data: Data, *, durable: bool) -> tuple[Path, int]:
    """A new temporary file in `folder` holding `data`, and its size."""
    descriptor, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    temporary = Path(name)
    size = 0
    try:
        with os.fdopen(descriptor, "wb") as out:
            for piece in _pieces(data):
                size += out.write(piece)
            if durable:
                out.flush()
                os.fsync(out.fileno())
    except BaseException:
        _remove(temporary)
        raise
    return temporary, size


def _pieces(data: Data) -> Iterator[Buffer]:
    if isinstance(data, str):
        yield data.encode("utf-8")
    elif isinstance(data, bytes | bytearray | memoryview):
        yield data
    else:
        yield from data


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
