"""The multi-line prompt box: Enter sends, Shift+Enter or Ctrl+J starts a new line.

Typed text is inserted in runs, not key by key. A paste that arrives as
keystrokes (a terminal without bracketed paste, a slow SSH link) is thousands
of keys, and each insert into a TextArea rewraps the whole line: one insert
per key costs time quadratic in the paste's length (20,000 characters took a
minute). What is waiting in the queue together (keys, and the runs of
chat.ui.terminal_input) goes in with one insert, so a paste costs time linear
in its length; a key typed alone still appears at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.containers import Lines
from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import TextArea

from chat.ui.terminal_input import TakesTypedText, TypedText


class PromptBox(TakesTypedText, TextArea):
    @dataclass
    class Submitted(Message):
        """Enter was pressed over `text` (not blank) in `prompt_box`."""

        prompt_box: PromptBox
        text: str

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.placeholder = "Message  (Enter to send · Shift+Enter or Ctrl+J for a new line)"
        self._typed: list[str] = []
        """Text typed and not inserted yet (see the module docstring)."""
        self._last_division: tuple[tuple[object, ...], Lines] | None = None
        """The rows of the last long line drawn (see `get_line`)."""

    async def on_event(self, event: events.Event) -> None:
        # Whatever comes after typed text (Enter, Backspace, a paste, a click)
        # finds it in the box.
        if _typed_text(event) is None:
            self.insert_typed()
        await super().on_event(event)

    def _on_typed_text(self, event: TypedText) -> None:
        self._type(event.text)

    async def _on_key(self, event: events.Key) -> None:
        text = _typed_text(event)
        if text is not None:
            event.stop()
            event.prevent_default()
            self._type(text)
            return
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            if self.text.strip():
                self.post_message(self.Submitted(self, self.text))
            return
        # Other keys go on to TextArea's own handler and bindings.

    def _type(self, text: str) -> None:
        self._typed.append(text)
        if len(self._typed) == 1:
            # After the events queued now: the text among them joins this insert.
            self.call_later(self.insert_typed)

    def get_line(self, line_index: int) -> Text:
        # TextArea draws each row of a wrapped line by dividing the whole line
        # into rows, once per row drawn: a row of a line of 200,000 characters
        # cost as much as the whole line, ten times a frame. The rows of a line
        # drawn together are divided once.
        return _SharedDivisionLine(self, self.document.get_line(line_index))

    def insert_typed(self) -> None:
        """Insert the characters typed so far, in place of the selection, as
        typing each would (one undo step)."""
        if not self._typed:
            return
        text = "".join(self._typed)
        self._typed.clear()
        self._restart_blink()
        self._replace_via_keyboard(text, *self.selection)
        # Again once the box is laid out: a long insert grows the box and its
        # scrollable height, and scrolling before that stops short of the cursor.
        self.call_after_refresh(self.scroll_cursor_visible)


class _SharedDivisionLine(Text):
    """A line of the box whose division into rows is kept by the box: the next
    row of the same line, styled the same, reuses it."""

    def __init__(self, box: PromptBox, text: str) -> None:
        super().__init__(text, end="", no_wrap=True)
        self._box = box

    def divide(self, offsets: Iterable[int]) -> Lines:
        offsets = tuple(offsets)
        key = (self.plain, self.style, tuple(self._spans), offsets)
        last = self._box._last_division
        if last is not None and last[0] == key:
            return last[1]
        lines = super().divide(offsets)
        self._box._last_division = (key, lines)
        return lines


NEWLINE_KEYS = ("shift+enter", "ctrl+j")


def _typed_text(event: events.Event) -> str | None:
    """The text `event` types into the box (a run of characters, a printable
    key, a new line), or None for anything else."""
    if isinstance(event, TypedText):
        return event.text
    if isinstance(event, events.Key):
        if event.key in NEWLINE_KEYS:
            return "\n"
        if event.is_printable:
            return event.character
    return None
