"""Widgets whose layout does the work Textual would ask of them again: no
second layout after the screen's layout sized them, no repaint of a
container when a child comes or goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.geometry import Region, Size

if TYPE_CHECKING:
    from textual.widget import Widget
    from typing_extensions import Self

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


class DrawnAgainByTheLayout(WidgetMixin):
    """For a container whose own cells stay the same when children come and
    go: a child mounted, removed or moved is laid out, and the layout draws
    what changed (the child where it is placed, the cells of one gone, every
    child that moved), so the container itself is not drawn again. Textual's
    mount and remove ask the parent for a layout and a repaint of the whole
    of it, and the screen then draws every widget inside it: for the
    conversation, the whole of it at each reply's start; for a streaming
    answer, the whole answer at each block it begins (in most frames that
    scroll with the terminal's rows, most of the screen; chat.ui.terminal_scroll).
    A change of its own styles still repaints it: a colour asks for a repaint
    without a layout, which this leaves as it is."""

    def layout_draws_its_changes(self) -> bool:
        """Whether a layout asked for it now (a child came or went) needs no
        repaint of it; overridden where that holds only at some times."""
        return True

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        if layout and repaint and not regions and self.layout_draws_its_changes():
            # Its height comes from its children: measured again at the layout.
            self.clear_cached_dimensions()
            repaint = False
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
