"""A compositor whose map, when it is built again between layouts, marks
what changed in it for drawing, as a layout does.

Textual's compositor keeps a map of where every widget is. A layout builds
it again and marks for drawing every widget whose place changed, or that
came or went (`Compositor.reflow`). But the map is also built again lazily,
between layouts, the first time something asks where a widget is after a
widget was mounted or the conversation scrolled (`Compositor.full_map`, from
`find_widget`, `Widget.region`): that build marks nothing. A widget mounted
just before it (the paragraphs of a reply's Markdown, mounted a moment after
the reply's view; a page of older messages mounted above) is then in the map
already when the layout comes, with the place the layout gives it, so the
layout marks nothing for it either; and a paragraph asked to be drawn before
it had a size, which asks for no cells. Nothing draws it: its rows stay as
they were on the terminal (blank, where its view had reserved them) until
something else draws them. With `chat.ui.terminal_scroll` those stale rows
then move with the terminal's scroll. Found by the terminal-scroll tests
failing under load (a busy machine lets a lookup come between the mount and
the layout): a reply's start left the three answers on the screen blank.

Here that lazy build marks the cells of every widget whose place or clip
changed since the map it replaces (the visible part, after a scroll's quick
layout, `reflow_visible`), and of every widget that came or went, as
`reflow` marks them. Not a change of painting order alone: Textual numbers
the widgets in the order it places them, and a map of the visible widgets
numbers them otherwise than one of all of them (each visible widget's number
differed, and the whole conversation would have been drawn again after each
scroll); the conversation's widgets do not overlap. It overrides a property of
Textual's private `Compositor`, so the chat screen uses it only on the
Textual versions it was tested with (chat.ui.textual_fixes.TESTED_TEXTUAL).
(A fix Textual could take: `full_map` marking its changes as `reflow` does.)"""

from __future__ import annotations

from textual._compositor import Compositor, CompositorMap


class MarkedMapCompositor(Compositor):
    @property
    def full_map(self) -> CompositorMap:
        if self.root is None or not self._full_map_invalidated:
            return super().full_map
        # What was last laid out: the visible map after a scroll's quick
        # layout (which leaves the full map as it was before the scroll).
        before = self._visible_map if self._visible_map is not None else self._full_map
        built = super().full_map
        if self.size.region in self._dirty_regions:
            return built  # all of it is drawn next
        marked = self._dirty_regions
        for widget, geometry in built.items():
            old = before.get(widget)
            if old is None or old.region != geometry.region or old.clip != geometry.clip:
                if cells := geometry.clip.intersection(geometry.region):
                    marked.add(cells)
                if old is not None and (cells := old.clip.intersection(old.region)):
                    marked.add(cells)
        for widget, old in before.items():
            if widget not in built and (cells := old.clip.intersection(old.region)):
                marked.add(cells)
        return built
