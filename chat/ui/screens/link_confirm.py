"""Asks before opening a link from a reply: model output is untrusted."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, Static

from chat.sanitize import sanitize
from chat.ui.screens.base import Dialog
from chat.ui.untrusted import shown


class LinkConfirmScreen(Dialog[bool]):
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel")]

    def __init__(self, href: str) -> None:
        super().__init__()
        self.href = href

    def compose(self) -> ComposeResult:
        with Vertical(id="link-dialog"):
            yield Label("Open this link from the model's reply?")
            yield Static(shown(self.href), id="link-href", markup=False)
            with Horizontal(id="link-buttons"):
                yield Button("Open", id="open", variant="warning")
                yield Button("Copy", id="copy")
                yield Button("Cancel", id="cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "open":
            self.app.open_url(self.href)
            self.dismiss(True)
        elif event.button.id == "copy":
            self.app.copy_to_clipboard(sanitize(self.href))
            self.app.notify("Link copied.")
            self.dismiss(False)
        else:
            self.dismiss(False)
