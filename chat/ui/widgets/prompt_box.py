"""The multi-line prompt box: Enter sends, Shift+Enter or Ctrl+J starts a new line.

Typed text is inserted in runs, not key by key. A paste that arrives as
keystrokes (a terminal without bracketed paste, a slow SSH link) is thousands
of keys, and each insert into a TextArea rewraps the whole line: one insert
per key costs time quadratic in the paste's length (20,000 characters took a
minute). What is waiting in the queue together (keys, and the runs of
chat.ui.terminal_input) goes in with one insert, so a paste costs time linear
in its length; a key typed alone still appears at once.

`@path` attaches a file (chat.session.draft_attachments). While the cursor
ends an `@path`, the box's top border lists the files it may complete to, and
Tab completes it (to what the matches share, then to each match in turn);
elsewhere Tab moves the focus as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.containers import Lines
from rich.text import Text
from textual import events
from textual.content import Content
from textual.message import Message

from chat.sanitize import sanitize_line
from chat.session.draft_attachments import (
    complete_path,
    mention_before,
    mention_text,
    shared_prefix,
)
from chat.ui.terminal_input import TakesTypedText, TypedText
from chat.ui.untrusted import UntrustedTextArea

# The most matches the border lists (Tab still cycles through all of them).
SHOWN_COMPLETIONS = 6
# How far back from the cursor an `@path` being typed may start.
MENTION_LOOKBACK = 1000


class PromptBox(TakesTypedText, UntrustedTextArea):
    @dataclass
    class Submitted(Message):
        """Enter was pressed over `text` (not blank) in `prompt_box`."""

        prompt_box: PromptBox
        text: str

    @dataclass
    class PageRequested(Message):
        """Page Up (`step` -1) or Page Down (1) in the box: the conversation
        scrolls a screenful, as in a chat where the history pages while one
        types (the box is a few lines: paging its own text is rarely needed)."""

        step: int

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.placeholder = "Message  (Enter to send · Shift+Enter or Ctrl+J for a new line)"
        self._typed: list[str] = []
        """Text typed and not inserted yet (see the module docstring)."""
        self._last_division: tuple[tuple[object, ...], Lines] | None = None
        """The rows of the last long line drawn (see `get_line`)."""
        self._cycle: tuple[list[str], int, str] | None = None
        """While Tab steps through matches: the matches, the index inserted last,
        and the `@path` text it inserted."""
        self.completion_base: Path | None = None
        """The folder relative paths start from (None: the working folder)."""

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
        if event.key in ("pageup", "pagedown") and not self.max_scroll_y:
            # A message taller than the box still pages its own text.
            event.stop()
            event.prevent_default()
            self.post_message(self.PageRequested(-1 if event.key == "pageup" else 1))
            return
        if event.key == "tab" and self.complete_mention():
            event.stop()
            event.prevent_default()
            return
        self._cycle = None
        if await self._run_own_binding(event.key):
            event.stop()
            event.prevent_default()
            return
        # Other keys go on to TextArea's own handler, and up the chain.

    async def _run_own_binding(self, key: str) -> bool:
        """Run the box's own binding for `key` (Backspace, the arrows, Ctrl+W,
        ...) here, in order with the text around it.

        Textual runs a widget's binding once the key has bubbled up to the
        app, a few queues later. Text read from the terminal with the key (a
        run of chat.ui.terminal_input, handed straight to the box) went in
        before that: "hello", Backspace twice, "p!" arriving together became
        "hello" (the backspaces took "p!"), and Left Left "X" put the X at
        the end. The box is the first place Textual looks for a key's
        binding (priority ones ran at the app before the key came here), so
        the binding run is the same; only its moment changes. True when a
        binding took the key (one whose action is not allowed now passes)."""
        for binding in self._bindings.key_to_bindings.get(key, ()):
            if not binding.priority and await self.app.run_action(binding.action, self):
                return True
        return False

    def _type(self, text: str) -> None:
        self._typed.append(text)
        if len(self._typed) == 1:
            # After the events queued now: the text among them joins this insert.
            self.call_later(self.insert_typed)

    # Completing `@path`.

    def _mention_at_cursor(self) -> tuple[int, int, str] | None:
        """The `@path` the cursor ends: its row, the column of its `@`, its path."""
        if self.selection.start != self.selection.end:
            return None
        row, column = self.cursor_location
        # Only the end of a long line: a paste of one long line stays cheap.
        skip = max(0, column - MENTION_LOOKBACK)
        mention = mention_before(self.document.get_line(row)[skip:], column - skip)
        return None if mention is None else (row, skip + mention.start, mention.path)

    def completions(self) -> list[str]:
        """The paths the `@path` at the cursor may complete to (none elsewhere,
        nor once it is complete)."""
        mention = self._mention_at_cursor()
        if mention is None:
            return []
        matches = complete_path(mention[2], self.completion_base)
        return [] if matches == [mention[2]] else matches

    def complete_mention(self) -> bool:
        """Tab: extend the `@path` at the cursor. False when there is none to
        extend (Tab then does what it does elsewhere)."""
        mention = self._mention_at_cursor()
        if mention is None:
            return False
        row, start, path = mention
        end = self.cursor_location
        cycle = self._cycle
        current = self.document.get_line(row)[start : end[1]]
        if cycle is not None and cycle[2] == current:
            matches, index = cycle[0], (cycle[1] + 1) % len(cycle[0])
        else:
            matches = complete_path(path, self.completion_base)
            if not matches:
                return False
            shared = shared_prefix(matches)
            if len(matches) == 1 or len(shared) > len(path):
                # A file completed is followed by a space: the next word can start.
                done = len(matches) == 1 and not shared.endswith("/")
                self._insert_mention(row, start, end, shared, done)
                self._cycle = None
                return True
            index = 0
        inserted = self._insert_mention(row, start, end, matches[index], False)
        self._cycle = (matches, index, inserted)
        return True

    def _insert_mention(
        self, row: int, start: int, end: tuple[int, int], path: str, done: bool
    ) -> str:
        text = mention_text(path) if done or not path.endswith("/") else f"@{path}"
        if " " in path and not done:
            text = f'@"{path}'  # still open: the closing quote comes with the file
        self.replace(
            text + (" " if done else ""), (row, start), end, maintain_selection_offset=False
        )
        return text

    def on_resize(self) -> None:
        # A narrower terminal wraps the draft into more rows: the cursor's row
        # moves, and the box kept its scroll, with the cursor out of sight.
        # Once the new wrapping is laid out, its row is brought back in sight.
        self.call_after_refresh(self.scroll_cursor_visible)

    def on_text_area_selection_changed(self) -> None:
        # The cursor moved (typing moves it too): list what it may complete to.
        self._show_completions()

    def _show_completions(self) -> None:
        matches = self.completions()
        if not matches:
            self.border_title = None
            return
        names = [
            match.rstrip("/").rpartition("/")[2] + ("/" if match.endswith("/") else "")
            for match in matches
        ]
        # File names are untrusted: each cleaned to one line, two spaces apart.
        listed = "  ".join(sanitize_line(name) for name in names[:SHOWN_COMPLETIONS])
        more = f"  +{len(names) - SHOWN_COMPLETIONS}" if len(names) > SHOWN_COMPLETIONS else ""
        self.border_title = Content(f"Tab: {listed}{more}")

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
