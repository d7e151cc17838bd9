"""The app's side of the trust boundary: every widget that shows or edits text
kvchat did not write itself takes it through here.

Textual passes escape sequences and control characters in a widget's text
straight to the terminal, and reads `[...]` as markup where a widget parses
markup. So text from outside (model output, conversations and titles, server
answers, theme and preset files, file names, GGUF metadata) is drawn as
`Content` (never parsed as markup) after `chat.sanitize` has removed escape
sequences, control characters and bidirectional overrides. The same cleaned
text is what an editable box holds and what Copy puts on the clipboard, so
the user never copies or sends something other than what the screen showed.

Typed and pasted input is cleaned where it is read (chat.ui.terminal_input).
"""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.widgets import TextArea

from chat.sanitize import sanitize, sanitize_line


def shown(text: str) -> Content:
    """Untrusted text as a widget may draw it: no markup, no escapes."""
    return Content(sanitize(text))


def shown_line(text: str) -> Content:
    """An untrusted name or title for one line."""
    return Content(sanitize_line(text))


def editable_line(text: str) -> str:
    """An untrusted name or title as an `Input` may hold it."""
    return sanitize_line(text)


class UntrustedTextArea(TextArea):
    """A text area whose text may come from outside (a saved message, a
    preset's system prompt): whatever is loaded into it is sanitized first,
    so setting `.text` cannot put an escape sequence on the screen."""

    def __init__(self, text: str = "", **options: Any) -> None:
        super().__init__(sanitize(text), **options)

    def load_text(self, text: str) -> None:
        super().load_text(sanitize(text))
