"""llama.cpp's log file (`llama.log` in the state folder): capped and rotated,
and never a reason for kvchat to stop.

The standard library's `RotatingFileHandler` caps the file at `LOG_MAX_BYTES`
and keeps `LOG_BACKUPS` older files (`llama.log.1`, ...). Lines arrive from C,
through a ctypes callback (`route_llama_log`), where an exception cannot
propagate (ctypes prints it on stderr, where Textual draws) and a model load
must go on whatever the disk does. So a folder that cannot be created, is
read-only or full only means that the lines are dropped; `log_problem()` says
why, for the app to tell the user once. A later `open_log` (each model load)
tries again. llama_cpp is imported only by `route_llama_log`: the UI may ask
`log_problem()` without it.

llama.cpp's latest error lines are kept too (`recent_error`), whether or not
the file can be written: why a model failed to load, in its own words
(`Llama()` itself raises only "Failed to load model from file").
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import stat
import sys
import threading
from collections import deque
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

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


# ggml's log levels (ggml.h: NONE, DEBUG, INFO, WARN, ERROR, CONT). CONT goes
# on with the message before it.
_GGML_LOG_LEVEL_DEBUG = 1
_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_CONT = 5
_log_level = _GGML_LOG_LEVEL_DEBUG
"""The level of the message llama.cpp is logging (a CONT piece has its level)."""
_errors_lock = threading.Lock()
_recent_errors: deque[str] = deque(maxlen=8)
_callback: Any = None
"""The ctypes callback given to llama.cpp, kept here so that ctypes keeps it
alive for as long as llama.cpp may call it."""


def _on_log_line(level: int, text: bytes) -> None:
    global _log_level
    if level != _GGML_LOG_LEVEL_CONT:
        _log_level = level
    line = text.decode("utf-8", errors="replace")
    if level == _GGML_LOG_LEVEL_ERROR and line.strip():
        with _errors_lock:
            _recent_errors.append(line.strip())
    # DEBUG lines are most of a load's log (one per layer, per token type...):
    # llama.cpp's own tools hide them too unless asked (-v).
    if _log_level != _GGML_LOG_LEVEL_DEBUG:
        write(line)


def route_llama_log(path: Path) -> None:
    """Send llama.cpp's log lines to `path` instead of the terminal. Never
    raises: a log that cannot be written is `log_problem()`."""
    global _callback
    import llama_cpp

    open_log(path)
    if _callback is None:

        @llama_cpp.llama_log_callback
        def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            # Called from C: an exception cannot propagate from here (ctypes
            # would print its traceback on stderr, where Textual draws), so
            # none may leave. (Not contextlib.suppress: at interpreter exit,
            # while llama.cpp frees a model, modules are half gone.)
            try:  # noqa: SIM105
                _on_log_line(level, text)
            except Exception:
                pass

        _callback = callback
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    # llama-cpp-python's own prints at a load (`verbose=True`: the system's
    # features, the model's metadata, the chat template's tokens) go to
    # sys.stderr. While the app runs Textual captures them, but a quit while
    # the model loads restored the terminal's stderr first: 27 lines of them
    # were printed after kvchat had gone. Its module's `print` is this one.
    sys.modules["llama_cpp.llama"].print = _print_to_log  # type: ignore[attr-defined]


def _print_to_log(*values: object, sep: str | None = " ", end: str | None = "\n", **_: Any) -> None:
    """`print`, for llama-cpp-python's module: into the log, never raising."""
    with contextlib.suppress(Exception):  # a str() that fails: a line is not worth a load
        write((" " if sep is None else sep).join(map(str, values)) + ("\n" if end is None else end))


def forget_errors() -> None:
    """Start over: `recent_error` says only what llama.cpp logs from now on."""
    with _errors_lock:
        _recent_errors.clear()


def recent_error() -> str | None:
    """llama.cpp's first error line since the last `forget_errors()`, without
    the name of the function that logged it."""
    with _errors_lock:
        errors = list(_recent_errors)
    if not errors:
        return None
    _, _, reason = errors[0].partition(": ")
    return reason.removeprefix("error loading model: ") or errors[0]
