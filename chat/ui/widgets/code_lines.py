"""A streaming code block's lines, kept from one delivery to the next.

A code block that streams gets a few characters more at each delivery.
Textual's code block highlights its whole code again, and splits the
highlighted whole into lines to draw it: both cost a little more with every
line, at every delivery (at 100 lines of Python here, several milliseconds a
delivery; docs/performance.md, "A code block kept by its lines"). Here the
lines are kept: what a delivery adds is drawn plain on the last line and the
lines after it, and every `HIGHLIGHT_EVERY_S` the lines added since are
highlighted, after a few lines before them lexed again as context. The
context must come out as it was highlighted before; where it does not (a
string or comment open across it: the lexer's state there is not the fresh
one), only the whole code can be highlighted, and it is. The whole is
highlighted again when the block is complete.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content

CONTEXT_LINES = 3
"""Lines with text, before the first new line, lexed again with the new ones."""

Highlighter = Callable[[str], Content]
"""Code in, the highlighted code out (the code block's own highlighter)."""


def plain_line(text: str) -> Content:
    """A line of code not highlighted yet: in the code's plain colour."""
    return Content(text).stylize_before("$text") if text else Content("")


def grown(lines: list[Content], added: str) -> list[Content]:
    """`lines` with `added` written after them, plain (`plain_line`)."""
    first, *more = added.split("\n")
    return [*lines[:-1], lines[-1] + plain_line(first), *map(plain_line, more)]


def with_new_lines_highlighted(
    lines: list[Content], stable: int, code: str, highlight: Highlighter
) -> list[Content] | None:
    """The lines of `code` highlighted, where `lines` are its lines as drawn
    and the first `stable` of them were highlighted as they are now: those
    are kept, the rest highlighted after their context. None when the
    context does not come out as it was (then highlight the whole)."""
    code_lines = code.split("\n")
    start, seen = stable, 0
    while start > 0 and seen < CONTEXT_LINES:
        start -= 1
        seen += bool(code_lines[start].strip())
    tail = highlight("\n".join(code_lines[start:])).split("\n", allow_blank=True)
    context = stable - start
    if len(tail) != len(code_lines) - start or [key(line) for line in tail[:context]] != [
        key(line) for line in lines[start:stable]
    ]:
        return None
    return lines[:stable] + tail[context:]


def key(line: Content) -> tuple[str, tuple[object, ...]]:
    """What a line shows: its text and styles."""
    return line.plain, tuple(line.spans)
