"""An error that nothing handles: the app stops, the terminal shows one
sentence (no traceback) naming a report file that holds the traceback, and
`chat` exits with status 1. A real process in a pseudo-terminal
(tests/ui/app/crash_driver.py); the report itself is also checked directly."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from chat.ui.crash_report import crash_notice, write_crash_report
from tests.ui.app.crash_driver import BROKEN
from tests.ui.app.quit_driver import Terminal, folders_env

CTRL_N = b"\x0e"
MODEL_READY = b" ctx"  # the status bar: "scripted · 4,096 ctx"


def test_an_unhandled_error_leaves_a_sentence_and_a_report(tmp_path: Path) -> None:
    terminal = Terminal(
        [sys.executable, "-m", "tests.ui.app.crash_driver"], folders_env(tmp_path), (100, 30)
    )
    try:
        assert terminal.wait_for(MODEL_READY), terminal.output[-2000:]
        terminal.send(CTRL_N)
        code = terminal.wait_exit(30)
    finally:
        terminal.close()
    assert code == 1
    output = terminal.output.decode("utf-8", "replace")
    (report,) = tmp_path.rglob("crash-*.log")
    assert "Traceback" not in output and "broken_new_conversation" not in output
    said = re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output))
    assert "kvchat stopped on an unexpected error (RuntimeError: broken on purpose" in said
    assert "[bold]red?[/bold]" in said  # the message as text: not markup
    # Whole, on a line of its own (folded where the terminal is narrower).
    assert str(report) in output.replace("\r\n", "")
    text = report.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text
    assert "broken_new_conversation" in text and BROKEN in text
    assert text.startswith(tuple("0123456789")) and "kvchat " in text.splitlines()[0]


def test_no_report_where_the_folder_cannot_be_written(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way", encoding="utf-8")
    assert write_crash_report(RuntimeError("x"), blocked / "state") is None


@pytest.mark.parametrize("message", ["\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "\x1b[2J"])
def test_the_notice_carries_no_terminal_escapes(tmp_path: Path, message: str) -> None:
    report = write_crash_report(RuntimeError(message), tmp_path)
    assert report is not None
    notice = crash_notice(RuntimeError(message), report)
    assert all("\x1b" not in text.plain for text in notice.renderables)  # type: ignore[union-attr]
