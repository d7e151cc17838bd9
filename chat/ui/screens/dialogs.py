"""Small modal dialogs: confirm, rename, and what to do with a database kvchat
cannot use. Each returns its answer through `dismiss`."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Button, Input, Label, Static

from chat.ui.screens.base import Dialog
from chat.ui.untrusted import UntrustedTextArea, editable_line, shown

DIALOG_CSS = """
.dialog {
    width: 76;
    max-width: 100%;
    height: auto;
    padding: 1 2;
    border: thick $primary;
    background: $surface;
}
.dialog.warning {
    border: thick $warning;
}
.dialog.error {
    border: thick $error;
}
.dialog-title {
    text-style: bold;
}
.dialog-text {
    margin: 1 0;
}
.dialog-buttons {
    height: auto;
    align-horizontal: right;
}
.dialog-buttons Button {
    margin-left: 1;
}
"""


class ConfirmScreen(Dialog[bool]):
    """A question with a yes button and a cancel button (Escape cancels)."""

    DEFAULT_CSS = "ConfirmScreen { align: center middle; }" + DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel")]

    def __init__(
        self, title: str, text: str, yes: str, no: str = "Cancel", *, danger: bool = False
    ) -> None:
        super().__init__()
        self._title = title
        self._text = text
        self._yes = yes
        self._no = no
        self._danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog warning" if self._danger else "dialog"):
            yield Label(shown(self._title), classes="dialog-title")
            yield Static(shown(self._text), classes="dialog-text")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self._yes, id="yes", variant="error" if self._danger else "primary")
                yield Button(self._no, id="no")

    def on_mount(self) -> None:
        # The safe answer has the focus: Enter alone never deletes anything.
        self.query_one("#no" if self._danger else "#yes", Button).focus()

    @on(Button.Pressed)
    def _answer(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class RenameScreen(Dialog[str | None]):
    """A new title: Enter saves, Escape cancels; an empty title is refused."""

    DEFAULT_CSS = "RenameScreen { align: center middle; }" + DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str) -> None:
        super().__init__()
        self._title = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Rename conversation", classes="dialog-title")
            yield Input(editable_line(self._title), id="title", select_on_focus=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Rename", id="rename", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    @on(Button.Pressed, "#rename")
    def _rename(self) -> None:
        title = " ".join(self.query_one(Input).value.split())
        if not title:
            self.notify("A title cannot be empty.", severity="warning")
            return
        self.dismiss(title)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


class StorageProblemScreen(Dialog[str]):
    """The conversation database cannot be used: kvchat has not touched it. The
    user decides: "move" it aside and start a new one, "continue" without
    saving, or "quit". Nothing happens to the file without the first answer.
    `can_move` False (a database from a newer kvchat, which is sound): no
    "move" at all, since the newer kvchat still needs the file where it is."""

    # Three buttons in a row, within the dialog's 76 columns: an 80-column
    # terminal shows every one of them.
    DEFAULT_CSS = "StorageProblemScreen { align: center middle; }" + DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss('continue')", "Continue without saving")]

    def __init__(self, problem: str, *, can_move: bool = True) -> None:
        super().__init__()
        self._problem = problem
        self._can_move = can_move

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog error"):
            yield Label("Conversations cannot be saved", classes="dialog-title")
            yield Static(shown(self._problem), classes="dialog-text", id="problem")
            with Horizontal(classes="dialog-buttons"):
                if self._can_move:
                    yield Button("Move aside, new database", id="move", variant="warning")
                yield Button("Continue without saving", id="continue", variant="primary")
                yield Button("Quit", id="quit")

    def on_mount(self) -> None:
        self.query_one("#continue", Button).focus()

    @on(Button.Pressed)
    def _answer(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "continue")


class EditReplyScreen(Dialog[str | None]):
    """A reply's text to edit: Ctrl+S (or the button) keeps the edit, Escape
    cancels. The text is the model's, shown as plain text: nothing in it is
    interpreted."""

    DEFAULT_CSS = (
        "EditReplyScreen { align: center middle; }"
        + DIALOG_CSS
        + "EditReplyScreen .dialog { width: 100; height: 80%; }"
        + "EditReplyScreen TextArea { height: 1fr; }"
    )
    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "keep", "Keep the edit", priority=True),
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Edit the reply", classes="dialog-title")
            yield Static(
                Content(
                    "The conversation goes on from the edited text; the original reply "
                    "is kept as an alternative (alt+←/→)."
                ),
                classes="dialog-text",
            )
            yield UntrustedTextArea(self._text, id="reply-text", soft_wrap=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Keep the edit (Ctrl+S)", id="keep", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#reply-text").focus()

    @on(Button.Pressed, "#keep")
    def action_keep(self) -> None:
        from textual.widgets import TextArea

        text = self.query_one("#reply-text", TextArea).text
        if not text.strip():
            self.notify("A reply cannot be empty.", severity="warning")
            return
        self.dismiss(text)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
