"""A frame in which the conversation only scrolled is drawn by scrolling the
terminal's rows, then drawing what is new, instead of the whole conversation.

While a reply streams the conversation follows its end: every few lines the
reply grows, the screen is laid out and the conversation scrolls up by those
lines. Textual then draws every row of the conversation again, since every
widget in it moved (`Compositor.reflow` marks each moved widget's region),
though all but the new lines are on the terminal already, a few rows higher:
2,300 to 4,000 cells a frame at 120x40 (docs/performance.md, "The
conversation scrolls with the terminal's rows"). The user scrolling by a line
or three (the mouse wheel, the arrow keys) is the same case.

`ScrollingCompositor` sees, after a layout or a scroll, how far the
conversation's content moved on the screen (its views' places before and
after: `content_moved`) and which widgets moved with it unchanged. It then
asks the terminal to scroll the conversation's rows (`TerminalScroll`: VT100
scrolling margins, DECSTBM, and index or reverse index, which every terminal
in use has), and marks for drawing only the cells the scroll leaves wrong:
- the rows scrolled in;
- every widget in those rows that did not move with the content (a new one,
  one that changed size or place, one over the conversation such as a toast),
  where it is now and where its old cells landed;
- for a container that grew or shrank at its bottom (the reply's message view
  as the reply grows), only its rows from the old bottom's padding down: the
  rows above draw the same as before (its children, in front, are checked on
  their own);
- what was waiting to be drawn, where it is now, and what a widget that
  moved with the content asked to draw and the compositor has not taken yet;
- beside the content, the widgets there (the scrollbar): the terminal
  scrolls whole rows, and the view's own padding is the same in every row.
Everything else in the frame is drawn as Textual draws it. Nothing is
scrolled while the terminal may show something else than the screen's last
frame: before its first, and after another screen (a dialog) drew over it,
until it is drawn whole again.
tests/ui/test_terminal_scroll.py feeds every frame of streamed replies and of
scrolling to a terminal emulator, beside one given what Textual's own
compositor draws for the same frames, and compares them cell by cell.

It relies on Textual's private compositor internals, like the compositor it
extends, so the chat screen uses it only on the Textual versions it was
tested with (chat.ui.textual_fixes.TESTED_TEXTUAL); `ui.terminal_scroll`
turns it off."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.control import Control
from rich.segment import ControlType, Segment
from textual._compositor import ChopsUpdate, CompositorUpdate, ReflowResult
from textual._context import visible_screen_stack
from textual.geometry import Region, Size
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget

from chat.ui.marked_map import MarkedMapCompositor
from chat.ui.row_compositor import RowCroppedCompositor

Placements = dict[Widget, tuple[Region, Region]]
"""A compositor's visible widgets: each one's region and clip on the screen."""


@dataclass(frozen=True)
class TerminalScroll:
    """Rows `top` to `bottom` (screen rows, `bottom` excluded) scrolled by
    `lines`: up (the content moves up, new rows at the bottom) when positive,
    down when negative."""

    top: int
    bottom: int
    lines: int

    def sequence(self) -> str:
        """The terminal's scrolling margins set to the rows, the cursor at the
        margin the content leaves by, an index (ESC D) or reverse index (ESC M)
        per line, and the margins back to the whole screen. DECSTBM, IND and RI
        are VT100's own: xterm, VTE, kitty, tmux, Windows Terminal all have them."""
        margins = f"\x1b[{self.top + 1};{self.bottom}r"
        if self.lines > 0:
            moves = f"\x1b[{self.bottom};1H" + "\x1bD" * self.lines
        else:
            moves = f"\x1b[{self.top + 1};1H" + "\x1bM" * -self.lines
        return margins + moves + "\x1b[r"


