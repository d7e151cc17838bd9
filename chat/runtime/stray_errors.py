"""Errors Python itself would print on the terminal, outside anything kvchat
handles: an exception in a finalizer (`__del__`, say asyncio's subprocess
transport collected after its event loop closed) or one that ends a thread.
Python writes their tracebacks to stderr, which is the user's terminal once
the app has stopped (and at the interpreter's exit). They go to a log file in
the state folder instead: the screen shows no traceback, and the details are
kept for a report.

A crash of the app itself is not one of these: it stops the app and says so
(chat.ui.crash_report)."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
import traceback
from pathlib import Path
from types import TracebackType

LOG_LIMIT_BYTES = 1_000_000
"""The log is started again past this size: one error repeated in a loop
must not fill the disk."""


def keep_stray_errors_off_screen(log: Path) -> None:
    """From now on, write finalizers' and threads' uncaught errors to `log`."""

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        # As Python's own hook words it: "<err_msg>: <object>".
        what = info.err_msg or "Exception ignored in"
        if info.object is not None:
            what = f"{what}: {_described(info.object)}"
        _write(log, what, info.exc_type, info.exc_value, info.exc_traceback)

    def thread_error(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return  # a thread that asked to end, as Python's own hook does
        name = args.thread.name if args.thread is not None else "a thread"
        _write(log, f"In {name}:", args.exc_type, args.exc_value, args.exc_traceback)

    sys.unraisablehook = unraisable
    threading.excepthook = thread_error


def _described(thing: object) -> str:
    """`repr(thing)`, or its type's name where its repr fails too."""
    try:
        return repr(thing)
    except Exception:  # a broken __repr__ of the object being finalized
        return f"<{type(thing).__name__} object>"


def _write(
    log: Path,
    what: str,
    kind: type[BaseException],
    error: BaseException | None,
    trace: TracebackType | None,
) -> None:
    """Append one error to the log; if that fails (a full disk, a read-only
    folder, a log that is no regular file) it is dropped: never the terminal,
    and never an error of its own. Opened without blocking: a FIFO in the
    log's place would otherwise hold the app (at its exit too) until a
    reader came; it is refused like any file that is not regular."""
    text = "".join(traceback.format_exception(kind, error, trace))
    entry = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {what}\n{text}\n"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o600)
        with open(descriptor, "a", encoding="utf-8") as file:
            state = os.fstat(descriptor)
            if not stat.S_ISREG(state.st_mode):
                return
            if state.st_size > LOG_LIMIT_BYTES:
                os.ftruncate(descriptor, 0)
            file.write(entry)
    except Exception:  # the hook itself must never raise
        pass
