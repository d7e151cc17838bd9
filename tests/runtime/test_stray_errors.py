"""Errors Python would print on the terminal outside kvchat's handling go to
a log file instead (chat.runtime.stray_errors)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chat.runtime import stray_errors

PROGRAM = textwrap.dedent(
    """
    import gc, sys, threading
    from pathlib import Path
    from chat.runtime.stray_errors import keep_stray_errors_off_screen

    keep_stray_errors_off_screen(Path(sys.argv[1]))

    class Finalizer:
        def __del__(self):
            raise RuntimeError("a finalizer failed")

    Finalizer()
    gc.collect()
    thread = threading.Thread(target=lambda: 1 / 0, name="kvchat-sample")
    thread.start()
    thread.join()

    """
)


def test_a_finalizers_and_a_threads_errors_go_to_the_log_not_the_terminal(
    tmp_path: Path,
) -> None:
    log = tmp_path / "state" / "errors.log"
    ran = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(log)], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0
    assert ran.stderr == ""
    written = log.read_text()
    assert "RuntimeError: a finalizer failed" in written
    assert "Exception ignored in: <function Finalizer.__del__" in written
    assert "In kvchat-sample:" in written and "ZeroDivisionError" in written


def test_the_log_starts_again_past_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "errors.log"
    log.write_text("x" * 200)
    monkeypatch.setattr(stray_errors, "LOG_LIMIT_BYTES", 100)
    try:
        raise ValueError("once more")
    except ValueError as error:
        stray_errors._write(log, "In a thread:", ValueError, error, error.__traceback__)
    written = log.read_text()
    assert not written.startswith("x")
    assert "ValueError: once more" in written


def test_a_log_that_cannot_be_written_is_dropped_quietly(tmp_path: Path) -> None:
    in_the_way = tmp_path / "file"
    in_the_way.write_text("")
    error = ValueError("lost")
    stray_errors._write(in_the_way / "errors.log", "In a thread:", ValueError, error, None)


def test_an_object_whose_repr_fails_is_named_by_its_type() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise ValueError("no repr")

    assert stray_errors._described(Broken()) == "<Broken object>"


def test_a_fifo_in_the_logs_place_is_refused_without_waiting(tmp_path: Path) -> None:
    """No reader on the FIFO: opening it to write would block, and with a
    reader the lines would go to whoever reads; neither happens."""
    fifo = tmp_path / "errors.log"
    os.mkfifo(fifo)
    error = ValueError("lost")
    stray_errors._write(fifo, "In a thread:", ValueError, error, None)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
