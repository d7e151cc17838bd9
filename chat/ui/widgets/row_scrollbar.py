"""A vertical scrollbar that draws again only the rows that change.

Textual draws every row of a scrollbar again whenever its thumb moves or the
height it stands for changes. While a reply streams in a conversation taller
than the screen, that is at each layout (the conversation grows) and each
scroll, two or three times a layout: the conversation's scrollbar was the
widget drawn most rows after the reply itself, 4-8 ms of the UI thread a
reply at 120x40 (docs/performance.md, "The scrollbar draws the rows that
change"). Only the rows the thumb left or took change; this one works out
which from the bar Textual would draw, and asks Textual to draw those. What
is drawn is still Textual's own rendering of the bar, row for row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.color import Color
from textual.geometry import Region
from textual.scrollbar import ScrollBar, ScrollBarRender

if TYPE_CHECKING:
    from rich.segment import Segment
    from typing_extensions import Self

DEFAULT_BACK = Color.parse("#555555")
DEFAULT_BAR = Color.parse("bright_magenta")
"""What Textual's bar is drawn with when its style names no colours (`ScrollBarRender`)."""


class RowScrollBar(ScrollBar):
    _rows: list[Segment] | None = None
    """The rows as the bar's last change left them (None: not known)."""

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        narrow = repaint and self.vertical and not (regions or layout or recompose)
        old, self._rows = self._rows, (self._bar_rows() if narrow else None)
        if narrow and old is not None and self._rows is not None and len(old) == len(self._rows):
            changed = changed_runs(old, self._rows)
            if not changed:
                return self  # the same rows: nothing to draw
            width = self.size.width
            regions = tuple(Region(0, start, width, end - start) for start, end in changed)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _bar_rows(self) -> list[Segment] | None:
        """The bar's rows as Textual draws it now, a segment each (`ScrollBarRender`)."""
        width, height = self.size
        if not (height and width and self.is_mounted and self.parent is not None):
            return None
        bar = self.render()
        if not isinstance(bar, ScrollBarRender) or isinstance(bar.style, str):
            return None
        drawn = bar.render_bar(
            size=height,
            virtual_size=bar.virtual_size,
            window_size=bar.window_size,
            position=bar.position,
            thickness=width,  # as the bar's console rendering passes it
            vertical=True,
            back_color=bar.style.bgcolor or DEFAULT_BACK,
            bar_color=bar.style.color or DEFAULT_BAR,
        )
        return list(drawn.segments)


def changed_runs(old: list[Segment], new: list[Segment]) -> list[tuple[int, int]]:
    """The runs of rows (first, after the last) where `new` differs from `old`."""
    runs: list[tuple[int, int]] = []
    for y, (before, after) in enumerate(zip(old, new, strict=True)):
        if before == after:
            continue
        if runs and runs[-1][1] == y:
            runs[-1] = (runs[-1][0], y + 1)
        else:
            runs.append((y, y + 1))
    return runs
