"""A thread's name for the kernel (/proc/PID/task/TID/comm, `top -H`,
`ps -L`): Python names its threads for itself only. kvchat's own threads
carry their names there too, so that a user and the benchmark (which counts
the UI's CPU apart from kvchat's other threads) can tell them apart."""

from __future__ import annotations

import contextlib
import ctypes
import sys


def name_this_thread(name: str) -> None:
    """The running thread's kernel name (Linux's prctl PR_SET_NAME: 15 bytes
    at most); elsewhere the thread keeps its Python name only."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(15, name.encode()[:15])  # PR_SET_NAME