class SpanUpdate(ChopsUpdate):
    """Textual's partial update, each piece written from its span's first
    column. Textual's own (`ChopsUpdate`) writes a piece that begins left of
    its span from the piece's beginning: drawing the scrollbar's column wrote
    the whole row where the conversation's blank background spans it, about
    as much as drawing the whole rows again. A piece is cut at the span only
    where no wide character straddles the cut (writing half of one would clear
    the other half on the terminal)."""

    def render_segments(self, console: Console) -> str:
        sequences: list[str] = []
        append = sequences.append
        last_y = self.spans[-1][0]
        for y, x1, x2 in self.spans:
            # Textual's own pairing: a row's chops and their ends, one to one.
            for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
                if strip is None or x >= x2 or end <= x1:
                    continue
                left = x1 if x < x1 and cuts_cleanly(strip, x1 - x) else x
                whole = left == x and end <= x2
                piece = strip if whole else strip.crop(left - x, min(end, x2) - x)
                append(Control.move_to(left, y).segment.text)
                append(piece.render(console))
            if y != last_y:
                append("\n")
        return "".join(sequences)


def cuts_cleanly(strip: Strip, offset: int) -> bool:
    """Whether the strip's cell `offset` begins a character (no wide
    character has its first half left of it)."""
    for segment in strip:
        width = segment.cell_length
        if offset < width:
            if offset == 0:
                return True
            before, after = segment.split_cells(offset)
            return before.text + after.text == segment.text
        offset -= width
    return True


class ScrolledUpdate(CompositorUpdate):
    """The terminal's rows scrolled, then the updates drawn over them."""

    def __init__(self, scroll: TerminalScroll, updates: list[SpanUpdate]) -> None:
        self.scroll = scroll
        self.updates = updates

    def render_segments(self, console: Console) -> str:
        return self.scroll.sequence() + "".join(
            update.render_segments(console) for update in self.updates
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Segment(self.scroll.sequence(), None, [(ControlType.HOME,)])
        for update in self.updates:
            yield from update.__rich_console__(console, options)


cut = Region.intersection
"""The part of one region inside another (an empty region where none is)."""


def row_groups(regions: Iterable[Region]) -> list[list[Region]]:
    """Regions grouped so that each group's rows overlap no other group's: a
    partial update draws every widget in the box around its regions, so one
    box around a few rows at the top and a few at the bottom would draw all
    the rows between."""
    groups: list[tuple[int, int, list[Region]]] = []
    for region in sorted(regions, key=lambda region: region.y):
        if groups and region.y < groups[-1][1]:
            top, bottom, members = groups[-1]
            members.append(region)
            groups[-1] = (top, max(bottom, region.bottom), members)
        else:
            groups.append((region.y, region.bottom, [region]))
    return [members for _, _, members in groups]


class ScrollingCompositor(MarkedMapCompositor, RowCroppedCompositor):
    """The chat screen's compositor: `scroll_view` (the conversation) is
    scrolled on the terminal when its content only moved. Its map, built
    again between layouts, marks what changed (chat.ui.marked_map): what the
    terminal shows is then the last frame drawn and what is marked."""

    scrolls_terminal = True
    """`ui.terminal_scroll`: off, every frame is marked as Textual marks it
    (the app and the settings pane set it)."""

    def __init__(self) -> None:
        super().__init__()
        self.scroll_view: Widget | None = None
        """The widget whose content may be scrolled on the terminal."""
        self._scroll: tuple[TerminalScroll, list[list[Region]]] | None = None
        """A scroll planned by the last layout for the next update, with what
        to draw again beside the content, in groups of their own (in one box
        with the rest, every widget in the rows between would be drawn)."""
        self._scrolled_to: int | None = None
        """The view's scroll offset at the last layout (the rows on the terminal)."""
        self._covered = True
        """The terminal may show something else than this screen's last frame
        (before its first frame; another screen drew over it): no scroll
        until the screen is drawn whole again."""

    def covered(self) -> None:
        """Another screen draws over this one (a dialog, the command palette):
        what the terminal shows is no longer this screen's frame."""
        self._covered = True

    def reflow(self, parent: Widget, size: Size) -> ReflowResult:
        before = self._before_layout()
        result = super().reflow(parent, size)
        self._plan_scroll(parent, before)
        return result

    def reflow_visible(self, parent: Widget, size: Size) -> set[Widget]:
        before = self._before_layout()
        exposed = super().reflow_visible(parent, size)
        self._plan_scroll(parent, before)
        return exposed

    def render_update(
        self, full: bool = False, screen_stack: list[Screen] | None = None, simplify: bool = False
    ) -> RenderableType | None:
        planned, self._scroll = self._scroll, None
        if full or self.size.region in self._dirty_regions:
            self._covered = False  # drawn whole: the terminal shows this screen
            planned = None
        if planned is None:
            return super().render_update(full, screen_stack, simplify)
        scroll, beside = planned
        visible_screen_stack.set([] if screen_stack is None else screen_stack)
        regions, self._dirty_regions = self._dirty_regions, set()
        groups = beside + row_groups(regions)
        return ScrolledUpdate(scroll, [self._draw(group) for group in groups])

    def _draw(self, regions: list[Region]) -> SpanUpdate:
        """A partial update of `regions`, as Textual's `render_partial_update`
        draws it (each piece written from its span)."""
        crop = Region.from_union(regions).intersection(self.size.region)
        spans = list(self._regions_to_spans(regions))
        chops = self._render_chops(crop, {y for y, _, _ in spans}.__contains__)
        return SpanUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])

    def _before_layout(self) -> tuple[Placements, set[Region]] | None:
        if self._scroll is not None:
            # A second layout before the first was drawn: what the terminal
            # shows is older than the map, so the frame is drawn whole.
            self._scroll = None
            self._dirty_regions.add(self.size.region)
        if not self.scrolls_terminal or self.scroll_view is None or self._covered:
            return None  # no scroll can be planned: nothing to compare with
        if self.root is None or not self._full_map or self.size.region in self._dirty_regions:
            return None
        return dict(self.visible_widgets), set(self._dirty_regions)

    def _plan_scroll(self, parent: Widget, before: tuple[Placements, set[Region]] | None) -> None:
        view = self.scroll_view
        scrolled_from, self._scrolled_to = self._scrolled_to, None
        if view is None or not view.is_attached:
            return
        self._scrolled_to = view.scroll_offset.y
        if before is None or scrolled_from is None:
            return
        app = parent.app
        if app.screen is not parent or app.is_inline or app._batch_count:
            return  # drawn through another screen, or later: marked as Textual marks it
        if parent._repaint_required:
            return  # all is drawn again next
        old, waiting = before
        new = self.visible_widgets
        if view not in new or old.get(view) != new[view]:
            return
        lines = content_moved(view, old, new, self._scrolled_to - scrolled_from)
        if not lines:
            return
        region, clip = new[view]
        content = clip.intersection(view._get_scrollable_region(region.shrink(view.styles.gutter)))
        if abs(lines) >= content.height:
            return
        width, height = self.size
        band = Region(0, content.y, width, content.height)
        above, below = Region(0, 0, width, band.y), Region(0, band.bottom, width, height)
        damage = ScrollDamage(view, content, band, lines)
        dirty, beside = damage.cells(old, new, waiting)
        for marked in self._dirty_regions:  # Textual's marks outside the rows stand
            dirty.update(piece for piece in (cut(marked, above), cut(marked, below)) if piece)
        self._dirty_regions = dirty
        self._scroll = (TerminalScroll(band.y, band.bottom, lines), beside)


