"""The conversation's scrollbar draws again only the rows that change, and
what it draws is what Textual's scrollbar draws."""

from __future__ import annotations

import time

import pytest
from rich.segment import Segment
from textual._styles_cache import StylesCache

from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.row_scrollbar import RowScrollBar, changed_runs
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send
from tests.ui.widgets.test_streamed_blocks import drawn_as_fresh, streaming_views

STORY = " ".join(["The keeper logged the tide and the wind, and the lamp burned on."] * 6)
REPLY = "\n\n".join([STORY] * 3)
TOKENS = [REPLY[at : at + 8] for at in range(0, len(REPLY), 8)]


def test_the_runs_of_rows_that_changed() -> None:
    a, b = Segment(" "), Segment("▄")
    assert changed_runs([a, a, a, a], [a, a, a, a]) == []
    assert changed_runs([a, b, b, a, a], [a, a, b, b, a]) == [(1, 2), (3, 4)]
    assert changed_runs([b, b, a, a], [a, a, b, b]) == [(0, 4)]


async def test_the_scrollbar_draws_the_rows_that_change_as_textual_draws_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn_rows = 0  # rows of the scrollbar drawn while the reply streams
    render_line = StylesCache.render_line

    def counting(self: StylesCache, *args: object, **kwargs: object) -> object:
        nonlocal drawn_rows
        drawn_rows += counting.on
        return render_line(self, *args, **kwargs)  # type: ignore[arg-type]

    counting.on = False  # type: ignore[attr-defined]
    engine = ScriptedEngine(replies=[TOKENS] * 3, delay=0.004)
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        for turn, question in enumerate(["a story", "another"]):  # taller than the screen
            await send(pilot, question)
            await turn_done(screen, pilot, 2 * turn + 2)
        bar = screen.query_one(ConversationView).vertical_scrollbar
        assert isinstance(bar, RowScrollBar)
        assert bar.display and bar.size.height > 20
        widget_render = StylesCache.render_widget

        checking = False  # a fresh render of the bar, to compare: not counted

        def counted(self: StylesCache, widget: object, crop: object) -> object:
            counting.on = widget is bar and not checking  # type: ignore[attr-defined]
            try:
                return widget_render(self, widget, crop)  # type: ignore[arg-type]
            finally:
                counting.on = False  # type: ignore[attr-defined]

        monkeypatch.setattr(StylesCache, "render_widget", counted)
        monkeypatch.setattr(StylesCache, "render_line", counting)
        positions = set()
        # The reply stalls after its first token, so its streaming is seen
        # however slow the machine (a loop waiting for it to begin once hung a
        # CI run that found it already over).
        engine.hold_after = 1
        await send(pilot, "and one more")
        await wait_for(engine.holding.is_set, pilot)
        assert streaming_views(screen)
        engine.release.set()
        deadline = time.monotonic() + 30
        while streaming_views(screen):
            assert time.monotonic() < deadline, "the reply did not end"
            await pilot.pause(0.02)
            positions.add(bar.position)
            checking = True
            assert drawn_as_fresh(bar)  # each row on screen as a whole bar draws it
            checking = False
        await pilot.pause()
        checking = True
        assert drawn_as_fresh(bar)
        height = bar.size.height
    assert len(positions) >= 3  # the thumb moved as the reply grew
    # Textual drew the whole bar at each move; here a few rows each time.
    assert 0 < drawn_rows < len(positions) * height / 2
