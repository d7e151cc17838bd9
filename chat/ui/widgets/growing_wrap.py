"""The rows a growing text wraps to, kept from one delivery to the next.

A streaming reply's last paragraph gets a few words more at each delivery,
and Textual wraps its whole text again twice for it: once for its height,
once to draw it (docs/performance.md, "a paragraph wrapped from its last
row"). Textual wraps greedily, a word at a time (Content.wrap): where a row
breaks depends only on the words before the break and the word after it.
So when text is only added at the end, the rows before the last one that
begins a word stay as they were, and the text from that row's start on
wraps to the rows that follow it. `GrowingWrap` keeps the rows and wraps
only that part again.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich._wrap import divide_line  # what Content.wrap breaks lines with
from textual.content import Content, Span

RowKey = tuple[int, int, str, tuple[Span, ...]]
"""A row's line, place in it, text and styles (`Row.key`)."""


@dataclass(frozen=True)
class Row:
    """One row of wrapped text, as Textual draws it (`Content.wrap`)."""

    content: Content
    x: int
    """Where the row begins in its line of the text (Textual marks each cell
    with its place, for selecting text with the mouse)."""
    y: int
    """Its line of the text (the text split at newlines)."""
    start: int
    """Where the row begins in the whole text."""

    @property
    def key(self) -> RowKey:
        """What the row looks like, and where: a row drawn with the same key
        is drawn the same."""
        return (self.y, self.x, self.content.plain, tuple(self.content.spans))


class GrowingWrap:
    """The rows of a text at a width; text added at the end wraps again from
    the last row only."""

    def __init__(self) -> None:
        self._text: Content | None = None
        self._width = 0
        self._rows: list[Row] = []
        self.kept = 0
        """How many rows, from the first, the last `rows` kept as they were."""

    def holds(self, text: Content, width: int) -> bool:
        """The rows kept are those of `text` (the same object) at `width`."""
        return text is self._text and width == self._width

    def rows(self, text: Content, width: int) -> list[Row]:
        """`text` wrapped at `width`, as `Content.wrap` wraps each of its lines."""
        old, rows = self._text, self._rows
        if text is old and width == self._width:
            return rows  # asked again (its height, then to draw it)
        self.kept = 0
        if old is not None and width == self._width and rows and appended_to(old, text):
            # From the last row that begins a word: a row that begins inside a
            # word (one too long for a row, cut) wraps with the word's start.
            at = len(rows) - 1
            while at and not _begins_a_word(rows[at], old.plain):
                at -= 1
            last = rows[at]
            self.kept = at
            tail = wrap_lines(text[last.start :], width)
            rows = rows[:at] + [
                Row(
                    row.content,
                    row.x + last.x if row.y == 0 else row.x,
                    row.y + last.y,
                    row.start + last.start,
                )
                for row in tail
            ]
        else:
            rows = wrap_lines(text, width)
        self._text, self._width, self._rows = text, width, rows
        return rows


def wrap_lines(text: Content, width: int) -> list[Row]:
    """Each line of `text` wrapped at `width` (Content.wrap), with where each
    row begins: where Content.wrap breaks the line (it breaks at the offsets
    Rich's `divide_line` gives, and takes the spaces off each row's end)."""
    rows: list[Row] = []
    line_start = 0
    for y, line in enumerate(text.split("\n", allow_blank=True)):
        plain = line.plain
        breaks = [0, *divide_line(plain, width, fold=True)]
        for row, x in zip(line.wrap(width), breaks, strict=True):
            rows.append(Row(row, x, y, line_start + x))
        line_start += len(plain) + 1
    return rows


def _begins_a_word(row: Row, plain: str) -> bool:
    """The row begins its line, or a word (after a space): not inside a word
    too long for a row, nor inside the spaces after one (both cut in rows).
    Spaces that begin a line belong to its first word, as in `divide_line`."""
    start = row.start
    if not row.x:
        return True
    return (
        start < len(plain)
        and plain[start - 1].isspace()
        and not plain[start].isspace()
        and not plain[start - row.x : start].isspace()
    )


def appended_to(old: Content, new: Content) -> bool:
    """`new` is `old` with text added at its end, styled as it was: the
    Markdown parsed again left the text before the addition alone (it may
    not: a closing `**` turns the words before it bold, and the markers
    go)."""
    if not new.plain.startswith(old.plain):
        return False
    end = len(old.plain)
    before = [
        Span(span.start, min(span.end, end), span.style) for span in new.spans if span.start < end
    ]
    return before == list(old.spans)
