"""`⧉ copy`: the button that copies a message, or a code block."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual import events
from textual.content import Content
from textual.message import Message as TextualMessage
from textual.widgets import Static


class CopyButton(Static):
    """`⧉ copy`: copies a message (at the right of its header, shown while the
    pointer is over it or it is selected: app.tcss) or a code block (above it)."""

    DEFAULT_CSS = """
    CopyButton {
        width: auto;
        height: 1;
        padding: 0 1;
        color: $text-muted;
    }
    CopyButton:hover {
        color: $text;
        background: $boost;
    }
    CopyButton.fence-copy {
        dock: top;
        width: 100%;
        content-align: right top;
    }
    """

    @dataclass
    class Pressed(TextualMessage):
        """Copy `text()` (read at the click: a reply may still be streaming);
        `what` names it in the message that says it was copied."""

        text: Callable[[], str]
        what: str

    def __init__(self, text: Callable[[], str], what: str, classes: str) -> None:
        super().__init__(Content("⧉ copy"), markup=False, classes=classes)
        self._text = text
        self._what = what

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.post_message(self.Pressed(self._text, self._what))
