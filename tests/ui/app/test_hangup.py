"""The terminal goes away under a running `chat` (the window closed, the SSH
link dropped), or the system asks it to end (SIGTERM): the app quits as
Ctrl+Q does, within `QUIT_WITHIN_S`, keeping the conversation and its KV
cache, and gives the terminal back as it found it when there still is one.
Exit status 0, as after Ctrl+Q: kvchat ended as asked, with nothing lost.

The real `chat` command with the demo model, in a pseudo-terminal, mid-reply.
"closed": the terminal's other end closes; the app then reads end-of-file or
EIO (no SIGHUP: the terminal is not its controlling one), as an orphan of a
killed terminal emulator would. "pane-closed": the same terminal is the app's
controlling one, as in a terminal emulator or tmux (`kill-pane`): closing it
sends SIGHUP as well, and every write to it fails. "hangup": SIGHUP alone.
"sigterm": `kill`, a shutdown.

Before: SIGTERM ended kvchat with status 143, the KV state not saved and the
terminal left in the alternate screen with mouse reporting on; a closed
terminal left kvchat running (Textual's output thread died on EIO and the app
waited on its queue at exit).
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from chat.conversations.store import Store
from tests.ui.app.quit_driver import (
    ENTER,
    GENERATING,
    MODEL_READY,
    Terminal,
    chat_command,
    folders_env,
)

QUIT_WITHIN_S = 2.0

# Written to the terminal when the app gives it back.
LEAVE_ALTERNATE_SCREEN = b"\x1b[?1049l"
MOUSE_OFF = b"\x1b[?1000l"
SHOW_CURSOR = b"\x1b[?25h"


def reply_saved_so_far(database: Path) -> bool:
    """Whether the streaming reply's row holds text yet (read without writing)."""
    if not database.exists():
        return False
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        row = db.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchone()
    return row is not None and row[0] != ""


def wait_until(condition, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # a poll of another process's database
    return True


@pytest.mark.model
@pytest.mark.parametrize("how", ["closed", "pane-closed", "hangup", "sigterm"])
def test_the_app_ends_like_ctrl_q_when_the_terminal_goes_or_it_is_told_to(
    demo_model: Path, tmp_path: Path, how: str
) -> None:
    env = folders_env(tmp_path)
    database = tmp_path / "data" / "conversations.db"
    # A long reply: it is still streaming when the terminal goes.
    argv = chat_command(demo_model, "--max-tokens", "2000")
    terminal = Terminal(argv, env, (120, 40), controlling=how == "pane-closed")
    try:
        assert terminal.wait_for(MODEL_READY, 60), terminal.output[-2000:]
        since = terminal.mark()
        terminal.send(b"Write a long story about a cat who learns to sail.")
        terminal.send(ENTER)
        assert terminal.wait_for(GENERATING, 60, since), terminal.output[-2000:]
        assert wait_until(lambda: reply_saved_so_far(database), 60)
        before_end = terminal.mark()
        ended_at = time.monotonic()
        if how in ("closed", "pane-closed"):
            terminal.hang_up()
        else:
            terminal.process.send_signal(signal.SIGHUP if how == "hangup" else signal.SIGTERM)
        code = terminal.wait_exit(30)
        took = time.monotonic() - ended_at
        tail = terminal.output[before_end:]
    finally:
        terminal.close()
    print(f"{how}: ended in {took:.2f} s")  # pytest -s shows it
    assert code == 0, tail[-2000:]
    assert took < QUIT_WITHIN_S, f"{took:.2f} s to end"
    if how in ("hangup", "sigterm"):
        assert b"Traceback" not in tail
        for sequence in (LEAVE_ALTERNATE_SCREEN, MOUSE_OFF, SHOW_CURSOR):
            assert sequence in tail, (sequence, tail[-500:])
    with Store(database) as store:
        (summary,) = store.list_conversations()
        messages = store.get_conversation(summary.id).messages
    assert [m.role for m in messages] == ["user", "assistant"]
    reply = messages[-1]
    assert reply.content and reply.state == "complete"
    assert reply.stats is not None and reply.stats.finish_reason == "stopped"
    # The conversation was left as on Ctrl+Q: its KV cache saved for instant resume.
    assert any(path.is_file() for path in (tmp_path / "xdg-cache").rglob("*")), "no KV state"
