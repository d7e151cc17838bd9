"""Make model output safe to put on a terminal.

Two ways: `sanitize` (and the streaming `TerminalSanitizer`) removes escape
sequences, for what the app shows; `show_controls` keeps every character but
shows control characters as visible symbols, for exports, where the text must
stay whole but may be printed to a terminal (`chat --export 3 | cat`).

Model output is untrusted text. Textual passes ESC through to the terminal, so
an escape sequence in a reply could move the cursor, change the title, write
to the clipboard (OSC 52) or print a hyperlink (OSC 8). `TerminalSanitizer`
removes every escape sequence and every C0/C1 control character except newline
and tab. It is a streaming filter: a sequence split across two tokens is still
recognised, because the state carries over from one `feed` to the next.
"""

from __future__ import annotations

import re
from enum import Enum, auto

ESC = "\x1b"
BEL = "\x07"
# C1 controls that introduce a string (DCS, SOS, OSC, PM, APC) or a CSI.
C1_CSI = "\x9b"
C1_STRING_STARTS = frozenset("\x90\x98\x9d\x9e\x9f")
C1_ST = "\x9c"
# After ESC, these characters open a string that runs until ST (ESC \ or BEL).
ESC_STRING_STARTS = frozenset(["P", "X", "]", "^", "_"])
KEPT_CONTROLS = frozenset("\n\t")
# Bidirectional formatting characters: they reorder what the terminal shows
# (U+202E makes "exe.txt" read "txt.exe"), so untrusted text loses them too.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


class _State(Enum):
    TEXT = auto()
    ESCAPE = auto()  # saw ESC
    ESCAPE_INTERMEDIATE = auto()  # ESC followed by 0x20-0x2F bytes (e.g. ESC ( B)
    CSI = auto()  # inside ESC [ ... final byte
    STRING = auto()  # inside OSC / DCS / APC / PM / SOS, until ST or BEL
    STRING_ESCAPE = auto()  # saw ESC inside a string: "\\" ends it


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or code == 0x7F or 0x80 <= code <= 0x9F or char in BIDI_CONTROLS


class TerminalSanitizer:
    """Streaming filter: `feed(chunk)` returns the printable part of the chunk."""

    def __init__(self) -> None:
        self._state = _State.TEXT

    def feed(self, chunk: str) -> str:
        kept: list[str] = []
        for char in chunk:
            self._step(char, kept)
        return "".join(kept)

    def _step(self, char: str, kept: list[str]) -> None:
        state = self._state
        if state is _State.TEXT:
            if char == ESC:
                self._state = _State.ESCAPE
            elif char == C1_CSI:
                self._state = _State.CSI
            elif char in C1_STRING_STARTS:
                self._state = _State.STRING
            elif char in KEPT_CONTROLS or not _is_control(char):
                kept.append(char)
        elif state is _State.ESCAPE:
            if char == "[":
                self._state = _State.CSI
            elif char in ESC_STRING_STARTS:
                self._state = _State.STRING
            elif "\x20" <= char <= "\x2f":
                self._state = _State.ESCAPE_INTERMEDIATE
            elif char == ESC:
                pass  # ESC ESC: still an escape
            else:
                # A two-character sequence such as ESC c (reset) or ESC 7: drop both.
                self._state = _State.TEXT
        elif state is _State.ESCAPE_INTERMEDIATE:
            if not "\x20" <= char <= "\x2f":
                self._state = _State.TEXT
        elif state is _State.CSI:
            # Parameter and intermediate bytes are 0x20-0x3F; a final byte 0x40-0x7E ends it.
            # Anything else (a newline, a letter outside ASCII) aborts the sequence.
            if "\x40" <= char <= "\x7e":
                self._state = _State.TEXT
            elif not "\x20" <= char <= "\x3f":
                self._state = _State.TEXT
                self._step(char, kept)
        elif state is _State.STRING:
            if char in (BEL, C1_ST):
                self._state = _State.TEXT
            elif char == "\n":
                # Real OSC/DCS payloads are one line. Ending the string at a newline
                # means an unterminated sequence cannot swallow the rest of a reply;
                # what follows is plain text again, which is harmless.
                self._state = _State.TEXT
                kept.append(char)
            elif char == ESC:
                self._state = _State.STRING_ESCAPE
        elif state is _State.STRING_ESCAPE:
            # ESC \ is the string terminator; any other ESC x inside a string is swallowed with it.
            self._state = _State.TEXT if char == "\\" else _State.STRING


# What the sanitizer removes starts with one of these (C0 controls but newline
# and tab, DEL, C1 controls, bidirectional formatting); text without any comes
# out as it went in, so that is checked first: the filter is per character.
_ANY_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + "".join(sorted(BIDI_CONTROLS)) + "]")


def sanitize(text: str) -> str:
    """Sanitize a complete text (a stored message, a one-shot reply)."""
    if not _ANY_CONTROL.search(text):
        return text
    return TerminalSanitizer().feed(text)


def sanitize_line(text: str) -> str:
    """A name or title for one line (a status bar, a list): sanitized, with
    newlines, tabs and runs of spaces made one space."""
    return " ".join(sanitize(text).split())


# Unicode's "Control Pictures" block shows C0 controls as printable symbols:
# U+2400 + the code (ESC -> U+241B), and DEL -> U+2421.
_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(0x20)} | {0x7F: "\u2421"}


def show_controls(text: str) -> str:
    """`text` with every control character except newline and tab made visible:
    C0 controls and DEL as their Control Pictures (ESC as "␛"), C1 controls and
    bidirectional formatting characters as "<U+009B>", "<U+202E>". Nothing
    else changes, and nothing a terminal acts on is left."""
    if not any(_is_control(char) and char not in KEPT_CONTROLS for char in text):
        return text
    return "".join(_visible(char) for char in text)


def _visible(char: str) -> str:
    if char in KEPT_CONTROLS or not _is_control(char):
        return char
    code = ord(char)
    return _CONTROL_PICTURES.get(code) or f"<U+{code:04X}>"
