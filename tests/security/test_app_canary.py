"""The app draws, edits and copies untrusted text: the real `chat`, in a
pseudo-terminal, against a hostile model server and a home folder whose every
source carries the canary payload. A user goes through each place that text
is shown: the status bar, a streamed reply, a saved conversation, the
browser and its Rename box, F3's edit box, F5's copy, the theme and preset
lists, the model picker, and a paste holding escapes. Nothing of the payload
may reach the terminal as an escape sequence (nor the clipboard as controls),
and each source must really have been drawn."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.canary import assert_no_leak, clipboard_writes, leaks
from tests.security.conftest import TAGS, HostileHome
from tests.ui.app.quit_driver import ENTER, FIRST_FRAME, Terminal

CTRL_O = b"\x0f"
CTRL_P = b"\x10"
CTRL_Q = b"\x11"
ESC = b"\x1b"
F3 = b"\x1bOR"
F5 = b"\x1b[15~"
F8 = b"\x1b[19~"
F9 = b"\x1b[20~"
WAIT_S = 60.0


class App:
    """The running app; each step waits for what the screen must show."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal

    def press(self, keys: bytes, then_shows: str | bytes) -> None:
        since = self.terminal.mark()
        self.terminal.send(keys)
        self.shows(then_shows, since)

    def shows(self, text: str | bytes, since: int = 0) -> None:
        wanted = text.encode() if isinstance(text, str) else text
        assert self.terminal.wait_for(wanted, WAIT_S, since), (
            f"never shown: {wanted!r}\n{self.terminal.output[-3000:]!r}"
        )

    def quit(self) -> None:
        self.terminal.send(CTRL_Q)
        assert self.terminal.wait_exit(30) == 0, self.terminal.output[-2000:]


@pytest.fixture
def app(hostile_home: HostileHome) -> Iterator[App]:
    argv = hostile_home.chat("--server", hostile_home.server.url, "--continue")
    terminal = Terminal(argv, hostile_home.env, (140, 45))
    try:
        running = App(terminal)
        running.shows(FIRST_FRAME)
        yield running
    finally:
        terminal.close()


def test_the_app_draws_edits_and_copies_no_escape(app: App) -> None:
    # The saved conversation, and the server's model in the status bar.
    app.shows(TAGS["reply"])
    app.shows(TAGS["user"])
    app.shows(TAGS["server_model"])
    # A reply streamed from the server, then copied (F5: the last reply).
    app.terminal.send(b"hello")
    app.press(ENTER, TAGS["server_reply"])
    app.shows("first token")  # the reply's figures: it ended (one token: no rate)
    app.press(F5, "Copied")
    # The earlier message in F3's edit box (the last message of the user).
    app.press(F3, "Editing")
    app.press(ESC, "Message")
    # The browser lists the title; Rename puts it in an editable box.
    app.press(CTRL_O, TAGS["title"])
    app.press(b"r", "Rename conversation")
    app.press(ESC, "Filter")
    app.press(ESC, "Message")
    # Themes and presets, by their names and descriptions.
    app.press(CTRL_P, "Search")
    app.terminal.send(b"Theme")
    app.press(ENTER, "Search for themes")
    app.shows(TAGS["theme"])
    app.press(ESC, "Message")
    app.press(F9, TAGS["preset"])
    app.press(ESC, "Message")
    # The model picker lists the models folder, by file name.
    app.press(F8, TAGS["file_name"])
    app.press(ESC, "Message")
    app.quit()
    output = app.terminal.output
    assert_no_leak(output)
    # F5 copied the reply as the screen shows it.
    copied = clipboard_writes(output)
    assert copied and TAGS["server_reply"] in copied[-1]


def test_a_paste_holding_escapes_stays_text(app: App) -> None:
    # Pasted: a BEL (Ctrl+G opens the editor), a Ctrl+Q (quits) and escapes.
    paste = (
        b"\x1b[200~" + TAGS["paste"].encode() + b" one\x07two\x11three\x1b]0;CANARY\x07"
        b"four\x1b[4242m\r\nfive\x1b[201~"
    )
    app.terminal.send(paste)
    app.shows("five")
    assert app.terminal.process.poll() is None, "the paste quit the app"
    app.shows(TAGS["paste"])
    # The text is in the box, the keys in it never ran: Enter sends it.
    app.press(ENTER, TAGS["server_reply"])
    app.quit()
    assert not leaks(app.terminal.output)
