"""Reading files that kvchat does not control, without freezing or escaping.

Every file kvchat reads from outside (config, themes, presets, attachments,
model stores' manifests, GGUF files) may be a FIFO, a device, a socket, a
symlink loop, or huge. Opening a FIFO blocks until a writer comes; reading
`/dev/zero` or `/dev/stdin` never ends. So:

- `read_bytes` / `read_text` open with `O_NONBLOCK` (a FIFO's open returns at
  once), accept only a regular file (checked on the open descriptor, so a file
  swapped after a check is still caught), and read at most `limit` bytes;
- `inside` resolves a path built from an outside name and refuses one that
  leaves its folder (`../`, an absolute part, a link pointing out);
- `walk_files` walks a folder tree with a bound on depth and entries, and
  never visits a folder twice (two links to `.` would loop forever).

Each refusal is an `UnsafeFileError` whose message is one sentence naming the
file and the reason. No Textual here: every layer uses it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from chat.errors import KvchatError
from chat.sanitize import sanitize_line


class UnsafeFileError(KvchatError):
    """A file cannot be read as asked: not a regular file, too big, unreadable,
    or outside the folder it must stay in. The message names it and why."""


def shown_path(path: Path | str) -> str:
    """A path as it may be put in a message: file names are untrusted text."""
    return sanitize_line(str(path))


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def human_limit(size: int) -> str:
    """A size limit in words: 64 KiB, 16 MiB (limits are whole units)."""
    for unit in ("bytes", "KiB", "MiB"):
        if size < 1024:
            return f"{size} {unit}"
        size //= 1024
    return f"{size} GiB"


def _kind_of_path(path: Path) -> str | None:
    """What `path` is when that is why it cannot be opened (a socket), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind_of(mode)


def open_regular(path: Path, *, what: str = "file") -> int:
    """An open, blocking-mode file descriptor on `path`, which must be a
    regular file (links are followed; a link loop is refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        kind = _kind_of_path(path)  # a socket cannot be opened: say what it is
        if kind is not None:
            raise UnsafeFileError(
                f"The {what} {shown_path(path)} is {kind}: only regular files are read."
            ) from error
        raise UnsafeFileError(
            f"The {what} {shown_path(path)} cannot be opened: {_reason(error)}."
        ) from error
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(
                f"The {what} {shown_path(path)} is {_kind_of(mode)}: only regular files are read."
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: Path, limit: int, *, what: str = "file") -> bytes:
    """The whole content of the regular file `path`, at most `limit` bytes;
    a larger file is refused (not cut: half a file would be misread)."""
    fd = open_regular(path, what=what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise _too_big(path, what, limit)
        chunks: list[bytes] = []
        got = 0
        # The size may change while it is read: stop one byte past the limit.
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise _too_big(path, what, limit)
        return b"".join(chunks)
    except OSError as error:
        raise UnsafeFileError(
            f"The {what} {shown_path(path)} cannot be read: {_reason(error)}."
        ) from error
    finally:
        os.close(fd)


def read_text(path: Path, limit: int, *, what: str = "file") -> str:
    """`read_bytes` decoded as UTF-8; bytes that are not UTF-8 are refused."""
    data = read_bytes(path, limit, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnsafeFileError(
            f"The {what} {shown_path(path)} is not UTF-8 text (byte {error.start})."
        ) from error


def _too_big(path: Path, what: str, limit: int) -> UnsafeFileError:
    return UnsafeFileError(
        f"The {what} {shown_path(path)} is larger than {human_limit(limit)}: not read."
    )


def _reason(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "its links form a loop"
    return (error.strerror or str(error)).lower()


def inside(folder: Path, *parts: str, what: str = "file") -> Path:
    """`folder` joined with `parts` (names that came from outside), resolved;
    refused unless the result stays inside `folder` (resolved too)."""
    for part in parts:
        if not part or "\x00" in part:
            raise UnsafeFileError(f"The {what} name {shown_path(part)!r} is not a valid name.")
    base = folder.resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and base not in target.parents:
        raise UnsafeFileError(
            f"The {what} name {shown_path('/'.join(parts))} leads outside {shown_path(base)}: "
            "refused."
        )
    return target


def is_plain_name(name: str) -> bool:
    """Whether `name` is one file name: no folder parts, no `..`, no NUL."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\x00")


def walk_files(root: Path, *, max_depth: int = 8, max_entries: int = 20_000) -> Iterator[Path]:
    """Every regular file under `root` (links followed), depth first, at most
    `max_depth` folders down and `max_entries` entries looked at; each folder
    is visited once, so links that loop end the walk instead of repeating it."""
    seen: set[tuple[int, int]] = set()
    budget = [max_entries]

    def visit(folder: Path, depth: int) -> Iterator[Path]:
        try:
            info = folder.stat()
        except OSError:
            return
        key = (info.st_dev, info.st_ino)
        if key in seen or depth > max_depth:
            return
        seen.add(key)
        try:
            with os.scandir(folder) as entries:
                names = []
                for entry in entries:
                    budget[0] -= 1
                    if budget[0] < 0:
                        break
                    names.append(entry.name)
        except OSError:
            return
        for name in sorted(names):
            path = folder / name
            try:
                mode = path.stat().st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                yield from visit(path, depth + 1)
            elif stat.S_ISREG(mode):
                yield path

    yield from visit(root, 0)


def refusal_detail(error: UnsafeFileError, path: Path, what: str = "file") -> str:
    """`error`'s sentence without its opening "The <what> <path>", for a
    message that names the file itself ("notes.txt: is a pipe (FIFO): ...")."""
    message = str(error)
    opening = f"The {what} {shown_path(path)} "
    return message[len(opening) :] if message.startswith(opening) else message
