"""The command line's side of the trust boundary: what `chat` prints to a
terminal passes through `chat.sanitize` on its way out.

Every `chat ...` command prints names and text from outside (conversation
titles, theme and preset files, model names from a server or a GGUF, file
names, error messages that quote them). Rather than trust each print to
clean what it quotes, `guard_terminal_output` wraps stdout and stderr, when
they are terminals, in a stream that removes escape sequences, control
characters and bidirectional overrides from everything written. The filter's
state carries from one write to the next, so a sequence split across two
prints is caught too. kvchat's own progress lines write their carriage
return and erase-line sequences through `write_control`, the one way past it.

Output to a file or a pipe is left whole (`chat --export 3 > chat.md`, JSON
for programs): exports make control characters visible instead
(chat.sanitize.show_controls), and listings clean the names they print.
"""

from __future__ import annotations

import io
import sys
from typing import TextIO

from chat.sanitize import TerminalSanitizer


class SanitizedTerminal(io.TextIOBase):
    """A text stream over a terminal that writes only the printable part of
    what it is given (`write_control` writes kvchat's own sequences as is)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream
        self._filter = TerminalSanitizer()

    @property
    def stream(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(self._filter.feed(text))
        return len(text)

    def write_control(self, sequence: str) -> None:
        self._stream.write(sequence)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors


def write_control(stream: TextIO, sequence: str) -> None:
    """Write kvchat's own terminal sequence (a carriage return, erase line)."""
    if isinstance(stream, SanitizedTerminal):
        stream.write_control(sequence)
    else:
        stream.write(sequence)


def guard_terminal_output() -> None:
    """Put stdout and stderr behind `SanitizedTerminal` where they are terminals."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, SanitizedTerminal):
            continue
        try:
            terminal = stream.isatty()
        except (OSError, ValueError):
            terminal = False
        if terminal:
            setattr(sys, name, SanitizedTerminal(stream))
