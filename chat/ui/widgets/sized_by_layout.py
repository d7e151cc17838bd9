"""Widgets that need no second layout after the screen's layout sized them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.geometry import Size

if TYPE_CHECKING:
    from textual.widget import Widget

# A mixin, not a widget: Textual's CSS follows each widget class's first
# base that is a widget (a paragraph stays a MarkdownParagraph to its styles).
if TYPE_CHECKING:
    WidgetMixin = Widget
else:
    WidgetMixin = object


class SizedByTheLayout(WidgetMixin):
    """For a widget whose virtual size is what the screen's layout made it
    (its content's size, as arranged): after a layout it needs no second one.
    Textual sets each widget's `virtual_size` after a layout through a
    reactive that asks for another layout when the value changes: every
    layout that resized the conversation, a message view, the answer or its
    last block was followed by a second layout of the whole screen a frame
    later, that moved nothing (two layouts for each paragraph a streaming
    reply began; docs/performance.md, "the second layout"); so was each that
    changed a streaming code block's lines, a message's header or the
    footer's keys. A scrollbar that comes or goes still asks for its layout
    (its own reactive), and a scroll offset past the new end is still
    corrected (`_scroll_update`). It overrides a private method of Textual's
    `Widget`, checked on the Textual versions in
    chat.ui.textual_fixes.TESTED_TEXTUAL (pyproject.toml allows only their
    minor version)."""

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)
