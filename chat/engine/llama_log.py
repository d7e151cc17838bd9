"""llama.cpp's log file (`llama.log` in the state folder): capped and rotated,
and never a reason for kvchat to stop.

The standard library's `RotatingFileHandler` caps the file at `LOG_MAX_BYTES`
and keeps `LOG_BACKUPS` older files (`llama.log.1`, ...). Lines arrive from C,
through a ctypes callback in chat.engine.llama, where an exception cannot
propagate (ctypes prints it on stderr, where Textual draws) and a model load
must go on whatever the disk does. So a folder that cannot be created, is
read-only or full only means that the lines are dropped; `log_problem()` says
why, for the app to tell the user once. A later `open_log` (each model load)
tries again. No llama_cpp here: the UI may ask `log_problem()` without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path

from chat import paths
from chat.safe_files import shown_path

LOG_MAX_BYTES = 2 * 1024 * 1024
"""Size at which the log is rotated: the logs of many model loads (some KB each)."""
LOG_BACKUPS = 1
"""Older logs kept beside the current one."""


class _DroppingFileHandler(RotatingFileHandler):
    """Drops what it cannot write and remembers the first reason, where
    logging's default prints a traceback to stderr."""

    error: OSError | None = None

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if self.error is None and isinstance(error, OSError):
            self.error = error


_lock = threading.Lock()
_path: Path | None = None
_handler: _DroppingFileHandler | None = None
_open_error: OSError | None = None
"""Why the log file could not be opened at the last `open_log`."""
_not_regular: str | None = None
"""The log's path is there but is no regular file (a FIFO would block the
model load on opening it, a device would swallow the lines): why, in words."""


def open_log(path: Path) -> None:
    """Write the log to `path` from now on (creating its folder). Never raises:
    if the file cannot be opened, lines are dropped and `log_problem()` says why."""
    global _path, _handler, _open_error, _not_regular
    with _lock:
        if path == _path and _handler is not None and _handler.error is None:
            return  # already writing there
        _close_handler()
        _path, _open_error, _not_regular = path, None, None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not _regular_or_absent(path):
                _not_regular = f"{shown_path(path)} is not a regular file"
                return
            _handler = _DroppingFileHandler(
                path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
            )
        except OSError as error:
            _open_error = error
            return
        _handler.terminator = ""  # llama.cpp sends its own line ends, sometimes in pieces


def write(text: str) -> None:
    """Append `text` (a piece of a line, as llama.cpp sends it). Never raises."""
    with _lock:
        if _handler is not None:
            _handler.handle(logging.makeLogRecord({"msg": text}))


def log_problem() -> str | None:
    """Why llama.cpp's log has not been written since the last `open_log`, as
    a sentence naming the folder; None while it is written."""
    with _lock:
        error = _open_error or (_handler.error if _handler is not None else None)
        path, not_regular = _path, _not_regular
    if not_regular is not None:
        return f"llama.cpp's log is not being written: {not_regular}."
    if error is None or path is None:
        return None
    return f"llama.cpp's log is not being written: {paths.folder_problem(path.parent, error)}."


def _regular_or_absent(path: Path) -> bool:
    """Whether `path` is a regular file or nothing yet (links followed); a
    link loop or an unreadable folder raises OSError, reported as such."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True


def close_log() -> None:
    """Stop writing the log (lines are dropped until the next `open_log`)."""
    global _path
    with _lock:
        _close_handler()
        _path = None


def _close_handler() -> None:
    global _handler
    if _handler is not None:
        # Closing flushes: the last lines may not fit on a full disk.
        with contextlib.suppress(OSError):
            _handler.close()
        _handler = None
