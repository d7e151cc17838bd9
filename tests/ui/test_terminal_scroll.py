"""Frames in which the conversation scrolled are drawn by scrolling the
terminal's rows (chat.ui.terminal_scroll), and the terminal then shows what
Textual's full render of the same frame shows, cell by cell.

Every update the chat screen's compositor draws is fed to a terminal emulator
(pyte) as the app writes it to the terminal; after each one, the emulator's
cells (character, colours, bold, italics, underline, reverse) are compared
with a second emulator given the whole screen rendered afresh."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyte
import pytest
from rich.console import Console
from rich.segment import Segment
from textual._compositor import ChopsUpdate, Compositor, CompositorUpdate, LayoutUpdate
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import Static

from chat.settings.schema import Settings
from chat.ui.screens.help import HelpScreen
from chat.ui.terminal_scroll import (
    ScrolledUpdate,
    ScrollingCompositor,
    SpanUpdate,
    TerminalScroll,
    cuts_cleanly,
    row_groups,
)
from chat.ui.widgets.conversation_view import ConversationView
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, opened_and_settled, pages_settled, ready, send, turn_done
from tests.ui.widgets.test_scroll_up_place import long_conversation

STORY = (
    "The keeper **lit the lamp** at dusk, as his father had, and watched the sea.\n\n"
    + "The tide came in over the rocks, grey and slow, and the wind turned. " * 4
    + "\n\n- the tide\n- the wind\n- a *ship* far out, its lights low on the water\n\n"
    "```python\nlog = ['tide', 'wind']\nfor entry in log:\n    print(entry)\n```\n\n"
    + "He wrote it all down in the log, 灯台日誌, line after line, until the morning came. " * 6
    + "\n\n## The morning\n\n"
    + "> A quiet hour, and the gulls.\n\n"
    + "The boats went out one by one and the lamp went dark. " * 5
)


def chunks(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def cells(screen: pyte.Screen) -> list[list[tuple[object, ...]]]:
    return [
        [
            (c.data, c.fg, c.bg, c.bold, c.italics, c.underscore, c.reverse, c.strikethrough)
            for c in (screen.buffer[y][x] for x in range(screen.columns))
        ]
        for y in range(screen.lines)
    ]


class Mirror:
    """The terminal as the app draws it, beside the terminal as Textual's own
    compositor would have drawn the same frames (each frame, the regions
    Textual marked; the whole screen when it drew all of it)."""

    def __init__(self, compositor: ScrollingCompositor, console) -> None:  # type: ignore[no-untyped-def]
        width, height = compositor.size
        self.compositor = compositor
        self.console = console
        self.terminal, self.textuals = pyte.Screen(width, height), pyte.Screen(width, height)
        self.marked: set[Region] = set()
        """What Textual's compositor marked for drawing since the last update."""
        self.updates = 0
        self.scrolled = 0
        self.scrolled_cells = 0
        """Cells the scrolled updates drew (besides the scroll itself)."""
        self.textuals_cells = 0
        """Cells Textual's compositor would have drawn for the same frames."""
        self.drawn_cells = 0
        """Cells every update drew, scrolled or not (a scroll itself counts none)."""
        self.textuals_drawn_cells = 0
        """Cells Textual's compositor would have drawn for every update."""

    def draw(self, update: object) -> None:
        if not isinstance(update, CompositorUpdate):
            return
        width, height = self.compositor.size
        if (self.terminal.columns, self.terminal.lines) != (width, height):
            # The terminal resized: both keep what they showed, cut to the size.
            for screen in (self.terminal, self.textuals):
                screen.resize(height, width)
        self.updates += 1
        pyte.Stream(self.terminal).feed(update.render_segments(self.console))
        marked, self.marked = self.marked, set()
        region = self.compositor.size.region
        if isinstance(update, LayoutUpdate) or region in marked:
            marked = {region}
        textuals_cells = sum(x2 - x1 for _, x1, x2 in Compositor._regions_to_spans(marked))
        self.textuals_drawn_cells += textuals_cells
        if isinstance(update, ScrolledUpdate):
            scrolled_cells = sum(x2 - x1 for u in update.updates for _, x1, x2 in u.spans)
            self.scrolled += 1
            self.scrolled_cells += scrolled_cells
            self.textuals_cells += textuals_cells
            self.drawn_cells += scrolled_cells
        elif isinstance(update, ChopsUpdate):
            self.drawn_cells += sum(x2 - x1 for _, x1, x2 in update.spans)
        else:
            self.drawn_cells += region.area
        textuals = self.compositor._draw(list(marked)) if marked else None
        if textuals is not None:
            pyte.Stream(self.textuals).feed(textuals.render_segments(self.console))
        self.check(self.textuals, "Textual's own drawing", or_now=True)

    def check(self, expected_screen: pyte.Screen, what: str, or_now: bool = False) -> None:
        """Every cell as `expected_screen` shows it; with `or_now`, a cell may
        instead be what the frame is now (a widget whose change Textual draws a
        frame later, such as the scrollbar's thumb, drawn already)."""
        expected, shown = cells(expected_screen), cells(self.terminal)
        now = cells(self.whole()) if or_now and shown != expected else expected
        for y, row in enumerate(expected):
            wrong = [
                x
                for x, cell in enumerate(shown[y])
                if cell != row[x] and not (or_now and cell == now[y][x])
            ]
            assert not wrong, (
                f"row {y} after update {self.updates}, against {what}, columns {wrong}:\n"
                f"shown    {''.join(str(c[0]) for c in shown[y])!r}\n"
                f"expected {''.join(str(c[0]) for c in row)!r}"
            )

    def whole(self) -> pyte.Screen:
        """The whole screen rendered afresh."""
        strips = self.compositor.render_strips()
        region = self.compositor.size.region
        fresh = pyte.Screen(region.width, region.height)
        whole = LayoutUpdate([[strip] for strip in strips], region)
        pyte.Stream(fresh).feed(whole.render_segments(self.console))
        return fresh

    def check_whole(self) -> None:
        """Against the whole screen rendered afresh (once nothing waits to be drawn)."""
        self.check(self.whole(), "a whole render")


