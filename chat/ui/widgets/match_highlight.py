"""Find's highlights inside one message view, where the words are drawn.

A message of yours is one `Static`; a reply is a Markdown widget made of
blocks (paragraphs, list items, headings, code blocks, table cells), each
drawing a `Content`. Every occurrence of the query in each of them is styled,
and the current one differently; the message's text is never parsed again and
never read as markup (`Content.stylize` adds spans to the text as it is).

Each block keeps the text it was built from (`MarkdownBlock._content`; a code
block's, highlighted, is drawn by its Label; a table cell's is kept here):
highlights are drawn with `Static.update`, leaving that untouched, so clearing
them draws it again. A reply rebuilt (it ended, another branch) comes with new
blocks and no highlights.

A reply is searched in its Markdown source (chat.conversations.find), and highlighted as
drawn: the two differ only where the query holds Markdown syntax (`**`, a
link's address), where fewer words are highlighted than counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from textual.content import Content
from textual.widget import Widget
from textual.widgets import Label, Static
from textual.widgets.markdown import MarkdownBlock, MarkdownFence

from chat.conversations.find import match_spans
from chat.sanitize import sanitize
from chat.ui.widgets.message_view import AssistantMessageView, MessageView

# Theme variables, so every theme (and a user's own) colours them.
MATCH_STYLE = "$foreground on $warning-muted"
CURRENT_STYLE = "bold $background on $warning"


@dataclass(frozen=True)
class Place:
    """Where the current match is drawn: `widget`, its `line`-th row from the top."""

    widget: Widget
    line: int


_cell_texts: WeakKeyDictionary[Static, Content] = WeakKeyDictionary()
"""What each table cell drew before it was first highlighted."""


@dataclass(frozen=True)
class _Drawn:
    widget: Static
    text: Content
    """What `widget` draws without highlights."""
    wraps: bool
    """Whether long lines wrap (a code block scrolls sideways instead)."""


def _drawn_texts(view: MessageView) -> Iterator[_Drawn]:
    """What `view` draws, in reading order."""
    if not isinstance(view, AssistantMessageView):
        for body in view.query(".message-body").results(Static):
            yield _Drawn(body, Content(sanitize(view.message.content)), wraps=True)
        return
    # One query, so that the table cells come in their place among the blocks;
    # none while the view is mounted but not yet composed.
    blocks = ".message-body MarkdownBlock, .message-body MarkdownTableCellContents"
    for widget in view.query(blocks):
        if isinstance(widget, MarkdownFence):
            for label in widget.query("#code-content").results(Label):
                yield _Drawn(label, widget._content, wraps=False)
        elif isinstance(widget, MarkdownBlock):
            if widget._content:  # not a container (a list, a quote, a table)
                yield _Drawn(widget, widget._content, wraps=True)
        elif isinstance(widget, Static) and isinstance(widget.visual, Content):
            # A table's cell keeps no text of its own apart from what it draws.
            text = _cell_texts.setdefault(widget, widget.visual)
            yield _Drawn(widget, text, wraps=True)


def highlight_view(view: MessageView, query: str, current: int | None) -> Place | None:
    """Style every occurrence of `query` in what `view` draws; the `current`-th
    (from 0, in reading order) as the current one. Returns where that one is
    drawn (None: no current one, or fewer occurrences drawn than counted)."""
    nth = 0
    place: Place | None = None
    for drawn in _drawn_texts(view):
        text = drawn.text
        spans = match_spans(text.plain, query)
        for start, end in spans:
            is_current = nth == current
            text = text.stylize(CURRENT_STYLE if is_current else MATCH_STYLE, start, end)
            nth += 1
        if spans or drawn.widget.has_class("find-highlighted"):
            drawn.widget.update(text)
            drawn.widget.set_class(bool(spans), "find-highlighted")
        if place is None and current is not None and nth > current:
            place = Place(drawn.widget, _line_of_current(drawn, text))
    return place


def clear_view(view: MessageView) -> None:
    """Draw `view` without highlights."""
    for drawn in _drawn_texts(view):
        if drawn.widget.has_class("find-highlighted"):
            drawn.widget.update(drawn.text)
            drawn.widget.remove_class("find-highlighted")


def _line_of_current(drawn: _Drawn, text: Content) -> int:
    """The row of `drawn.widget` on which the current match starts, wrapped as
    the widget wraps it."""
    width = drawn.widget.content_region.width
    lines = text.wrap(width) if drawn.wraps and width > 0 else text.split("\n")
    for row, line in enumerate(lines):
        if any(span.style == CURRENT_STYLE for span in line.spans):
            return row
    return 0
