"""Typed text from the terminal in runs, not one key event per character.

A paste that arrives as keystrokes (a terminal or multiplexer without bracketed
paste, a slow SSH link) is one key per character. Textual parses each
character into its own key event and hands it through the app to the focused
widget, at a few hundred microseconds a key on this machine: 200,000
characters took over a minute, and Ctrl+Q, behind them in the input, waited as
long. Here the terminal's input parser hands over each run of printable
characters read together as one `TypedText` event. The app gives it to the
prompt box in one piece, or, where anything else has focus, as the keys it is.
A key read alone is a key event as before.

Only the input thread's parser is replaced (`TypingDriver.run_input_thread`,
Textual's own with `RunParser`); the rest is Textual's `LinuxDriver`, but for
its output: written through `TerminalOutput` (a closed terminal), and each
frame handed to Textual's writer thread in one piece (`TypingDriver.write`).
"""

from __future__ import annotations

import os
import selectors
import time
from codecs import getincrementaldecoder
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from textual import constants, events
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.keys import _character_to_key
from textual.message import Message

from chat.sanitize import sanitize
from chat.ui.textual_fixes import textual_known

if TYPE_CHECKING:
    from textual.app import App


class TypedText(events.Event, bubble=False):
    """Printable characters that the terminal sent together, in order (no
    newline, tab or control character: those stay keys)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def as_keys(self) -> list[events.Key]:
        """The key events the characters would have been, one by one."""
        return [events.Key(_character_to_key(character), character) for character in self.text]


class TerminalGone(events.Event, bubble=False):
    """The terminal went away (the window closed, the SSH link dropped): reading
    input gives end-of-file or an error. The app quits as Ctrl+Q does, rather
    than run on without a screen (reading nothing, at full speed)."""


class TakesTypedText:
    """A widget that takes `TypedText` in one piece: it handles it in order with
    its key events, as typing the characters would."""


async def deliver_typed_text(app: App[Any], event: TypedText) -> None:
    """Hand `event` to the focused widget in one piece when it takes typed text
    and none of the characters is a key binding; otherwise as its keys, each
    handled as if it had arrived alone."""
    focused = app.focused
    bound = app.active_bindings
    if isinstance(focused, TakesTypedText) and not any(
        _character_to_key(character) in bound for character in set(event.text)
    ):
        focused.post_message(event)
        return
    for key in event.as_keys():
        key.set_sender(app)
        await app.on_event(key)


class _Character:
    """A printable character as the parser sees it, before it joins a run."""

    __slots__ = ("character", "key")

    def __init__(self, character: str) -> None:
        self.character = character
        self.key = character  # never Keys.Ignore, which the parser filters on


HOLD_S = constants.ESCAPE_DELAY
"""How long the start of a paste marker at the end of a read waits for the rest."""
PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"


def _partial_marker(text: str, marker: str) -> int:
    """How many characters at the end of `text` could begin `marker` (the
    rest of it still to be read)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def pasted_text(raw: str) -> str:
    """What a bracketed paste inserts: its text, whatever it holds. Line ends
    become newlines (terminals send a pasted newline as a carriage return);
    escape sequences and other control characters are removed, so a paste is
    never taken for keys or drawn as a terminal command."""
    return sanitize(raw.replace("\r\n", "\n").replace("\r", "\n"))


class RunParser(XTermParser):
    """Textual's terminal parser, with printable characters read together
    joined into one `TypedText`, and bracketed pastes read here.

    Textual's parser reads an ESC inside a paste as the start of a key
    sequence and, when none matches, hands the characters over as keys: a
    pasted BEL or Ctrl+Q then ran as a key binding. Here everything between
    the paste's start and end markers is one `Paste` of text, and only the
    rest of the input goes to Textual's parser."""

    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        self._paste: list[str] | None = None
        """The text of the paste being read; None outside a paste."""
        self._held = ""
        """The end of the last read that may be the start of a paste marker."""
        self._held_at = 0.0

    def _sequence_to_key_events(self, sequence: str, alt: bool = False) -> Iterable[Any]:
        if not alt and len(sequence) == 1 and sequence.isprintable():
            return (_Character(sequence),)
        keys = super()._sequence_to_key_events(sequence, alt)
        if alt:
            # A terminal sends Alt+T as ESC t, which Textual reads as "alt+t"
            # carrying the character "t": a text box then typed the t, and the
            # key's binding never ran. A key with a modifier types nothing
            # (as `textual.keys.key_to_character` has it, and as Pilot presses it).
            return [_without_character(key) for key in keys]
        return keys

    def feed(self, data: str) -> Iterable[Message]:
        return self._runs(self._split_pastes(data))

    def _split_pastes(self, data: str) -> Iterator[Any]:
        data = self._held + data
        self._held = ""
        while data:
            if self._paste is None:
                start = data.find(PASTE_START)
                if start < 0:
                    held = _partial_marker(data, PASTE_START)
                    if held:
                        data, self._held = data[:-held], data[-held:]
                        self._held_at = time.monotonic()
                    yield from self._keys(data)
                    return
                yield from self._keys(data[:start])
                self._paste = []
                data = data[start + len(PASTE_START) :]
            else:
                end = data.find(PASTE_END)
                if end < 0:
                    held = _partial_marker(data, PASTE_END)
                    self._paste.append(data[: len(data) - held])
                    self._held = data[len(data) - held :]
                    return
                self._paste.append(data[:end])
                yield events.Paste(pasted_text("".join(self._paste)))
                self._paste = None
                data = data[end + len(PASTE_END) :]

    def _keys(self, data: str) -> Iterable[Any]:
        # Textual's parser takes an empty feed for the end of the input.
        return super().feed(data) if data else ()

    def tick(self) -> Iterable[Message]:
        # The start of a marker that no read completed: the keys it was. An
        # ESC alone has waited as long as Textual waits to tell the Escape key
        # from the start of a sequence: it is the Escape key.
        if self._held and self._paste is None and time.monotonic() - self._held_at > HOLD_S:
            held, self._held = self._held, ""
            if held == "\x1b":
                return [events.Key("escape", "\x1b"), *self._runs(super().tick())]
            return self._runs([*self._keys(held), *super().tick()])
        return self._runs(super().tick())

    def _runs(self, tokens: Iterable[Any]) -> Iterator[Message]:
        run: list[str] = []
        for token in tokens:
            if isinstance(token, _Character):
                run.append(token.character)
                continue
            if run:
                yield _run_event(run)
                run = []
            yield token
        if run:
            yield _run_event(run)


