"""The question before a tool call: the tool, its server and its full
arguments, and the four answers (chat.tools.permissions.Choice).

The arguments are the model's, and the tool's and server's names the
server's: untrusted text, drawn as `Content` after `chat.sanitize` (no
markup, no escapes). They are shown whole, as indented JSON, in a box that
scrolls: a line says how many lines they have, so a long one is never cut
off without the user knowing. Escape refuses, like the Refuse button: the
model is told, and Esc on the chat screen then stops the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label, Static

from chat.tools.permissions import Choice
from chat.ui.screens.base import Dialog
from chat.ui.screens.dialogs import DIALOG_CSS
from chat.ui.untrusted import shown, shown_line
from chat.ui.widgets.tool_call_block import arguments_text
from chat.wording import counted


class ToolPermissionScreen(Dialog[Choice]):
    DEFAULT_CSS = (
        "ToolPermissionScreen { align: center middle; }"
        + DIALOG_CSS
        + """
    ToolPermissionScreen .dialog { max-height: 100%; }
    ToolPermissionScreen .dialog-text { margin: 0; }
    ToolPermissionScreen #tool-arguments {
        height: auto;
        max-height: 12;
        border: round $primary-muted;
        background: $background;
        padding: 0 1;
    }
    ToolPermissionScreen #tool-arguments:focus { border: round $primary; }
    ToolPermissionScreen .dialog-buttons { margin-top: 1; }
    ToolPermissionScreen .dialog-buttons Button { width: 1fr; min-width: 0; }
    """
    )
    BINDINGS = [
        Binding("o", "answer('once')", "Run once"),
        Binding("t", "answer('tool')", "Always this tool"),
        Binding("s", "answer('server')", "Always this server"),
        Binding("r", "answer('refuse')", "Refuse"),
        Binding("escape", "answer('refuse')", "Refuse"),
    ]

    def __init__(self, server: str, tool: str, arguments: Mapping[str, Any]) -> None:
        super().__init__()
        self._server = server
        self._tool = tool
        self._arguments = arguments_text(arguments)

    def compose(self) -> ComposeResult:
        lines = self._arguments.count("\n") + 1
        with Vertical(classes="dialog warning"):
            yield Label("Run a tool?", classes="dialog-title")
            yield Static(shown_line(f"Tool: {self._tool}"), classes="dialog-text", id="tool-name")
            yield Static(
                shown_line(f"Server: {self._server}"), classes="dialog-text", id="tool-server"
            )
            yield Static(
                f"Arguments ({counted(lines, 'line')}; ↑↓ scroll):",
                classes="dialog-text",
                markup=False,
            )
            with VerticalScroll(id="tool-arguments", can_focus=True):
                yield Static(shown(self._arguments), markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Run once (o)", id="once", variant="primary")
                yield Button("Always this tool (t)", id="tool")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Always this server (s)", id="server")
                yield Button("Refuse (r)", id="refuse", variant="error")

    def on_mount(self) -> None:
        # The arguments have the focus: Enter alone runs nothing.
        self.query_one("#tool-arguments").focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id or "refuse")

    def action_answer(self, choice: str) -> None:
        self.dismiss(Choice(choice))
