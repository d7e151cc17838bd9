"""Quitting while turns are not saved (a full or read-only disk): the user
chooses to wait until they are, to save them to a file elsewhere, or to quit
anyway. Escape goes back to the chat."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import Button, Label, Static

from chat.errors import KvchatError
from chat.ui.screens.base import Dialog
from chat.ui.screens.dialogs import DIALOG_CSS

WAIT_RETRY_S = 1.0
"""While the user waits, saving is tried this often."""


class QuitUnsavedScreen(Dialog[str | None]):
    """Answers "saved" (waiting worked), "saved-elsewhere:PATH", "quit", or
    None (Escape: back to the chat)."""

    DEFAULT_CSS = "QuitUnsavedScreen { align: center middle; }" + DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss(None)", "Back to the chat")]

    def __init__(
        self,
        unsaved: int,
        reason: str,
        try_saving: Callable[[], bool],
        save_elsewhere: Callable[[], Path],
    ) -> None:
        """`try_saving`: one more try, True once everything is saved;
        `save_elsewhere`: writes the conversation to a file and returns its
        path (raises KvchatError)."""
        super().__init__()
        self._unsaved = unsaved
        self._reason = reason
        self._try_saving = try_saving
        self._save_elsewhere = save_elsewhere
        self._waiting: Timer | None = None

    def compose(self) -> ComposeResult:
        turns = "1 message is" if self._unsaved == 1 else f"{self._unsaved} messages are"
        text = (
            f"{turns} not saved: {self._reason}.\n\n"
            "Wait: kvchat keeps trying and quits once they are saved (free some "
            "space, or make the folder writable). Save to a file: the conversation "
            "goes to a JSON file in your home folder or the temporary folder "
            "(chat --import reads it back). Quit anyway: the unsaved messages are lost, and "
            "a reply that was being saved reads as interrupted next time."
        )
        with Vertical(classes="dialog error"):
            yield Label("Quit without saving?", classes="dialog-title")
            yield Static(Content(text), classes="dialog-text", id="problem")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Wait", id="wait", variant="primary")
                yield Button("Save to a file", id="elsewhere", variant="warning")
                yield Button("Quit anyway", id="quit", variant="error")

    def on_mount(self) -> None:
        self.query_one("#wait", Button).focus()

    def _say(self, text: str) -> None:
        self.query_one("#problem", Static).update(Content(text))

    @on(Button.Pressed, "#wait")
    def _wait(self) -> None:
        if self._try():
            return
        self._say(
            f"Waiting: {self._reason}. kvchat quits as soon as it can save. "
            "Escape goes back to the chat."
        )
        if self._waiting is None:
            self._waiting = self.set_interval(WAIT_RETRY_S, self._try)

    def _try(self) -> bool:
        if not self._try_saving():
            return False
        self.dismiss("saved")
        return True

    @on(Button.Pressed, "#elsewhere")
    def _elsewhere(self) -> None:
        try:
            path = self._save_elsewhere()
        except KvchatError as error:
            self._say(f"{error}\nWait, or quit anyway.")
            return
        self.dismiss(f"saved-elsewhere:{path}")

    @on(Button.Pressed, "#quit")
    def _quit(self) -> None:
        self.dismiss("quit")
