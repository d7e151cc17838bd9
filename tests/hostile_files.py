"""Files that must never freeze kvchat or be read whole: the real thing each
time (a FIFO with no writer, a link to `/dev/zero`, a link to `/dev/stdin`, a
listening Unix socket, a link loop, a sparse file larger than any limit).

`hostile_file(kind, path)` makes one at `path`; `HOSTILE` lists the kinds, for
`pytest.mark.parametrize`. Each reader is expected to refuse the file at once
with one sentence, never to block (the FIFO) or read without end (the devices).
"""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

T = TypeVar("T")

HOSTILE = ("fifo", "dev-zero", "dev-stdin", "socket", "link-loop", "huge")

_sockets: list[socket.socket] = []
"""Kept open for the test session: a closed socket's file still exists, but
nothing listens on it; an open one is the real thing."""


def hostile_file(kind: str, path: Path, huge_size: int = 1 << 34) -> Path:
    """Make the `kind` of hostile file at `path` and return `path`."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dev-stdin":
        path.symlink_to("/dev/stdin")
    elif kind == "socket":
        # A Unix socket's path is limited to about 100 bytes: bind by a short
        # relative name from the file's folder.
        here = os.getcwd()
        os.chdir(path.parent)
        try:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path.name)
            server.listen(1)
        finally:
            os.chdir(here)
        _sockets.append(server)
    elif kind == "link-loop":
        partner = path.with_name(path.name + ".loop")
        path.symlink_to(partner.name)
        partner.symlink_to(path.name)
    elif kind == "huge":
        with path.open("wb") as file:
            file.truncate(huge_size)  # sparse: no disk used
    else:
        raise ValueError(kind)
    return path


def returns_within(call: Callable[[], T], seconds: float = 10.0) -> T:
    """`call()`'s result; fails the test if it has not returned in `seconds`
    (a reader that blocks on a FIFO would otherwise hang the whole run)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:
            outcome.append((False, error))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        pytest.fail(f"still running after {seconds} s: it froze on the file")
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)


def stdin_is_regular() -> bool:
    """Whether this process's fd 0 is a regular file (input redirected from
    one): then `/dev/stdin` is a regular file and may be read."""
    return stat.S_ISREG(os.fstat(0).st_mode)