@contextmanager
def mirrored(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Mirror]]:
    """Every chat screen's compositor, drawing into its own mirror."""
    mirrors: dict[int, Mirror] = {}
    found: list[Mirror] = []

    def mirror(compositor: Compositor) -> Mirror | None:
        if not isinstance(compositor, ScrollingCompositor) or compositor.root is None:
            return None
        if id(compositor) not in mirrors:
            mirrors[id(compositor)] = Mirror(compositor, compositor.root.app.console)
            found.append(mirrors[id(compositor)])
        return mirrors[id(compositor)]

    def marking(method):  # type: ignore[no-untyped-def]
        def marks(self: Compositor, *args, **kwargs):  # type: ignore[no-untyped-def]
            result = method(self, *args, **kwargs)
            watched = mirror(self)
            # Marked while another screen is on top, a region is drawn through
            # that screen (Textual hands it over), not by this compositor.
            if watched is not None and self.root is not None and self.root is self.root.app.screen:
                watched.marked |= self._dirty_regions
            return result

        return marks

    for name in ("reflow", "reflow_visible", "update_widgets"):
        monkeypatch.setattr(Compositor, name, marking(getattr(Compositor, name)))
    others_update = Compositor.render_update

    def others_drawing(self: Compositor, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Another screen's drawing (a dialog over the chat) reaches the terminal
        too: both emulators get it as it is."""
        update = others_update(self, *args, **kwargs)
        if not isinstance(self, ScrollingCompositor) and isinstance(update, CompositorUpdate):
            for watched in found:
                text = update.render_segments(watched.console)
                pyte.Stream(watched.terminal).feed(text)
                pyte.Stream(watched.textuals).feed(text)
        return update

    monkeypatch.setattr(Compositor, "render_update", others_drawing)
    render_update = ScrollingCompositor.render_update

    def drawing(self: ScrollingCompositor, *args, **kwargs):  # type: ignore[no-untyped-def]
        update = render_update(self, *args, **kwargs)
        if (watched := mirror(self)) is not None:
            watched.draw(update)
        return update

    monkeypatch.setattr(ScrollingCompositor, "render_update", drawing)
    yield found


def test_the_scroll_sequence_sets_margins_scrolls_and_resets() -> None:
    assert TerminalScroll(2, 30, 3).sequence() == "\x1b[3;30r\x1b[30;1H" + "\x1bD" * 3 + "\x1b[r"
    assert TerminalScroll(2, 30, -2).sequence() == "\x1b[3;30r\x1b[3;1H" + "\x1bM" * 2 + "\x1b[r"


def test_a_piece_is_written_from_its_span_unless_a_wide_character_straddles_the_cut() -> None:
    strip = Strip([Segment("ab漢c")])
    assert cuts_cleanly(strip, 2) and not cuts_cleanly(strip, 3) and cuts_cleanly(strip, 4)

    def written(span: tuple[int, int, int]) -> str:
        terminal = pyte.Screen(6, 1)
        stream = pyte.Stream(terminal)
        stream.feed("xxxxxx")
        stream.feed(SpanUpdate([{0: strip}], [span], [[5]]).render_segments(Console()))
        return terminal.display[0]

    assert written((0, 4, 5)) == "xxxxcx"  # from the span
    assert written((0, 2, 5)) == "xx漢cx"
    assert written((0, 3, 5)) == "ab漢cx"  # from the piece's start: no half character


def test_regions_are_drawn_in_groups_of_rows_that_do_not_overlap() -> None:
    groups = row_groups([Region(0, 30, 80, 2), Region(3, 1, 4, 2), Region(0, 2, 9, 3)])
    assert groups == [[Region(3, 1, 4, 2), Region(0, 2, 9, 3)], [Region(0, 30, 80, 2)]]


# The share of Textual's cells the scrolled frames draw, at most: on a small
# terminal the reply's new lines are a third of the conversation's rows. The
# share moves with where the frames fall among the deliveries: 0.45-0.51 at
# 100x32 from run to run on a 2-CPU machine (0.75-0.76 at 60x20).
@pytest.mark.parametrize(("size", "share"), [((100, 32), 0.6), ((60, 20), 0.9)])
async def test_a_streamed_reply_scrolls_the_terminal_and_the_screen_is_what_textual_draws(
    monkeypatch: pytest.MonkeyPatch, size: tuple[int, int], share: float
) -> None:
    # About 500 characters a second, the demo model's pace here.
    engine = ScriptedEngine(replies=[chunks(STORY), chunks(STORY[::-1][:400])], delay=0.01)
    with mirrored(monkeypatch) as mirrors:
        app = make_app(engine)
        async with app.run_test(size=size) as pilot:
            screen = await ready(app, pilot)
            await send(pilot, "Tell me about the lighthouse.")
            await turn_done(screen, pilot, 2)
            app.notify("A toast over the conversation while it scrolls.")
            await send(pilot, "And then?")
            await turn_done(screen, pilot, 4)
            await pilot.pause()
            view = screen.query_one(ConversationView)
            # The user scrolling: a line, a few (the wheel), a page, the ends.
            for scroll in (
                lambda: view.scroll_up(animate=False),
                lambda: view.scroll_relative(y=-3, animate=False),
                lambda: view.scroll_page_up(animate=False),
                lambda: view.scroll_relative(y=2, animate=False),
                lambda: view.scroll_home(animate=False),
                lambda: view.scroll_end(animate=False),
            ):
                scroll()
                await pilot.pause()
                await pilot.pause()
            (mirror,) = mirrors
            mirror.check_whole()
    assert mirror.updates > 20
    assert mirror.scrolled >= 5, "the streamed reply scrolled the terminal"
    assert mirror.scrolled_cells < mirror.textuals_cells * share


async def test_with_terminal_scroll_off_every_frame_is_drawn_as_textual_draws_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ScrollingCompositor, "scrolls_terminal", True)  # restored after
    settings = Settings()
    settings.ui.terminal_scroll = False
    engine = ScriptedEngine(replies=[chunks(STORY)], delay=0.002)
    with mirrored(monkeypatch) as mirrors:
        app = make_app(engine, settings)
        async with app.run_test(size=(100, 32)) as pilot:
            screen = await ready(app, pilot)
            await send(pilot, "Tell me about the lighthouse.")
            await turn_done(screen, pilot, 2)
            screen.query_one(ConversationView).scroll_relative(y=-3, animate=False)
            await pilot.pause()
            (mirror,) = mirrors
            mirror.check_whole()
    assert mirror.updates > 10
    assert mirror.scrolled == 0


async def test_scrolling_up_a_long_conversation_as_pages_mount_above_draws_what_textual_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Line by line up through 200 messages: pages of older views mount above
    while the place is kept (the scroll offset jumps with them, the views on
    screen stay), then back down."""
    with mirrored(monkeypatch) as mirrors:
        app = make_app(ScriptedEngine())
        async with app.run_test(size=(80, 24)) as pilot:
            _, view = await opened_and_settled(app, pilot, long_conversation())
            earlier = view.earlier_count
            for _ in range(40):
                view.scroll_relative(y=-2, animate=False)
                await pilot.pause()
            await wait_for(lambda: pages_settled(view), pilot)
            assert view.earlier_count < earlier, "a page was mounted above"
            for _ in range(10):
                view.scroll_relative(y=3, animate=False)
                await pilot.pause()
            await pilot.pause()
            (mirror,) = mirrors
            mirror.check_whole()
    assert mirror.scrolled >= 30


async def test_a_reply_started_below_views_set_aside_above_scrolls_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the bottom of a long conversation a reply's start sets the oldest
    views aside above as the new ones mount below: the view's scroll offset
    stays about where it was while everything on the screen moves up. The
    frame scrolls the terminal's rows and draws the new views, not the whole
    conversation, and the screen is what Textual draws."""
    engine = ScriptedEngine(replies=[["Noted."], ["Noted again."]])
    with mirrored(monkeypatch) as mirrors:
        app = make_app(engine)
        async with app.run_test(size=(100, 40)) as pilot:
            screen, view = await opened_and_settled(app, pilot, long_conversation())
            view.scroll_end(animate=False, immediate=True)
            await pilot.pause()
            (mirror,) = mirrors
            for text in ("One more note.", "And one after it."):
                count = len(screen.conversation.messages) + 2
                earlier, scrolled = view.earlier_count, mirror.scrolled
                drawn, textuals = mirror.drawn_cells, mirror.textuals_drawn_cells
                await send(pilot, text)
                await turn_done(screen, pilot, count)
                await pilot.pause()
                assert view.earlier_count > earlier, "views were set aside above"
                assert mirror.scrolled > scrolled, "the reply's start scrolled the terminal"
                # The new views and the lines around them, not the whole conversation.
                assert mirror.drawn_cells - drawn < (mirror.textuals_drawn_cells - textuals) / 2
            mirror.check_whole()


async def test_a_dialog_opened_and_closed_while_a_reply_streams_leaves_what_textual_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply streams on behind the help screen (the chat screen drawn
    through it), and on after it closes."""
    engine = ScriptedEngine(replies=[chunks(STORY)], delay=0.01, hold_after=60)
    with mirrored(monkeypatch) as mirrors:
        app = make_app(engine)
        async with app.run_test(size=(100, 32)) as pilot:
            screen = await ready(app, pilot)
            await send(pilot, "Tell me about the lighthouse.")
            await wait_for(engine.holding.is_set, pilot)
            await pilot.press("f1")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            engine.release.set()
            for _ in range(10):
                await pilot.pause(0.02)
            assert screen.generating, "the reply streams on behind the dialog"
            await pilot.press("escape")
            assert app.screen is screen
            await turn_done(screen, pilot, 2)
            await pilot.pause()
            (mirror,) = mirrors
            mirror.check_whole()
    assert mirror.scrolled >= 2


async def test_what_a_user_does_while_a_reply_streams_leaves_what_textual_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Find (its bar docked over the conversation), a message selected, the
    theme changed, the terminal resized, a scroll up and back, all while the
    reply streams and the conversation follows it."""
    engine = ScriptedEngine(replies=[chunks(STORY), chunks(STORY, 3)], delay=0.006)
    with mirrored(monkeypatch) as mirrors:
        app = make_app(engine)
        async with app.run_test(size=(100, 32)) as pilot:
            screen = await ready(app, pilot)
            await send(pilot, "Tell me about the lighthouse.")
            await turn_done(screen, pilot, 2)
            await send(pilot, "Again, slower.")
            view = screen.query_one(ConversationView)
            steps = [
                lambda: pilot.press("ctrl+f"),
                lambda: pilot.press(*"tide"),
                lambda: pilot.press("escape"),
                lambda: pilot.press("alt+up"),
                lambda: pilot.press("alt+up"),
                lambda: pilot.press("escape"),
                lambda: setattr(app, "theme", "kvchat-light"),
                lambda: pilot.resize_terminal(90, 28),
                lambda: view.scroll_relative(y=-4, animate=False),
                lambda: view.scroll_end(animate=False),
                lambda: setattr(app, "theme", "kvchat-dark"),
                lambda: pilot.resize_terminal(100, 32),
            ]
            for step in steps:
                done = step()
                if done is not None:
                    await done
                await pilot.pause(0.05)
            await turn_done(screen, pilot, 4)
            await pilot.pause()
            (mirror,) = mirrors
            mirror.check_whole()
    assert mirror.scrolled >= 3


async def test_a_widget_looked_up_between_its_mount_and_the_layout_is_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a widget is, asked between its mount and the layout (the map is
    built again then), still has it drawn (chat.ui.marked_map): on a busy
    machine a reply's paragraphs stayed blank."""
    with mirrored(monkeypatch) as mirrors:
        app = make_app(ScriptedEngine())
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await ready(app, pilot)
            view = screen.query_one(ConversationView)
            note = Static("Mounted between two layouts.")
            await view.mount(note)
            compositor = screen._compositor
            assert note not in compositor._full_map, "laid out already"
            # Its repaint heard before its layout, as on a busy machine (the
            # map is then out of date), and where it is asked: the map is
            # built again, before the layout.
            compositor.update_widgets({note})
            assert note.region
            for _ in range(3):
                await pilot.pause()
            (mirror,) = mirrors
            mirror.check_whole()
    assert "Mounted between two layouts." in "".join(mirror.terminal.display)