def _without_character(key: events.Key) -> events.Key:
    if "+" in key.key and key.character is not None and key.character.isprintable():
        return events.Key(key.key, None)
    return key


def _run_event(run: list[str]) -> Message:
    if len(run) == 1:  # a key typed alone: bindings and widgets see it as always
        return events.Key(_character_to_key(run[0]), run[0])
    return TypedText("".join(run))


class TerminalOutput:
    """The terminal's output stream, for Textual's writer thread, that drops what
    cannot be written once the terminal is gone (EIO, EPIPE). Textual's thread
    dies on that error; its queue then fills and the app, leaving, waits on it
    for ever: a closed window left kvchat running."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> None:
        if not self.gone:
            try:
                self._stream.write(text)
            except OSError:
                self.gone = True

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except OSError:
                self.gone = True

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()


SYNC_START = "\x1b[?2026h"
SYNC_END = "\x1b[?2026l"
"""A synchronized frame's start and end (the terminal's mode 2026), as Textual
writes them: each a piece of its own."""


class TypingDriver(LinuxDriver):
    """Textual's driver for Linux and macOS, reading input with `RunParser`,
    writing through `TerminalOutput`, and handing each frame to the writer
    thread in one piece."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stream = self._file
        assert stream is not None  # Textual checked there is a terminal to draw on
        # Not a TextIOWrapper: Textual's writer thread calls only write, flush, fileno.
        self._file = TerminalOutput(stream)  # type: ignore[assignment]
        self._frame: list[str] | None = None
        """The pieces of a synchronized frame written so far (None: not in one)."""

    def write(self, data: str) -> None:
        """Textual writes a frame as three pieces, the synchronized output's
        start, the frame and its end, and its writer thread wakes for each
        and writes each to the terminal when it finds its queue empty: up to
        three wakes and three writes a frame, each taking a core from
        llama.cpp's threads while a reply streams (docs/performance.md, "A
        frame goes to the terminal in one write"). The pieces between a
        start and an end are joined and go as one."""
        if data == SYNC_START:
            self._frame = [data]
            return
        frame = self._frame
        if frame is None:
            super().write(data)
            return
        frame.append(data)
        if data == SYNC_END:
            self._frame = None
            super().write("".join(frame))

    def run_input_thread(self) -> None:
        # Textual 8.2's LinuxDriver.run_input_thread, with RunParser and a
        # forgiving decoder.
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        parser = RunParser(self._debug)
        # Bytes that are not UTF-8 (another locale, a key pressed in the middle
        # of a character) become U+FFFD: Textual's strict decoder stops the app.
        decode = getincrementaldecoder("utf-8")(errors="replace").decode

        gone = False

        def process(selector_events: list[tuple[Any, int]], final: bool = False) -> None:
            nonlocal gone
            for index, (_key, mask) in enumerate(selector_events):
                if mask & selectors.EVENT_READ:
                    last = index == len(selector_events) - 1
                    try:
                        read = os.read(self.fileno, 1024 * 4)
                    except OSError:  # EIO: the terminal is gone
                        read = b""
                    if not read:
                        gone = True
                        self.process_message(TerminalGone())
                        break
                    data = decode(read, final=final and last)
                    if not data:
                        break
                    for event in parser.feed(data):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set() and not gone:
                process(selector.select(0.1))
            selector.unregister(self.fileno)
            if not gone:
                process(selector.select(0.1), final=True)
        finally:
            selector.close()
            try:
                for _event in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass


def typing_driver(driver: type[Driver]) -> type[Driver]:
    """The driver to use in place of `driver` (the one Textual chose). The
    input loop is a copy of Textual's own, so it is used only on the Textual
    versions it was copied from and tested with."""
    return TypingDriver if driver is LinuxDriver and textual_known() else driver