def content_moved(view: Widget, old: Placements, new: Placements, scrolled: int) -> int:
    """How many rows up the view's content moved on the screen in a layout:
    how far most of its children on the screen before and after it moved
    (`scrolled`, the change of the view's scroll offset, where that is one
    of the most, or where none is on the screen both times). The scroll
    offset alone misses what moved without it: when a reply starts in a
    long conversation, the oldest views are set aside above (their rows
    gone from the content's top) as the new ones mount below, and the view,
    pinned to its end, keeps about the offset it had while everything on the
    screen moved up by the new views' height (chat.ui.widgets.conversation_view);
    and a page mounted above while the place is kept moves nothing on the
    screen though the offset jumps by the page's height."""
    moves = Counter(
        old[child][0].y - new[child][0].y
        for child in view.children
        if child in old and child in new
    )
    if not moves:
        return scrolled
    most = max(moves.values())
    return scrolled if moves[scrolled] == most else moves.most_common(1)[0][0]


class ScrollDamage:
    """The cells of `band` (whole screen rows) that scrolling them by `lines`
    leaves different from the new frame, where `content` (the view's content
    area within the band) moved by `lines` with the view's scroll."""

    def __init__(self, view: Widget, content: Region, band: Region, lines: int) -> None:
        self.view = view
        self.content = content
        self.band = band
        self.lines = lines
        self.shift = (0, -lines)
        if lines > 0:
            self.kept = Region(band.x, band.y, band.width, band.height - lines)
            self.scrolled_in = Region(band.x, band.bottom - lines, band.width, lines)
        else:
            self.kept = Region(band.x, band.y - lines, band.width, band.height + lines)
            self.scrolled_in = Region(band.x, band.y, band.width, -lines)
        self.left = Region(band.x, band.y, content.x - band.x, band.height)
        self.right = Region(content.right, band.y, band.right - content.right, band.height)

    def cells(
        self, old: Placements, new: Placements, waiting: set[Region]
    ) -> tuple[set[Region], list[list[Region]]]:
        """What to draw in the content and the rows scrolled in; and beside the
        content (the terminal scrolls whole rows), in groups for each side.
        Beside it the view's own cells (its padding, an empty scrollbar gutter)
        are the same in every row, so what is drawn there again is only the
        widgets in those columns: the scrollbar, whatever is over the view."""
        band = self.band
        damage: set[Region] = set()
        for marked in waiting:  # drawn where it is now; kept where it was, to be sure
            damage.add(cut(marked, band))
            damage.add(cut(cut(marked, band).translate(self.shift), band))
        behind = set(self.view.ancestors_with_self)
        for widget in old.keys() | new.keys():
            if widget in behind:
                continue  # the view covers its ancestors; its own content area is blank
            damage.update(self._widget_cells(widget, old.get(widget), new.get(widget)))
        content, left, right = self.content, self.left, self.right
        in_content = {piece for region in damage if (piece := cut(region, content))}
        in_content.add(self.scrolled_in)
        sides = (
            row_groups(piece for region in damage if (piece := cut(region, side)))
            for side in (left, right)
        )
        return in_content, [group for side in sides for group in side]

    def _widget_cells(
        self,
        widget: Widget,
        old: tuple[Region, Region] | None,
        new: tuple[Region, Region] | None,
    ) -> list[Region]:
        band = self.band
        old_cells = cut(*old) if old else Region()
        new_cells = cut(*new) if new else Region()
        if not old_cells.overlaps(band) and not new_cells.overlaps(band):
            return []  # outside the scrolled rows: Textual's marks stand
        # Its old cells where the scroll takes them, and its new cells.
        moved = cut(old_cells.translate(self.shift), band)
        drawn = cut(new_cells, band)
        both = [region for region in (moved, drawn) if region]
        if old is None or new is None:
            return both
        old_region, new_region = old[0], new[0]
        same_columns = old_region.x == new_region.x and old_region.width == new_region.width
        if not same_columns or new_region.y != old_region.y - self.lines:
            return both
        # It moved with the content. From row `changed` down it draws
        # differently: nowhere if its size is the same; from its old bottom's
        # padding and border for a container whose height changed (its own
        # cells above are its background and sides, drawn as before).
        if old_region.height == new_region.height:
            changed = new_region.bottom
        elif widget.is_container:
            shorter = min(old_region.height, new_region.height)
            changed = new_region.y + shorter - widget.styles.gutter.bottom
        else:
            return both
        unchanged = cut(self.kept, Region(band.x, band.y, band.width, max(0, changed - band.y)))
        if cut(moved, unchanged) != cut(drawn, unchanged):
            return both
        lowest = max(new_region.bottom, old_region.bottom - self.lines)
        tail = Region(new_region.x, changed, new_region.width, max(0, lowest - changed))
        if widget.is_container:
            return [cut(tail, band)]
        # What it asked to draw that the compositor has not taken yet (its
        # refresh is a message still in the queue): on the terminal its old
        # cells moved, so that is drawn now, where it is, and taken (Textual
        # would have drawn the whole widget in this frame, as it moved). A
        # container's own cells are its background: what it asks after a
        # change of size is drawn by the rule above.
        offset = new_region.offset
        asked = [cut(part.translate(offset), drawn) for part in widget._exchange_repaint_regions()]
        return [cut(tail, band), *asked]
