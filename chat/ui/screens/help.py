"""The help screen (F1, or a click on the status bar or the meter): every key
of the screen below it, every figure of the status bar and the context meter
(a narrow terminal shows only the first ones), and why the whole conversation
is sent again each turn."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Label, Static

from chat.ui.frame_timer import DrawsWhenAsked
from chat.ui.screens.dialogs import DIALOG_CSS
from chat.ui.widgets.context_meter import HELP as CONTEXT_HELP
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.status_bar import StatusBar

TYPING_KEYS = [
    ("Enter", "send the message"),
    ("Shift+Enter, Ctrl+J", "new line in the message"),
    (
        "Page Up, Page Down",
        "scroll the conversation a screenful, also while typing "
        "(a message taller than its box pages its own text)",
    ),
]
"""Keys of the prompt box (a TextArea), which are not bindings of the screen."""
MOVING_FOCUS = {"focus_next", "focus_previous"}
"""Textual's Tab and Shift+Tab: the same in every app, not worth a line."""


def screen_keys(screen: Screen[Any]) -> list[tuple[str, str]]:
    """The keys the screen and the app bind, shown in the footer or not, as
    (key, what it does), in the order they are bound."""
    keys: list[tuple[str, str]] = []
    seen: set[str] = set()
    for node, binding, _enabled, tooltip in screen.active_bindings.values():
        if node is not screen and node is not screen.app:
            continue  # the focused widget's own keys (cursor moves, ...)
        if binding.action in seen or binding.action.rsplit(".", 1)[-1] in MOVING_FOCUS:
            continue
        seen.add(binding.action)
        what = tooltip or binding.description
        if what:  # one without a description is told of by another's line
            keys.append((screen.app.get_key_display(binding), what))
    return keys


class HelpScreen(DrawsWhenAsked, ModalScreen[None]):
    DEFAULT_CSS = (
        """
    HelpScreen { align: center middle; }
    HelpScreen .dialog { height: 100%; max-height: 40; padding: 0 1; }
    #help-body { height: 1fr; }
    .help-heading { text-style: bold; color: $accent; margin-top: 1; }
    .help-key { width: 22; color: $text; }
    .help-row { height: auto; }
    .help-what { width: 1fr; }
    """
        + DIALOG_CSS
    )
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("f1", "dismiss", "Close", show=False),
    ]

    def __init__(self, keys: list[tuple[str, str]], status: list[str], meter: list[str]) -> None:
        super().__init__()
        self._keys = keys
        self._status = status
        self._meter = meter

    @classmethod
    def of(cls, screen: Screen[Any]) -> HelpScreen:
        """Help for `screen`: its keys, and its status bar and meter if it has them."""
        bars = screen.query(StatusBar)
        meters = screen.query(ContextMeter)
        return cls(
            TYPING_KEYS + screen_keys(screen),
            bars.first().full_lines() if bars else [],
            meters.first().legend_lines() if meters else [],
        )

    def compose(self) -> ComposeResult:
        # Model names and server URLs reach these lines: never markup.
        with Vertical(classes="dialog"):
            yield Label("Help  (Esc closes)", classes="dialog-title")
            with VerticalScroll(id="help-body"):
                if self._status:
                    yield Label("Status", classes="help-heading")
                    for line in self._status:
                        yield Static(line, markup=False)
                if self._meter:
                    yield Label("Context window", classes="help-heading")
                    for line in self._meter:
                        yield Static(line, markup=False)
                yield Label("Keys", classes="help-heading")
                for key, what in self._keys:
                    with Horizontal(classes="help-row"):
                        yield Label(key, classes="help-key", markup=False)
                        yield Static(what, classes="help-what", markup=False)
                yield Label("Why the whole conversation is sent again", classes="help-heading")
                yield Static(CONTEXT_HELP, markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        # The text, not the Close button: the arrows and Page Down scroll it
        # at once (Esc closes, Tab reaches the button).
        self.query_one("#help-body", VerticalScroll).focus()

    def on_button_pressed(self) -> None:
        self.dismiss()
