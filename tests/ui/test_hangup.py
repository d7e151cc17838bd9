"""The terminal goes away under a running `chat` (the window closed, the SSH
link dropped): the app quits as Ctrl+Q does, keeping the conversation and its
KV cache, instead of running on with no screen, reading nothing at full speed.

The real `chat` command with the demo model, in a pseudo-terminal whose other
end is closed: the app then reads end-of-file or EIO (no SIGHUP: the terminal
is not its controlling one), as an orphan of a killed terminal emulator would.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from chat.conversations.store import Store
from tests.ui.quit_driver import ENTER, MODEL_READY, REPLY_DONE, Terminal, chat_command, folders_env


@pytest.mark.model
@pytest.mark.parametrize("how", ["closed", "hangup"])
def test_a_terminal_that_goes_away_ends_the_app_cleanly(
    demo_model: Path, tmp_path: Path, how: str
) -> None:
    """closed: the terminal's other end closes; hangup: SIGHUP, as a
    controlling terminal that hangs up sends."""
    env = folders_env(tmp_path)
    terminal = Terminal(chat_command(demo_model), env, (120, 40))
    try:
        assert terminal.wait_for(MODEL_READY, 60), terminal.output[-2000:]
        terminal.send(b"Say hello.")
        terminal.send(ENTER)
        assert terminal.wait_for(REPLY_DONE, 120), terminal.output[-2000:]
        if how == "closed":
            os.close(terminal._master)  # the terminal emulator is gone
            terminal._master = os.open(os.devnull, os.O_RDONLY)  # for close()
        else:
            terminal.process.send_signal(signal.SIGHUP)
        assert terminal.wait_exit(30) == 0
    finally:
        terminal.close()
    with Store(tmp_path / "data" / "conversations.db") as store:
        (summary,) = store.list_conversations()
        messages = store.get_conversation(summary.id).messages
    assert [m.role for m in messages] == ["user", "assistant"]
    # The conversation was left as on Ctrl+Q: its KV cache saved for instant resume.
    assert any(path.is_file() for path in (tmp_path / "xdg-cache").rglob("*")), "no KV state"
