"""A compositor that draws, in a partial update, only the rows that changed.

Textual's compositor, for an update of a few lines (a streaming reply's last
line, a blinking cursor), asks every widget whose clip overlaps those lines
for *all* of its visible lines, and uses only the rows in the update: the
screen, the conversation and each container around the reply go through
their 30 to 40 cached lines, about 15 widgets a frame, most of a frame's
time while a reply streams (docs/performance.md, "a frame of a few lines").
This one asks each widget only for its lines in the update's rows. What is
drawn is the same: the rows outside the update were never used.

It overrides a private method of Textual's `Compositor` (`_get_renders`), so
the chat screen uses it only on the Textual versions it was tested with
(chat.ui.textual_fixes.TESTED_TEXTUAL).

It also skips a widget whose part of the update lies wholly under one widget
drawn before it. Textual draws front to back and each cell keeps the first
widget's strip (`Compositor._render_chops`): nothing is blended, so a widget
covered there draws nothing the update keeps. A streaming paragraph's frame
is such an update: the screen, the conversation and each container around
the paragraph were drawn under it and thrown away, about 8 widgets a frame
(docs/performance.md, "widgets drawn under the paragraph")."""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import Compositor
from textual.geometry import Region
from textual.strip import Strip


class RowCroppedCompositor(Compositor):
    def _get_renders(
        self, crop: Region | None = None
    ) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders(crop)
            return
        top, bottom = crop.y, crop.bottom
        in_front: list[Region] = []
        """The part of the update each widget drawn so far covers (front first)."""
        for widget, (region, clip) in list(self.visible_widgets.items()):
            if not crop.overlaps(clip):
                continue
            x, y, width, height = region.intersection(clip)
            # The rows of the update, across the widget's whole visible width
            # (the update's columns are cut from them as before).
            first, last = max(y, top), min(y + height, bottom)
            if not width or last <= first:
                continue
            shown = Region(x, first, width, last - first)
            in_update = shown.intersection(crop)
            if not in_update.area or any(front.contains_region(in_update) for front in in_front):
                continue  # outside the update's columns, or wholly under a widget in front
            in_front.append(in_update)
            lines = widget.render_lines(shown.translate(-region.offset))
            # `shown` as the clip: the caller draws region ∩ clip, which is it.
            yield region, shown, lines
